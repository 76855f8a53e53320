package broker

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic configs: what the embedded broker accepts, validates as Kafka does,
// stores and reports. docs/architecture.md ("What the embedded broker
// supports") has the table of what each one does here.

// RetentionRecordsConfig is the read-only topic config through which
// DescribeConfigs reports saga's own cap on the records kept per partition
// (Retention.MaxRecords, or RederivedMaxRecords for the topics saga
// re-derives); -1 means no cap. Kafka has no such config.
const RetentionRecordsConfig = "saga.retention.records"

// The broker configs through which DescribeConfigs reports saga's caps for
// every topic (sagad's --kafka-retention-records and
// --kafka-retention-rederived-records); -1 means no cap.
const (
	brokerRetentionRecords          = "saga.retention.records"
	brokerRetentionRederivedRecords = "saga.retention.rederived.records"
)

// storedPrefix prefixes the names under which kfake stores the topic
// configs saga enforces itself (retention.ms, retention.bytes): kfake's own
// cleaner, which runs hourly and ignores consumer groups, must not see them.
const storedPrefix = "saga.topic."

// topicConfigSpec is a topic config the embedded broker accepts.
type topicConfigSpec struct {
	typ kmsg.ConfigType
	// broker is the broker config whose value the topic takes when it has
	// no override of its own; empty: def.
	broker string
	// def is the default when broker is empty.
	def string
	// check returns why a value of the right type is refused, in Kafka's
	// words, or "".
	check func(string) string
	// stored: saga enforces it and stores it under storedPrefix+name.
	stored bool
	doc    string
}

func atLeast(n int64) func(string) string {
	return func(v string) string {
		if x, _ := strconv.ParseInt(v, 10, 64); x < n {
			return fmt.Sprintf("Value must be at least %d", n)
		}
		return ""
	}
}

func oneOf(list bool, allowed ...string) func(string) string {
	return func(v string) string {
		values := []string{v}
		if list {
			values = strings.Split(v, ",")
		}
		for _, x := range values {
			ok := false
			for _, a := range allowed {
				ok = ok || strings.TrimSpace(x) == a
			}
			if !ok {
				return "String must be one of: " + strings.Join(allowed, ", ")
			}
		}
		return ""
	}
}

// topicConfigSpecs are the topic configs the embedded broker accepts; any
// other name is refused with INVALID_CONFIG, as Kafka refuses a name it
// does not know.
var topicConfigSpecs = map[string]topicConfigSpec{
	"cleanup.policy": {typ: kmsg.ConfigTypeList, def: "delete", check: oneOf(true, "compact", "delete"),
		doc: "compact: kfake compacts the topic (hourly); saga's retention leaves a topic whose policy includes compact alone."},
	"compression.type": {typ: kmsg.ConfigTypeString, broker: "compression.type", check: oneOf(false, "uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
		doc: "Accepted and reported; not applied: records are stored as their producer compressed them."},
	"delete.retention.ms": {typ: kmsg.ConfigTypeLong, def: "86400000", check: atLeast(0),
		doc: "How long compaction keeps tombstones."},
	"max.message.bytes": {typ: kmsg.ConfigTypeInt, broker: "message.max.bytes", check: atLeast(0),
		doc: "The largest record batch the broker accepts on this topic."},
	"message.timestamp.type": {typ: kmsg.ConfigTypeString, broker: "log.message.timestamp.type", check: oneOf(false, "CreateTime", "LogAppendTime"),
		doc: "Accepted and reported; not applied: records keep their producer's timestamp."},
	"min.insync.replicas": {typ: kmsg.ConfigTypeInt, broker: "min.insync.replicas", check: atLeast(1),
		doc: "Accepted and reported; the embedded broker is one replica."},
	"retention.bytes": {typ: kmsg.ConfigTypeLong, broker: "log.retention.bytes", stored: true,
		doc: "saga's retention pass (every minute) cuts each partition to about this size, but never past a consumer group's committed offset; -1: no limit."},
	"retention.ms": {typ: kmsg.ConfigTypeLong, broker: "log.retention.ms", check: atLeast(-1), stored: true,
		doc: "saga's retention pass (every minute) removes records older than this, but never past a consumer group's committed offset; -1: any age."},
	"segment.bytes": {typ: kmsg.ConfigTypeInt, broker: "log.segment.bytes", check: atLeast(14),
		doc: "The size of a partition's segment files."},
	"segment.ms": {typ: kmsg.ConfigTypeLong, broker: "log.roll.ms", check: atLeast(1),
		doc: "Accepted and reported; not applied: segments roll by size only."},
}

// sagaOwnedBrokerConfigs are the broker configs sagad sets from its flags:
// clients may not alter them.
var sagaOwnedBrokerConfigs = map[string]string{
	"log.retention.ms":                "--kafka-retention-age",
	"log.retention.minutes":           "--kafka-retention-age",
	"log.retention.hours":             "--kafka-retention-age",
	"log.retention.bytes":             "the embedded broker (no byte cap of its own)",
	"log.retention.check.interval.ms": "the embedded broker (a pass a minute)",
	brokerRetentionRecords:            "--kafka-retention-records",
	brokerRetentionRederivedRecords:   "--kafka-retention-rederived-records",
	"message.max.bytes":               "the embedded broker (16 MiB records and a margin)",
	"log.segment.bytes":               "the embedded broker (16 MiB segments)",
}

// storedName is the name kfake stores a topic config under.
func storedName(name string) string {
	if spec, ok := topicConfigSpecs[name]; ok && spec.stored {
		return storedPrefix + name
	}
	return name
}

// configRefusal is why a config is refused: Kafka's error code and message.
type configRefusal struct {
	code int16
	msg  string
}

func (r *configRefusal) message() *string { return &r.msg }

// validateTopicConfig checks a topic config as Kafka does and returns its
// value as stored (trimmed), or why it is refused. A nil value is refused
// with nullCode (Kafka answers CreateTopics and the alters differently).
func validateTopicConfig(name string, value *string, nullCode int16) (*string, *configRefusal) {
	if why := knownTopicConfig(name); why != nil {
		return nil, why
	}
	spec := topicConfigSpecs[name]
	if value == nil {
		return nil, &configRefusal{nullCode, "Null value not supported for topic configs: " + name}
	}
	v := strings.TrimSpace(*value)
	switch spec.typ {
	case kmsg.ConfigTypeLong, kmsg.ConfigTypeInt:
		bits, typ := 64, "LONG"
		if spec.typ == kmsg.ConfigTypeInt {
			bits, typ = 32, "INT"
		}
		if _, err := strconv.ParseInt(v, 10, bits); err != nil {
			return nil, &configRefusal{kerr.InvalidConfig.Code, fmt.Sprintf("Invalid value %s for configuration %s: Not a number of type %s", *value, name, typ)}
		}
	case kmsg.ConfigTypeList:
		v = strings.Join(strings.Fields(strings.ReplaceAll(v, ",", " ")), ",")
	}
	if spec.check != nil {
		if why := spec.check(v); why != "" {
			return nil, &configRefusal{kerr.InvalidConfig.Code, fmt.Sprintf("Invalid value %s for configuration %s: %s", *value, name, why)}
		}
	}
	return &v, nil
}

// knownTopicConfig refuses a name that is not a topic config clients may
// set.
func knownTopicConfig(name string) *configRefusal {
	if name == RetentionRecordsConfig {
		return &configRefusal{kerr.InvalidConfig.Code, RetentionRecordsConfig + " is the embedded broker's own cap for every topic (sagad's --kafka-retention-records and --kafka-retention-rederived-records); it cannot be set per topic"}
	}
	if _, ok := topicConfigSpecs[name]; !ok {
		return &configRefusal{kerr.InvalidConfig.Code, "Unknown topic config name: " + name}
	}
	return nil
}
