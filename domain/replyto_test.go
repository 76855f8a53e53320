package domain_test

import (
	"regexp"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
)

func TestReplyTopicPolicy(t *testing.T) {
	triggers := []string{"orders", "shop.orders"}
	for topic, allowed := range map[string]bool{
		"reply.shop":           true,
		"saga.reply.2f1c-uuid": true,
		"saga.replies":         false,
		"saga.status":          false,
		"saga.cmd.payment":     false,
		"saga.deadletter":      false,
		"orders":               false,
		"shop.orders":          false,
		"__consumer_offsets":   false,
		"shop.replies":         false, // outside the default pattern
		"reply.":               false,
		"reply.no/slashes":     false,
		"saga.reply":           false,
	} {
		err := domain.ReplyTopicPolicy{}.Check(topic, triggers)
		if allowed {
			assert.NoError(t, err, topic)
			continue
		}
		assert.ErrorIs(t, err, domain.ErrReplyTopicNotAllowed, topic)
		assert.True(t, errors.Is(err, domain.ErrInvalidMessage), topic)
	}
	wide := domain.ReplyTopicPolicy{Pattern: regexp.MustCompile(`.*`)}
	assert.NoError(t, wide.Check("shop.replies", triggers))
	assert.Error(t, wide.Check("saga.replies", triggers), "saga's own topics stay forbidden")
	assert.Error(t, wide.Check("shop.orders", triggers), "trigger topics stay forbidden")
}
