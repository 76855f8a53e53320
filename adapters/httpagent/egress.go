package httpagent

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrEgressRefused is returned (as a permanent failure) when the egress
// policy refuses the address a call would connect to.
var ErrEgressRefused = errors.New("refused by the HTTP agent's egress policy")

// ErrRedirectRefused is returned (as a permanent failure) when a step that
// follows redirects is sent to another host than its own, or through too
// many redirects.
var ErrRedirectRefused = errors.New("redirect refused")

// Allow entries with a meaning of their own.
const (
	// Loopback names every loopback address (127.0.0.0/8 and ::1).
	Loopback = "loopback"
	// AnyAddress allows any address but those refused unless named, as an
	// empty Allow does, so that it can be given with other entries.
	AnyAddress = "*"
)

// EgressPolicy says which addresses the HTTP agent may connect to. It is
// checked when a connection is made, against the addresses a name
// resolves to, so a name that resolves elsewhere later (DNS rebinding)
// cannot pass it; redirects are connections too.
type EgressPolicy struct {
	// Allow lists what may be called: host names ("api.example.com", or
	// "*.example.com" for the names under it), IP addresses, CIDR prefixes
	// ("10.0.0.0/8") and Loopback, each optionally with a port
	// ("api.example.com:443"). Empty, or AnyAddress among them, allows any
	// address but those refused unless named (see Egress).
	Allow []string
	// AllowLoopback lets loopback addresses be called without an Allow
	// entry naming them (the default of a development setup, whose demo
	// services listen on 127.0.0.1).
	AllowLoopback bool
}

// allowEntry is one parsed Allow entry.
type allowEntry struct {
	name   string // lower case; "*.example.com" matches names under it
	prefix netip.Prefix
	port   int // 0: any
}

// Egress is a compiled EgressPolicy plus saga's own listeners (see
// Check). It is safe for concurrent use.
type Egress struct {
	entries       []allowEntry
	allowAny      bool
	allowLoopback bool
	resolver      *net.Resolver
	own           *ownListeners
}

// ownListeners are saga's own listeners, shared by the policies made from
// one another (Also).
type ownListeners struct {
	mu   sync.Mutex
	list []netip.AddrPort
}

// NewEgress checks and compiles a policy.
func NewEgress(p EgressPolicy) (*Egress, error) {
	e := &Egress{allowAny: len(p.Allow) == 0, allowLoopback: p.AllowLoopback, resolver: net.DefaultResolver, own: &ownListeners{}}
	return e, e.add(p.Allow)
}

// Also returns a policy that allows what e does and the entries too, and
// shares e's own listeners.
func (e *Egress) Also(entries ...string) (*Egress, error) {
	c := *e
	c.entries = slices.Clone(e.entries)
	return &c, c.add(entries)
}

// add parses Allow entries into e.
func (e *Egress) add(entries []string) error {
	var problems []string
	for _, raw := range entries {
		if strings.TrimSpace(raw) == AnyAddress {
			e.allowAny = true
			continue
		}
		entry, err := parseAllow(strings.TrimSpace(raw))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		e.entries = append(e.entries, entry...)
	}
	if len(problems) > 0 {
		return errors.Newf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// parseAllow parses one Allow entry.
func parseAllow(raw string) ([]allowEntry, error) {
	bad := func(why string) error { return errors.Newf("http agent allow entry %q: %s", raw, why) }
	if raw == "" {
		return nil, bad("is empty")
	}
	host, port := raw, 0
	if h, p, err := net.SplitHostPort(raw); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, bad("the port must be from 1 to 65535")
		}
		host, port = h, n
	}
	switch {
	case strings.EqualFold(host, Loopback):
		return []allowEntry{{prefix: netip.MustParsePrefix("127.0.0.0/8"), port: port}, {prefix: netip.MustParsePrefix("::1/128"), port: port}}, nil
	case strings.Contains(host, "/"):
		prefix, err := netip.ParsePrefix(host)
		if err != nil {
			return nil, bad("is not a CIDR prefix such as 10.0.0.0/8")
		}
		return []allowEntry{{prefix: prefix.Masked(), port: port}}, nil
	}
	if addr, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []allowEntry{{prefix: netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()), port: port}}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	check := strings.TrimPrefix(name, "*.")
	if check == "" || strings.ContainsAny(check, "*/ :[]") {
		return nil, bad("is not a host name, *.domain, IP address, CIDR prefix or loopback")
	}
	return []allowEntry{{name: name, port: port}}, nil
}

// AddOwn notes one of saga's own listeners (host:port), which the policy
// refuses unless an Allow entry names its port. A listener on every
// address (0.0.0.0, ::) stands for each address of this machine.
func (e *Egress) AddOwn(addr string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		host, port, splitErr := net.SplitHostPort(addr)
		n, atoiErr := strconv.Atoi(port)
		if splitErr != nil || atoiErr != nil {
			return
		}
		ips, _ := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		for _, ip := range ips {
			e.addOwn(netip.AddrPortFrom(ip.Unmap(), uint16(n)))
		}
		return
	}
	ip := ap.Addr().Unmap()
	if !ip.IsUnspecified() {
		e.addOwn(netip.AddrPortFrom(ip, ap.Port()))
		return
	}
	locals := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback(), netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				locals = append(locals, p.Addr().Unmap())
			}
		}
	}
	for _, l := range locals {
		e.addOwn(netip.AddrPortFrom(l, ap.Port()))
	}
}

func (e *Egress) addOwn(ap netip.AddrPort) {
	e.own.mu.Lock()
	defer e.own.mu.Unlock()
	if !slices.Contains(e.own.list, ap) {
		e.own.list = append(e.own.list, ap)
	}
}

// isOwn reports whether ip:port is one of saga's own listeners. A
// listener on a loopback address counts for every loopback address.
func (e *Egress) isOwn(ip netip.Addr, port int) bool {
	e.own.mu.Lock()
	defer e.own.mu.Unlock()
	for _, o := range e.own.list {
		if int(o.Port()) == port && (o.Addr() == ip || (o.Addr().IsLoopback() && ip.IsLoopback())) {
			return true
		}
	}
	return false
}

// Check returns nil when the policy lets the agent connect to ip:port,
// reached through host (a name, or the address itself), else an error
// marked ErrEgressRefused that says why. Link-local, unspecified,
// multicast and (unless AllowLoopback) loopback addresses pass only when
// an address, prefix or loopback entry names them: a name entry never lets
// a name lead there, whatever it resolves to. Saga's own listeners pass
// only when such an entry names their port too.
func (e *Egress) Check(host string, ip netip.Addr, port int) error {
	ip = ip.Unmap()
	byName, byAddr, withPort := e.named(host, ip, port)
	refuse := func(why string) error {
		target := net.JoinHostPort(ip.String(), strconv.Itoa(port))
		if host != "" && host != ip.String() {
			target = host + " (" + target + ")"
		}
		return errors.Mark(errors.Newf("%s is %s, which the HTTP agent's egress policy refuses unless --http-agent-allow names it", target, why), ErrEgressRefused)
	}
	switch {
	case e.isOwn(ip, port) && !withPort:
		return refuse("one of saga's own listeners")
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		if !byAddr {
			return refuse("a link-local address")
		}
	case ip.IsUnspecified() || ip.IsMulticast():
		if !byAddr {
			return refuse("an unspecified or multicast address")
		}
	case ip.IsLoopback():
		if !byAddr && !e.allowLoopback {
			return refuse("a loopback address")
		}
	default:
		if !byName && !byAddr && !e.allowAny {
			return refuse("not on its allow-list")
		}
	}
	return nil
}

// named reports whether a name entry names host, whether an address entry
// names ip, with port, and whether an address entry names ip with that
// port given explicitly.
func (e *Egress) named(host string, ip netip.Addr, port int) (byName, byAddr, withPort bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, entry := range e.entries {
		if entry.port != 0 && entry.port != port {
			continue
		}
		switch {
		case entry.name == "":
			if entry.prefix.Contains(ip) {
				byAddr = true
				withPort = withPort || entry.port != 0
			}
		case strings.HasPrefix(entry.name, "*."):
			byName = byName || strings.HasSuffix(host, entry.name[1:])
		default:
			byName = byName || host == entry.name
		}
	}
	return byName, byAddr, withPort
}

// dialContext resolves addr's host, checks every address against the
// policy and connects to the first one allowed, by its address, so that
// what is checked is what is reached.
func (e *Egress) dialContext(dialer *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, portText, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, errors.Wrapf(err, "dial %s", addr)
		}
		port, err := strconv.Atoi(portText)
		if err != nil {
			return nil, errors.Newf("dial %s: port %q is not a number", addr, portText)
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = e.resolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, errors.Wrapf(err, "resolve %s", host)
		}
		var refused, dialErr error
		for _, ip := range ips {
			if err := e.Check(host, ip, port); err != nil {
				refused = errors.CombineErrors(refused, err)
				continue
			}
			conn, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), portText))
			if err == nil {
				return conn, nil
			}
			dialErr = err
		}
		if dialErr != nil {
			return nil, dialErr
		}
		if refused == nil {
			return nil, errors.Newf("%s resolves to no address", host)
		}
		return nil, refused
	}
}

// MaxConnsPerHost bounds the connections NewClient's client keeps to one
// host; a call past it waits, within its deadline, for one to be free.
// Without the bound an agent calls with as many connections as it has calls
// at once (an instance's capacity, 1,024 by default), and a burst of
// dispatches spent thousands of file descriptors at once.
const MaxConnsPerHost = 256

// NewClient returns the client a Handler uses when given none: keep-alive
// connections, at most MaxConnsPerHost per host, all of them kept idle, no
// timeout of its own (each call's context carries the command's deadline)
// and, when egress is not nil, connections only where it allows. Proxies from the environment are not
// used with a policy, since the policy is checked against the address
// connected to.
func NewClient(egress *Egress) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = MaxConnsPerHost
	t.MaxConnsPerHost = MaxConnsPerHost
	if egress != nil {
		t.Proxy = nil
		t.DialContext = egress.dialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	}
	return &http.Client{Transport: t}
}
