package eventstore

import (
	"context"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/cockroachdb/errors"
)

// LimitStream bounds stream in the store: it keeps at most maxCount of
// its events and none older than maxAge (the stream's $maxCount and
// $maxAge; a zero or negative bound is left unset). The await inboxes use
// it (processes.StreamLimiter).
func (s *Store) LimitStream(ctx context.Context, stream string, maxCount int, maxAge time.Duration) error {
	var meta esdb.StreamMetadata
	if maxCount > 0 {
		meta.SetMaxCount(uint64(maxCount))
	}
	if maxAge > 0 {
		meta.SetMaxAge(maxAge)
	}
	err := s.retry(ctx, func(c *esdb.Client) error {
		_, err := c.SetStreamMetadata(ctx, stream, esdb.AppendToStreamOptions{}, meta)
		return err
	})
	return errors.Wrapf(err, "limit stream %s", stream)
}
