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

// userinfo matches the user and password of a connection string; the
// password runs to the last @ before the host, as url.Parse reads it.
var userinfo = regexp.MustCompile(`(://[^:/@\s]*):[^/?#\s]*@`)

// Redact returns a connection string (esdb://user:password@host...) fit to
// log, print or report: the password replaced by xxxxx, everything else as
// it was. Every log line, error and metric that shows an event-store
// address goes through it.
func Redact(connection string) string {
	return userinfo.ReplaceAllString(connection, "${1}:"+redacted+"@")
}

// redactIn replaces the connection string, and its password, in a message
// from a library that quotes what it was given.
func redactIn(msg, connection string) string {
	msg = strings.ReplaceAll(msg, connection, Redact(connection))
	if u, err := url.Parse(connection); err == nil && u.User != nil {
		if pass, has := u.User.Password(); has && pass != "" {
			msg = strings.ReplaceAll(msg, pass, redacted)
		}
	}
	return msg
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
