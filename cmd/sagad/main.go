// Command sagad runs the saga engine. With no subcommand it runs everything
// in one process on embedded defaults; subcommands run one part on its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/cmd/internal/buildinfo"
)

// Stamped by release builds: go build -ldflags "-X main.version=v0.2.0
// -X main.commit=HASH -X main.date=TIME" (see cmd/internal/buildinfo).
var version, commit, date string

const usage = `usage: sagad [command] [flags]

commands:
  (none)       run the whole system in one process on embedded defaults
  eventstore   run only the embedded EventStoreDB-protocol server
  token        make an API token (sagad token --name NAME --role viewer|operator --file F)
  eventstore-user --users-file FILE [--admin] NAME
               add a user of the event store's secure mode (password on stdin)
  certs --out DIR --hosts H1,H2 [--passwords NAME,...] [--tokens-file NAME]
               make a CA, a server certificate and secrets for Kafka and
               KurrentDB run apart (compose.yaml's certs service)
  healthcheck [--addr HOST:PORT] [--path /readyz] [--tls-ca FILE]
               exit 0 when a sagad's /readyz answers 200, else 1 (for
               container health checks: the image has no curl)
  version      print the version, commit, build time and Go version

Run 'sagad COMMAND -h' for the flags of a command.
`

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel(), ReplaceAttr: plainErrors}))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	engine.TuneGC()

	args := os.Args[1:]
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "eventstore":
		err = runEventStore(ctx, args, logger)
	case "token":
		err = runToken(args)
	case "eventstore-user":
		err = runEventStoreUser(args)
	case "certs":
		err = runCerts(args)
	case "", "all":
		err = runAll(ctx, args, logger)
	case "healthcheck":
		if err := runHealthcheck(ctx, args, os.Stdout); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return
			}
			fmt.Fprintln(os.Stderr, "sagad healthcheck:", err)
			os.Exit(1)
		}
		return
	case "version":
		fmt.Print(buildinfo.Get(version, commit, date))
		return
	case "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "sagad: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // -h printed the flags
	}
	if err != nil {
		logStopped(logger, err)
		os.Exit(1)
	}
}

// logLevel reads SAGA_LOG_LEVEL (debug, info, warn, error); default info.
func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("SAGA_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// plainErrors logs errors by their message: slog would otherwise print
// cockroachdb errors with their stack traces.
func plainErrors(_ []string, a slog.Attr) slog.Attr {
	if err, ok := a.Value.Any().(error); ok {
		return slog.String(a.Key, err.Error())
	}
	return a
}
