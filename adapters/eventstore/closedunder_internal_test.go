package eventstore

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
)

func TestClosedUnderTurnsASendOnAClosedChannelIntoAnError(t *testing.T) {
	ch := make(chan int)
	close(ch)
	err := closedUnder(func() error { ch <- 1; return nil })
	assert.True(t, errors.Is(err, errClosedUnder), "%v", err)
	assert.Equal(t, errTransient, classify(err), "retried on a new client")

	assert.Panics(t, func() { _ = closedUnder(func() error { panic("something else") }) }, "other panics go on")
	assert.NoError(t, closedUnder(func() error { return nil }))
}
