package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

func runEventStore(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("sagad eventstore", flag.ContinueOnError)
	listen := fs.String("listen", esdbserver.DefaultListen, "address to serve the EventStoreDB gRPC protocol on")
	data := fs.String("data", defaultDataDir("eventstore"), "directory of the event log")
	maxEvent := fs.Int("max-event-size", 16<<20, "largest event accepted, in bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: *listen, DataDir: *data, MaxEventSize: *maxEvent, Logger: logger})
	if err != nil {
		return err
	}
	logger.Info("connect with esdb://" + srv.Addr() + "?tls=false")
	<-ctx.Done()
	logger.Info("shutting down event store")
	return srv.Close()
}
