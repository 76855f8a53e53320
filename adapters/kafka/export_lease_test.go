package kafka

// LeaseMemberID is the member id of a lease's group member.
func LeaseMemberID(l *Lease) string {
	id, _ := leaseClientGroup(l)
	return id
}

// LeaseGeneration is the group generation a lease's member is in, -1 when
// it stands down.
func LeaseGeneration(l *Lease) int32 {
	_, gen := leaseClientGroup(l)
	return gen
}

func leaseClientGroup(l *Lease) (string, int32) {
	l.mu.Lock()
	c := l.client
	l.mu.Unlock()
	if c == nil {
		return "", -1
	}
	return c.GroupMetadata()
}
