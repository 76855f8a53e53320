package domain

import (
	"regexp"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
)

// DefaultReplyTopicPattern is the reply topics an order may name unless
// configured otherwise: reply.<name> or saga.reply.<name> (the Go client's
// private topics are saga.reply.<uuid>).
const DefaultReplyTopicPattern = `^(saga\.)?reply\.[A-Za-z0-9._-]+$`

// ReplyTopicPrefix starts the private reply topics of saga's clients, the
// only saga.* topics a caller may name as replyTo.
const ReplyTopicPrefix = "saga.reply."

// ErrReplyTopicNotAllowed is returned for an order whose replyTo names a
// topic it may not: one outside the configured pattern, one of saga's own
// topics or a trigger topic, where a status would be read as a forged
// order, command or reply. It is an ErrInvalidMessage.
var ErrReplyTopicNotAllowed = errors.Mark(errors.New("replyTo names a topic that is not allowed"), ErrInvalidMessage)

var defaultReplyTopics = regexp.MustCompile(DefaultReplyTopicPattern)

// ReservedTopic reports whether topic belongs to saga or to Kafka itself
// and so may never receive statuses: saga's namespace saga.*, where every
// topic of saga's protocol is (but the clients' reply topics saga.reply.*),
// the orders topic DefaultTriggerTopic and Kafka's internal __* topics.
func ReservedTopic(topic string) bool {
	return (strings.HasPrefix(topic, "saga.") && !strings.HasPrefix(topic, ReplyTopicPrefix)) ||
		topic == DefaultTriggerTopic || strings.HasPrefix(topic, "__")
}

// ReplyTopicPolicy decides which topics orders may name as replyTo. The zero
// value allows DefaultReplyTopicPattern.
type ReplyTopicPolicy struct {
	// Pattern is what a reply topic must match; nil means
	// DefaultReplyTopicPattern. Whatever it allows, reserved topics and
	// trigger topics stay forbidden.
	Pattern *regexp.Regexp
}

// Check returns nil if an order may name topic as its replyTo, given the
// topics that start tasks, and otherwise an ErrReplyTopicNotAllowed saying
// why.
func (p ReplyTopicPolicy) Check(topic string, triggerTopics []string) error {
	pattern := p.Pattern
	if pattern == nil {
		pattern = defaultReplyTopics
	}
	switch {
	case ReservedTopic(topic):
		return errors.Wrapf(ErrReplyTopicNotAllowed, "%q is one of saga's own topics", truncate(topic))
	case slices.Contains(triggerTopics, topic):
		return errors.Wrapf(ErrReplyTopicNotAllowed, "%q is a topic that starts tasks", truncate(topic))
	case !topicPattern.MatchString(topic) || !pattern.MatchString(topic):
		return errors.Wrapf(ErrReplyTopicNotAllowed, "%q does not match %s", truncate(topic), pattern)
	}
	return nil
}
