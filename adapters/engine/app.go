// Package engine runs saga inside a Go program: it wires saga's adapters and
// processes into one running system, on embedded or external Kafka and
// event store, with the roles asked for. sagad is a thin command around it,
// so there is one way to wire saga; integration tests and applications that
// embed saga use it the same way.
package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/console"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/metrics"
	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// Config says what to run and where. The zero value of a listen address
// means the default port on loopback; port 0 picks a free one.
type Config struct {
	// DataDir holds the embedded servers' data (eventstore/, kafka/) and
	// the task view (taskview/).
	DataDir string
	// APITokensFile, when set, turns API authentication on: the tokens
	// file of httpapi.LoadTokens (viewer and operator roles).
	APITokensFile string
	// APITLSCert and APITLSKey, when set, serve the API over TLS.
	APITLSCert, APITLSKey string
	// TaskViewDir holds the task view's SQLite file; default
	// DataDir/taskview, or a temporary directory removed at Close when
	// there is no DataDir (the view is then rebuilt at every start).
	TaskViewDir string
	// KafkaBrokers, when set, uses that Kafka and starts no embedded broker.
	KafkaBrokers []string
	KafkaListen  string
	// KafkaFsync makes the embedded broker fsync every batch; see
	// broker.Config.Fsync.
	KafkaFsync bool
	// KafkaSyncTopics are the topics whose produces the embedded broker
	// acknowledges only once fsynced; nil means broker.DefaultSyncTopics.
	KafkaSyncTopics []string
	// KafkaRetention bounds what the embedded broker keeps of each
	// partition, never removing what a consumer group has not consumed;
	// nil means broker.DefaultRetention, a zero Retention keeps everything.
	KafkaRetention *broker.Retention
	// KafkaMaxTopics caps the topics clients may make the embedded broker
	// create (broker.Config.MaxTopics): 0 derives it from the fd
	// limit, a negative number sets none.
	KafkaMaxTopics int
	// KafkaCompression is the codec every Kafka producer of the engine
	// compresses record batches with: one of kafka.CompressionNames, or
	// KafkaCompressionAuto (also the empty string), which is none with the
	// embedded broker (over loopback compressing saves no network and
	// costs CPU to compress and allocations to decompress) and franz-go's
	// default, snappy, with KafkaBrokers. The agents' and the Go client's
	// own defaults are theirs; consumers read every codec.
	KafkaCompression string
	// KafkaSecurity is how every Kafka client of the engine (producers,
	// consumers, agents, the lease, topic creation) connects to
	// KafkaBrokers: TLS and SASL. With Secure and the embedded broker, the
	// generated credentials are used instead.
	KafkaSecurity kafka.Security
	// Secure runs the embedded broker and event store in secure mode: TLS
	// with a local CA and SASL/SCRAM on Kafka, TLS and users on the event
	// store, with certificates and random credentials generated into
	// SecureDir on first start and reused after (see adapters/secure).
	// The engine's own clients use them; App.Secure says where they are.
	Secure bool
	// SecureDir holds the secure mode's files; default DataDir/secure.
	SecureDir string
	// EventStoreURL, when set, uses that EventStoreDB and starts no
	// embedded server. It may carry credentials: the engine prints it only
	// through eventstore.Redact.
	EventStoreURL    string
	EventStoreListen string
	// HTTPListen is where the HTTP API listens (the api role; default
	// httpapi.DefaultListen). A process without the api role serves only
	// the operational endpoints there (/healthz, /readyz, /metrics), with
	// the same tokens, allowed hosts and TLS, and none when it is empty.
	HTTPListen string
	// HTTPAllowedHosts are the names, besides localhost, IP addresses and
	// the host of HTTPListen, by which the HTTP API may be reached (see
	// httpapi.AllowedHosts; "*" any). Without API tokens they are always
	// checked; with tokens, only when set.
	HTTPAllowedHosts []string
	// EventStoreIndexMemtable is how many stream-index entries the embedded
	// event store keeps in memory before it writes an index table and its
	// checkpoint; 0 means the store's default. Tests set it small so that
	// index writes are frequent.
	EventStoreIndexMemtable int
	// EventStoreMaxAppendSize bounds one append to the embedded event store
	// (esdbserver.Config.MaxAppendSize); 0 means KurrentDB's default, 1 MiB.
	EventStoreMaxAppendSize int
	// TaskViewBatch bounds the events the task view folds per SQLite
	// commit; 0 means projections.StoredTasks's default.
	TaskViewBatch int
	// TaskViewUpdateDelay bounds how long a change to a task in flight
	// waits before the task view writes it (projections.StoredTasks's
	// MaxUpdateDelay); 0 means its default, a negative value no wait.
	TaskViewUpdateDelay time.Duration
	// Partitions of the topics saga creates; default DefaultPartitions.
	Partitions int32
	// Instance names this process in events (actor, LockedBy).
	Instance string
	// Roles lists the parts to run; empty means those of AllRoles.
	// RoleBroker alone runs the embedded broker and nothing else.
	Roles []Role
	// DemoAgents runs the demo remote services and their agents (with the
	// agents role): inventory, payment and shipping, the agents of the demo
	// workflow, and no others.
	DemoAgents bool
	// DemoKeyRetention is how long the demo services keep an idempotency
	// key and its answer, in this process's memory; zero means
	// demo.DefaultKeyRetention.
	DemoKeyRetention time.Duration
	// ExternalAgents are agents that run elsewhere: no demo agent for them.
	ExternalAgents []string
	// Agents are Go step handlers to run (with the agents role), by agent
	// name: the embedding program's own agents. They take precedence over
	// a demo agent of the same name.
	Agents map[string]agent.Handler
	// HTTPAgentAllow is what the built-in HTTP agents may call
	// (httpagent.EgressPolicy.Allow: host names, *.domain, addresses, CIDR
	// prefixes, "loopback", "*"). With none, any address but link-local
	// ones, saga's own listeners and, unless the engine runs its embedded
	// Kafka and event store (a development setup), loopback ones.
	HTTPAgentAllow []string
	// SecretsDir holds the secrets ({{secret.NAME}}) of the HTTP agents
	// this process runs, one file per secret; those not found there come
	// from the environment, SAGA_SECRET_NAME (httpagent.Secrets).
	SecretsDir string
	// HTTPAgents are agents, besides domain.HTTPAgent, whose steps the
	// built-in HTTP agent carries out (with the agents role), so that HTTP
	// steps of different services can be scaled apart.
	HTTPAgents []string
	// DemoServiceURLs points demo agents at demo services running
	// elsewhere, by agent name, instead of starting them in this process.
	DemoServiceURLs map[string]string
	// SupervisorInterval is how often the supervisor scans; default 1 s.
	SupervisorInterval time.Duration
	// SupervisorStoreTimeout is how long a supervisor goes without an
	// answer from the event store before it gives up its lease; at least
	// SupervisorInterval. Default processes.DefaultSupervisorStoreTimeout,
	// or SupervisorInterval when that is longer.
	SupervisorStoreTimeout time.Duration
	// CheckpointEvery bounds the time between the scheduler's and the
	// supervisor's task checkpoints, from which they resume; default
	// processes.DefaultTaskCheckpointEvery.
	CheckpointEvery time.Duration
	// ShutdownTimeout bounds Close: the parts that have not stopped by
	// then are logged and left (the process exits without them); default
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// RegisterWorkflowsTimeout bounds registering Workflows at start;
	// default DefaultRegisterWorkflowsTimeout.
	RegisterWorkflowsTimeout time.Duration
	// CreateTopicsTimeout bounds creating saga's topics at start; default
	// DefaultCreateTopicsTimeout.
	CreateTopicsTimeout time.Duration
	// SchedulerSetupTimeout bounds finding the partitions the scheduler
	// shares tasks by, at start; default DefaultSchedulerSetupTimeout.
	SchedulerSetupTimeout time.Duration
	// SupervisorSetupTimeout bounds setting up the supervisors' lease, at
	// start; default DefaultSupervisorSetupTimeout.
	SupervisorSetupTimeout time.Duration
	// Faults injects failures into demo services, by agent name.
	Faults map[string][]demo.Fault
	// Workflows are registered at start (a new version for each one that
	// differs from its newest registered version), with those of the
	// definition files in WorkflowDirs; with none, and demo agents on, the
	// demo order workflow.
	Workflows    []*domain.Workflow
	WorkflowDirs []string
	// MaxOrderSize bounds an order message; default 1 MiB.
	MaxOrderSize int
	// MaxUnfinishedTasks bounds the unfinished tasks this process's
	// scheduler holds: past it, the submitter leaves new orders in Kafka
	// until tasks finish (processes.UnfinishedLimit). 0 means
	// processes.DefaultMaxUnfinishedTasks, a negative number no bound.
	MaxUnfinishedTasks int
	// AwaitInboxMax and AwaitInboxRetention bound each inbox of await
	// steps (one per topic and correlation value): how many events and
	// marks of waiting tasks it keeps, and for how long. Defaults
	// processes.DefaultAwaitInboxMax and DefaultAwaitInboxRetention.
	AwaitInboxMax       int
	AwaitInboxRetention time.Duration
	// MaxRenderedBytes bounds what the templates of one HTTP step render
	// to in the built-in HTTP agents; default domain.DefaultMaxRenderedBytes.
	MaxRenderedBytes int
	// ReplyTopicPattern is a regular expression the replyTo of an order
	// must match; default domain.DefaultReplyTopicPattern. Saga's own topics
	// and trigger topics are refused whatever it allows.
	ReplyTopicPattern string
	Logger            *slog.Logger
	// Clock tells the time to every decision, agent and breaker; default
	// time.Now. It is a function, as in adapters/agent and
	// adapters/httpagent, and not processes.Clock: timers stay the
	// runtime's, because the engine also waits on time no Clock reaches
	// (Kafka sessions and the lease, the event store, the status
	// publisher's restarts), and a test that stops time for some of them
	// and not the others can only wedge. Tests that control time do it
	// where all of it is theirs: a process with a processes.Clock, or
	// testing/synctest.
	Clock func() time.Time
	// TracerProvider starts every span of the engine (see
	// docs/operations.md, Tracing). When nil, the engine exports spans over
	// OTLP/HTTP if OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is
	// not true), as service OTEL_SERVICE_NAME (default "saga"), and
	// flushes them at Close; otherwise it uses the global provider, which
	// does nothing unless the program set one.
	TracerProvider trace.TracerProvider
	// MetricsListen, when set, serves /metrics on a listener of its own,
	// without tokens (HTTPListen serves it too, in every process).
	MetricsListen string
	// AgentInstances configures the agents this process runs: capacity,
	// shared limits, latency budget.
	AgentInstances AgentInstances
	// CommandsThroughKafka sends every command and reply through Kafka. By
	// default, in a process that runs the scheduler and agents, a command
	// the scheduler routes to an agent instance of the same process is
	// handed to it directly and its reply comes back the same way: no
	// Kafka hop per step, the same records in the event store, the same
	// recovery (see docs/architecture.md, In-process commands).
	CommandsThroughKafka bool
	// PreferLocalAgents makes the scheduler of a process that also runs
	// agents (and hands them commands directly) route a dispatch to an
	// instance of this process whenever one has room, instead of to the
	// least loaded instance anywhere: instances elsewhere get work once
	// those here are full or unhealthy. Where every scheduler runs beside
	// its agents, no command then crosses Kafka.
	PreferLocalAgents bool
	// EventStoreThroughNetwork sends the engine's appends and its
	// subscription to $all to the embedded event store through gRPC, as to
	// any EventStoreDB. By default they go to the embedded server of the
	// same process directly (the same checks, group commit, durability and
	// deliveries, without the network); other reads go through gRPC either
	// way.
	EventStoreThroughNetwork bool

	// instanceGiven says Instance was set rather than defaulted.
	instanceGiven bool
	// startFault, set by tests, fails start-up after the step it names
	// has started its part.
	startFault func(step string) error
}

// Role is a part of the system a process runs.
type Role string

// The roles.
const (
	RoleSubmitter  Role = "submitter"
	RoleScheduler  Role = "scheduler"
	RoleSupervisor Role = "supervisor"
	RoleAgents     Role = "agents"
	RoleAPI        Role = "api"
	RoleStatus     Role = "status"
	// RoleBroker runs the embedded Kafka broker. Alone, the process runs
	// the broker and nothing else: no event store (embedded or client), no
	// workflows, no other part. With other roles it changes nothing: the
	// embedded broker runs whenever KafkaBrokers is empty. It needs an
	// empty KafkaBrokers, and "all" does not include it.
	RoleBroker Role = "broker"
)

// AllRoles lists every role "all" stands for: every part of saga. The
// broker role is apart (see RoleBroker).
var AllRoles = []Role{RoleSubmitter, RoleScheduler, RoleSupervisor, RoleAgents, RoleAPI, RoleStatus}

// KnownRoles lists every role a process may be given.
var KnownRoles = append(slices.Clone(AllRoles), RoleBroker)

// ErrRoles marks a role list ParseRoles refuses: empty, or naming an
// unknown role.
var ErrRoles = errors.New("invalid role list")

// ParseRoles parses a comma-separated role list; "all" means every role
// of AllRoles. A list that names no role ("", " , ") or an unknown one is
// refused with ErrRoles; a role named twice counts once.
func ParseRoles(list string) ([]Role, error) {
	var out []Role
	add := func(rs ...Role) {
		for _, r := range rs {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	for _, r := range strings.Split(list, ",") {
		r = strings.TrimSpace(r)
		switch {
		case r == "":
		case r == "all":
			add(AllRoles...)
		case slices.Contains(KnownRoles, Role(r)):
			add(Role(r))
		default:
			return nil, errors.Wrapf(ErrRoles, "unknown role %q: want a comma-separated list of %s, or all", r, roleNames())
		}
	}
	if len(out) == 0 {
		return nil, errors.Wrapf(ErrRoles, "no role in %q: want a comma-separated list of %s, or all", list, roleNames())
	}
	return out, nil
}

// roleNames lists KnownRoles for an error message.
func roleNames() string {
	names := make([]string, len(KnownRoles))
	for i, r := range KnownRoles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// has reports whether the process runs role r: every role of AllRoles
// when Roles is empty.
func (c *Config) has(r Role) bool {
	if len(c.Roles) == 0 {
		return r != RoleBroker
	}
	return slices.Contains(c.Roles, r)
}

// brokerOnly reports whether the process runs the embedded broker and
// nothing else (RoleBroker alone).
func (c *Config) brokerOnly() bool {
	return len(c.Roles) > 0 && !slices.ContainsFunc(c.Roles, func(r Role) bool { return r != RoleBroker })
}

// App is a running system.
type App struct {
	cfg    Config
	logger *slog.Logger
	// clock is cfg.Clock as the processes' Clock port.
	clock processes.Clock

	KafkaBrokers []string
	// KafkaSecurity is how the engine's clients connect to KafkaBrokers.
	KafkaSecurity kafka.Security
	// EventStoreURL may carry a password: print it with eventstore.Redact.
	EventStoreURL string
	HTTPAddr      string
	// Secure are the secure mode's files, with Config.Secure.
	Secure *secure.Files
	// kafkaOpts apply KafkaSecurity and KafkaCompression to every Kafka
	// client.
	kafkaOpts []kgo.Opt

	Workflows *processes.Registry
	Store     *eventstore.Store
	// followers shares one subscription among this process's followers.
	followers *eventstore.Fanout
	// Tasks is the task view the API serves (the api role).
	Tasks      *TaskView
	Scheduler  *processes.Scheduler
	Supervisor *processes.Supervisor
	Operator   *processes.Operator
	Status     *processes.StatusPublisher
	Submitter  *processes.Submitter
	// Awaiter reads the topics of await steps (with the scheduler).
	Awaiter  *processes.Awaiter
	Services map[string]*demo.Service
	// AgentProcs are the agents this process runs, by name.
	AgentProcs map[string]*agent.Agent
	// inProcess hands the scheduler's commands to AgentProcs directly;
	// nil when CommandsThroughKafka or either role is not run here.
	inProcess *inProcessCommands
	// agentsProducer is the Kafka client every agent of this process
	// produces its replies, dead letters and heartbeats with (made by the
	// first agent): one client batches the agents' replies together.
	agentsProducer *kgo.Client
	// HTTPHandlers are the built-in HTTP agent's handlers, by agent.
	HTTPHandlers map[string]*httpagent.Handler
	// egress is the HTTP agents' egress policy; it refuses this process's
	// listeners.
	egress *httpagent.Egress
	// AgentDirectory knows the agent instances from their heartbeats
	// (with the scheduler or api role).
	AgentDirectory *kafka.AgentDirectory
	// Metrics are this process's metrics, served at /metrics.
	Metrics *metrics.Metrics
	// MetricsAddr is the address of the MetricsListen listener.
	MetricsAddr string

	esServer *esdbserver.Server
	broker   *broker.Broker
	client   *kgo.Client
	// tracing starts the spans of every part.
	tracing trace.TracerProvider
	// groups are the Kafka consumer groups this process consumes in.
	groups   []string
	groupsMu sync.Mutex
	// memberTag tells this process's consumers from others' in their
	// groups (consumerClientID).
	memberTag string

	// runCtx is the context every part runs under; Close cancels it.
	runCtx context.Context
	// agents and triggerTopics are those of the workflows registered at start.
	agents, triggerTopics []string

	// closers stop the parts started, newest first (Close).
	closers closers
	cancel  context.CancelFunc
	errs    chan error
	closed  sync.Once
}

// Start starts every part and returns once all of them are serving. It
// fills in the defaults of cfg and checks it first (Config.Validate): a
// Config with problems starts nothing.
func Start(cfg Config) (*App, error) {
	cfg.setDefaults()
	workflows, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cfg.Workflows = workflows
	egress, err := httpagent.NewEgress(httpagent.EgressPolicy{Allow: cfg.HTTPAgentAllow,
		AllowLoopback: len(cfg.HTTPAgentAllow) == 0 && len(cfg.KafkaBrokers) == 0 && cfg.EventStoreURL == ""})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &App{egress: egress, cfg: cfg, logger: cfg.Logger, clock: processes.ClockFunc(cfg.Clock), cancel: cancel, runCtx: ctx, errs: make(chan error, 16),
		Services: map[string]*demo.Service{}, AgentProcs: map[string]*agent.Agent{},
		HTTPHandlers: map[string]*httpagent.Handler{}, Metrics: metrics.New(), memberTag: newMemberTag()}
	for _, step := range a.startSteps() {
		err := step.start(ctx)
		if err == nil && cfg.startFault != nil {
			err = cfg.startFault(step.name)
		}
		if err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// newMemberTag returns a tag unique to this process and App: the pid
// and random bytes.
func newMemberTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%d-%x", os.Getpid(), b)
}

// startStep is one step of start-up: it starts a part (or, for a role
// this process does not run, nothing) and pushes what stops it onto the
// closers.
type startStep struct {
	name  string
	start func(context.Context) error
}

// startSteps lists the steps of start-up in order: the servers and the
// clients every part shares, then the roles, each after those it uses,
// then what reads from all of them.
func (a *App) startSteps() []startStep {
	return []startStep{
		{"tracing", a.startTracing},
		{"event store", a.startEventStore},
		{"workflows", a.registerWorkflows},
		{"kafka", a.startKafka},
		{"agent directory", a.startAgentDirectory},
		{string(RoleScheduler), a.startScheduler},
		{string(RoleSupervisor), a.startSupervisor},
		{string(RoleSubmitter), a.startSubmitter},
		{string(RoleStatus), a.startStatus},
		{string(RoleAgents), a.startAgents},
		{string(RoleAPI), a.startAPI},
		// The followers of the shared subscription register as their
		// parts are built, and it starts delivering once all of them are:
		// no counts.
		{"event fan-out", a.startFanout},
		{"metrics", a.startMetrics},
	}
}

// startEventStore starts the embedded event store unless one is
// configured, and the engine's client of it.
func (a *App) startEventStore(context.Context) error {
	if a.cfg.brokerOnly() {
		return nil // the broker needs no event store
	}
	a.EventStoreURL = a.cfg.EventStoreURL
	if a.EventStoreURL == "" {
		esCfg := esdbserver.Config{
			Listen: a.cfg.EventStoreListen, DataDir: filepath.Join(a.cfg.DataDir, "eventstore"), Logger: a.logger,
			IndexMemtableEntries: a.cfg.EventStoreIndexMemtable,
			MaxAppendSize:        a.cfg.EventStoreMaxAppendSize,
		}
		if a.cfg.Secure {
			files, err := a.secureFiles()
			if err != nil {
				return err
			}
			if esCfg.TLS, err = files.ServerTLS(); err != nil {
				return err
			}
			esCfg.UsersFile = files.EventStoreUsers
		}
		srv, err := esdbserver.Start(esCfg)
		if err != nil {
			return err
		}
		a.esServer = srv
		a.closers.pushServer("event store server", srv.Close)
		a.egress.AddOwn(srv.Addr())
		a.EventStoreURL = fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
		if a.cfg.Secure {
			if a.EventStoreURL, err = a.Secure.EventStoreURL(srv.Addr()); err != nil {
				return err
			}
		}
	}
	store, err := eventstore.Dial(a.EventStoreURL, a.logger)
	if err != nil {
		return err
	}
	a.closers.push("event store client", func() error {
		_ = store.Close() // its connection's end is no news at Close
		return nil
	})
	store.ObserveAppends(a.Metrics.AppendDone)
	if a.esServer != nil && !a.cfg.EventStoreThroughNetwork {
		store.AppendInProcess(localAppends(a.esServer))
		store.SubscribeInProcess(localSubscriptions(a.esServer))
	}
	a.Store = store
	a.followers = eventstore.NewFanout(store, domain.TaskStreamPrefix)
	return nil
}

// registerWorkflows registers the configured workflows and reads back
// the agents and trigger topics of every registered one.
func (a *App) registerWorkflows(ctx context.Context) error {
	if a.Store == nil {
		return nil // the broker role alone: its clients create their topics
	}
	a.Workflows = processes.NewRegistry(a.Store, a.clock)
	regCtx, cancel := context.WithTimeout(ctx, a.cfg.RegisterWorkflowsTimeout)
	defer cancel()
	for _, w := range a.cfg.Workflows {
		registered, changed, err := a.Workflows.Apply(regCtx, w, "sagad/"+a.cfg.Instance)
		if err != nil {
			return errors.Wrapf(err, "register workflow %s", w.Name)
		}
		if changed {
			a.logger.Info("workflow registered", "workflow", registered.Name, "version", registered.Version)
		}
	}
	var err error
	if a.agents, err = a.Workflows.Agents(regCtx); err != nil {
		return err
	}
	a.triggerTopics, err = a.Workflows.Topics(regCtx)
	return err
}

// registering is the registry as the API offers it: registering a workflow
// also creates the topics of its agents and triggers, so that an agent can
// subscribe to its commands before the first one is sent.
type registering struct {
	*processes.Registry
	app *App
}

// Apply registers the workflow, then creates its topics.
func (r registering) Apply(ctx context.Context, w *domain.Workflow, by string) (*domain.Workflow, bool, error) {
	registered, changed, err := r.Registry.Apply(ctx, w, by)
	if err != nil {
		return registered, changed, err
	}
	topics := append(w.Trigger.TopicsOrDefault(), w.AwaitTopics()...)
	for _, agent := range w.Agents() {
		topics = append(topics, protocol.CommandTopics(agent)...)
	}
	return registered, changed, errors.Wrap(kafka.EnsureTopics(ctx, r.app.client, r.app.cfg.Partitions, topics...), "create the workflow's topics")
}

// EmbeddedBroker is the embedded Kafka broker this process serves, nil
// when it uses external brokers.
func (a *App) EmbeddedBroker() *broker.Broker { return a.broker }

// Topics lists the topics saga creates at start.
func (a *App) Topics() []string {
	topics := []string{protocol.RepliesTopic, protocol.StatusTopic, protocol.DeadLetterTopic, protocol.AlertsTopic, protocol.SyncBarrierTopic}
	topics = append(topics, a.triggerTopics...)
	for _, agent := range append(append([]string{domain.HTTPAgent}, a.cfg.HTTPAgents...), a.agents...) {
		for _, topic := range protocol.CommandTopics(agent) {
			if !slices.Contains(topics, topic) {
				topics = append(topics, topic)
			}
		}
	}
	return topics
}

func (a *App) startKafka(ctx context.Context) error {
	a.KafkaBrokers = a.cfg.KafkaBrokers
	if len(a.KafkaBrokers) == 0 {
		brokerCfg := broker.Config{
			Listen: a.cfg.KafkaListen, DataDir: filepath.Join(a.cfg.DataDir, "kafka"),
			Partitions: a.cfg.Partitions, Topics: a.Topics(), Fsync: a.cfg.KafkaFsync, SyncTopics: a.cfg.KafkaSyncTopics, Retention: a.cfg.KafkaRetention, Logger: a.logger,
			MaxTopics: a.cfg.KafkaMaxTopics,
		}
		if a.cfg.Secure {
			if err := a.secureBroker(&brokerCfg); err != nil {
				return err
			}
		}
		embedded, err := broker.Start(brokerCfg)
		if err != nil {
			return err
		}
		a.broker = embedded
		a.closers.pushServer("kafka broker", func() error { embedded.Close(); return nil })
		a.KafkaBrokers = embedded.Addrs()
		for _, addr := range a.KafkaBrokers {
			a.egress.AddOwn(addr)
		}
	} else {
		a.KafkaSecurity = a.cfg.KafkaSecurity
	}
	opts, err := a.KafkaSecurity.Opts()
	if err != nil {
		return err
	}
	if compression := a.cfg.kafkaCompression(a.broker != nil); compression != "" {
		opt, err := kafka.CompressionOpt(compression)
		if err != nil {
			return errors.Wrap(err, "KafkaCompression")
		}
		opts = append(opts, opt)
	}
	a.kafkaOpts = opts
	client, err := kafka.NewClient(a.KafkaBrokers, a.kafkaOpts...)
	if err != nil {
		return err
	}
	a.client = client
	a.closers.push("kafka client", func() error { client.Close(); return nil })
	topicCtx, cancel := context.WithTimeout(ctx, a.cfg.CreateTopicsTimeout)
	defer cancel()
	if err := kafka.EnsureTopics(topicCtx, client, a.cfg.Partitions, a.Topics()...); err != nil {
		return a.KafkaSecurity.Explain(err)
	}
	err = kafka.EnsureCompactedTopics(topicCtx, client, a.cfg.Partitions, protocol.AgentsTopic)
	if errors.Is(err, kafka.ErrTopicNotCompacted) {
		a.logger.Warn("agent heartbeats' topic is not compacted", "topic", protocol.AgentsTopic, "err", err.Error())
	} else if err != nil {
		return a.KafkaSecurity.Explain(err)
	}
	return nil
}

// newProducer gives a process a Kafka client of its own, so that one's
// traffic (statuses) never queues another's (commands); Close closes it
// once the process has stopped.
func (a *App) newProducer(role string) *kafka.Producer {
	newClient := kafka.NewClient
	if role == "status" {
		newClient = kafka.NewStatusClient
	}
	client, err := newClient(a.KafkaBrokers, a.kafkaOpts...)
	if err != nil {
		// NewClient fails only on invalid options, checked in startKafka.
		panic(err)
	}
	a.closers.push(role+" producer", func() error { client.Close(); return nil })
	p := kafka.NewProducer(client, "saga/"+role+"/"+a.cfg.Instance, a.logger)
	// An order within the size limit is dead-lettered whole, so that it
	// can be redriven; a larger one by reference.
	p.MaxDeadLetterBytes = max(a.cfg.MaxOrderSize, kafka.DefaultMaxDeadLetterBytes)
	return p
}

// startSubmitter runs the submitter, which turns orders into tasks (the
// submitter role).
func (a *App) startSubmitter(ctx context.Context) error {
	if !a.cfg.has(RoleSubmitter) {
		return nil
	}
	var replyTopics domain.ReplyTopicPolicy
	if a.cfg.ReplyTopicPattern != "" {
		pattern, err := regexp.Compile(a.cfg.ReplyTopicPattern)
		if err != nil {
			return errors.Wrap(err, "reply topic pattern")
		}
		replyTopics.Pattern = pattern
	}
	producer := a.newProducer("submitter")
	// A refused order's status goes only to a reply topic that exists
	// (its caller waits on it): naming a new one creates nothing.
	rejectClient, err := kafka.NewClientForExistingTopics(a.KafkaBrokers, a.kafkaOpts...)
	if err != nil {
		return err
	}
	a.closers.push("submitter rejections producer", func() error { rejectClient.Close(); return nil })
	rejections := kafka.NewProducer(rejectClient, "saga/submitter/"+a.cfg.Instance, a.logger)
	a.Submitter = &processes.Submitter{Store: a.Store, DeadLetters: producer, Rejections: rejections, Workflows: a.Workflows,
		Actor: "submitter/" + a.cfg.Instance, Clock: a.clock, Logger: a.logger, MaxOrderSize: a.cfg.MaxOrderSize, ReplyTopics: replyTopics,
		Tracing: a.tracing}
	if a.Scheduler != nil {
		// The scheduler of this process records each task it owns
		// with its first dispatch, in the append that creates it.
		a.Submitter.Starter = a.Scheduler
		if a.cfg.MaxUnfinishedTasks >= 0 {
			a.Submitter.Intake = &processes.UnfinishedLimit{Max: a.cfg.MaxUnfinishedTasks, Logger: a.logger,
				Unfinished: a.Scheduler.Unfinished}
		}
	}
	if err := a.Submitter.Validate(); err != nil {
		return err
	}
	a.consumeWith(ctx, kafka.ConsumerConfig{Group: "saga-submitter", Topics: a.triggerTopics, MoreTopics: a.Workflows.Topics},
		a.Submitter.HandleOrder)
	return nil
}

// startStatus runs the status publisher (the status role).
func (a *App) startStatus(ctx context.Context) error {
	if !a.cfg.has(RoleStatus) {
		return nil
	}
	statuses := a.newProducer("status")
	a.Status = &processes.StatusPublisher{Store: a.followers.Register("status"), Checkpoints: a.Store, Sink: statuses, Alerts: statuses,
		Logger: a.logger, Name: processes.DefaultStatusCheckpoint,
		// Each finished task's stream gets its workflow's retention.
		Retention: &processes.FinishedTaskRetention{Workflows: a.Workflows, Limits: a.Store, Logger: a.logger}}
	a.run("status publisher", func() error { return a.Status.Run(ctx) })
	return nil
}

// startFanout runs the subscription the followers registered so far
// share.
func (a *App) startFanout(ctx context.Context) error {
	if a.followers == nil {
		return nil
	}
	a.run("event fan-out", func() error { return a.followers.Run(ctx) })
	return nil
}

// startScheduler runs the scheduler (the scheduler role); it shares tasks
// with other schedulers by the partitions of the replies topic its
// consumer group assigns it.
func (a *App) startScheduler(ctx context.Context) error {
	if !a.cfg.has(RoleScheduler) {
		return nil
	}
	lookupCtx, cancel := context.WithTimeout(ctx, a.cfg.SchedulerSetupTimeout)
	defer cancel()
	ownership, err := kafka.NewPartitionOwnership(lookupCtx, a.client, protocol.RepliesTopic)
	if err != nil {
		return errors.Wrap(err, "scheduler ownership")
	}
	commands := a.newProducer("scheduler")
	var sender processes.CommandSender = commands
	if a.cfg.has(RoleAgents) && !a.cfg.CommandsThroughKafka {
		a.inProcess = &inProcessCommands{Producer: commands, ctx: ctx, logger: a.logger}
		// The commands handed over are waited for once the scheduler,
		// which hands them, has stopped.
		a.closers.push("in-process commands", func() error { a.inProcess.wait(); return nil })
		sender = a.inProcess
	}
	a.Scheduler = &processes.Scheduler{Store: a.followers.Register("scheduler"), Commands: sender, DeadLetters: commands, Workflows: a.Workflows,
		Actor: "scheduler/" + a.cfg.Instance, Clock: a.clock, Logger: a.logger, Ownership: ownership,
		Checkpoints: a.Store, CheckpointEvery: a.cfg.CheckpointEvery, Observer: a.Metrics, Tracing: a.tracing}
	if a.AgentDirectory != nil {
		// Dispatches go by the room and health of agents' instances.
		a.Scheduler.Agents, a.Scheduler.AgentsReady, a.Scheduler.Router = a.AgentDirectory, a.AgentDirectory.Ready(), a.AgentDirectory
	}
	if a.inProcess != nil {
		a.inProcess.replies = processes.ReplySenderFunc(a.Scheduler.RecordReply)
		if a.cfg.PreferLocalAgents {
			a.Scheduler.PreferInstance = a.inProcess.has
		}
	}
	a.Scheduler.AwaitInbox = &processes.AwaitInbox{Store: a.Store, Limits: a.Store, Max: a.cfg.AwaitInboxMax,
		Retention: a.cfg.AwaitInboxRetention, Clock: a.clock}
	a.run("scheduler", func() error { return a.Scheduler.Run(ctx) })
	a.startAwaiter(ctx)
	a.consumeWith(ctx, kafka.ConsumerConfig{Group: "saga-scheduler", Topics: []string{protocol.RepliesTopic},
		OnAssigned: func(m map[string][]int32) { ownership.Assigned(m); go a.Scheduler.Rebalanced(ctx) },
		OnRevoked:  func(m map[string][]int32) { ownership.Revoked(m); go a.Scheduler.Rebalanced(ctx) },
	}, a.Scheduler.HandleReply)
	return nil
}

// startSupervisor runs the supervisor (the supervisor role); among
// several, the holder of the lease acts. The lease is set up (its topic,
// its client) under a bounded context, then runs under the app's until
// Close.
func (a *App) startSupervisor(ctx context.Context) error {
	if !a.cfg.has(RoleSupervisor) {
		return nil
	}
	setupCtx, cancel := context.WithTimeout(ctx, a.cfg.SupervisorSetupTimeout)
	defer cancel()
	lease, err := kafka.NewLease(setupCtx, a.KafkaBrokers, "saga-supervisor", a.logger, a.kafkaOpts...)
	if err != nil {
		return err
	}
	a.closers.push("supervisor lease", func() error { lease.Close(); return nil })
	a.run("supervisor lease", func() error { return lease.Run(ctx) })
	a.Supervisor = &processes.Supervisor{Store: a.followers.Register("supervisor"), Alerts: a.newProducer("supervisor"), Workflows: a.Workflows, Actor: "supervisor/" + a.cfg.Instance,
		Clock: a.clock, Logger: a.logger, Interval: a.cfg.SupervisorInterval, Leader: lease,
		Terms: processes.StoreLeaseTerms{Store: a.Store}, StoreTimeout: a.cfg.SupervisorStoreTimeout,
		Checkpoints: a.Store, CheckpointEvery: a.cfg.CheckpointEvery, Observer: a.Metrics, Tracing: a.tracing}
	a.run("supervisor", func() error { return a.Supervisor.Run(ctx) })
	return nil
}

// startAPI serves the task view and the operators' actions over HTTP (the
// api role). A process without the api role serves only the operational
// endpoints (/healthz, /readyz, /metrics) on HTTPListen, when it is set.
func (a *App) startAPI(ctx context.Context) error {
	if !a.cfg.has(RoleAPI) {
		if a.cfg.HTTPListen == "" {
			return nil
		}
		return a.serveHTTP(func(guard httpapi.Guard) http.Handler {
			return httpapi.Operational(httpapi.Config{Metrics: a, Readiness: a, Tokens: guard.Tokens, Hosts: guard.Hosts})
		})
	}
	dir := a.cfg.TaskViewDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "saga-taskview-")
		if err != nil {
			return errors.Wrap(err, "task view directory")
		}
		a.closers.push("task view temporary directory", func() error { return os.RemoveAll(tmp) })
		dir = tmp
	}
	view, err := openTaskView(ctx, a, dir, a.followers.Register("task view"), a.Store)
	if err != nil {
		return err
	}
	a.Tasks = view
	a.Operator = &processes.Operator{Store: a.Store, Workflows: a.Workflows, Clock: a.clock, Observer: a.Metrics, Tracing: a.tracing}
	return a.serveHTTP(func(guard httpapi.Guard) http.Handler {
		agents := agentsView{dir: a.AgentDirectory, registered: a.Workflows.Agents, adm: kadm.NewClient(a.client), now: a.cfg.Clock,
			held: func() map[string]map[domain.Priority]int {
				if a.Scheduler == nil {
					return nil
				}
				return a.Scheduler.WaitingByPriority()
			}}
		ui := console.Handler(console.Config{Tasks: a.Tasks, History: a.Store, Tokens: guard.Tokens, Kafka: topics.Dial(a.KafkaBrokers, a.cfg.KafkaSecurity.Explain, a.kafkaOpts...),
			Metrics: a.Metrics.Registry, Context: ctx, Agents: agents})
		mounts := append([]httpapi.Mount{{Pattern: console.Pattern, Handler: ui},
			{Pattern: "GET /ui", Handler: http.RedirectHandler(console.Pattern, http.StatusMovedPermanently)}}, httpapi.AgentsAPI(agents)...)
		return httpapi.Handler(httpapi.Config{Tasks: a.Tasks, Operations: a.Operator, Workflows: registering{a.Workflows, a},
			Metrics: a, Readiness: a, Tokens: guard.Tokens, Hosts: guard.Hosts, Mounts: mounts})
	})
}

// serveHTTP serves the handler handler builds on HTTPListen, with the
// tokens, allowed hosts and TLS configured, until Close.
func (a *App) serveHTTP(handler func(httpapi.Guard) http.Handler) error {
	var guard httpapi.Guard
	if a.cfg.APITokensFile != "" {
		var err error
		if guard.Tokens, err = httpapi.LoadTokens(a.cfg.APITokensFile); err != nil {
			return err
		}
	}
	hosts, err := httpapi.ParseAllowedHosts(strings.Join(a.cfg.HTTPAllowedHosts, ","), a.cfg.HTTPListen)
	if err != nil {
		return err
	}
	guard.Hosts = hosts
	lis, err := net.Listen("tcp", a.cfg.HTTPListen)
	if err != nil {
		return errors.Wrap(err, "http api listen")
	}
	a.HTTPAddr = lis.Addr().String()
	a.egress.AddOwn(a.HTTPAddr)
	// Timeouts and a header limit, so that slow or hostile clients cannot
	// hold connections and memory: bodies are small (1 MiB at most).
	server := &http.Server{Handler: handler(guard),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	a.run("http api", func() error {
		var err error
		if a.cfg.APITLSCert != "" {
			err = server.ServeTLS(lis, a.cfg.APITLSCert, a.cfg.APITLSKey)
		} else {
			err = server.Serve(lis)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	a.closers.push("http api server", func() error { shutdown(server); return nil })
	a.logger.Info("http api listening", "addr", a.HTTPAddr, "tls", a.cfg.APITLSCert != "", "tokens", guard.Tokens.Enabled(),
		"operational-only", !a.cfg.has(RoleAPI))
	return nil
}

// startAgents runs the configured Go agents, the built-in HTTP agent for
// domain.HTTPAgent and the configured HTTP agents and, with DemoAgents, the
// demo services with an HTTP agent in front of each (the agents role).
func (a *App) startAgents(ctx context.Context) error {
	if !a.cfg.has(RoleAgents) {
		return nil
	}
	for name, handler := range a.cfg.Agents {
		if err := a.startAgent(ctx, name, handler, 0, nil, false); err != nil {
			return err
		}
	}
	client := httpagent.NewClient(a.egress)
	for _, name := range append([]string{domain.HTTPAgent}, a.cfg.HTTPAgents...) {
		// Its steps call any host their definitions name: each host's
		// health is judged apart, so that one that hangs holds no other.
		if err := a.startHTTPAgent(ctx, name, httpagent.Config{Client: client, Clock: a.cfg.Clock, HealthByTarget: true}); err != nil {
			return err
		}
	}
	if !a.cfg.DemoAgents {
		return nil
	}
	// Only the demo workflow's agents: a user's agent of another name must
	// never be answered by a demo service.
	for _, agentName := range demo.Workflow().Agents() {
		if _, own := a.cfg.Agents[agentName]; own || slices.Contains(a.cfg.HTTPAgents, agentName) || slices.Contains(a.cfg.ExternalAgents, agentName) {
			continue
		}
		url, external := a.cfg.DemoServiceURLs[agentName]
		if !external {
			svc := demo.NewService(agentName, a.logger)
			svc.KeyRetention = a.cfg.DemoKeyRetention
			if faults := a.cfg.Faults[agentName]; len(faults) > 0 {
				svc.SetFaults(faults...)
				for _, f := range faults {
					a.logger.Warn("fault injected", "agent", agentName, "mode", f.Mode, "rate", f.Rate)
				}
			}
			if err := svc.Start("127.0.0.1:0"); err != nil {
				return err
			}
			a.closers.push("demo service "+agentName, func() error { _ = svc.Close(); return nil })
			a.Services[agentName] = svc
			url = svc.URL()
		}
		// The demo agent may call its service, wherever it is.
		egress := a.egress
		if u, err := neturl.Parse(url); err == nil && u.Host != "" {
			port := u.Port()
			if port == "" {
				port = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
			}
			if egress, err = a.egress.Also(net.JoinHostPort(u.Hostname(), port)); err != nil {
				return errors.Wrapf(err, "demo service of %s", agentName)
			}
		}
		if err := a.startHTTPAgent(ctx, agentName, httpagent.Config{Client: httpagent.NewClient(egress), BaseURL: url, Clock: a.cfg.Clock}); err != nil {
			return err
		}
	}
	return nil
}

// startHTTPAgent runs the built-in HTTP agent under a name; its handler
// keeps a breaker per host, so the agent runtime keeps none. With
// cfg.HealthByTarget the handler also judges each host's hangs, with the
// agent's latency budget, and the instance stays healthy; without it (an
// agent of one service, BaseURL) the instance's health is its host's.
func (a *App) startHTTPAgent(ctx context.Context, name string, cfg httpagent.Config) error {
	cfg.TracerProvider = a.tracing
	cfg.MaxRenderedBytes = a.cfg.MaxRenderedBytes
	cfg.Secrets = &httpagent.Secrets{Dir: a.cfg.SecretsDir}
	var probe agent.Config
	a.cfg.AgentInstances.configure(name, &probe)
	cfg.HangAfter = probe.HangAfter
	h := httpagent.New(cfg)
	a.HTTPHandlers[name] = h
	breakers := h.BreakerState
	if cfg.HealthByTarget {
		breakers = nil
	}
	return a.startAgent(ctx, name, func(ctx context.Context, req agent.Request) (any, error) {
		return h.Handle(ctx, req.Command())
	}, -1, breakers, cfg.HealthByTarget)
}

// startAgent runs an agent through the Go agent SDK, as any program would.
func (a *App) startAgent(ctx context.Context, name string, handler agent.Handler, breakerOpenFor time.Duration, breakers func() agentruntime.BreakerState,
	healthByTarget bool) error {
	group := "saga-agent-" + name
	// The client ID names this process's consumer in its group (readiness
	// looks for it there); the agent's producer carries it too.
	opts := append(slices.Clone(a.kafkaOpts), kgo.ClientID(a.consumerClientID(group)))
	cfg := agent.Config{Brokers: a.KafkaBrokers, KafkaOptions: opts, Group: group, Logger: a.logger, Clock: a.cfg.Clock, BreakerOpenFor: breakerOpenFor,
		TracerProvider: a.tracing, Instance: a.agentInstance(name), Breakers: breakers, HealthByTarget: healthByTarget}
	a.cfg.AgentInstances.configure(name, &cfg)
	cfg.Directory = a.directory()
	if a.agentsProducer == nil {
		client, err := kafka.NewClient(a.KafkaBrokers, a.kafkaOpts...)
		if err != nil {
			return errors.Wrap(err, "agents' producer")
		}
		// Pushed before any agent's wait, so closed after every agent
		// has stopped.
		a.closers.push("agents producer", func() error { client.Close(); return nil })
		a.agentsProducer = client
	}
	cfg.Producer = a.agentsProducer
	ag, err := agent.New(name, handler, cfg)
	if err != nil {
		return errors.Wrapf(err, "agent %s", name)
	}
	a.AgentProcs[name] = ag
	if a.inProcess != nil {
		a.inProcess.add(ag)
	}
	a.addGroup(ag.Group())
	a.run("agent "+name, func() error { return ag.Run(ctx) })
	return nil
}

// addGroup notes a consumer group this process consumes in.
func (a *App) addGroup(group string) {
	a.groupsMu.Lock()
	defer a.groupsMu.Unlock()
	a.groups = append(a.groups, group)
}

func (a *App) consumeWith(ctx context.Context, cfg kafka.ConsumerConfig, h kafka.Handler) {
	cfg.Brokers, cfg.Logger = a.KafkaBrokers, a.logger
	cfg.Opts = append(append(cfg.Opts, a.kafkaOpts...), kgo.ClientID(a.consumerClientID(cfg.Group)))
	a.addGroup(cfg.Group)
	a.run(cfg.Group, func() error { return kafka.Consume(ctx, cfg, h) })
}

// run starts a part's goroutine, which stops when the run context ends,
// and pushes its wait onto the closers.
func (a *App) run(name string, f func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.report(name, f())
	}()
	a.closers.push(name, func() error {
		<-done
		return nil
	})
}

// report logs a part that stopped with an error by itself, and delivers
// the first such error to Failed.
func (a *App) report(name string, err error) {
	if err == nil {
		return
	}
	a.logger.Error("component stopped", "component", name, "err", err.Error())
	select {
	case a.errs <- errors.Wrap(err, name):
	default:
	}
}

// shutdown stops an HTTP server, giving its requests in flight a moment.
func shutdown(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// Run starts the system, runs it until ctx ends or a part of it fails, and
// stops it: Start, then Close.
func Run(ctx context.Context, cfg Config) error {
	a, err := Start(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.Failed():
		return err
	}
}

// Failed delivers the first error of a component that stopped by itself.
func (a *App) Failed() <-chan error { return a.errs }

// Close stops every part and waits for them: it ends the context they run
// under, then pops the closers, newest part first, each part before what
// it was started on. After a Start that failed part way, it stops what
// had started; a second call does nothing.
//
// Close waits ShutdownTimeout at most for the parts: past it, it logs
// those that have not stopped (one waiting for a broker it cannot reach, a
// handler that ignores its context), closes the embedded servers, and
// returns, leaving the parts to the process's exit.
func (a *App) Close() {
	a.closed.Do(func() {
		a.cancel()
		done := make(chan error, 1)
		go func() { done <- a.closers.closeAll() }()
		timeout := time.NewTimer(a.cfg.ShutdownTimeout)
		defer timeout.Stop()
		select {
		case err := <-done:
			if err != nil {
				a.logger.Error("close", "err", err.Error())
			}
		case <-timeout.C:
			a.logger.Error("parts did not stop within the shutdown timeout; leaving them", "timeout", a.cfg.ShutdownTimeout,
				"waiting", strings.Join(a.closers.waiting(), ", "))
			// The embedded servers still close their data cleanly (each
			// bounds its own close); the parts left fail against them.
			for _, srv := range a.closers.takeServers() {
				if err := srv.close(); err != nil {
					a.logger.Error("close", "err", errors.Wrapf(err, "close %s", srv.name).Error())
				}
			}
			// A server closeAll was closing when the timeout came is
			// still writing its data: returning now would let the
			// process exit (or a test remove the directory) mid-write.
			a.closers.awaitServers()
		}
	})
}

// startAwaiter consumes the topics of the registered workflows' await
// steps, from the moment each is registered, and completes the steps that
// wait for their events (processes.Awaiter). It runs with the scheduler,
// which carries out what follows a completed step; partitions are shared
// among instances by the consumer group, as triggers' are. The consumer
// starts with the first await topic: a group with no topic joins nothing,
// and readiness waits for every group this process consumes in.
func (a *App) startAwaiter(ctx context.Context) {
	a.Awaiter = &processes.Awaiter{Workflows: a.Workflows, Inbox: a.Scheduler.AwaitInbox, Correlator: a.Scheduler, Clock: a.clock,
		Logger: a.logger, MaxEventSize: a.cfg.MaxOrderSize}
	consume := func(topics []string) {
		a.consumeWith(ctx, kafka.ConsumerConfig{Group: "saga-await", Topics: topics, MoreTopics: a.Awaiter.Topics,
			TopicsInterval: awaitTopicsInterval}, a.Awaiter.HandleEvent)
	}
	if topics, err := a.Awaiter.Topics(ctx); err == nil && len(topics) > 0 {
		consume(topics)
		return
	}
	a.run("await topics", func() error {
		tick := time.NewTicker(awaitTopicsInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			topics, err := a.Awaiter.Topics(ctx)
			if err != nil && ctx.Err() == nil {
				a.logger.Warn("list the topics of await steps", "err", err.Error())
			}
			if len(topics) > 0 && ctx.Err() == nil {
				consume(topics)
				return nil
			}
		}
	})
}

// awaitTopicsInterval is how often the topics of await steps are looked
// for: an event published on a topic within this time of its workflow's
// registration is read all the same, from the topic's start.
const awaitTopicsInterval = 2 * time.Second
