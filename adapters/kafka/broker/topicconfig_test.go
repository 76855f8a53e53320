package broker_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// startConfigBroker starts a one-partition broker with retention r whose
// passes run when the test calls RetainOnce (and at start), and an admin
// client of it.
func startConfigBroker(t *testing.T, dir string, r broker.Retention) (*broker.Broker, *kgo.Client, *kadm.Client) {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1, Retention: &r, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	client, err := kafka.NewClient(b.Addrs())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return b, client, kadm.NewClient(client)
}

func createTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(ctx, 1, -1, configs, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err, resp.ErrMessage)
}

func describeTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) map[string]kadm.Config {
	t.Helper()
	described, err := adm.DescribeTopicConfigs(ctx, topic)
	require.NoError(t, err)
	rc, err := described.On(topic, nil)
	require.NoError(t, err)
	require.NoError(t, rc.Err)
	configs := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		configs[c.Key] = c
	}
	return configs
}

// TestTopicRetentionMsIsEnforcedByTheNextPass: a topic's retention.ms
// removes its older records at the next retention pass (a minute at most),
// not at kfake's hourly cleaner, even with no broker-wide cap; a consumer
// group that has not consumed them still holds them back.
func TestTopicRetentionMsIsEnforcedByTheNextPass(t *testing.T) {
	b, client, adm := startConfigBroker(t, t.TempDir(), broker.Retention{})
	ctx := testContext(t)
	minute := "60000"
	createTopic(t, ctx, adm, "shop.events", map[string]*string{"retention.ms": &minute})
	createTopic(t, ctx, adm, "shop.held", nil)
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &minute}}, "shop.held")
	require.NoError(t, err)
	_, err = altered.On("shop.held", nil)
	require.NoError(t, err)
	old, now := time.Now().Add(-10*time.Minute), time.Now()
	for _, topic := range []string{"shop.events", "shop.held", "shop.kept"} {
		produceN(t, ctx, client, topic, 10, old)
		produceN(t, ctx, client, topic, 5, now)
	}
	commit(t, ctx, adm, "reader", "shop.held", 4)

	_, err = b.RetainOnce(ctx, broker.Retention{})
	require.NoError(t, err)
	assert.Equal(t, int64(10), startOffset(t, ctx, adm, "shop.events"), "the records older than a minute are gone")
	assert.Equal(t, int64(4), startOffset(t, ctx, adm, "shop.held"), "a group's committed offset holds them back")
	assert.Equal(t, int64(0), startOffset(t, ctx, adm, "shop.kept"), "a topic without retention.ms keeps everything")

	// retention.ms=-1 on a topic lifts the broker-wide age.
	forever := "-1"
	createTopic(t, ctx, adm, "shop.forever", map[string]*string{"retention.ms": &forever})
	produceN(t, ctx, client, "shop.forever", 3, old)
	_, err = b.RetainOnce(ctx, broker.Retention{MaxAge: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, int64(0), startOffset(t, ctx, adm, "shop.forever"))
	assert.Equal(t, int64(10), startOffset(t, ctx, adm, "shop.kept"), "the broker-wide age applies to the others")
}

// TestTopicRetentionBytesIsEnforcedByTheNextPass: a partition is cut to
// about its topic's retention.bytes at the next pass.
func TestTopicRetentionBytesIsEnforcedByTheNextPass(t *testing.T) {
	b, client, adm := startConfigBroker(t, t.TempDir(), broker.Retention{})
	ctx := testContext(t)
	createTopic(t, ctx, adm, "shop.sized", nil)
	limit := "20000"
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: &limit}}, "shop.sized")
	require.NoError(t, err)
	_, err = altered.On("shop.sized", nil)
	require.NoError(t, err)
	for range 100 {
		value := make([]byte, 1000)
		_, _ = rand.Read(value) // incompressible
		require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "shop.sized", Value: value}).FirstErr())
	}

	_, err = b.RetainOnce(ctx, broker.Retention{})
	require.NoError(t, err)
	start := startOffset(t, ctx, adm, "shop.sized")
	// Each record is a batch of a little over 1,000 bytes: 20,000 bytes
	// keep 18 or 19 of them.
	assert.GreaterOrEqual(t, start, int64(80))
	assert.LessOrEqual(t, start, int64(83))
	logDirs, err := adm.DescribeAllLogDirs(ctx, nil)
	require.NoError(t, err)
	var size int64
	logDirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == "shop.sized" {
				size += p.Size
			}
		})
	})
	assert.LessOrEqual(t, size, int64(20000))
	assert.Greater(t, size, int64(15000))
}

// TestDescribeConfigsShowsWhatTheBrokerEnforces: a topic's retention shows
// saga's broker-wide caps as the broker's (static) settings, or the topic's
// own where it has one, and the broker shows its caps too.
func TestDescribeConfigsShowsWhatTheBrokerEnforces(t *testing.T) {
	_, _, adm := startConfigBroker(t, t.TempDir(), broker.Retention{MaxAge: 48 * time.Hour, MaxRecords: 1000, RederivedMaxRecords: 100})
	ctx := testContext(t)
	minute, bytes := "60000", "1048576"
	createTopic(t, ctx, adm, "shop.plain", nil)
	createTopic(t, ctx, adm, "saga.cmd.pay", nil)
	createTopic(t, ctx, adm, "shop.own", map[string]*string{"retention.ms": &minute, "retention.bytes": &bytes})

	plain := describeTopic(t, ctx, adm, "shop.plain")
	assert.Equal(t, "172800000", value(plain["retention.ms"]))
	assert.Equal(t, kmsg.ConfigSourceStaticBrokerConfig, plain["retention.ms"].Source)
	require.NotEmpty(t, plain["retention.ms"].Synonyms)
	assert.Equal(t, "log.retention.ms", plain["retention.ms"].Synonyms[0].Key)
	assert.Equal(t, "-1", value(plain["retention.bytes"]))
	assert.Equal(t, "1000", value(plain[broker.RetentionRecordsConfig]))
	assert.Equal(t, "delete", value(plain["cleanup.policy"]))
	assert.Equal(t, "100", value(describeTopic(t, ctx, adm, "saga.cmd.pay")[broker.RetentionRecordsConfig]))

	own := describeTopic(t, ctx, adm, "shop.own")
	assert.Equal(t, "60000", value(own["retention.ms"]))
	assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, own["retention.ms"].Source)
	assert.Equal(t, "1048576", value(own["retention.bytes"]))
	assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, own["retention.bytes"].Source)
	for name := range own {
		assert.False(t, strings.HasPrefix(name, "saga.topic."), "a name kfake stores is not shown: %s", name)
	}
	deleted, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "retention.ms"}}, "shop.own")
	require.NoError(t, err)
	require.NoError(t, firstErr(deleted))
	back := describeTopic(t, ctx, adm, "shop.own")["retention.ms"]
	assert.Equal(t, "172800000", value(back), "deleting the topic's own value brings back the broker's")
	assert.Equal(t, kmsg.ConfigSourceStaticBrokerConfig, back.Source)

	brokers, err := adm.DescribeBrokerConfigs(ctx)
	require.NoError(t, err)
	require.Len(t, brokers, 1)
	require.NoError(t, brokers[0].Err)
	got := map[string]kadm.Config{}
	for _, c := range brokers[0].Configs {
		got[c.Key] = c
	}
	assert.Equal(t, "172800000", value(got["log.retention.ms"]))
	assert.Equal(t, kmsg.ConfigSourceStaticBrokerConfig, got["log.retention.ms"].Source)
	assert.Equal(t, "-1", value(got["log.retention.bytes"]))
	assert.Equal(t, "1000", value(got["saga.retention.records"]))
	assert.Equal(t, "100", value(got["saga.retention.rederived.records"]))
	assert.Equal(t, "60000", value(got["log.retention.check.interval.ms"]))
}

// TestInvalidTopicConfigsAreRefused: values that do not parse or are out
// of Kafka's range, and names Kafka does not know, are refused with
// INVALID_CONFIG on CreateTopics, AlterConfigs and IncrementalAlterConfigs,
// and change nothing.
func TestInvalidTopicConfigsAreRefused(t *testing.T) {
	_, _, adm := startConfigBroker(t, t.TempDir(), broker.Retention{})
	ctx := testContext(t)
	abc, minus2, one := "abc", "-2", "1"
	for name, c := range map[string]struct {
		configs map[string]*string
		message string
	}{
		"not a number":   {map[string]*string{"retention.ms": &abc}, "Invalid value abc for configuration retention.ms: Not a number of type LONG"},
		"below -1":       {map[string]*string{"retention.ms": &minus2}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"},
		"unknown name":   {map[string]*string{"retention.msec": &one}, "Unknown topic config name: retention.msec"},
		"saga's own cap": {map[string]*string{broker.RetentionRecordsConfig: &one}, "cannot be set per topic"},
		"bad policy":     {map[string]*string{"cleanup.policy": &abc}, "String must be one of: compact, delete"},
	} {
		created, err := adm.CreateTopics(ctx, 1, -1, c.configs, "shop.refused")
		require.NoError(t, err, name)
		resp, err := created.On("shop.refused", nil)
		require.NoError(t, err, name)
		assert.ErrorIs(t, resp.Err, kerr.InvalidConfig, name)
		assert.Contains(t, resp.ErrMessage, c.message, name)
	}
	described, err := adm.DescribeTopicConfigs(ctx, "shop.refused")
	require.NoError(t, err)
	require.Len(t, described, 1)
	assert.ErrorIs(t, described[0].Err, kerr.UnknownTopicOrPartition, "a refused topic is not created")

	minute := "60000"
	createTopic(t, ctx, adm, "shop.checked", map[string]*string{"retention.ms": &minute})
	incremental, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &abc}}, "shop.checked")
	require.NoError(t, err)
	assert.ErrorIs(t, firstErr(incremental), kerr.InvalidConfig)
	incremental, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "no.such.config", Value: &one}}, "shop.checked")
	require.NoError(t, err)
	assert.ErrorIs(t, firstErr(incremental), kerr.InvalidConfig)
	legacy, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: &abc}}, "shop.checked")
	require.NoError(t, err)
	assert.ErrorIs(t, firstErr(legacy), kerr.InvalidConfig)
	assert.Equal(t, "60000", value(describeTopic(t, ctx, adm, "shop.checked")["retention.ms"]), "a refused alter changes nothing")

	// Saga's broker-wide settings are sagad's flags.
	brokerAlter, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.retention.ms", Value: &one}})
	require.NoError(t, err)
	require.Len(t, brokerAlter, 1)
	assert.ErrorIs(t, brokerAlter[0].Err, kerr.InvalidRequest)
	assert.Contains(t, brokerAlter[0].ErrMessage, "--kafka-retention-age")
}

// TestTopicConfigsSurviveARestart: a topic's own retention is kept, and
// still enforced, after a restart.
func TestTopicConfigsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	b, _, adm := startConfigBroker(t, dir, broker.Retention{})
	ctx := testContext(t)
	minute := "60000"
	createTopic(t, ctx, adm, "shop.events", map[string]*string{"retention.ms": &minute})
	b.Close()

	b, client, adm := startConfigBroker(t, dir, broker.Retention{})
	got := describeTopic(t, ctx, adm, "shop.events")["retention.ms"]
	assert.Equal(t, "60000", value(got))
	assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got.Source)
	produceN(t, ctx, client, "shop.events", 3, time.Now().Add(-time.Hour))
	_, err := b.RetainOnce(ctx, broker.Retention{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), startOffset(t, ctx, adm, "shop.events"))
}

func value(c kadm.Config) string { return c.MaybeValue() }

func firstErr(resps kadm.AlterConfigsResponses) error {
	for _, r := range resps {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
