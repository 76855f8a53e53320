package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// readyTimeout bounds each readiness check that asks a server.
const readyTimeout = 2 * time.Second

// subscriptionFailingAfter is how long a subscription to $all may fail
// without delivering before readiness says so: longer than a server's
// restart. Tests shorten it.
var subscriptionFailingAfter = 10 * time.Second

// The readiness checks, by name.
const (
	checkProjection = "projection"
	checkEventStore = "eventstore"
	checkKafka      = "kafka"
	checkFollowers  = "followers"
	checkConsumers  = "consumers"
	checkResources  = "resources"
)

var readinessChecks = []string{checkProjection, checkEventStore, checkKafka, checkFollowers, checkConsumers, checkResources}

// checks lists the readiness checks of what this process runs: the task
// view's with the api role, the event store's and the shared
// subscription's unless it runs only the broker, the consumer groups'
// when it consumes in any; Kafka's and the resources' always.
func (a *App) checks() []string {
	var out []string
	for _, name := range readinessChecks {
		switch {
		case name == checkProjection && a.Tasks == nil,
			name == checkEventStore && a.Store == nil,
			name == checkFollowers && a.followers == nil,
			name == checkConsumers && len(a.consumerGroups()) == 0:
			continue
		}
		out = append(out, name)
	}
	return out
}

// fdsReadyFraction is the share of the process's file descriptor limit
// past which readiness fails: out of descriptors, listeners cannot accept
// and files cannot be opened.
const fdsReadyFraction = 0.9

// readyFailures counts failed readiness checks, by check.
var readyFailures = func() map[string]*atomic.Int64 {
	m := map[string]*atomic.Int64{}
	for _, c := range readinessChecks {
		m[c] = new(atomic.Int64)
	}
	return m
}()

// Readiness runs the readiness checks of what this process runs (checks):
// the projection has caught up, the event store answers (and the embedded
// one accepts writes, and no subscription to $all has failed in place for
// subscriptionFailingAfter), the Kafka broker answers, no follower of the
// shared subscription is stalled, every consumer of this process is a
// member of its consumer group, and the process has file descriptors to
// spare and the embedded broker room for topics (broker.ErrTopicCap).
// The checks that ask a server run concurrently, each within readyTimeout.
func (a *App) Readiness(ctx context.Context) []httpapi.Check {
	names := a.checks()
	results := make([]httpapi.Check, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.check(ctx, name)
			results[i] = httpapi.Check{Name: name, OK: err == nil}
			if err != nil {
				results[i].Error = err.Error()
				readyFailures[name].Add(1)
			}
		}()
	}
	wg.Wait()
	return results
}

func (a *App) check(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	switch name {
	case checkProjection:
		if a.Tasks == nil {
			return nil
		}
		select {
		case <-a.Tasks.Ready():
		default:
			return errors.New("catching up")
		}
		if err := a.Tasks.Failure(); err != nil {
			return errors.Wrap(err, "the task view cannot keep up; it retries from its checkpoint")
		}
		return nil
	case checkEventStore:
		if a.esServer != nil {
			if err := a.esServer.Health(); err != nil {
				return err
			}
		}
		// Reading a stream that does not exist asks the server for nothing
		// but an answer.
		if _, err := a.Store.ReadStream(ctx, "saga-readiness"); err != nil {
			return err
		}
		// A subscription that keeps failing in place (an event it must read
		// next is damaged, say) holds every process that follows it.
		if failing := a.Store.SubscriptionFailures(subscriptionFailingAfter); len(failing) > 0 {
			f := failing[0]
			at := "from the start"
			if f.HasAfter {
				at = fmt.Sprintf("after position %d", f.After)
			}
			return errors.Newf("a subscription to $all has failed %s since %s: %v", at, f.Since.UTC().Format(time.RFC3339), f.Err)
		}
		return nil
	case checkKafka:
		return errors.Wrap(a.client.Ping(ctx), "ping")
	case checkConsumers:
		return a.checkMembership(ctx)
	case checkFollowers:
		if stalled := a.followers.Stalled(); len(stalled) > 0 {
			return errors.Newf("stalled: %s", strings.Join(stalled, ", "))
		}
	case checkResources:
		if open, limit := broker.OpenFiles(); open >= 0 && limit > 0 && float64(open) >= fdsReadyFraction*float64(limit) {
			return errors.Newf("%d of %d file descriptors open (RLIMIT_NOFILE): raise the limit or find what holds them", open, limit)
		}
		if a.broker != nil {
			if _, _, err := a.broker.TopicCapacity(); err != nil {
				return errors.Wrap(err, "new reply topics are refused until idle ones are deleted (--kafka-max-topics, --kafka-idle-reply-topic-after)")
			}
		}
	}
	return nil
}

// WaitLive waits until every process of this instance that catches up at
// start has caught up, or until ctx ends: the task view, the scheduler and
// the supervisor with the event store, so that they decide on current
// state, and the agent directory with saga.agents.
func (a *App) WaitLive(ctx context.Context) error {
	var waits []<-chan struct{}
	if a.Tasks != nil {
		waits = append(waits, a.Tasks.Ready())
	}
	if a.Scheduler != nil {
		waits = append(waits, a.Scheduler.Ready())
	}
	if a.Supervisor != nil {
		waits = append(waits, a.Supervisor.Ready())
	}
	if a.AgentDirectory != nil {
		waits = append(waits, a.AgentDirectory.Ready())
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// consumerGroups lists the consumer groups this process consumes in.
func (a *App) consumerGroups() []string {
	a.groupsMu.Lock()
	defer a.groupsMu.Unlock()
	return slices.Clone(a.groups)
}

// consumerClientID is the Kafka client ID of this process's consumer in
// group: the broker lists it with the group's members, which is how
// checkMembership finds this process's own member.
func (a *App) consumerClientID(group string) string {
	return "saga-" + a.memberTag + "-" + group
}

// checkMembership asks the broker for this process's consumer groups and
// fails unless every one has this process's consumer among its members:
// one cut off from the broker, or whose session expired and that has not
// joined again, receives nothing.
func (a *App) checkMembership(ctx context.Context) error {
	groups := a.consumerGroups()
	described, err := kadm.NewClient(a.client).DescribeGroups(ctx, groups...)
	if err != nil {
		return errors.Wrap(err, "describe the consumer groups")
	}
	var out []string
	for _, g := range groups {
		d, ok := described[g]
		switch {
		case !ok:
			out = append(out, g+" (not described)")
		case d.Err != nil:
			out = append(out, g+" ("+d.Err.Error()+")")
		case !slices.ContainsFunc(d.Members, func(m kadm.DescribedGroupMember) bool { return m.ClientID == a.consumerClientID(g) }):
			out = append(out, g+" (state "+d.State+")")
		}
	}
	if len(out) > 0 {
		return errors.Newf("this process's consumer is not a member of %s: joining, or cut off from the broker", strings.Join(out, ", "))
	}
	return nil
}
