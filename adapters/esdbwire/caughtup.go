package esdbwire

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of ReadResp's caught_up and of the messages within it, from
// the client protocol of KurrentDB 24.10 and later (streams.proto).
const (
	readRespCaughtUp       protowire.Number = 8
	caughtUpTimestamp      protowire.Number = 1
	caughtUpStreamRevision protowire.Number = 2
	caughtUpPosition       protowire.Number = 3
	positionCommit         protowire.Number = 1
	positionPrepare        protowire.Number = 2
	timestampSeconds       protowire.Number = 1
	timestampNanos         protowire.Number = 2
)

// CaughtUp is a subscription's caught-up answer as KurrentDB 24.10 and
// later send it: the server's time and the checkpoint to resume after, a
// stream's revision (HasRevision) or a position in $all (HasPosition);
// neither while the stream or the database is empty. Clients of older
// protocols read it as the empty CaughtUp they know; KurrentDB-Client-Go
// reports a CaughtUp only when it has a time.
type CaughtUp struct {
	Time            time.Time
	Revision        uint64
	HasRevision     bool
	Commit, Prepare uint64
	HasPosition     bool
}

// Encode encodes the ReadResp that carries c.
func (c *CaughtUp) Encode() []byte {
	var ts []byte
	if sec := c.Time.Unix(); sec != 0 {
		ts = protowire.AppendTag(ts, timestampSeconds, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(sec))
	}
	if nanos := c.Time.Nanosecond(); nanos != 0 {
		ts = protowire.AppendTag(ts, timestampNanos, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(nanos))
	}
	var pos []byte
	if c.HasPosition {
		if c.Commit != 0 {
			pos = protowire.AppendTag(pos, positionCommit, protowire.VarintType)
			pos = protowire.AppendVarint(pos, c.Commit)
		}
		if c.Prepare != 0 {
			pos = protowire.AppendTag(pos, positionPrepare, protowire.VarintType)
			pos = protowire.AppendVarint(pos, c.Prepare)
		}
	}
	body := make([]byte, 0, 8+len(ts)+len(pos)+protowire.SizeVarint(c.Revision))
	body = protowire.AppendTag(body, caughtUpTimestamp, protowire.BytesType)
	body = protowire.AppendBytes(body, ts)
	if c.HasRevision {
		body = protowire.AppendTag(body, caughtUpStreamRevision, protowire.VarintType)
		body = protowire.AppendVarint(body, c.Revision)
	}
	if c.HasPosition {
		body = protowire.AppendTag(body, caughtUpPosition, protowire.BytesType)
		body = protowire.AppendBytes(body, pos)
	}
	b := make([]byte, 0, 1+protowire.SizeBytes(len(body)))
	b = protowire.AppendTag(b, readRespCaughtUp, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}
