package eventstore

import (
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/cockroachdb/errors"
)

// redacted replaces a password in what Redact returns.
const redacted = "xxxxx"

// schemePrefix matches a connection string's scheme with the slashes
// after it, however many were typed (esdb://, esdb:/, esdb+discover://),
// also in a message that quotes the string.
var schemePrefix = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*:/+`)

// passwordSpan finds the password in a connection string, well formed or
// not: after the scheme and the user (up to its first colon), up to the @
// before the host. In a well-formed string that is the first @ (the URL
// parser then reads the same password; an @ after it is in the query). An
// unencoded password may hold any character, #, /, ?, @ or a space, where a
// parser stops early and would leave the rest in the clear: then the
// password runs to the last @, which may redact more than needed, the safe
// side. ok is false when the string has no password.
func passwordSpan(connection string) (start, end int, ok bool) {
	from := 0
	if m := schemePrefix.FindStringIndex(connection); m != nil {
		from = m[1]
	}
	last := strings.LastIndex(connection, "@")
	if last < from {
		return 0, 0, false
	}
	colon := strings.Index(connection[from:last], ":")
	if colon < 0 {
		return 0, 0, false // a user without a password
	}
	start = from + colon + 1
	if first := start + strings.Index(connection[start:], "@"); first < last && !strings.ContainsAny(connection[start:first], " #/?") {
		if u, err := url.Parse(connection); err == nil && u.User != nil {
			pass, has := u.User.Password()
			if raw, err := url.PathUnescape(connection[start:first]); err == nil && has && pass == raw {
				return start, first, true
			}
		}
	}
	return start, last, true
}

// Redact returns a connection string (esdb://user:password@host...) fit to
// log, print or report: the password replaced by xxxxx, everything else as
// it was, also when the string does not parse (passwordSpan). Every log
// line, error and metric that shows an event-store address goes through
// it.
func Redact(connection string) string {
	start, end, ok := passwordSpan(connection)
	if !ok {
		return connection
	}
	return connection[:start] + redacted + connection[end:]
}

// redactIn replaces the connection string, and its password, in a message
// from a library that quotes what it was given.
func redactIn(msg, connection string) string {
	msg = strings.ReplaceAll(msg, connection, Redact(connection))
	if start, end, ok := passwordSpan(connection); ok && end > start {
		pass := connection[start:end]
		msg = strings.ReplaceAll(msg, pass, redacted)
		if decoded, err := url.PathUnescape(pass); err == nil && decoded != pass {
			msg = strings.ReplaceAll(msg, decoded, redacted)
		}
	}
	return msg
}

// ErrMalformedCredentials is returned by Dial for a connection string
// whose user and password a URL parser would not read as such: an
// unencoded #, /, ?, @ or space in the password, or a scheme without its
// two slashes (esdb:/). The parser's own error would quote part of the
// password, so the error says what to fix instead.
var ErrMalformedCredentials = errors.New("the connection string's user and password cannot be read")

// checkCredentials refuses a connection string with a password the URL
// parser would misread (ErrMalformedCredentials).
func checkCredentials(connection string) error {
	start, end, ok := passwordSpan(connection)
	if !ok {
		return nil
	}
	if scheme := schemePrefix.FindString(connection); !strings.HasSuffix(scheme, "://") || strings.HasSuffix(scheme, ":///") {
		return errors.Wrapf(ErrMalformedCredentials, "event store address %q: the scheme must be followed by two slashes, as esdb://USER:PASSWORD@host:2113", Redact(connection))
	}
	if strings.ContainsAny(connection[start:end], " #/?@") {
		return errors.Wrapf(ErrMalformedCredentials, "event store address %q: percent-encode # / ? @ and spaces in the password (# as %%23, / as %%2F, ? as %%3F, @ as %%40, space as %%20), or give it with a password file", Redact(connection))
	}
	u, err := url.Parse(connection)
	if err != nil || u.User == nil {
		return errors.Wrapf(ErrMalformedCredentials, "event store address %q: not a URL such as esdb://USER:PASSWORD@host:2113", Redact(connection))
	}
	return nil
}

// URLFlag is a flag.Value holding a connection string, shown redacted in
// usage messages (where its default may come from the environment).
type URLFlag string

// String is the redacted connection string.
func (u *URLFlag) String() string {
	if u == nil {
		return ""
	}
	return Redact(string(*u))
}

// Set keeps the connection string as given.
func (u *URLFlag) Set(v string) error {
	*u = URLFlag(v)
	return nil
}

// WithPasswordFile puts the password held in file (its first line) into
// a connection string that names a user and no password
// (esdb://admin@host:2113?tls=true becomes esdb://admin:PASSWORD@...), so
// that the password can come from a secret file while the rest of the
// string stays in a flag or variable anyone may read. An empty file name
// returns the connection string as it is.
func WithPasswordFile(connection, file string) (string, error) {
	if file == "" {
		return connection, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", errors.Wrap(err, "read the event store password file")
	}
	password, _, _ := strings.Cut(string(data), "\n")
	password = strings.TrimRight(password, "\r")
	if password == "" {
		return "", errors.Newf("the event store password file %s is empty", file)
	}
	scheme, rest, ok := strings.Cut(connection, "://")
	authority := rest
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		authority = rest[:end] // an @ in the path or query is not userinfo
	}
	at := strings.LastIndex(authority, "@")
	if !ok || at < 0 {
		return "", errors.Newf("event store %s: a password file needs a user in the connection string, as esdb://USER@host:2113?tls=true", Redact(connection))
	}
	if strings.Contains(rest[:at], ":") {
		return "", errors.Newf("event store %s: the connection string has a password already; give it there or in the file, not both", Redact(connection))
	}
	user, err := url.PathUnescape(rest[:at])
	if err != nil || user == "" {
		return "", errors.Newf("event store %s: a password file needs a user in the connection string", Redact(connection))
	}
	return scheme + "://" + url.UserPassword(user, password).String() + rest[at:], nil
}
