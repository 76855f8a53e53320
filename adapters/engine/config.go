package engine

import (
	"cmp"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/projections"
)

// Defaults of the Config; a zero setting means its default.
const (
	// DefaultPartitions is how many partitions the topics saga creates have.
	DefaultPartitions = 4
	// DefaultRegisterWorkflowsTimeout bounds registering the configured
	// workflows at start.
	DefaultRegisterWorkflowsTimeout = 30 * time.Second
	// DefaultCreateTopicsTimeout bounds creating saga's topics at start.
	DefaultCreateTopicsTimeout = 30 * time.Second
	// DefaultSchedulerSetupTimeout bounds finding the replies topic's
	// partitions, which the scheduler shares tasks by, at start.
	DefaultSchedulerSetupTimeout = 30 * time.Second
	// DefaultSupervisorSetupTimeout bounds setting up the supervisors'
	// lease (its topic and its client) at start.
	DefaultSupervisorSetupTimeout = 30 * time.Second
	// DefaultShutdownTimeout bounds stopping: within a container
	// runtime's usual grace period (10 s) before it kills the process.
	DefaultShutdownTimeout = 8 * time.Second
)

// KafkaCompressionAuto is the Config.KafkaCompression that chooses by
// where Kafka runs: none for the embedded broker, franz-go's default
// (snappy) for KafkaBrokers.
const KafkaCompressionAuto = "auto"

// kafkaCompression is the codec name the engine's Kafka clients produce
// with, embedded telling whether this process runs the broker; "" leaves
// franz-go's default.
func (c *Config) kafkaCompression(embedded bool) string {
	if c.KafkaCompression != "" && c.KafkaCompression != KafkaCompressionAuto {
		return c.KafkaCompression
	}
	if embedded {
		return kafka.CompressionNone
	}
	return ""
}

// ErrInvalidConfig marks a Config that Start refuses; the ConfigError
// carrying it lists every problem.
var ErrInvalidConfig = errors.New("invalid engine configuration")

// ConfigError lists every problem of a Config at once, as a workflow
// definition's error lists all of its problems.
type ConfigError struct {
	Problems []error
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return ErrInvalidConfig.Error() + ": " + strings.Join(msgs, "; ")
}

// Is makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap gives the problems, so that errors.Is and errors.As reach them
// (a workflow's domain.ErrInvalidWorkflow, for one).
func (e *ConfigError) Unwrap() []error { return e.Problems }

// setDefaults fills in every setting left at its zero value that the
// engine itself defaults; settings whose zero value is documented as the
// default of the part they configure are left to that part.
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	c.instanceGiven = c.Instance != ""
	if c.Instance == "" {
		host, _ := os.Hostname()
		c.Instance = "sagad@" + host
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	orDefault := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	orDefault(&c.KafkaListen, broker.DefaultListen)
	orDefault(&c.EventStoreListen, esdbserver.DefaultListen)
	if c.has(RoleAPI) {
		// Without the api role, the operational endpoints are served
		// only where HTTPListen says.
		orDefault(&c.HTTPListen, httpapi.DefaultListen)
	}
	if c.DataDir != "" {
		orDefault(&c.SecureDir, filepath.Join(c.DataDir, "secure"))
		orDefault(&c.TaskViewDir, filepath.Join(c.DataDir, "taskview"))
	}
	durationOr := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	durationOr(&c.SupervisorInterval, processes.DefaultSupervisorInterval)
	durationOr(&c.SupervisorStoreTimeout, max(processes.DefaultSupervisorStoreTimeout, c.SupervisorInterval))
	durationOr(&c.CheckpointEvery, processes.DefaultTaskCheckpointEvery)
	durationOr(&c.RegisterWorkflowsTimeout, DefaultRegisterWorkflowsTimeout)
	durationOr(&c.CreateTopicsTimeout, DefaultCreateTopicsTimeout)
	durationOr(&c.SchedulerSetupTimeout, DefaultSchedulerSetupTimeout)
	durationOr(&c.SupervisorSetupTimeout, DefaultSupervisorSetupTimeout)
	durationOr(&c.ShutdownTimeout, DefaultShutdownTimeout)
	if c.MaxOrderSize == 0 {
		c.MaxOrderSize = processes.DefaultMaxOrderSize
	}
	if c.MaxRenderedBytes == 0 {
		c.MaxRenderedBytes = domain.DefaultMaxRenderedBytes
	}
	if c.TaskViewBatch == 0 {
		c.TaskViewBatch = projections.DefaultBatchSize
	}
}

// Validate reports every problem of the Config at once, as a
// *ConfigError: unknown roles, negative sizes and durations, a missing
// data directory for the embedded servers, invalid workflows (those of
// WorkflowDirs are read), a secrets directory that is not one, invalid
// HTTP agent egress entries, reply topic pattern, Kafka compression or
// Kafka security. Zero values mean defaults. Start calls it before it
// starts anything.
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks the Config as Validate does and returns the workflows
// to register: Workflows, then those of WorkflowDirs, or with none and
// DemoAgents the demo workflow.
func (c *Config) validate() ([]*domain.Workflow, error) {
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, errors.Newf(format, args...)) }
	for _, r := range c.Roles {
		if !slices.Contains(KnownRoles, r) {
			add("unknown role %q: want %v", r, KnownRoles)
		}
	}
	if slices.Contains(c.Roles, RoleBroker) && len(c.KafkaBrokers) > 0 {
		add("the broker role runs the embedded Kafka broker: give no KafkaBrokers (--kafka-brokers) with it")
	}
	if c.DataDir == "" && c.EventStoreURL == "" && !c.brokerOnly() {
		add("a data directory is required for the embedded event store")
	}
	if c.DataDir == "" && len(c.KafkaBrokers) == 0 {
		add("a data directory is required for the embedded kafka")
	}
	if c.MaxRenderedBytes < 0 {
		add("MaxRenderedBytes must not be negative, not %d", c.MaxRenderedBytes)
	}
	for _, n := range []struct {
		name  string
		value int64
	}{
		{"Partitions", int64(c.Partitions)},
		{"MaxOrderSize", int64(c.MaxOrderSize)},
		{"TaskViewBatch", int64(c.TaskViewBatch)},
		{"AwaitInboxMax", int64(c.AwaitInboxMax)},
		{"EventStoreIndexMemtable", int64(c.EventStoreIndexMemtable)},
		{"EventStoreMaxAppendSize", int64(c.EventStoreMaxAppendSize)},
	} {
		if n.value < 0 {
			add("%s must not be negative, not %d", n.name, n.value)
		}
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"SupervisorInterval", c.SupervisorInterval},
		{"CheckpointEvery", c.CheckpointEvery},
		{"RegisterWorkflowsTimeout", c.RegisterWorkflowsTimeout},
		{"CreateTopicsTimeout", c.CreateTopicsTimeout},
		{"SchedulerSetupTimeout", c.SchedulerSetupTimeout},
		{"SupervisorSetupTimeout", c.SupervisorSetupTimeout},
		{"ShutdownTimeout", c.ShutdownTimeout},
		{"SupervisorStoreTimeout", c.SupervisorStoreTimeout},
		{"AwaitInboxRetention", c.AwaitInboxRetention},
	} {
		if d.value < 0 {
			add("%s must not be negative, not %s", d.name, d.value)
		}
	}
	if interval := cmp.Or(c.SupervisorInterval, processes.DefaultSupervisorInterval); c.SupervisorStoreTimeout > 0 && c.SupervisorStoreTimeout < interval {
		add("SupervisorStoreTimeout (%s) must be at least SupervisorInterval (%s)", c.SupervisorStoreTimeout, interval)
	}
	if (c.APITLSCert == "") != (c.APITLSKey == "") {
		add("APITLSCert and APITLSKey go together: set both or neither")
	}
	if c.SecretsDir != "" {
		if info, err := os.Stat(c.SecretsDir); err != nil || !info.IsDir() {
			add("secrets directory %s is not a directory", c.SecretsDir)
		}
	}
	if _, err := httpagent.NewEgress(httpagent.EgressPolicy{Allow: c.HTTPAgentAllow}); err != nil {
		problems = append(problems, errors.Wrap(err, "HTTPAgentAllow"))
	}
	if c.ReplyTopicPattern != "" && c.has(RoleSubmitter) {
		if _, err := regexp.Compile(c.ReplyTopicPattern); err != nil {
			problems = append(problems, errors.Wrap(err, "reply topic pattern"))
		}
	}
	if name := c.kafkaCompression(false); name != "" {
		if _, err := kafka.CompressionOpt(name); err != nil {
			problems = append(problems, errors.Newf("KafkaCompression: %w, or %s", err, KafkaCompressionAuto))
		}
	}
	if len(c.KafkaBrokers) > 0 {
		if err := c.KafkaSecurity.Validate(); err != nil {
			problems = append(problems, errors.Wrap(err, "KafkaSecurity"))
		}
	}
	workflows := slices.Clone(c.Workflows)
	for _, dir := range c.WorkflowDirs {
		loaded, err := workflowfile.LoadDir(dir)
		switch {
		case err != nil:
			problems = append(problems, err)
		case len(loaded) == 0:
			add("no workflow definitions (*.yaml, *.yml, *.json) in %s", dir)
		}
		workflows = append(workflows, loaded...)
	}
	if len(workflows) == 0 && len(c.WorkflowDirs) == 0 && c.DemoAgents {
		workflows = []*domain.Workflow{demo.Workflow()}
	}
	for i, w := range workflows {
		// A workflow built in Go takes the defaults its file would.
		workflows[i] = w.WithDefaults()
		if err := workflows[i].Validate(); err != nil {
			problems = append(problems, errors.Wrapf(err, "workflow %s", w.Name))
		}
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return workflows, nil
}
