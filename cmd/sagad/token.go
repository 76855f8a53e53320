package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/httpapi"
)

// runToken makes an API token: it appends the token's hash to the tokens
// file and prints the secret once.
func runToken(args []string) error {
	fs := flag.NewFlagSet("sagad token", flag.ContinueOnError)
	name := fs.String("name", "", "who holds the token; recorded as the actor of what they do (required)")
	role := fs.String("role", string(httpapi.RoleViewer), "viewer (read) or operator (read, retry, cancel, register workflows)")
	file := fs.String("file", envOr("SAGA_API_TOKENS_FILE", ""), "the tokens file to add it to, as sagad --api-tokens-file reads it (required) [$SAGA_API_TOKENS_FILE]")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *file == "" {
		return errors.New("usage: sagad token --name NAME --role viewer|operator --file TOKENS_FILE")
	}
	secret, line, err := httpapi.NewToken(*name, httpapi.Role(*role))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return errors.Wrap(err, "open the tokens file")
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return errors.Wrap(err, "write the tokens file")
	}
	if err := f.Close(); err != nil {
		return errors.Wrap(err, "write the tokens file")
	}
	fmt.Fprintf(os.Stderr, "token for %s (%s) added to %s; it is shown once, here:\n", *name, *role, *file)
	fmt.Println(secret)
	return nil
}
