package esdbwire

import (
	"strconv"
	"strings"
)

// KurrentDB's limits on appends, by default.
const (
	// DefaultMaxAppendSize is KurrentDB's MaxAppendSize: all events of one
	// append together, however many requests (chunks) carry them.
	DefaultMaxAppendSize = 1 << 20
)

// Trailer keys and values of the errors KurrentDB sends as trailers.
const (
	// TrailerException names the error.
	TrailerException = "exception"
	// ExceptionMaxAppendSize is an append over the maximum append size;
	// TrailerMaxAppendSize then gives the limit, in bytes.
	ExceptionMaxAppendSize = "maximum-append-size-exceeded"
	TrailerMaxAppendSize   = "maximum-append-size"
	// ExceptionNotLeader is a request sent to a follower;
	// TrailerLeaderHost and TrailerLeaderPort then give the leader.
	ExceptionNotLeader = "not-leader"
	TrailerLeaderHost  = "leader-endpoint-host"
	TrailerLeaderPort  = "leader-endpoint-port"
)

// maxAppendSizeText frames KurrentDB's message for an append over its
// maximum append size: "Maximum Append Size of 1048576 Exceeded.".
const (
	maxAppendSizePrefix = "Maximum Append Size of "
	maxAppendSizeSuffix = " Exceeded."
)

// MaxAppendSizeMessage is KurrentDB's message for an append over its
// maximum append size of limit bytes, as its Append call ends with.
func MaxAppendSizeMessage(limit int) string {
	return maxAppendSizePrefix + strconv.Itoa(limit) + maxAppendSizeSuffix
}

// ParseMaxAppendSize finds MaxAppendSizeMessage in s (an error's text,
// however wrapped) and returns its limit.
func ParseMaxAppendSize(s string) (int, bool) {
	i := strings.Index(s, maxAppendSizePrefix)
	if i < 0 {
		return 0, false
	}
	rest := s[i+len(maxAppendSizePrefix):]
	j := strings.Index(rest, maxAppendSizeSuffix)
	if j <= 0 {
		return 0, false
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
