// Package plainjson reads and writes JSON objects of known members without
// reflection, for the messages and events every order carries, exactly as
// encoding/json does or not at all: a Reader or Writer whose OK turns false
// met something it does not handle byte for byte (an escaped string, a
// differently cased or unknown member, a number that is not a plain
// integer, odd times), and its caller then leaves the whole value to
// encoding/json. The fuzz targets of its callers hold it to that.
package plainjson
