package processes

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// LeaseTermsStream is the event stream where supervisors record the lease
// terms they begin (StoreLeaseTerms): one LeaseTermBegan per term, in
// order. It is not a task stream.
const LeaseTermsStream = "supervisor-lease-terms"

// LeaseTermBeganType is the wire name of LeaseTermBegan.
const LeaseTermBeganType = "LeaseTermBegan"

// LeaseTermBegan records that a supervisor took the lease and acts in Term
// from At (its clock) on.
type LeaseTermBegan struct {
	Term  int64     `json:"term"`
	Actor string    `json:"actor"`
	At    time.Time `json:"at"`
}

// StoreLeaseTerms number supervisors' leaderships in the event store: a
// term is the revision of its LeaseTermBegan in LeaseTermsStream plus one,
// appended on the revision read, so no two instances begin the same term
// and terms grow for as long as the store keeps the stream, across
// restarts of every supervisor and of the broker.
type StoreLeaseTerms struct {
	Store EventStore
}

var _ LeaseTerms = StoreLeaseTerms{}

// maxTermClaims bounds the tries of BeginTerm when other instances keep
// beginning terms meanwhile.
const maxTermClaims = 8

// BeginTerm appends the next term to LeaseTermsStream and returns it.
func (s StoreLeaseTerms) BeginTerm(ctx context.Context, actor string, at time.Time) (int64, error) {
	for range maxTermClaims {
		recorded, err := s.Store.ReadStream(ctx, LeaseTermsStream)
		if err != nil {
			return 0, errors.Wrap(err, "read the lease terms")
		}
		last := int64(-1)
		if n := len(recorded); n > 0 {
			last = int64(recorded[n-1].Revision)
		}
		term := last + 2
		data, err := json.Marshal(LeaseTermBegan{Term: term, Actor: actor, At: at})
		if err != nil {
			return 0, errors.Wrap(err, "encode a lease term")
		}
		_, err = s.Store.Append(ctx, LeaseTermsStream, domain.ExpectAfter(last),
			domain.NewEvent{Type: LeaseTermBeganType, Data: data, Metadata: domain.EventMetadata{Actor: actor}})
		if errors.Is(err, domain.ErrConcurrencyConflict) {
			continue // another instance began a term meanwhile
		}
		if err != nil {
			return 0, errors.Wrap(err, "record a lease term")
		}
		return term, nil
	}
	return 0, errors.Newf("begin a lease term: %d tries lost to other instances", maxTermClaims)
}
