package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
	"github.com/sagaengine/saga/projections"
)

// faultFlags collects repeated --fault AGENT=MODE[:RATE] flags.
type faultFlags map[string][]demo.Fault

// DefaultDemoKeyRetention is how long sagad's demo services keep an
// idempotency key: longer than every retry of the demo workflow (three
// attempts of 5 s), short enough that the keys, held in sagad's own heap,
// stay bounded under load (about 60 MB at 1,000 orders/s for the three
// services). The demo package's default, a day, is a real service's, which
// keeps them on its own machine.
const DefaultDemoKeyRetention = 2 * time.Minute

func (f faultFlags) String() string { return "" }

func (f faultFlags) Set(spec string) error {
	agent, fault, err := demo.ParseFault(spec)
	if err != nil {
		return err
	}
	f[agent] = append(f[agent], fault)
	return nil
}

// serviceFlags collects repeated --demo-service AGENT=URL flags.
type serviceFlags map[string]string

func (f serviceFlags) String() string { return "" }

func (f serviceFlags) Set(spec string) error {
	agent, url, ok := strings.Cut(spec, "=")
	if !ok || agent == "" || url == "" {
		return errors.Newf("demo service %q: want AGENT=URL", spec)
	}
	f[agent] = url
	return nil
}

// listFlag collects a repeatable flag's values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

// helpOutput receives the flags that -h prints; tests read it.
var helpOutput io.Writer = os.Stderr

// fixedLimits are the limits no flag changes, printed after the flags.
var fixedLimits = fmt.Sprintf(`
limits no flag changes:
  order id                    %d characters of A-Z a-z 0-9 . _ : @ -
  steps of a workflow         %d
  a step's result             %d bytes (a larger one fails the attempt, transient)
  a workflow definition file  %d bytes
  placeholders of an HTTP call %d (url, headers and body together; more is refused at registration)
  conflicts per decision      %d (then it is decided again at the task's next event, retry or timeout)
The embedded event store runs with the limits 'sagad eventstore -h' lists, at
their defaults; start it apart with 'sagad eventstore' to change them.
`, domain.MaxOrderIDLength, domain.MaxSteps, domain.MaxResultBytes, workflowfile.MaxFileBytes, domain.MaxTemplatePlaceholders, processes.DefaultMaxConflicts)

func runAll(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("sagad", flag.ContinueOnError)
	fs.SetOutput(helpOutput)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sagad [flags]   (sagad help: the other commands)\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), fixedLimits)
	}
	data := fs.String("data", defaultDataDir(""), "directory of the embedded servers' data")
	kafkaListen := fs.String("kafka-listen", broker.DefaultListen, "address of the embedded Kafka broker")
	esListen := fs.String("eventstore-listen", esdbserver.DefaultListen, "address of the embedded event store")
	esMaxAppend := fs.Int("eventstore-max-append-size", esdbserver.DefaultMaxAppendSize, "largest append the embedded event store accepts (all its events), in bytes: KurrentDB's default; raise --max-order-size with it, as a TaskSubmitted event carries its order")
	httpListen := fs.String("http-listen", envOr("SAGA_HTTP_LISTEN", ""), "address of the HTTP API (default "+httpapi.DefaultListen+" with the api role). A process without the api role serves only /healthz, /readyz and /metrics there (same tokens, hosts and TLS), and nothing when it is not set [$SAGA_HTTP_LISTEN]")
	httpAllowedHosts := fs.String("http-allowed-hosts", envOr("SAGA_HTTP_ALLOWED_HOSTS", ""), "names (comma-separated) by which the HTTP API may be reached besides localhost, IP addresses and --http-listen's host; .example.com allows subdomains, * any name. Other Host headers get 421, which stops DNS rebinding; checked always without --api-tokens-file, with it only when set [$SAGA_HTTP_ALLOWED_HOSTS]")
	debugListen := fs.String("debug-listen", envOr("SAGA_DEBUG_LISTEN", ""), "serve Go's profiling endpoints (/debug/pprof/) on this address, apart from the API; off by default [$SAGA_DEBUG_LISTEN]")
	metricsListen := fs.String("metrics-listen", envOr("SAGA_METRICS_LISTEN", ""), "serve /metrics on this address too, on a listener of its own without tokens (--http-listen serves it in every process); off by default [$SAGA_METRICS_LISTEN]")
	brokers := fs.String("kafka-brokers", envOr("SAGA_KAFKA_BROKERS", ""), "use these Kafka brokers (comma-separated) and start no embedded broker [$SAGA_KAFKA_BROKERS]")
	esURL := new(eventstore.URLFlag)
	*esURL = eventstore.URLFlag(envOr("SAGA_EVENTSTORE", ""))
	fs.Var(esURL, "eventstore", "use this EventStoreDB (esdb://...) and start no embedded event store; give a password through $SAGA_EVENTSTORE, not this flag, which others can read in the process list [$SAGA_EVENTSTORE]")
	esPasswordFile := fs.String("eventstore-password-file", envOr("SAGA_EVENTSTORE_PASSWORD_FILE", ""), "file holding the password of the user --eventstore names (esdb://USER@host...), so the connection string itself holds no secret [$SAGA_EVENTSTORE_PASSWORD_FILE]")
	instance := fs.String("instance", envOr("SAGA_INSTANCE", ""), "name of this instance in events (default sagad@HOSTNAME); its agent instances are INSTANCE/AGENT (default HOSTNAME-PID-RANDOM/AGENT) [$SAGA_INSTANCE]")
	partitions := fs.Int("partitions", engine.DefaultPartitions, "partitions of the topics saga creates")
	kafkaFsync := fs.Bool("kafka-fsync", false, "make the embedded Kafka fsync every batch of every topic and every offset commit, one by one (slower). Off: the sync topics are still fsynced before they are acknowledged; other records survive kill -9 but not power loss")
	kafkaSyncTopics := fs.String("kafka-sync-topics", strings.Join(broker.DefaultSyncTopics, ","), "topics (or prefix*) the embedded Kafka acknowledges only once fsynced, with group commit; \"*\" all, \"\" none, !topic or !prefix* excepted (statuses are fsynced by the status publisher's sync barriers)")
	kafkaCompression := fs.String("kafka-compression", envOr("SAGA_KAFKA_COMPRESSION", engine.KafkaCompressionAuto), "codec the engine's Kafka producers compress record batches with: "+strings.Join(kafka.CompressionNames, ", ")+", or auto: none with the embedded Kafka (over loopback compressing saves no network and costs CPU; records take about 2.5 times the disk), snappy (franz-go's default) with --kafka-brokers. This process's agents use it too; agents and clients you run with saga's SDKs keep their own (franz-go's default, snappy), and every consumer reads every codec [$SAGA_KAFKA_COMPRESSION]")
	retentionAge := fs.Duration("kafka-retention-age", broker.DefaultRetention.MaxAge, "the embedded Kafka removes records older than this (0: any age is kept); records a consumer group has not consumed are always kept")
	retentionRecords := fs.Int64("kafka-retention-records", broker.DefaultRetention.MaxRecords, "the embedded Kafka keeps at most this many records per partition (0: no limit); records a consumer group has not consumed are always kept")
	rederivedRecords := fs.Int64("kafka-retention-rederived-records", broker.DefaultRetention.RederivedMaxRecords, "the same for the topics saga re-derives from the event store (commands, replies, heartbeats); 0: --kafka-retention-records")
	maxTopics := fs.Int("kafka-max-topics", 0, "the embedded Kafka creates at most this many topics in all (each holds file descriptors while it exists); at it, a new topic takes the place of the oldest reply topic saga created for statuses (10 s old at least; never one its caller created), and when there is none a topic a client names is refused and /readyz says so. 0: derived from the fd limit (RLIMIT_NOFILE), -1: no cap")
	idleReplyTopics := fs.Duration("kafka-idle-reply-topic-after", broker.DefaultIdleReplyTopicAfter, "the embedded Kafka deletes a reply topic (reply.*, saga.reply.*) that received nothing for this long and that no consumer group has left to read (0: keep them)")
	demoAgents := fs.Bool("demo-agents", true, "run the demo remote services and their agents")
	demoKeyRetention := fs.Duration("demo-key-retention", DefaultDemoKeyRetention, "how long the demo services keep an idempotency key and its answer; they keep them in this process's memory, about 170 bytes a key (a real service keeps them for a day, elsewhere)")
	preferLocalAgents := fs.Bool("prefer-local-agents", envBool("SAGA_PREFER_LOCAL_AGENTS"), "with the scheduler and agents roles in one process, route each command to an agent instance of this process while one has room, and to instances elsewhere only once those are full or unhealthy; off: to the least loaded instance anywhere [$SAGA_PREFER_LOCAL_AGENTS]")
	commandsThroughKafka := fs.Bool("commands-through-kafka", envBool("SAGA_COMMANDS_THROUGH_KAFKA"), "send every command and reply through Kafka; off: a command the scheduler routes to an agent instance of this process is handed to it directly, and its reply comes back so, with no Kafka hop [$SAGA_COMMANDS_THROUGH_KAFKA]")
	rolesFlag := fs.String("roles", envOr("SAGA_ROLES", "all"), "parts to run, comma-separated: submitter, scheduler, supervisor, agents, api, status, or all (those six); broker alone runs only the embedded Kafka broker (no event store: 'sagad eventstore' runs that alone). An empty or unknown role is refused [$SAGA_ROLES]")
	shutdownTimeout := fs.Duration("shutdown-timeout", engine.DefaultShutdownTimeout, "at SIGTERM or SIGINT, parts that have not stopped after this long (a broker out of reach, a call that ignores cancellation) are logged and left: the process exits")
	supervisorInterval := fs.Duration("supervisor-interval", processes.DefaultSupervisorInterval, "how often the supervisor looks for attempts past their complete-by")
	supervisorStoreTimeout := fs.Duration("supervisor-store-timeout", processes.DefaultSupervisorStoreTimeout,
		"a supervisor that has had no answer from the event store for this long gives up its lease, so that a standby leads, and stands again once the store answers; each of its actions waits for the store this long at most; at least --supervisor-interval, which is the default when longer")
	checkpointEvery := fs.Duration("checkpoint-every", processes.DefaultTaskCheckpointEvery,
		"how often the scheduler and supervisor save the checkpoint they resume from (position and unfinished tasks)")
	maxUnfinished := fs.Int("max-unfinished-tasks", processes.DefaultMaxUnfinishedTasks,
		"the scheduler holds at most this many unfinished tasks; past it new orders wait in Kafka until tasks finish, so a backlog or a flood of orders costs no memory. -1: no bound")
	awaitInboxMax := fs.Int("await-inbox-max", processes.DefaultAwaitInboxMax,
		"most entries each inbox of await steps keeps (one inbox per topic and correlation value: the events that came, and the tasks that wait); older ones are dropped")
	awaitInboxRetention := fs.Duration("await-inbox-retention", processes.DefaultAwaitInboxRetention,
		"how long an event for an await step is kept for a task that has not reached the step yet; an older one is never correlated")
	maxOrderSize := fs.Int("max-order-size", processes.DefaultMaxOrderSize,
		"largest order body accepted, in bytes; a larger order is dead-lettered (its TaskSubmitted event must also fit the event store's largest event)")
	maxRendered := fs.Int("max-rendered-size", domain.DefaultMaxRenderedBytes,
		"largest request, in bytes, an HTTP step's templates may render to (url, headers and body together); a step whose rendering is larger fails for good")
	taskViewBatch := fs.Int("task-view-batch", projections.DefaultBatchSize, "most events the task view folds into one SQLite commit")
	taskViewDelay := fs.Duration("task-view-update-delay", projections.DefaultMaxUpdateDelay, "longest a change to a task in flight waits before the task view writes it (new and finished tasks are written at once; 0 writes every change at the next commit)")
	workflowsDir := fs.String("workflows", envOr("SAGA_WORKFLOWS", ""), "register the workflow definitions in this directory (*.yaml, *.yml, *.json) at start; default the demo order workflow when demo agents run [$SAGA_WORKFLOWS]")
	replyTopics := fs.String("reply-topic-pattern", domain.DefaultReplyTopicPattern, "regular expression an order's replyTo must match; saga's own topics (saga.*, but saga.reply.*), orders and trigger topics are refused whatever it allows")
	apiTokens := fs.String("api-tokens-file", envOr("SAGA_API_TOKENS_FILE", ""), "require API tokens from this file (make them with 'sagad token'); off: anyone who reaches the API may act [$SAGA_API_TOKENS_FILE]")
	apiCert := fs.String("api-tls-cert", envOr("SAGA_API_TLS_CERT", ""), "serve the API over TLS with this certificate file [$SAGA_API_TLS_CERT]")
	apiKey := fs.String("api-tls-key", envOr("SAGA_API_TLS_KEY", ""), "the key of --api-tls-cert [$SAGA_API_TLS_KEY]")
	secureMode := fs.Bool("secure", envBool("SAGA_SECURE"), "run the embedded Kafka and event store with TLS and authentication: a local CA, certificates and random credentials are generated into DATA/secure on first start and reused [$SAGA_SECURE]")
	kafkaSecurity := kafka.RegisterFlags(fs)
	var httpAgents listFlag
	fs.Var(&httpAgents, "http-agent", "run the built-in HTTP agent also under this agent name, for HTTP steps that name it (repeatable; the agent \"http\" always runs)")
	var httpAgentAllow listFlag
	fs.Var(&httpAgentAllow, "http-agent-allow", "what the built-in HTTP agents may call: host names, *.domain, IP addresses, CIDR prefixes, loopback, or * for any address, each optionally with :PORT (repeatable, or comma-separated). Default: any address but link-local ones, saga's own listeners and, unless the embedded Kafka and event store run, loopback ones; those are refused unless an entry names them (saga's listeners by their port) [$SAGA_HTTP_AGENT_ALLOW]")
	secretsDir := fs.String("secrets-dir", envOr("SAGA_SECRETS_DIR", ""), "directory of the secrets steps name as {{secret.NAME}}, one file NAME per secret, read by the HTTP agents of this process at every call; a secret with no file there comes from $SAGA_SECRET_NAME [$SAGA_SECRETS_DIR]")
	services := serviceFlags{}
	fs.Var(services, "demo-service", "let the demo agent AGENT call a demo service at URL instead of one in this process: AGENT=URL (repeatable)")
	faults := faultFlags{}
	fs.Var(faults, "fault", "inject a fault into a demo service: AGENT=MODE[:RATE], MODE transient, permanent or hang (repeatable)")
	capacity, rates, globalLimits, hangAfter := agentCounts{}, agentRates{}, agentCounts{}, agentDurations{}
	fs.Var(capacity, "agent-capacity", "calls an agent's instance in this process makes at once, at most: AGENT=N[,AGENT=N...] (repeatable); other agents take --agent-capacity-default. Heartbeats announce it; past it, commands wait, higher priority first")
	defaultCapacity := fs.Int("agent-capacity-default", agentruntime.DefaultAgentCapacity, "calls at once of the agents --agent-capacity does not name")
	fs.Var(rates, "agent-rate", "calls an agent makes per period across all its instances, each taking its share: AGENT=CALLS/PERIOD, e.g. payment=50/1s (repeatable). No window of the period holds more, and an instance waits one period after it starts")
	fs.Var(globalLimits, "agent-global-limit", "calls an agent makes at once across all its instances, each taking its share: AGENT=N[,AGENT=N...] (repeatable)")
	fs.Var(hangAfter, "agent-hang-after", "latency budget of an agent's calls: once the oldest call in flight has run longer with no answer meanwhile, the instance is unhealthy and gives commands back: AGENT=DURATION[,...] (repeatable); others take --agent-hang-after-default")
	defaultHangAfter := fs.Duration("agent-hang-after-default", agentruntime.DefaultHangAfter, "latency budget of the agents --agent-hang-after does not name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(httpAgentAllow) == 0 {
		httpAgentAllow = splitList(os.Getenv("SAGA_HTTP_AGENT_ALLOW"))
	}
	if *maxTopics < -1 || *idleReplyTopics < 0 {
		return errors.New("--kafka-max-topics must be -1, 0 or positive and --kafka-idle-reply-topic-after not negative")
	}
	if *maxUnfinished < -1 || *maxUnfinished == 0 {
		return errors.New("--max-unfinished-tasks must be -1 or positive")
	}
	storeTimeoutSet := false
	fs.Visit(func(f *flag.Flag) { storeTimeoutSet = storeTimeoutSet || f.Name == "supervisor-store-timeout" })
	switch {
	case !storeTimeoutSet:
		*supervisorStoreTimeout = 0 // the default, or the interval when longer
	case *supervisorStoreTimeout < *supervisorInterval:
		return errors.New("--supervisor-store-timeout must be at least --supervisor-interval")
	}
	if *defaultCapacity < 1 || *defaultHangAfter <= 0 {
		return errors.New("--agent-capacity-default must be at least 1 and --agent-hang-after-default positive")
	}
	if *demoKeyRetention <= 0 {
		return errors.New("--demo-key-retention must be positive")
	}
	if *shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	roles, err := engine.ParseRoles(*rolesFlag)
	if err != nil {
		return err
	}
	esConnection, err := eventstore.WithPasswordFile(strings.TrimSpace(string(*esURL)), *esPasswordFile)
	if err != nil {
		return err
	}
	var workflowDirs []string
	if *workflowsDir != "" {
		workflowDirs = []string{*workflowsDir}
	}
	if *debugListen != "" {
		stop, err := serveDebug(*debugListen, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	logger.Info("starting saga", "data", *data, "roles", *rolesFlag)
	started := time.Now()
	a, err := engine.Start(engine.Config{
		DataDir: *data, KafkaBrokers: kafka.SplitBrokers(*brokers), KafkaListen: *kafkaListen, EventStoreMaxAppendSize: *esMaxAppend,
		EventStoreURL: esConnection, EventStoreListen: *esListen, HTTPListen: *httpListen, HTTPAllowedHosts: kafka.SplitBrokers(*httpAllowedHosts), MetricsListen: *metricsListen,
		Partitions: int32(*partitions), Instance: *instance, DemoAgents: *demoAgents, DemoKeyRetention: *demoKeyRetention, Faults: faults, Logger: logger,
		Roles: roles, ShutdownTimeout: *shutdownTimeout, SupervisorInterval: *supervisorInterval, SupervisorStoreTimeout: *supervisorStoreTimeout, CheckpointEvery: *checkpointEvery, KafkaFsync: *kafkaFsync, KafkaCompression: *kafkaCompression, DemoServiceURLs: services, CommandsThroughKafka: *commandsThroughKafka, PreferLocalAgents: *preferLocalAgents,
		WorkflowDirs: workflowDirs, HTTPAgents: httpAgents, HTTPAgentAllow: splitList(strings.Join(httpAgentAllow, ",")), SecretsDir: *secretsDir, KafkaSyncTopics: append([]string{}, kafka.SplitBrokers(*kafkaSyncTopics)...),
		ReplyTopicPattern: *replyTopics, APITokensFile: *apiTokens, APITLSCert: *apiCert, APITLSKey: *apiKey,
		Secure: *secureMode, KafkaSecurity: *kafkaSecurity, MaxOrderSize: *maxOrderSize, MaxUnfinishedTasks: *maxUnfinished, AwaitInboxMax: *awaitInboxMax, AwaitInboxRetention: *awaitInboxRetention, MaxRenderedBytes: *maxRendered, TaskViewBatch: *taskViewBatch, TaskViewUpdateDelay: viewDelay(*taskViewDelay),
		KafkaRetention: &broker.Retention{MaxAge: *retentionAge, MaxRecords: *retentionRecords, RederivedMaxRecords: *rederivedRecords,
			Interval: broker.DefaultRetentionInterval, IdleReplyTopicAfter: *idleReplyTopics}, KafkaMaxTopics: *maxTopics,
		AgentInstances: engine.AgentInstances{Capacity: capacity, DefaultCapacity: *defaultCapacity, RateLimit: rates, GlobalLimit: globalLimits,
			HangAfter: hangAfter, DefaultHangAfter: *defaultHangAfter},
	})
	if err != nil {
		return err
	}
	logger.Info("saga is running", "kafka", strings.Join(a.KafkaBrokers, ","), "kafka-security", a.KafkaSecurity,
		"eventstore", eventstore.Redact(a.EventStoreURL), "http", httpSummary(a.HTTPAddr, roles))
	if a.Secure != nil {
		esAddr := *esListen
		if u, err := url.Parse(a.EventStoreURL); err == nil {
			esAddr = u.Host
		}
		fmt.Fprint(os.Stderr, a.Secure.Instructions(strings.Join(a.KafkaBrokers, ","), esAddr))
	}
	go func() {
		if a.WaitLive(ctx) == nil {
			logger.Info("saga is live: every process has caught up with the event store", "after", time.Since(started).Round(time.Millisecond))
		}
	}()
	if os.Getenv("SAGA_READY_FILE") != "" {
		// Lets a supervising test or script know the ports are bound.
		_ = os.WriteFile(os.Getenv("SAGA_READY_FILE"), []byte(a.HTTPAddr), 0o644)
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-a.Failed():
	}
	a.Close()
	return err
}

// httpSummary says what the process serves over HTTP, for the log.
func httpSummary(addr string, roles []engine.Role) string {
	switch {
	case addr == "":
		return "none (--http-listen serves /healthz, /readyz and /metrics)"
	case slices.Contains(roles, engine.RoleAPI):
		return "http://" + addr + "/api/tasks"
	}
	return "http://" + addr + " (/healthz, /readyz, /metrics)"
}

// viewDelay maps --task-view-update-delay to engine.Config's: there 0 is the
// default and a negative value no wait.
func viewDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
