package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/cockroachdb/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/adapters/eventstore"
)

func init() {
	commandHelp["scavenge"] = struct{ usage, examples string }{"sagactl scavenge [flags]\n       sagactl scavenge --stop SCAVENGE_ID",
		"  sagactl scavenge\n  sagactl scavenge --no-wait -o json\n  sagactl scavenge --stop 5e1c...-...\n" +
			"  (a secure event store: SAGA_EVENTSTORE=esdb://admin@host:2113?tls=true --eventstore-password-file FILE)"}
}

// scavenge starts a scavenge of the event store through its Operations
// service, as KurrentDB's clients do, and waits for its result in
// $scavenges-ID; or stops one.
func scavenge(ctx context.Context, args []string) error {
	fs, c := flags("scavenge")
	stop := fs.String("stop", "", "stop the running scavenge with this id instead of starting one")
	noWait := fs.Bool("no-wait", false, "print the scavenge's id and return without waiting for its result")
	timeout := fs.Duration("timeout", time.Hour, "how long to wait for the result (exit code 4 past it)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New("usage: sagactl scavenge [flags] | sagactl scavenge --stop SCAVENGE_ID")
	}
	connection, err := eventstore.WithPasswordFile(string(c.eventstore), c.eventstorePasswordFile)
	if err != nil {
		return err
	}
	conn, err := dialOperations(connection)
	if err != nil {
		return err
	}
	defer conn.Close()
	call, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var resp esdbserver.ScavengeResp
	if *stop != "" {
		err = conn.Invoke(call, esdbserver.StopScavengeMethod, &esdbserver.StopScavengeReq{ScavengeID: *stop}, &resp)
	} else {
		err = conn.Invoke(call, esdbserver.StartScavengeMethod, &esdbserver.StartScavengeReq{}, &resp)
	}
	if err != nil {
		return errors.Wrapf(err, "event store %s", eventstore.Redact(string(c.eventstore)))
	}
	if *stop != "" || *noWait {
		if *c.output == outputJSON {
			return printJSON(map[string]string{"scavengeId": resp.ScavengeID, "result": resp.Result.String()})
		}
		fmt.Printf("scavenge %s: %s\n", clean(resp.ScavengeID), resp.Result)
		return nil
	}
	if *c.output == outputTable {
		fmt.Printf("scavenge %s: %s; waiting for its result\n", clean(resp.ScavengeID), resp.Result)
	}
	store, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer store.Close()
	deadline := time.Now().Add(*timeout)
	for {
		evs, err := store.ReadStream(ctx, esdbserver.ScavengesStream+"-"+resp.ScavengeID)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Type != esdbserver.ScavengeCompletedEventType {
				continue
			}
			var done esdbserver.ScavengeCompleted
			if err := json.Unmarshal(e.Data, &done); err != nil {
				return errors.Wrapf(err, "decode the result of scavenge %s", resp.ScavengeID)
			}
			return printScavenge(*c.output, done)
		}
		if time.Now().After(deadline) {
			return exitCode{code: 4, msg: fmt.Sprintf("scavenge %s has not finished after %s; its result will be in %s-%s", resp.ScavengeID, *timeout, esdbserver.ScavengesStream, resp.ScavengeID)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func printScavenge(output string, done esdbserver.ScavengeCompleted) error {
	if output == outputJSON {
		return printJSON(done)
	}
	fmt.Printf("scavenge %s: %s in %s: removed %d events, %d bytes, rewriting %d of %d closed segments\n",
		clean(done.ScavengeID), clean(done.Result), clean(done.TimeTaken), done.EventsRemoved, done.SpaceSaved, done.SegmentsRewritten, done.SegmentsScanned)
	if done.Error != "" {
		fmt.Println("error:", clean(done.Error))
	}
	if done.Result == "Failed" {
		return exitCode{code: exitError, msg: "the scavenge failed: " + done.Error}
	}
	return nil
}

// dialOperations connects to the event store the connection string names
// (a single node) for the Operations service, which the official Go client
// lacks: TLS and basic credentials as the connection string says.
func dialOperations(connection string) (*grpc.ClientConn, error) {
	conf, err := esdb.ParseConnectionString(connection)
	if err != nil {
		return nil, errors.Wrapf(err, "event store %s", eventstore.Redact(connection))
	}
	if conf.Address == "" || conf.DnsDiscover || len(conf.GossipSeeds) > 0 {
		return nil, errors.Newf("event store %s: scavenge needs the address of one node", eventstore.Redact(connection))
	}
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(esdbwire.NewCodec()))}
	if conf.DisableTLS {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			InsecureSkipVerify: conf.SkipCertificateVerification, //nolint:gosec // as the connection string asks
			RootCAs:            conf.RootCAs,
		})))
		if conf.Username != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(basicCredentials("Basic "+base64.StdEncoding.EncodeToString([]byte(conf.Username+":"+conf.Password)))))
		}
	}
	conn, err := grpc.NewClient(conf.Address, opts...)
	return conn, errors.Wrapf(err, "connect to the event store at %s", conf.Address)
}

type basicCredentials string

func (b basicCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}

func (basicCredentials) RequireTransportSecurity() bool { return true }
