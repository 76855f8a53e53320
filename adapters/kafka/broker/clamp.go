package broker

import (
	"context"
	"log/slog"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clampOffsets makes no committed group offset point past its partition's
// log end, before any client is served.
//
// Why it is needed: kfake writes group commits (groups.log) and records
// (segments) without fsync, except what the sync layer fsyncs, so after a
// power loss a commit can survive while the records it covers do not. The
// partition then restarts at a lower end offset, new records reuse the lost
// offsets, and a group resuming from its stale commit skips them silently.
//
// A synced topic is not exempt: kfake makes a batch visible to fetches as
// soon as it is in the page cache, before the sync layer has fsynced it and
// acknowledged it. A consumer can read it, handle it and commit past it,
// and then the power goes. No acknowledged record is lost (the producer
// never had its acknowledgement and saga's consumers are idempotent), but
// the commit points past the durable log, so it is clamped like any other.
//
// A commit for a topic that no longer exists (its creation was not durable)
// is deleted, so a recreated topic is read from its start.
func clampOffsets(ctx context.Context, client *kgo.Client, logger *slog.Logger) error {
	adm := kadm.NewClient(client)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return errors.Wrap(err, "list groups to check their offsets")
	}
	for _, group := range groups.Groups() {
		if err := clampGroup(ctx, adm, client, group, logger); err != nil {
			return errors.Wrapf(err, "clamp committed offsets of group %s", group)
		}
	}
	return nil
}

func clampGroup(ctx context.Context, adm *kadm.Client, client *kgo.Client, group string, logger *slog.Logger) error {
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return errors.Wrap(err, "fetch committed offsets")
	}
	if err := committed.Error(); err != nil {
		return errors.Wrap(err, "fetch committed offsets")
	}
	var topics []string
	for topic := range committed {
		topics = append(topics, topic)
	}
	if len(topics) == 0 {
		return nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return errors.Wrap(err, "list end offsets")
	}
	clamp := kadm.Offsets{}
	gone := kadm.TopicsSet{}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.At < 0 {
			return
		}
		end, ok := ends.Lookup(o.Topic, o.Partition)
		if !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
			logger.Warn("kafka broker: committed offset of a partition that no longer exists; deleting it",
				"group", group, "topic", o.Topic, "partition", o.Partition, "old", o.At)
			gone.Add(o.Topic, o.Partition)
			return
		}
		if end.Err != nil {
			err = errors.CombineErrors(err, errors.Wrapf(end.Err, "end offset of %s/%d", o.Topic, o.Partition))
			return
		}
		if o.At <= end.Offset {
			return
		}
		logger.Warn("kafka broker: committed offset is past the log end (records lost in a crash); clamping it",
			"group", group, "topic", o.Topic, "partition", o.Partition, "old", o.At, "new", end.Offset)
		clamp.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: end.Offset, LeaderEpoch: end.LeaderEpoch, Metadata: o.Metadata})
	})
	if err != nil {
		return err
	}
	if len(clamp) == 0 && len(gone) == 0 {
		return nil
	}
	// Simple commits are refused while the group has members, which it has
	// only if kfake restored the previous process's members from its clean
	// shutdown. Those members are gone with their process: remove them.
	if err := emptyGroup(ctx, adm, client, group); err != nil {
		return err
	}
	if len(clamp) > 0 {
		resp, err := adm.CommitOffsets(ctx, group, clamp)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return errors.Wrap(err, "commit clamped offsets")
		}
	}
	if len(gone) > 0 {
		resp, err := adm.DeleteOffsets(ctx, group, gone)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return errors.Wrap(err, "delete offsets of missing partitions")
		}
	}
	return nil
}

// emptyGroup removes the group's members, if any.
func emptyGroup(ctx context.Context, adm *kadm.Client, client *kgo.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return errors.Wrap(err, "describe group")
	}
	d := described[group]
	if d.Err != nil {
		return errors.Wrap(d.Err, "describe group")
	}
	if len(d.Members) == 0 {
		return nil
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range d.Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.MemberID
		lm.InstanceID = m.InstanceID
		req.Members = append(req.Members, lm)
	}
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return errors.Wrap(err, "remove the members of the previous process")
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return errors.Wrap(err, "remove the members of the previous process")
	}
	return nil
}
