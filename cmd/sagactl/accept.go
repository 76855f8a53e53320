package main

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain/protocol"
)

// acceptance follows saga.status and saga.dead letters from where they
// ended before an order was submitted, to learn without a reply topic
// whether saga accepted it (its first status) or refused it (a dead letter
// of the orders topic with its id as key).
type acceptance struct {
	consumer    *kgo.Client
	ordersTopic string
}

// watchAcceptance starts following saga.status and saga.deadletter at
// their ends; call it before submitting.
func watchAcceptance(ctx context.Context, c *common, ordersTopic string) (*acceptance, error) {
	admin, err := openKafka(ctx, c)
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, protocol.StatusTopic, protocol.DeadLetterTopic)
	admin.Close()
	if err != nil {
		return nil, errors.Wrap(err, "find the ends of saga.status and saga.deadletter")
	}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	if len(from[protocol.StatusTopic]) == 0 {
		return nil, errors.Newf("Kafka at %s has no topic %s: is it saga's?", c.brokers, protocol.StatusTopic)
	}
	consumer, err := openKafka(ctx, c, kgo.ConsumePartitions(from))
	if err != nil {
		return nil, err
	}
	return &acceptance{consumer: consumer, ordersTopic: ordersTopic}, nil
}

// await waits for the order's first status, or its dead letter
// (client.ErrRejected with the reason).
func (a *acceptance) await(ctx context.Context, orderID string) (client.Outcome, error) {
	for {
		fetches := a.consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return client.Outcome{}, errors.Wrapf(ctx.Err(), "wait for order %s", orderID)
		}
		var out client.Outcome
		var rejected error
		fetches.EachRecord(func(r *kgo.Record) {
			if len(out.Statuses) > 0 || rejected != nil || string(r.Key) != orderID {
				return
			}
			switch r.Topic {
			case protocol.StatusTopic:
				if st, err := protocol.ParseTaskStatus(r.Value); err == nil && st.OrderID == orderID {
					out.Statuses = append(out.Statuses, st)
				}
			case protocol.DeadLetterTopic:
				d := topics.NewDeadLetter(r)
				if strings.HasPrefix(d.Source, a.ordersTopic+"/") {
					st := protocol.TaskStatus{OrderID: orderID, Status: protocol.StatusRejected, Reason: d.Reason, Time: d.Time}
					out.Statuses, out.Final = append(out.Statuses, st), st
					rejected = errors.Wrapf(client.ErrRejected, "order %s: %s", orderID, d.Reason)
				}
			}
		})
		if rejected != nil || len(out.Statuses) > 0 {
			return out, rejected
		}
	}
}

func (a *acceptance) close() { a.consumer.Close() }
