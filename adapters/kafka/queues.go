package kafka

import (
	"context"
	"regexp"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// agentName is what an agent's name can be (as a workflow definition
// allows): anything else has no command topics to ask about.
var agentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// AgentGroup is the consumer group of an agent's instances: the default
// of adapters/agent (Config.Group).
func AgentGroup(agent string) string { return "saga-agent-" + agent }

// CommandQueues tells, for each agent, how many commands wait in its
// command topics (protocol.CommandTopics), by priority: per partition,
// the end offset less the offset its group (AgentGroup) committed, or less
// the log start where the group committed none (or does not exist yet).
// A topic that does not exist holds none. A name no agent can have (a
// heartbeat may say anything) is left out of the answer.
func CommandQueues(ctx context.Context, adm *kadm.Client, names ...string) (map[string]map[domain.Priority]int64, error) {
	out := map[string]map[domain.Priority]int64{}
	var agents []string
	for _, a := range names {
		if agentName.MatchString(a) {
			agents = append(agents, a)
		}
	}
	if len(agents) == 0 {
		return out, nil
	}
	var topics, groups []string
	for _, a := range agents {
		topics = append(topics, protocol.CommandTopics(a)...)
		groups = append(groups, AgentGroup(a))
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, errors.Wrap(err, "list the end offsets of the command topics")
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, errors.Wrap(err, "list the start offsets of the command topics")
	}
	committed := adm.FetchManyOffsets(ctx, groups...)
	for _, a := range agents {
		queued := map[domain.Priority]int64{}
		out[a] = queued
		group := committed[AgentGroup(a)]
		if group.Err != nil && !errors.Is(group.Err, kerr.GroupIDNotFound) {
			return nil, errors.Wrapf(group.Err, "fetch the offsets of group %s", AgentGroup(a))
		}
		for _, p := range domain.Priorities() {
			topic := protocol.CommandTopicFor(a, p)
			queued[p] = 0
			for part, end := range ends[topic] {
				if end.Err != nil || end.Offset < 0 {
					continue // no such topic: nothing queued
				}
				from := int64(0)
				if start, ok := starts.Lookup(topic, part); ok && start.Err == nil && start.Offset > 0 {
					from = start.Offset
				}
				if c, ok := group.Fetched.Lookup(topic, part); ok && c.Err == nil && c.At > from {
					from = c.At
				}
				queued[p] += max(end.Offset-from, 0)
			}
		}
	}
	return out, nil
}
