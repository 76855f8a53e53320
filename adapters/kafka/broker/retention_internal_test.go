package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPartitionCutNewStart(t *testing.T) {
	both := Retention{MaxRecords: 10, MaxAge: time.Hour}
	for name, c := range map[string]struct {
		cut  partitionCut
		r    Retention
		want int64
	}{
		"count":                        {partitionCut{start: 0, end: 100, afterAge: -1, committed: -1}, Retention{MaxRecords: 10}, 90},
		"count, fewer records":         {partitionCut{start: 0, end: 8, afterAge: -1, committed: -1}, Retention{MaxRecords: 10}, 0},
		"age cuts further than count":  {partitionCut{start: 0, end: 100, afterAge: 95, committed: -1}, both, 95},
		"count cuts further than age":  {partitionCut{start: 0, end: 100, afterAge: 50, committed: -1}, both, 90},
		"everything aged":              {partitionCut{start: 0, end: 100, afterAge: 100, committed: -1}, Retention{MaxAge: time.Hour}, 100},
		"a group holds back":           {partitionCut{start: 0, end: 100, afterAge: 100, committed: 30}, both, 30},
		"a group ahead of the policy":  {partitionCut{start: 0, end: 100, afterAge: -1, committed: 100}, Retention{MaxRecords: 10}, 90},
		"a group behind the log start": {partitionCut{start: 50, end: 100, afterAge: -1, committed: 20}, Retention{MaxRecords: 10}, 20},
		"disabled":                     {partitionCut{start: 0, end: 100, afterAge: -1, committed: -1}, Retention{}, 0},
	} {
		assert.Equal(t, c.want, c.cut.newStart(c.r, "saga.status"), name)
	}
}

// TestRederivedTopicsKeepFewerRecords: commands, replies and heartbeats,
// which saga re-derives from the event store, are cut to their own count;
// other topics to MaxRecords; a group still holds either back.
func TestRederivedTopicsKeepFewerRecords(t *testing.T) {
	r := Retention{MaxRecords: 50, RederivedMaxRecords: 10}
	cut := partitionCut{start: 0, end: 100, afterAge: -1, committed: -1}
	for topic, want := range map[string]int64{"saga.cmd.payment": 90, "saga.cmd.payment.high": 90, "saga.replies": 90, "saga.agents": 90,
		"saga.orders": 50, "saga.status": 50, "shop.payments": 50} {
		assert.Equal(t, want, cut.newStart(r, topic), topic)
	}
	held := partitionCut{start: 0, end: 100, afterAge: -1, committed: 20}
	assert.Equal(t, int64(20), held.newStart(r, "saga.cmd.payment"), "a group that has not consumed holds commands back")
	assert.Equal(t, int64(50), cut.newStart(Retention{MaxRecords: 50}, "saga.replies"), "no count of their own: MaxRecords")
}
