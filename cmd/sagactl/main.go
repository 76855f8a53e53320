// Command sagactl is the command-line client of saga: it submits orders to
// Kafka and reads task state from the HTTP API.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
)

const usage = `usage: sagactl COMMAND [flags] [args]

commands:
  submit ORDER_ID [JSON]   publish an order (JSON fields are merged into the order)
  get TASK_ID              show a task's current state
  tasks [--state STATE]    list tasks

common flags:
  --kafka-brokers   Kafka brokers, comma-separated [$SAGA_KAFKA_BROKERS] (default 127.0.0.1:9092)
  --api             saga HTTP API [$SAGA_API] (default http://127.0.0.1:8080)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "submit":
		err = submit(ctx, args)
	case "get":
		err = get(ctx, args)
	case "tasks":
		err = tasks(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		err = errors.Newf("unknown command %q\n\n%s", cmd, usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sagactl:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

type common struct {
	brokers string
	api     string
}

func flags(name string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("sagactl "+name, flag.ContinueOnError)
	c := &common{}
	fs.StringVar(&c.brokers, "kafka-brokers", envOr("SAGA_KAFKA_BROKERS", kafka.DefaultListen), "Kafka brokers, comma-separated")
	fs.StringVar(&c.api, "api", envOr("SAGA_API", "http://127.0.0.1:8080"), "saga HTTP API")
	return fs, c
}

func submit(ctx context.Context, args []string) error {
	fs, c := flags("submit")
	workflow := fs.String("workflow", "", "workflow to run (default order)")
	replyTo := fs.String("reply-to", "", "topic to receive the task's status messages")
	topic := fs.String("topic", domain.OrdersTopic, "orders topic")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return errors.New("usage: sagactl submit [flags] ORDER_ID [JSON]")
	}
	order := map[string]any{}
	if fs.NArg() == 2 {
		if err := json.Unmarshal([]byte(fs.Arg(1)), &order); err != nil {
			return errors.Wrap(err, "order JSON")
		}
	}
	order["orderId"] = fs.Arg(0)
	if *workflow != "" {
		order["workflow"] = *workflow
	}
	if *replyTo != "" {
		order["replyTo"] = *replyTo
	}
	body, err := json.Marshal(order)
	if err != nil {
		return err
	}
	client, err := kafka.NewClient(kafka.SplitBrokers(c.brokers))
	if err != nil {
		return err
	}
	defer client.Close()
	p := kafka.NewProducer(client, "sagactl", nil)
	sendCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := p.Publish(sendCtx, p.Record(*topic, fs.Arg(0), domain.OrderPlacedMessageType, body)); err != nil {
		return err
	}
	fmt.Printf("submitted order %s to %s\n", fs.Arg(0), *topic)
	return nil
}

func get(ctx context.Context, args []string) error {
	fs, c := flags("get")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sagactl get [flags] TASK_ID")
	}
	return show(ctx, c.api+"/api/tasks/"+url.PathEscape(fs.Arg(0)))
}

func tasks(ctx context.Context, args []string) error {
	fs, c := flags("tasks")
	state := fs.String("state", "", "only tasks in this state")
	if err := fs.Parse(args); err != nil {
		return err
	}
	q := url.Values{}
	if *state != "" {
		q.Set("state", *state)
	}
	return show(ctx, c.api+"/api/tasks?"+q.Encode())
}

// show prints the API's JSON answer, or its error.
func show(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return errors.Wrap(err, "is sagad running? GET "+u)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		return errors.Newf("%s: %s", resp.Status, strings.TrimSpace(e.Error))
	}
	_, err = os.Stdout.Write(body)
	return err
}
