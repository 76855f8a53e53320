package protocol

import "github.com/sagaengine/saga/domain"

// Topic names. Like event wire names they are stable. Every topic but
// OrdersTopic is in saga's own namespace (saga.*), which domain.ReservedTopic
// keeps workflows and reply topics out of.
const (
	// OrdersTopic is the default input topic of orders: the topic of
	// workflows whose trigger names none (domain.DefaultTriggerTopic).
	OrdersTopic = domain.DefaultTriggerTopic
	// CommandTopicPrefix starts the command topic of every agent.
	CommandTopicPrefix = "saga.cmd."
	// RepliesTopic carries every agent's replies to the scheduler.
	RepliesTopic = "saga.replies"
	// StatusTopic carries status messages of every task.
	StatusTopic = "saga.status"
	// DeadLetterTopic keeps input that could not be processed, with the reason.
	DeadLetterTopic = "saga.deadletter"
	// AlertsTopic carries alerts for operators.
	AlertsTopic = "saga.alerts"
	// SyncBarrierTopic carries sync barriers: the embedded broker
	// acknowledges a record produced to it only once every record it
	// acknowledged before, on any topic, is on stable storage. The status
	// publisher produces one before each checkpoint, so statuses need no
	// fsync of their own. To a real Kafka it is an ordinary topic.
	SyncBarrierTopic = "saga.sync"
)

// CommandTopic names the topic of an agent's normal-priority commands: the
// topic agents consumed before priorities, and still the only one an agent
// that knows nothing of priorities must consume.
func CommandTopic(agent string) string { return CommandTopicPrefix + agent }

// CommandTopicFor names the topic of an agent's commands of priority p,
// its band: CommandTopic(agent) for normal (and empty), with the suffix
// .high or .low for the others (saga.cmd.payment.high).
func CommandTopicFor(agent string, p domain.Priority) string {
	if p = p.OrNormal(); p == domain.PriorityNormal {
		return CommandTopic(agent)
	}
	return CommandTopic(agent) + "." + string(p)
}

// CommandTopics lists an agent's command topics, one per priority band,
// highest first.
func CommandTopics(agent string) []string {
	out := make([]string, 0, 3)
	for _, p := range domain.Priorities() {
		out = append(out, CommandTopicFor(agent, p))
	}
	return out
}

// CommandTopicPriority is the priority of the agent's command topic:
// normal for any topic that is not one of its bands.
func CommandTopicPriority(agent, topic string) domain.Priority {
	for _, p := range domain.Priorities() {
		if topic == CommandTopicFor(agent, p) {
			return p
		}
	}
	return domain.PriorityNormal
}

// CloudEvents types of the messages saga puts on Kafka (the ce_type header).
// Like event wire names they are stable.
const (
	// OrderPlacedMessageType is the type a CloudEvents order may carry.
	OrderPlacedMessageType = "saga.order.placed"
	// ExecuteStepMessageType is the type of agent commands.
	ExecuteStepMessageType = "saga.step.execute"
	// StepReplyMessageType is the type of agent replies.
	StepReplyMessageType = "saga.step.reply"
	// DeadLetteredMessageType is the type of dead-letter records.
	DeadLetteredMessageType = "saga.deadlettered"
	// StatusMessageType is the type of task status messages.
	StatusMessageType = "saga.task.status"
	// AlertMessageType is the type of raised alerts on AlertsTopic.
	AlertMessageType = "saga.alert.raised"
	// AlertResolvedMessageType is the type of resolved alerts on
	// AlertsTopic: a task left Error.
	AlertResolvedMessageType = "saga.alert.resolved"
	// SyncBarrierMessageType is the type of sync barriers on
	// SyncBarrierTopic; they have no body.
	SyncBarrierMessageType = "saga.sync.barrier"
)
