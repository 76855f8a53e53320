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
)

// CommandTopic names the topic an agent consumes.
func CommandTopic(agent string) string { return CommandTopicPrefix + agent }

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
)
