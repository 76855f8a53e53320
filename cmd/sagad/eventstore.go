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
	data := fs.String("data", defaultDataDir("eventstore"), "directory of the event log (one process at a time)")
	maxEvent := fs.Int("max-event-size", esdbserver.DefaultMaxEventSize, "largest event accepted (data plus metadata), in bytes")
	maxAppend := fs.Int("max-append-size", esdbserver.DefaultMaxAppendSize, "largest append accepted (all its events), in bytes")
	searchWindow := fs.Int("max-search-window", esdbserver.DefaultMaxSearchWindow,
		"most events one page of a filtered $all read or subscription examines; subscriptions send a checkpoint at least this often")
	maxRegex := fs.Int("max-filter-regex", esdbserver.DefaultMaxFilterRegex, "longest filter regex accepted, in bytes")
	readBytes := fs.Int("max-read-bytes", esdbserver.DefaultMaxReadBytes,
		"most bytes of events one page of a read or subscription holds to send (at least one event)")
	maxSubs := fs.Int("max-subscriptions", esdbserver.DefaultMaxSubscriptions, "most catch-up subscriptions served at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv, err := esdbserver.Start(esdbserver.Config{
		Listen: *listen, DataDir: *data, MaxEventSize: *maxEvent, MaxAppendSize: *maxAppend,
		MaxSearchWindow: *searchWindow, MaxFilterRegex: *maxRegex, MaxReadBytes: *readBytes, MaxSubscriptions: *maxSubs,
		Logger: logger,
	})
	if err != nil {
		return err
	}
	logger.Info("connect with esdb://" + srv.Addr() + "?tls=false")
	<-ctx.Done()
	logger.Info("shutting down event store")
	return srv.Close()
}
