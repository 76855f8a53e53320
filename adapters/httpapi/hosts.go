package httpapi

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/cockroachdb/errors"
)

// ErrAllowedHosts is returned for an allowed-hosts list that cannot be used.
var ErrAllowedHosts = errors.New("invalid allowed hosts")

// AllowedHosts are the names by which the API may be reached: the Host
// header of a request, and the host of its Origin, must be one of them. A
// page on another name that resolves to the API's address (DNS rebinding)
// is then refused, though the browser takes it for that page's own origin.
//
// An IP address is always allowed: no name is resolved to reach it, so it
// cannot be rebound. Names are compared without their port and ignoring
// case; an entry ".example.com" allows example.com and its subdomains, "*"
// any name (no check). The zero value allows localhost and IP addresses.
type AllowedHosts struct {
	names    []string
	any      bool
	explicit bool
}

// DefaultAllowedHosts are the names always allowed besides IP addresses
// and the host of the listen address.
var DefaultAllowedHosts = []string{"localhost"}

// ParseAllowedHosts reads a comma-separated list of names (see
// AllowedHosts) and adds the host of the listen address and
// DefaultAllowedHosts. An empty list keeps only those.
func ParseAllowedHosts(list, listen string) (AllowedHosts, error) {
	var h AllowedHosts
	for _, name := range strings.Split(list, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name == "":
			continue
		case name == "*":
			h.any = true
		case strings.ContainsAny(name, "/:@ \t[]"):
			return AllowedHosts{}, errors.Wrapf(ErrAllowedHosts, "%q is not a host name (give names without scheme or port)", name)
		default:
			h.names = append(h.names, name)
		}
		h.explicit = true
	}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		h.names = append(h.names, strings.ToLower(host))
	}
	return h, nil
}

// Explicit reports whether the list was configured rather than defaulted.
func (h AllowedHosts) Explicit() bool { return h.explicit }

// Allows reports whether host (a Host header: a name or address, with or
// without a port) is allowed.
func (h AllowedHosts) Allows(host string) bool {
	if h.any {
		return true
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if name == "" {
		return false
	}
	if net.ParseIP(name) != nil {
		return true
	}
	for _, allowed := range append(h.names, DefaultAllowedHosts...) {
		if name == allowed || strings.HasPrefix(allowed, ".") && (name == allowed[1:] || strings.HasSuffix(name, allowed)) {
			return true
		}
	}
	return false
}

// allowsOrigin reports whether a request from origin (an Origin header)
// may act on the API reached as host: the origin is the API's own (same
// host and port) and by an allowed name.
func (h AllowedHosts) allowsOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, host) && h.Allows(u.Host)
}

// checksHosts reports whether the guard checks Host headers: always
// without tokens (the development mode, where anyone who reaches the API
// may act), and with tokens when the list was configured.
func (h AllowedHosts) checksHosts(tokens *Tokens) bool {
	return !tokens.Enabled() || h.explicit
}

// refuseHost answers a request by a name that is not allowed.
func refuseHost(w http.ResponseWriter, host string) {
	writeError(w, http.StatusMisdirectedRequest, "the API is not served under the name "+truncateHost(host)+
		"; allow it with --http-allowed-hosts (this check stops DNS rebinding)")
}

func truncateHost(host string) string {
	if len(host) > 100 {
		host = host[:100] + "..."
	}
	return `"` + strings.ToValidUTF8(host, "?") + `"`
}
