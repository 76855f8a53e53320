package esdbserver

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// TestDiskErrorsMapToStatuses checks the codes a client sees for the store's
// disk errors: a full disk is ResourceExhausted (retry later), a store that
// stopped writing is Unavailable (go elsewhere until it restarts).
func TestDiskErrorsMapToStatuses(t *testing.T) {
	ctx := context.Background()
	err := toStatus(ctx, errors.Wrap(eslog.ErrNoSpace, "write"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, err.Error(), "no space")
	err = toStatus(ctx, errors.Wrap(eslog.ErrWriteFailed, "sync: restart to recover"))
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, err.Error(), "restart to recover")
}
