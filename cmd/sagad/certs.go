package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/secure"
)

// runCerts prepares a directory of certificates and secrets for servers
// saga connects to but does not run (compose.yaml's certs service): a CA,
// a server certificate for the hosts, random passwords and an API tokens
// file, each created once and reused after. It prints what it did, never
// a secret.
func runCerts(args []string) error {
	fs := flag.NewFlagSet("sagad certs", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write into (created 0700); files already there are reused (required)")
	hosts := fs.String("hosts", "localhost,127.0.0.1", "names and addresses the server certificate is for, comma-separated")
	passwords := fs.String("passwords", "", "password files to create with a random password when missing, comma-separated names in --out")
	tokens := fs.String("tokens-file", "", "API tokens file to create empty when missing, a name in --out ('sagad token --file' adds tokens)")
	modeFlag := fs.String("file-mode", "0600", "mode of the files but the CA key (always 0600); 0644 when containers that run as other users read them")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: sagad certs --out DIR [--hosts H1,H2] [--passwords NAME,...] [--tokens-file NAME] [--file-mode 0600]

Writes ca.pem and ca-key.pem (a CA, made once), server.pem and server-key.pem
(RSA, PKCS#8; issued again when a host is missing or expiry is near), and the
files named by --passwords and --tokens-file when missing.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("sagad certs needs --out DIR and no arguments")
	}
	mode, err := strconv.ParseUint(*modeFlag, 8, 32)
	if err != nil || mode&^0o777 != 0 || mode&0o133 != 0 || mode&0o600 != 0o600 {
		return errors.Newf("--file-mode %q: want an octal mode the owner can read and write, that no one can execute and only the owner write, such as 0600 or 0644", *modeFlag)
	}
	fileMode := os.FileMode(mode)
	names := splitList(*passwords)
	if *tokens != "" {
		names = append(names, *tokens)
	}
	for _, n := range names {
		if n == "" || n != filepath.Base(n) || strings.HasPrefix(n, ".") {
			return errors.Newf("%q: a file name in --out, without a directory", n)
		}
	}

	is, err := secure.IssueServer(*out, splitList(*hosts), fileMode)
	if err != nil {
		return hintOwner(err, *out)
	}
	fmt.Fprintf(os.Stderr, "%s: CA %s (%s), server certificate %s and key %s (%s) for %s\n", *out,
		secure.CAFile, madeOrKept(is.NewCA), secure.CertFile, secure.KeyFile, madeOrKept(is.NewCert), *hosts)
	for _, n := range splitList(*passwords) {
		wrote, err := secure.EnsurePassword(filepath.Join(*out, n), fileMode)
		if err != nil {
			return hintOwner(err, *out)
		}
		fmt.Fprintf(os.Stderr, "%s: password %s (%s)\n", *out, n, madeOrKept(wrote))
	}
	if *tokens != "" {
		wrote, err := secure.EnsureFile(filepath.Join(*out, *tokens),
			[]byte("# saga API tokens: IDENTITY ROLE sha256:HEX, one a line; add one with 'sagad token --file FILE'\n"), fileMode)
		if err != nil {
			return hintOwner(err, *out)
		}
		fmt.Fprintf(os.Stderr, "%s: API tokens file %s (%s)\n", *out, *tokens, madeOrKept(wrote))
	}
	return nil
}

func madeOrKept(made bool) string {
	if made {
		return "new"
	}
	return "kept"
}

// hintOwner adds the usual cure to a permission error: in a container,
// sagad runs as its image's user, who does not own a mounted directory.
func hintOwner(err error, dir string) error {
	if errors.Is(err, os.ErrPermission) {
		return errors.Wrapf(err, "%s is not writable by uid %d: run as its owner (docker compose run --user \"$(id -u):$(id -g)\" ...)", dir, os.Getuid())
	}
	return err
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(list string) []string {
	var out []string
	for _, v := range strings.Split(list, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
