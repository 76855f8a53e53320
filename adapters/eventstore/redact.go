package eventstore

import (
	"net/url"
	"regexp"
	"strings"
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
