package broker

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// configGuard makes the embedded broker's configs tell the truth. kfake
// accepts any topic config name and value (retention.ms=abc reads as 0),
// reports its own defaults rather than what saga enforces, and applies
// retention.ms and retention.bytes only at its hourly cleaner, ignoring
// consumer groups. The guard hooks CreateTopics, AlterConfigs,
// IncrementalAlterConfigs and DescribeConfigs: it refuses what Kafka
// refuses, stores retention.ms and retention.bytes under names kfake's
// cleaner does not read (saga's retention pass enforces them, never past a
// committed offset), and answers DescribeConfigs for topics and the broker
// itself with what the broker enforces, saga's caps included.
type configGuard struct {
	cluster    *kfake.Cluster
	retention  Retention
	partitions int32
	// kfakeBroker are the broker configs saga gives kfake; an AlterConfigs
	// request, which replaces every dynamic broker config, keeps them.
	kfakeBroker map[string]string
	topics      *topicCap

	mu sync.Mutex
	// brokerBase is the broker's configs at start, as DescribeConfigs
	// reports them; broker is what it reports now (clients may alter the
	// broker configs that saga does not own).
	brokerBase, broker map[string]kmsg.DescribeConfigsResponseResourceConfig
}

// kfakeBrokerConfigs are the broker configs saga starts kfake with. Age and
// size retention are off in kfake: its cleaner would remove records that a
// consumer group has not consumed; saga's retention pass applies them.
func kfakeBrokerConfigs() map[string]string {
	return map[string]string{
		"message.max.bytes":   strconv.Itoa(MaxRecordBytes + 1<<20),
		"log.segment.bytes":   strconv.Itoa(retentionSegmentBytes),
		"log.retention.ms":    "-1",
		"log.retention.bytes": "-1",
	}
}

// loadBrokerConfigs reads kfake's own DescribeConfigs answer for the broker
// over an in-process connection, before the guard is installed, and puts
// saga's settings in it.
func (g *configGuard) loadBrokerConfigs(ctx context.Context, b *Broker) error {
	client, err := b.internalClient()
	if err != nil {
		return err
	}
	defer client.Close()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeSynonyms, req.IncludeDocumentation = true, true
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return err
	}
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		return errors.New("no broker configs in kfake's answer")
	}
	base := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range resp.Resources[0].Configs {
		base[c.Name] = c
	}
	static := func(name, value string, typ kmsg.ConfigType, doc string) {
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source, c.ReadOnly, c.ConfigType = name, kmsg.StringPtr(value), kmsg.ConfigSourceStaticBrokerConfig, true, typ
		if doc != "" {
			c.Documentation = kmsg.StringPtr(doc)
		}
		syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		syn.Name, syn.Value, syn.Source = name, c.Value, c.Source
		c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{syn}
		base[name] = c
	}
	r := g.retention
	static("log.retention.ms", strconv.FormatInt(orNoLimit(r.MaxAge.Milliseconds()), 10), kmsg.ConfigTypeLong,
		"sagad's --kafka-retention-age: saga's retention pass removes older records, but never past a consumer group's committed offset; -1: any age.")
	static("log.retention.bytes", "-1", kmsg.ConfigTypeLong, "The embedded broker has no size cap of its own; a topic's retention.bytes applies.")
	static("log.retention.check.interval.ms", strconv.FormatInt(r.interval().Milliseconds(), 10), kmsg.ConfigTypeLong, "The time between two of saga's retention passes.")
	static(brokerRetentionRecords, strconv.FormatInt(orNoLimit(r.MaxRecords), 10), kmsg.ConfigTypeLong,
		"sagad's --kafka-retention-records: saga's retention pass keeps at most this many records per partition, but never removes one a consumer group has not committed past; -1: no cap.")
	static(brokerRetentionRederivedRecords, strconv.FormatInt(orNoLimit(r.maxRecords(commandTopicExample)), 10), kmsg.ConfigTypeLong,
		"sagad's --kafka-retention-rederived-records: the same for the topics saga re-derives from the event store (commands, replies, heartbeats).")
	for _, name := range []string{"message.max.bytes", "log.segment.bytes"} {
		if c, ok := base[name]; ok && c.Value != nil {
			static(name, *c.Value, c.ConfigType, "Set by the embedded broker.")
		}
	}
	g.brokerBase = base
	g.broker = clone(base)
	return nil
}

// commandTopicExample is a topic saga re-derives, to ask Retention for its
// count.
const commandTopicExample = "saga.cmd.x"

func orNoLimit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func clone(m map[string]kmsg.DescribeConfigsResponseResourceConfig) map[string]kmsg.DescribeConfigsResponseResourceConfig {
	out := make(map[string]kmsg.DescribeConfigsResponseResourceConfig, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// install hooks the guard into cluster.
func (g *configGuard) install() {
	keep := func(resp kmsg.Response, handled bool) (kmsg.Response, error, bool) {
		g.cluster.KeepControl()
		return resp, nil, handled
	}
	g.cluster.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := g.createTopics(r.(*kmsg.CreateTopicsRequest))
		return keep(resp, resp != nil)
	})
	g.cluster.ControlKey(int16(kmsg.AlterConfigs), func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := g.alterConfigs(r.(*kmsg.AlterConfigsRequest))
		return keep(resp, resp != nil)
	})
	g.cluster.ControlKey(int16(kmsg.IncrementalAlterConfigs), func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := g.incrementalAlterConfigs(r.(*kmsg.IncrementalAlterConfigsRequest))
		return keep(resp, resp != nil)
	})
	g.cluster.ControlKey(int16(kmsg.DescribeConfigs), func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := g.describeConfigs(r.(*kmsg.DescribeConfigsRequest))
		return keep(resp, resp != nil)
	})
}

// createTopics checks a CreateTopics request's configs. A request whose
// configs are all valid and include none saga stores under its own names
// is left to kfake; any other is answered here, creating the valid topics
// with their configs as saga stores them.
func (g *configGuard) createTopics(req *kmsg.CreateTopicsRequest) kmsg.Response {
	refused := map[string]*configRefusal{}
	answer, seen := false, map[string]bool{}
	for i := range req.Topics {
		t := &req.Topics[i]
		if seen[t.Topic] {
			return nil // kfake refuses the whole request
		}
		seen[t.Topic] = true
		for j := range t.Configs {
			c := &t.Configs[j]
			v, why := validateTopicConfig(c.Name, c.Value, kerr.InvalidConfig.Code)
			if why != nil {
				refused[t.Topic], answer = why, true
				break
			}
			c.Value = v
			answer = answer || storedName(c.Name) != c.Name
		}
	}
	if !answer {
		if g.topics != nil {
			g.topics.created(req, g.cluster.DeleteTopic)
		}
		return nil
	}
	valid := *req
	valid.Topics = nil
	for _, t := range req.Topics {
		if refused[t.Topic] == nil {
			valid.Topics = append(valid.Topics, t)
		}
	}
	if g.topics != nil {
		g.topics.created(&valid, g.cluster.DeleteTopic)
	}
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = t.Topic
		if why := refused[t.Topic]; why != nil {
			st.ErrorCode, st.ErrorMessage = why.code, why.message()
			resp.Topics = append(resp.Topics, st)
			continue
		}
		code, partitions := g.createTopic(t, req.ValidateOnly)
		st.ErrorCode = code
		if code == 0 {
			if info := g.cluster.TopicInfo(t.Topic); info != nil && !req.ValidateOnly {
				st.TopicID = info.TopicID
			}
			st.NumPartitions, st.ReplicationFactor = partitions, 1
			for _, c := range t.Configs {
				rc := kmsg.NewCreateTopicsResponseTopicConfig()
				rc.Name, rc.Value, rc.Source = c.Name, c.Value, int8(kmsg.ConfigSourceDynamicTopicConfig)
				st.Configs = append(st.Configs, rc)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// createTopic creates one topic of a CreateTopics request, checked as kfake
// checks it, and reports the error code and its partition count.
func (g *configGuard) createTopic(t kmsg.CreateTopicsRequestTopic, validateOnly bool) (int16, int32) {
	partitions := t.NumPartitions
	switch {
	case len(t.ReplicaAssignment) > 0:
		if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
			return kerr.InvalidRequest.Code, 0
		}
		partitions = int32(len(t.ReplicaAssignment))
	case t.ReplicationFactor > 1:
		return kerr.InvalidReplicationFactor.Code, 0
	case partitions == 0:
		return kerr.InvalidPartitions.Code, 0
	case partitions < 0:
		partitions = g.partitions
	}
	if validateOnly {
		if g.cluster.TopicInfo(t.Topic) != nil {
			return kerr.TopicAlreadyExists.Code, 0
		}
		return 0, partitions
	}
	configs := map[string]string{}
	for _, c := range t.Configs {
		configs[storedName(c.Name)] = *c.Value
	}
	if err := g.cluster.CreateTopic(t.Topic, partitions, configs); err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			return ke.Code, 0
		}
		return kerr.UnknownServerError.Code, 0
	}
	return 0, partitions
}

// brokerOp is one change to a broker config: set (value) or delete.
type brokerOp struct {
	name  string
	value *string
	del   bool
}

// refuseBroker reports why a broker config may not be altered by clients.
func refuseBroker(name string) *configRefusal {
	if owner, ok := sagaOwnedBrokerConfigs[name]; ok {
		return &configRefusal{kerr.InvalidRequest.Code, "Cannot update these configs dynamically: " + name + " is set by " + owner}
	}
	return nil
}

// alterConfigs checks an AlterConfigs request (each resource's configs
// replace all its earlier ones). A valid request is left to kfake, with
// topic configs renamed as saga stores them and saga's broker configs kept;
// one with an invalid config is answered here, and changes nothing.
func (g *configGuard) alterConfigs(req *kmsg.AlterConfigsRequest) kmsg.Response {
	refused := make([]*configRefusal, len(req.Resources))
	bad := false
	var brokerOps [][]brokerOp
	for i := range req.Resources {
		rr := &req.Resources[i]
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			for j := range rr.Configs {
				c := &rr.Configs[j]
				v, why := validateTopicConfig(c.Name, c.Value, kerr.InvalidRequest.Code)
				if why != nil {
					refused[i], bad = why, true
					break
				}
				c.Value = v
			}
		case kmsg.ConfigResourceTypeBroker:
			var ops []brokerOp
			for _, c := range rr.Configs {
				if why := refuseBroker(c.Name); why != nil {
					refused[i], bad = why, true
					break
				}
				ops = append(ops, brokerOp{name: c.Name, value: c.Value})
			}
			brokerOps = append(brokerOps, ops)
		}
	}
	if bad {
		resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
		for i, rr := range req.Resources {
			st := kmsg.NewAlterConfigsResponseResource()
			st.ResourceType, st.ResourceName = rr.ResourceType, rr.ResourceName
			st.ErrorCode, st.ErrorMessage = refusedOrHeldBack(refused[i])
			resp.Resources = append(resp.Resources, st)
		}
		return resp
	}
	for i := range req.Resources {
		rr := &req.Resources[i]
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			for j := range rr.Configs {
				rr.Configs[j].Name = storedName(rr.Configs[j].Name)
			}
		case kmsg.ConfigResourceTypeBroker:
			for name, value := range g.kfakeBroker {
				c := kmsg.NewAlterConfigsRequestResourceConfig()
				c.Name, c.Value = name, kmsg.StringPtr(value)
				rr.Configs = append(rr.Configs, c)
			}
		}
	}
	if !req.ValidateOnly {
		for _, ops := range brokerOps {
			g.alterBroker(ops, true)
		}
	}
	return nil
}

// refusedOrHeldBack answers a resource of a refused request: its own
// refusal, or that it was held back because another resource was refused
// (the embedded broker applies a request's resources all or none).
func refusedOrHeldBack(why *configRefusal) (int16, *string) {
	if why != nil {
		return why.code, why.message()
	}
	return kerr.InvalidRequest.Code, kmsg.StringPtr("not applied: another resource in the same request was refused")
}

// incrementalAlterConfigs is alterConfigs for IncrementalAlterConfigs.
func (g *configGuard) incrementalAlterConfigs(req *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	refused := make([]*configRefusal, len(req.Resources))
	bad := false
	var brokerOps [][]brokerOp
	for i := range req.Resources {
		rr := &req.Resources[i]
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			for j := range rr.Configs {
				c := &rr.Configs[j]
				if why := checkIncremental(c); why != nil {
					refused[i], bad = why, true
					break
				}
			}
		case kmsg.ConfigResourceTypeBroker:
			var ops []brokerOp
			for _, c := range rr.Configs {
				if why := refuseBroker(c.Name); why != nil {
					refused[i], bad = why, true
					break
				}
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					ops = append(ops, brokerOp{name: c.Name, value: c.Value})
				case kmsg.IncrementalAlterConfigOpDelete:
					ops = append(ops, brokerOp{name: c.Name, del: true})
				}
				// A list op (sasl.enabled.mechanisms, super.users) is
				// kfake's; what it makes of it shows at the next start.
			}
			brokerOps = append(brokerOps, ops)
		}
	}
	if bad {
		resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		for i, rr := range req.Resources {
			st := kmsg.NewIncrementalAlterConfigsResponseResource()
			st.ResourceType, st.ResourceName = rr.ResourceType, rr.ResourceName
			st.ErrorCode, st.ErrorMessage = refusedOrHeldBack(refused[i])
			resp.Resources = append(resp.Resources, st)
		}
		return resp
	}
	for i := range req.Resources {
		if rr := &req.Resources[i]; rr.ResourceType == kmsg.ConfigResourceTypeTopic {
			for j := range rr.Configs {
				rr.Configs[j].Name = storedName(rr.Configs[j].Name)
			}
		}
	}
	if !req.ValidateOnly {
		for _, ops := range brokerOps {
			g.alterBroker(ops, false)
		}
	}
	return nil
}

// checkIncremental checks one topic config change of an
// IncrementalAlterConfigs request as Kafka does, trimming a value it sets.
func checkIncremental(c *kmsg.IncrementalAlterConfigsRequestResourceConfig) *configRefusal {
	switch c.Op {
	case kmsg.IncrementalAlterConfigOpSet:
		v, why := validateTopicConfig(c.Name, c.Value, kerr.InvalidRequest.Code)
		if why == nil {
			c.Value = v
		}
		return why
	case kmsg.IncrementalAlterConfigOpDelete:
		return knownTopicConfig(c.Name)
	case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
		if spec, ok := topicConfigSpecs[c.Name]; ok && spec.typ != kmsg.ConfigTypeList {
			return &configRefusal{kerr.InvalidConfig.Code, "Config value append is not allowed for config key: " + c.Name}
		}
		v, why := validateTopicConfig(c.Name, c.Value, kerr.InvalidRequest.Code)
		if why == nil {
			c.Value = v
		}
		return why
	default:
		return &configRefusal{kerr.InvalidRequest.Code, "Unknown alter config operation " + strconv.Itoa(int(c.Op))}
	}
}

// alterBroker keeps the broker's reported configs in step with a change a
// client made; replace drops every client-set config first.
func (g *configGuard) alterBroker(ops []brokerOp, replace bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if replace {
		g.broker = clone(g.brokerBase)
	}
	for _, op := range ops {
		if op.del {
			if base, ok := g.brokerBase[op.name]; ok && base.Source != kmsg.ConfigSourceDynamicBrokerConfig {
				g.broker[op.name] = base
			} else {
				delete(g.broker, op.name)
			}
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		if base, ok := g.brokerBase[op.name]; ok {
			c.ConfigType, c.Documentation = base.ConfigType, base.Documentation
		}
		c.Name, c.Value, c.Source = op.name, op.value, kmsg.ConfigSourceDynamicBrokerConfig
		syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		syn.Name, syn.Value, syn.Source = op.name, op.value, c.Source
		c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{syn}
		g.broker[op.name] = c
	}
}

// describeConfigs answers a DescribeConfigs request about topics and the
// broker; one naming any other kind of resource is left to kfake.
func (g *configGuard) describeConfigs(req *kmsg.DescribeConfigsRequest) kmsg.Response {
	for _, rr := range req.Resources {
		if rr.ResourceType != kmsg.ConfigResourceTypeTopic && rr.ResourceType != kmsg.ConfigResourceTypeBroker {
			return nil
		}
	}
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	g.mu.Lock()
	broker := clone(g.broker)
	g.mu.Unlock()
	for _, rr := range req.Resources {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		var configs []kmsg.DescribeConfigsResponseResourceConfig
		if rr.ResourceType == kmsg.ConfigResourceTypeBroker {
			node := g.cluster.CurrentNode()
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(node)) {
				r.ErrorCode = kerr.InvalidRequest.Code
				resp.Resources = append(resp.Resources, r)
				continue
			}
			for _, c := range broker {
				configs = append(configs, c)
			}
			if rr.ResourceName != "" {
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source, c.ReadOnly, c.ConfigType = "broker.id", kmsg.StringPtr(rr.ResourceName), kmsg.ConfigSourceStaticBrokerConfig, true, kmsg.ConfigTypeInt
				configs = append(configs, c)
			}
		} else {
			info := g.cluster.TopicInfo(rr.ResourceName)
			if info == nil {
				r.ErrorCode = kerr.UnknownTopicOrPartition.Code
				resp.Resources = append(resp.Resources, r)
				continue
			}
			configs = g.topicConfigs(rr.ResourceName, info.Configs, broker)
		}
		slices.SortFunc(configs, func(a, b kmsg.DescribeConfigsResponseResourceConfig) int { return strings.Compare(a.Name, b.Name) })
		for _, c := range configs {
			if rr.ConfigNames != nil && !slices.Contains(rr.ConfigNames, c.Name) {
				continue
			}
			c.IsDefault = c.Source == kmsg.ConfigSourceDefaultConfig
			if !req.IncludeSynonyms {
				c.ConfigSynonyms = nil
			}
			if !req.IncludeDocumentation {
				c.Documentation = nil
			}
			r.Configs = append(r.Configs, c)
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp
}

// topicConfigs are a topic's configs as the broker enforces them: the
// topic's own (stored as kfake keeps them), else the broker's default,
// with saga's cap on the records kept.
func (g *configGuard) topicConfigs(topic string, stored map[string]*string, broker map[string]kmsg.DescribeConfigsResponseResourceConfig) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for name, spec := range topicConfigSpecs {
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.ConfigType, c.Documentation = name, spec.typ, kmsg.StringPtr(spec.doc)
		var fallback *kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
		if b, ok := broker[spec.broker]; ok && spec.broker != "" {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = b.Name, b.Value, b.Source
			fallback = &syn
		} else {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = name, kmsg.StringPtr(spec.def), kmsg.ConfigSourceDefaultConfig
			fallback = &syn
		}
		if v, ok := stored[storedName(name)]; ok && v != nil {
			c.Value, c.Source = v, kmsg.ConfigSourceDynamicTopicConfig
			own := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			own.Name, own.Value, own.Source = name, v, c.Source
			c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{own, *fallback}
		} else {
			c.Value, c.Source = fallback.Value, fallback.Source
			c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{*fallback}
		}
		out = append(out, c)
	}
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name, c.ConfigType, c.Source, c.ReadOnly = RetentionRecordsConfig, kmsg.ConfigTypeLong, kmsg.ConfigSourceStaticBrokerConfig, true
	count, from := orNoLimit(g.retention.maxRecords(topic)), brokerRetentionRecords
	if g.retention.RederivedMaxRecords > 0 && rederived(topic) {
		from = brokerRetentionRederivedRecords
	}
	doc := "saga's cap on the records kept per partition (" + from + "), never past a consumer group's committed offset; -1: no cap."
	if policy := stored["cleanup.policy"]; policy != nil && strings.Contains(*policy, "compact") {
		count, doc = -1, "A compacted topic is not cut by saga's retention."
	}
	c.Value, c.Documentation = kmsg.StringPtr(strconv.FormatInt(count, 10)), kmsg.StringPtr(doc)
	syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	syn.Name, syn.Value, syn.Source = from, c.Value, c.Source
	c.ConfigSynonyms = []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{syn}
	return append(out, c)
}

// moveStoredRetention moves the retention.ms and retention.bytes that
// earlier versions let kfake store under their own names (where kfake's
// hourly cleaner applies them, ignoring consumer groups) to the names saga
// stores them under. It runs at start, before the guard is installed; a
// value Kafka would refuse is dropped, with a warning.
func (g *configGuard) moveStoredRetention(ctx context.Context, b *Broker) error {
	client, err := b.internalClient()
	if err != nil {
		return err
	}
	defer client.Close()
	adm := kadm.NewClient(client)
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return errors.Wrap(err, "list topics")
	}
	for _, topic := range listed.Names() {
		info := g.cluster.TopicInfo(topic)
		if info == nil {
			continue
		}
		var alter []kadm.AlterConfig
		for _, name := range []string{"retention.ms", "retention.bytes"} {
			v, ok := info.Configs[name]
			if !ok {
				continue
			}
			alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: name})
			valid, why := validateTopicConfig(name, v, kerr.InvalidConfig.Code)
			if why != nil {
				b.logger.Warn("kafka dropped a topic config stored before the broker checked them", "topic", topic, "config", name, "reason", why.msg)
				continue
			}
			alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: storedName(name), Value: valid})
		}
		if len(alter) == 0 {
			continue
		}
		resp, err := adm.AlterTopicConfigs(ctx, alter, topic)
		if err == nil {
			_, err = resp.On(topic, nil)
		}
		if err != nil {
			return errors.Wrapf(err, "move the retention settings of topic %s", topic)
		}
	}
	return nil
}
