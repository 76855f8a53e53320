package kafka

// LeaseMemberID is the member id of a lease's group member.
func LeaseMemberID(l *Lease) string {
	id, _ := l.client.GroupMetadata()
	return id
}
