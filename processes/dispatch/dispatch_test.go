package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/dispatch"
)

// TestAdmitNamesTheInstanceWithTheMostRoom: a dispatch goes to the usable
// instance with the most room for its capacity; it is refused, with the
// reason, when the room left is for those ranked ahead of it, when every
// instance is full, avoided since it gave work back, or unhealthy; an agent
// with no known instance admits it to none.
func TestAdmitNamesTheInstanceWithTheMostRoom(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	instance := func(name, health string, capacity int) protocol.AgentHeartbeat {
		return protocol.AgentHeartbeat{Agent: "pay", Instance: name, Health: health, Capacity: capacity, At: at, Reason: "calls hang"}
	}
	v := dispatch.View{Agent: "pay", Instances: []protocol.AgentHeartbeat{instance("p-1", protocol.HealthHealthy, 4),
		instance("p-2", protocol.HealthHealthy, 2)}, Load: map[string]int{"p-1": 1, "p-2": 1}}
	assert.Equal(t, domain.Admission{OK: true, Instance: "p-1"}, v.Admit(0), "a quarter used beats a half")
	assert.Equal(t, domain.Admission{OK: true, Instance: "p-1"}, v.Admit(3))
	assert.Equal(t, domain.Admission{Reason: "at capacity: pay takes 6 at once on 2 healthy instances"}, v.Admit(4), "the room is for those ahead")

	v.Avoid = map[string]time.Time{"p-1": at}
	assert.Equal(t, domain.Admission{OK: true, Instance: "p-2"}, v.Admit(0), "p-1 gave work back and has not said it may take more")
	v.Load["p-2"] = 2
	assert.False(t, v.Admit(0).OK, "p-2 is full")

	v = dispatch.View{Agent: "pay", Instances: []protocol.AgentHeartbeat{instance("p-1", protocol.HealthUnhealthy, 4)}}
	assert.Equal(t, domain.Admission{Reason: "no healthy instance of pay (1 live): p-1: calls hang"}, v.Admit(0))

	assert.Equal(t, domain.Admission{OK: true}, dispatch.View{Agent: "pay"}.Admit(0), "no heartbeats: by task id")
}

// TestAdmitPrefersTheInstancesNamedWhileTheyHaveRoom: with Prefer, a
// dispatch goes to a preferred instance that may take it even when another
// is less loaded, to the least loaded of several preferred ones, and to the
// others only once every preferred one is full, avoided or unhealthy.
func TestAdmitPrefersTheInstancesNamedWhileTheyHaveRoom(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	instance := func(name, health string, capacity int) protocol.AgentHeartbeat {
		return protocol.AgentHeartbeat{Agent: "pay", Instance: name, Health: health, Capacity: capacity, At: at}
	}
	local := map[string]bool{"here-1": true, "here-2": true}
	v := dispatch.View{Agent: "pay", Instances: []protocol.AgentHeartbeat{instance("there", protocol.HealthHealthy, 8),
		instance("here-1", protocol.HealthHealthy, 4), instance("here-2", protocol.HealthHealthy, 4)},
		Load: map[string]int{"here-1": 2, "here-2": 1}, Prefer: func(i string) bool { return local[i] }}
	assert.Equal(t, domain.Admission{OK: true, Instance: "here-2"}, v.Admit(0), "the least loaded preferred one, not the idle one elsewhere")

	v.Load["here-2"] = 4
	assert.Equal(t, domain.Admission{OK: true, Instance: "here-1"}, v.Admit(0), "here-2 is full")

	v.Avoid = map[string]time.Time{"here-1": at}
	assert.Equal(t, domain.Admission{OK: true, Instance: "there"}, v.Admit(0), "every preferred one is full or avoided")

	v.Avoid = nil
	v.Instances[1].Health = protocol.HealthUnhealthy
	assert.Equal(t, domain.Admission{OK: true, Instance: "there"}, v.Admit(0), "here-1 is unhealthy, here-2 full")

	v.Prefer = nil
	v.Instances[1].Health = protocol.HealthHealthy
	assert.Equal(t, domain.Admission{OK: true, Instance: "there"}, v.Admit(0), "without Prefer, the least loaded")
}
