package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

func runEventStore(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("sagad eventstore", flag.ContinueOnError)
	listen := fs.String("listen", esdbserver.DefaultListen, "address to serve the EventStoreDB gRPC protocol on")
	data := fs.String("data", defaultDataDir("eventstore"), "directory of the event log (one process at a time)")
	maxEvent := fs.Int("max-event-size", esdbserver.DefaultMaxEventSize, "largest event accepted (data plus metadata), in bytes")
	maxAppend := fs.Int("max-append-size", esdbserver.DefaultMaxAppendSize, "largest append accepted (all its events), in bytes")
	searchWindow := fs.Int("max-search-window", esdbserver.DefaultMaxSearchWindow,
		"most events one page of a filtered $all read or subscription examines; subscriptions send a checkpoint at least this often")
	maxRegex := fs.Int("max-filter-regex", esdbserver.DefaultMaxFilterRegex, "longest filter regex accepted, in bytes")
	readBytes := fs.Int("max-read-bytes", esdbserver.DefaultMaxReadBytes,
		"most bytes of events one page of a read or subscription holds to send (at least one event)")
	maxSubs := fs.Int("max-subscriptions", esdbserver.DefaultMaxSubscriptions, "most catch-up subscriptions served at once")
	certFile := fs.String("tls-cert", "", "PEM server certificate: serve TLS and require users (secure mode; default insecure: plaintext, no authentication)")
	keyFile := fs.String("tls-key", "", "PEM key of --tls-cert")
	usersFile := fs.String("users-file", "", "users of secure mode, NAME:HASH:GROUPS lines ('sagad eventstore-user' writes them); without it, admin/changeit")
	debugListen := fs.String("debug-listen", "", "serve Go's profiling endpoints (/debug/pprof/) on this address, apart from the event store; off by default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := esdbserver.Config{
		Listen: *listen, DataDir: *data, MaxEventSize: *maxEvent, MaxAppendSize: *maxAppend,
		MaxSearchWindow: *searchWindow, MaxFilterRegex: *maxRegex, MaxReadBytes: *readBytes, MaxSubscriptions: *maxSubs,
		UsersFile: *usersFile, Logger: logger,
	}
	if *certFile != "" || *keyFile != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return errors.Wrap(err, "event store TLS certificate")
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	} else if *usersFile != "" {
		return errors.New("--users-file needs --tls-cert and --tls-key: clients send credentials only over TLS")
	}
	srv, err := esdbserver.Start(cfg)
	if err != nil {
		return err
	}
	if *debugListen != "" {
		stop, err := serveDebug(*debugListen, logger)
		if err != nil {
			_ = srv.Close()
			return err
		}
		defer stop()
	}
	if cfg.TLS != nil {
		logger.Info("connect with esdb://USER:PASSWORD@" + srv.Addr() + "?tls=true&tlsCAFile=CA.pem")
	} else {
		logger.Info("connect with esdb://" + srv.Addr() + "?tls=false")
	}
	<-ctx.Done()
	logger.Info("shutting down event store")
	return srv.Close()
}

// runEventStoreUser adds a user to a users file, or replaces its password
// and groups; the password is read from standard input, never a flag.
func runEventStoreUser(args []string) error {
	fs := flag.NewFlagSet("sagad eventstore-user", flag.ContinueOnError)
	usersFile := fs.String("users-file", "", "users file to add the user to (created 0600 if missing)")
	admin := fs.Bool("admin", false, "make the user an administrator ("+esdbserver.AdminsGroup+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *usersFile == "" {
		return errors.New("usage: sagad eventstore-user --users-file FILE [--admin] NAME < password")
	}
	name := fs.Arg(0)
	if name == "" || strings.ContainsAny(name, ": \t\n") {
		return errors.Newf("user name %q: must be non-empty, without ':' or white space", name)
	}
	fmt.Fprintln(os.Stderr, "password (one line on standard input):")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return errors.Wrap(err, "no password on standard input")
	}
	hash, err := esdbserver.HashPassword(password)
	if err != nil {
		return err
	}
	user := esdbserver.User{Name: name, Hash: hash}
	if *admin {
		user.Groups = []string{esdbserver.AdminsGroup}
	}
	var lines []string
	if old, err := os.ReadFile(*usersFile); err == nil {
		lines = slices.DeleteFunc(strings.Split(strings.TrimRight(string(old), "\n"), "\n"), func(l string) bool {
			return strings.HasPrefix(l, name+":")
		})
	} else if !os.IsNotExist(err) {
		return errors.Wrap(err, "read users file")
	}
	lines = append(lines, esdbserver.FormatUser(user))
	if err := os.WriteFile(*usersFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return errors.Wrap(err, "write users file")
	}
	if err := os.Chmod(*usersFile, 0o600); err != nil {
		return errors.Wrap(err, "restrict the users file to its owner")
	}
	fmt.Fprintf(os.Stderr, "user %s written to %s\n", name, *usersFile)
	return nil
}
