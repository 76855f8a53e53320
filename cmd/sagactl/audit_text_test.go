package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

var t0 = audittest.T0

func TestAuditTextOfACompensatedTask(t *testing.T) {
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{})
	require.NoError(t, err)
	a.CompareWith(protocol.ViewOf(a.State.Task()))
	var text bytes.Buffer
	require.NoError(t, writeAuditText(&text, a))
	audittest.Golden(t, "audit_compensated.golden", text.Bytes())
}

func TestAuditTextAtARevisionAndATime(t *testing.T) {
	cut, err := parseCut("9")
	require.NoError(t, err)
	require.NotNil(t, cut.Revision)
	assert.Equal(t, uint64(9), *cut.Revision)
	a, err := projections.BuildAudit("o-1", audittest.History(), cut)
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, writeAuditText(&text, a))
	audittest.Golden(t, "audit_at_revision_9.golden", text.Bytes())

	byTime, err := parseCut(t0.Add(15900 * time.Millisecond).Format(time.RFC3339Nano))
	require.NoError(t, err)
	require.NotNil(t, byTime.Time)
	b, err := projections.BuildAudit("o-1", audittest.History(), byTime)
	require.NoError(t, err)
	assert.Len(t, b.Rows, 14)

	none, err := parseCut("")
	require.NoError(t, err)
	assert.Equal(t, projections.Cut{}, none)
	_, err = parseCut("yesterday")
	assert.Error(t, err)
}
