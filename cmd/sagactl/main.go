// Command sagactl is the command-line client of saga: it submits orders to
// Kafka and reads task state from the HTTP API.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/cmd/internal/buildinfo"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Stamped by release builds: go build -ldflags "-X main.version=v0.2.0
// -X main.commit=HASH -X main.date=TIME" (see cmd/internal/buildinfo).
var version, commit, date string

const usage = `usage: sagactl COMMAND [flags] [args]

commands:
  submit ORDER_ID [JSON]   publish an order (JSON fields are merged into the order) and
                           wait until saga accepts it (--wait: until it ends); exit
                           code 5 if saga rejects it
  get TASK_ID              show a task's current state
  tasks [--state STATE]    list tasks, newest first, a page at a time (--workflow,
                           --step, --reason-contains, --since, --until, --limit, --cursor)
  retry TASK_ID [STEP]     retry a task in Error (its failed step or compensation)
  retry --state Error FILTERS
                           retry every task in Error the filters select (--workflow,
                           --step, --reason-contains, --older-than, --since, --until);
                           --dry-run lists them; over 5 asks, or --yes
  cancel TASK_ID           cancel a task: it compensates what it did
  cancel FILTERS           cancel every task the filters select (as for retry)
  alerts                   alerts for tasks in Error, newest first, open or resolved
                           (--open, --since)
  deadletters [ID...]      what saga could not accept: reason, source, payload
                           (--reason-contains, --source-topic, --key, --since)
  deadletters redrive ID...|FILTERS
                           re-publish dead letters to the topic they came from, once
                           the cause is fixed (--dry-run, --value-file for a fixed payload)
  overdue                  attempts in flight past their completeBy, oldest first
  agents [NAME]            agents and their instances: health, calls in flight of
                           capacity, commands waiting and queued by priority (h/n/l)
  watch ORDER_ID           follow an order until it ends; exit code 0 processed,
                           2 compensated, 3 failed (Error), 4 --timeout passed,
                           5 rejected, 1 error
  watch --topic TOPIC      follow a status topic (saga.status or a reply topic)
  audit TASK_ID            the task's timeline and state replayed from its stream
                           (--at REVISION|TIME, --json), compared with the live view
  replay                   make sagad rebuild its task view from the store (it serves the
                           old one meanwhile); report events/s
  scavenge                 reclaim the event store's space of deleted, truncated and
                           expired events (embedded store or KurrentDB); wait for the
                           result (--no-wait, --stop ID)
  workflows COMMAND        apply, validate, list, get or diff workflow definitions
                           ('sagactl workflows help')
  version                  print the version, commit, build time and Go version
  completion bash          a bash completion script: source <(sagactl completion bash)

'sagactl COMMAND --help' shows a command's flags with examples; every command takes
--output table|json (-o).

Flags may come before or after the arguments.

Settings come from flags, then SAGA_* environment variables, then KEY=VALUE
lines in $SAGA_CONFIG (default ~/.config/saga/sagactl.conf).

common flags:
  --kafka-brokers   Kafka brokers, comma-separated [$SAGA_KAFKA_BROKERS] (default 127.0.0.1:9092)
  --api             saga HTTP API [$SAGA_API] (default http://127.0.0.1:8080)
  --eventstore      event store [$SAGA_EVENTSTORE] (default esdb://127.0.0.1:2113?tls=false)
  --eventstore-password-file
                    file with the password of the user --eventstore names
                    [$SAGA_EVENTSTORE_PASSWORD_FILE]
  --api-token-file  file with the API's bearer token [$SAGA_API_TOKEN_FILE, or $SAGA_API_TOKEN]
  --api-ca          CA file for the API's TLS certificate [$SAGA_API_CA]
  --kafka-tls, --kafka-tls-ca, --kafka-tls-cert, --kafka-tls-key, --kafka-tls-server-name,
  --kafka-sasl-mechanism, --kafka-sasl-user, --kafka-sasl-password-file, --kafka-sasl-token-file
                    Kafka TLS and SASL [$SAGA_KAFKA_TLS_CA, $SAGA_KAFKA_SASL_MECHANISM, ...;
                    passwords only from a file or $SAGA_KAFKA_SASL_PASSWORD]; see docs/operations.md
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if cmd := os.Args[1]; cmd == "version" || cmd == "--version" {
		// Before the configuration file: a broken one must not hide the version.
		fmt.Print(buildinfo.Get(version, commit, date))
		return
	}
	if err := loadConfigFile(); err != nil {
		fmt.Fprintln(os.Stderr, "sagactl:", err)
		os.Exit(exitError)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	case "workflow":
		err = workflowsCmd(ctx, args)
	case "completion":
		err = completion(ctx, args)
	default:
		run, ok := commands[cmd]
		if !ok {
			err = errors.Newf("unknown command %q\n\n%s", cmd, usage)
			break
		}
		err = run(ctx, args)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // --help printed the command's usage
	}
	var code exitCode
	if errors.As(err, &code) {
		fmt.Fprintln(os.Stderr, "sagactl:", cleanLines(code.msg))
		os.Exit(code.code)
	}
	if err != nil {
		// An error may quote what a service or the API answered.
		fmt.Fprintln(os.Stderr, "sagactl:", cleanLines(err.Error()))
		os.Exit(exitError)
	}
}

// commands are sagactl's commands, by name.
var commands map[string]func(context.Context, []string) error

func init() {
	commands = map[string]func(context.Context, []string) error{
		"submit": submit, "get": get, "tasks": tasks, "retry": retry, "cancel": cancel,
		"watch": watch, "audit": audit, "replay": replay, "workflows": workflowsCmd,
		"alerts": alerts, "deadletters": deadletters, "overdue": overdue, "agents": agents,
		"scavenge": scavenge,
	}
}

// parseInterspersed parses flags wherever they stand among the arguments,
// as kubectl and most CLIs do: "audit o-1 --json" and "audit --json o-1"
// mean the same. After "--" everything is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	if collecting != nil {
		collecting(fs)
		return errCollected
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

type common struct {
	output     *string
	brokers    string
	api        string
	eventstore eventstore.URLFlag
	// eventstorePasswordFile holds the password of eventstore's user.
	eventstorePasswordFile string
	security               *kafka.Security
}

// kafkaOpts are the Kafka security options of the flags.
func (c *common) kafkaOpts() ([]kgo.Opt, error) { return c.security.Opts() }

func flags(name string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("sagactl "+name, flag.ContinueOnError)
	setUsage(fs, name)
	c := &common{output: output(fs)}
	fs.StringVar(&c.brokers, "kafka-brokers", envOr("SAGA_KAFKA_BROKERS", broker.DefaultListen), "Kafka brokers, comma-separated")
	fs.StringVar(&c.api, "api", envOr("SAGA_API", "http://127.0.0.1:8080"), "saga HTTP API")
	fs.StringVar(&apiTokenFile, "api-token-file", envOr("SAGA_API_TOKEN_FILE", ""), "file holding the API's bearer token (or $SAGA_API_TOKEN)")
	fs.StringVar(&apiCAFile, "api-ca", envOr("SAGA_API_CA", ""), "CA certificate file the API's TLS certificate is checked against")
	c.eventstore = eventstore.URLFlag(envOr("SAGA_EVENTSTORE", "esdb://127.0.0.1:2113?tls=false"))
	fs.Var(&c.eventstore, "eventstore",
		"event store; a password belongs in $SAGA_EVENTSTORE, not in this flag, which others can read in the process list")
	fs.StringVar(&c.eventstorePasswordFile, "eventstore-password-file", envOr("SAGA_EVENTSTORE_PASSWORD_FILE", ""),
		"file holding the password of the user --eventstore names (esdb://USER@host...)")
	c.security = kafka.RegisterFlags(fs)
	return fs, c
}

func submit(ctx context.Context, args []string) error {
	fs, c := flags("submit")
	workflow := fs.String("workflow", "", "workflow to run (default: chosen by the topic's triggers, else order)")
	version := fs.Int("version", 0, "workflow version to run (default the newest)")
	priority := fs.String("priority", "", "the task's priority: high, normal or low (default the workflow's, else normal)")
	replyTo := fs.String("reply-to", "", "topic to receive the task's status messages, reply.<name> or saga.reply.<name> by default (default with --wait a private one, deleted after; without, none)")
	topic := fs.String("topic", protocol.OrdersTopic, "orders topic")
	wait := fs.Bool("wait", false, "wait until the task ends and print its statuses; exit codes as for watch")
	timeout := fs.Duration("timeout", 15*time.Second, "how long to wait for saga to accept the order (with --wait: to finish it)")
	if err := parseInterspersed(fs, args); err != nil {
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
	if *workflow != "" {
		order["workflow"] = *workflow
	}
	if *version > 0 {
		order["workflowVersion"] = *version
	}
	if *priority != "" {
		order["priority"] = *priority
	}
	waitCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	kafkaOpts, err := c.kafkaOpts()
	if err != nil {
		return err
	}
	// Without --wait no reply topic is made: a private one would be
	// deleted on exit while the task still sends statuses to it, each
	// then a dead letter. Acceptance is read from saga.status and the
	// dead letters instead.
	private := !*wait && *replyTo == ""
	cl, err := client.New(waitCtx, client.Config{Brokers: kafka.SplitBrokers(c.brokers), OrdersTopic: *topic, ReplyTopic: *replyTo,
		NoReplyTopic: private, KafkaOptions: kafkaOpts})
	if err != nil {
		return errors.Wrap(c.security.Explain(err), "is Kafka reachable at "+c.brokers+"?")
	}
	defer cl.Close()
	var accepted *acceptance
	if private {
		if accepted, err = watchAcceptance(waitCtx, c, *topic); err != nil {
			return err
		}
		defer accepted.close()
	}
	if err := cl.Submit(waitCtx, fs.Arg(0), order); err != nil {
		return err
	}
	fmt.Printf("submitted order %s to %s\n", fs.Arg(0), *topic)
	await := cl.Accepted
	switch {
	case *wait:
		await = cl.Wait
	case private:
		await = accepted.await
	}
	outcome, err := await(waitCtx, fs.Arg(0))
	for _, st := range outcome.Statuses {
		printStatus(c, st)
	}
	switch {
	case errors.Is(err, client.ErrRejected):
		return exitCode{exitRejected, err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return exitCode{exitTimeout, "order " + fs.Arg(0) + ": no answer from saga within " + timeout.String()}
	case err != nil:
		return err
	case *wait:
		return outcomeCode(fs.Arg(0), outcome.Final)
	}
	return nil
}

func get(ctx context.Context, args []string) error {
	fs, c := flags("get")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sagactl get [flags] TASK_ID")
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	var t protocol.TaskView
	if err := call(ctx, http.MethodGet, c.api+"/api/tasks/"+url.PathEscape(fs.Arg(0)), nil, &t); err != nil {
		return err
	}
	if *c.output == outputJSON {
		return printJSON(t)
	}
	return printTask(&t)
}

func tasks(ctx context.Context, args []string) error {
	fs, c := flags("tasks")
	state := fs.String("state", "", "only tasks in this state")
	workflow := fs.String("workflow", "", "only tasks of this workflow")
	priority := fs.String("priority", "", "only tasks of this priority: high, normal or low")
	step := fs.String("step", "", "only tasks at this step (in flight, retrying, failed or being compensated there)")
	reason := fs.String("reason-contains", "", "only tasks whose reason contains this (ignoring ASCII case)")
	since := fs.String("since", "", "only tasks submitted at or after this RFC 3339 time")
	until := fs.String("until", "", "only tasks submitted before this RFC 3339 time")
	limit := fs.Int("limit", 100, "tasks per page (at most 1000)")
	cursor := fs.String("cursor", "", "continue after the page that printed this cursor")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	for name, v := range map[string]string{"state": *state, "workflow": *workflow, "priority": *priority, "step": *step, "reason": *reason, "since": *since,
		"until": *until, "cursor": *cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	q.Set("limit", strconv.Itoa(*limit))
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	var list protocol.TaskList
	if err := call(ctx, http.MethodGet, c.api+"/api/tasks?"+q.Encode(), nil, &list); err != nil {
		return err
	}
	if *c.output == outputJSON {
		return printJSON(list)
	}
	return printTaskList(list)
}

func operatorName() string {
	if u := os.Getenv("USER"); u != "" {
		return u + "@sagactl"
	}
	return "sagactl"
}

// retry retries one task in Error, or with filters every task in Error
// they select.
func retry(ctx context.Context, args []string) error {
	fs, c := flags("retry")
	by := fs.String("by", operatorName(), "who retries, recorded in the task's events")
	f := filterFlags(fs, true)
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := oneOrFiltered(fs, f, 2, "sagactl retry [flags] TASK_ID [STEP], or sagactl retry --state Error [filters]"); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		states, err := f.states("retry", domain.StateError)
		if err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]string{"by": *by})
		return bulkTasks(ctx, c, f, "retry", states, body, nil)
	}
	body, _ := json.Marshal(map[string]string{"step": fs.Arg(1), "by": *by})
	return act(ctx, c, "retry", fs.Arg(0), body)
}

// cancel cancels one task, or with filters every task they select that
// can be cancelled.
func cancel(ctx context.Context, args []string) error {
	fs, c := flags("cancel")
	by := fs.String("by", operatorName(), "who cancels, recorded in the task's events")
	reason := fs.String("reason", "", "why")
	f := filterFlags(fs, true)
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := oneOrFiltered(fs, f, 1, "sagactl cancel [flags] TASK_ID, or sagactl cancel FILTERS"); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]string{"by": *by, "reason": *reason})
	if fs.NArg() == 0 {
		states, err := f.states("cancel", domain.StatePending, domain.StateProcessing, domain.StateError)
		if err != nil {
			return err
		}
		return bulkTasks(ctx, c, f, "cancel", states, body, func(t *protocol.TaskView) bool { return t.Compensating })
	}
	return act(ctx, c, "cancel", fs.Arg(0), body)
}

// oneOrFiltered checks that a command got either a task id (and at most
// maxArgs arguments) or filters, not both.
func oneOrFiltered(fs *flag.FlagSet, f *taskFilter, maxArgs int, usage string) error {
	switch {
	case fs.NArg() > maxArgs, fs.NArg() == 0 && !f.given():
		return errors.New("usage: " + usage)
	case fs.NArg() > 0 && (f.given() || f.dryRun || f.yes || f.max > 0):
		return errors.New("give a task id or filters, not both; usage: " + usage)
	}
	return nil
}

// act asks the API for an operator's action on a task.
func act(ctx context.Context, c *common, action, id string, body []byte) error {
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	var answer map[string]any
	if err := call(ctx, http.MethodPost, c.api+"/api/tasks/"+url.PathEscape(id)+"/"+action, body, &answer); err != nil {
		return err
	}
	if *c.output == outputJSON {
		return printJSON(answer)
	}
	fmt.Printf("%s of task %s accepted; follow it with: sagactl watch %s\n", action, id, id)
	return nil
}
