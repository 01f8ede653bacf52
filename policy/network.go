package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// NetworkAllowlist gives the sandbox a route to exactly the hosts, addresses
// and ports its Allow entries name, and a DNS server that answers only for
// the names on the list.
const NetworkAllowlist = "allowlist"

// MaxAllow bounds the number of allowlist entries.
const MaxAllow = 256

// Allow is one allowlist entry: exactly one of Host, IP or CIDR, and the
// ports it may be reached on (TCP and UDP).
type Allow struct {
	// Host is a DNS name ("pypi.internal") or a wildcard for every name
	// below a suffix ("*.example.com", which does not match example.com).
	// The addresses it resolves to are reachable; private, loopback,
	// link-local and metadata addresses only if an IP or CIDR entry names
	// them as well (DNS rebinding).
	Host string `json:"host,omitempty" mapstructure:"host"`
	// IP is one IPv4 address.
	IP string `json:"ip,omitempty" mapstructure:"ip"`
	// CIDR is an IPv4 prefix ("192.0.2.0/24").
	CIDR string `json:"cidr,omitempty" mapstructure:"cidr"`
	// Ports are the destination ports, 1..65535; at least one.
	Ports []uint16 `json:"ports" mapstructure:"ports"`
}

// Prefix is the entry's address range; ok is false for a Host entry.
func (a Allow) Prefix() (netip.Prefix, bool) {
	switch {
	case a.IP != "":
		ip, err := netip.ParseAddr(a.IP)
		if err != nil {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(ip, ip.BitLen()), true
	case a.CIDR != "":
		p, err := netip.ParsePrefix(a.CIDR)
		if err != nil {
			return netip.Prefix{}, false
		}
		return p.Masked(), true
	}
	return netip.Prefix{}, false
}

// MatchHost reports whether name (any case, optional trailing dot) is
// named by the entry.
func (a Allow) MatchHost(name string) bool {
	if a.Host == "" {
		return false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	h := strings.ToLower(a.Host)
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return name == h
}

// Special are the ranges a host name may never resolve into and a broad
// CIDR never covers: loopback, link-local (with the cloud metadata address
// 169.254.169.254), RFC 1918, shared address space, "this network",
// multicast and reserved. Only an IP or CIDR entry that lies inside one of
// them opens (that part of) it.
var Special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// InsideSpecial reports whether the whole of pr lies inside one Special
// range: only such an IP or CIDR entry opens (that part of) a special
// range. A broader prefix, even one covering a special range, never does.
func InsideSpecial(pr netip.Prefix) bool {
	for _, s := range Special {
		if s.Bits() <= pr.Bits() && s.Contains(pr.Addr()) {
			return true
		}
	}
	return false
}

// IsSpecial reports whether a is in a Special range (or is not IPv4).
func IsSpecial(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return true
	}
	for _, p := range Special {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Entries is the allowlist (nil when there is none).
func (p *Policy) Entries() []Allow {
	if p.Allow == nil {
		return nil
	}
	return *p.Allow
}

// Explicit reports whether an IP or CIDR entry of p that lies inside a
// Special range names a (the only way a Special address becomes
// reachable). A broad entry such as 0.0.0.0/0 contains 169.254.169.254 but
// does not make it explicit.
func (p *Policy) Explicit(a netip.Addr) bool {
	for _, e := range p.Entries() {
		if pr, ok := e.Prefix(); ok && InsideSpecial(pr) && pr.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// HostPorts returns the ports every Host entry matching name allows, or
// nil when no entry names it.
func (p *Policy) HostPorts(name string) []uint16 {
	var ports []uint16
	for _, e := range p.Entries() {
		if e.MatchHost(name) {
			ports = append(ports, e.Ports...)
		}
	}
	return ports
}

func validHostname(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasSuffix(h, ".") {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func checkAllow(i int, a Allow) error {
	field := fmt.Sprintf("allow[%d]", i)
	set := 0
	for _, v := range []string{a.Host, a.IP, a.CIDR} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("%w: %s: want exactly one of host, ip, cidr", ErrInvalid, field)
	}
	switch {
	case a.Host != "":
		if !validHostname(a.Host) {
			return fmt.Errorf("%w: %s.host = %q, want a DNS name or *.suffix", ErrInvalid, field, a.Host)
		}
	case a.IP != "":
		ip, err := netip.ParseAddr(a.IP)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("%w: %s.ip = %q, want an IPv4 address", ErrInvalid, field, a.IP)
		}
	default:
		pr, err := netip.ParsePrefix(a.CIDR)
		if err != nil || !pr.Addr().Is4() {
			return fmt.Errorf("%w: %s.cidr = %q, want an IPv4 prefix", ErrInvalid, field, a.CIDR)
		}
	}
	if len(a.Ports) == 0 || len(a.Ports) > 64 {
		return fmt.Errorf("%w: %s.ports: want 1..64 ports", ErrInvalid, field)
	}
	for _, port := range a.Ports {
		if port == 0 {
			return fmt.Errorf("%w: %s.ports: port 0, allowed 1..65535", ErrInvalid, field)
		}
	}
	return nil
}

// checkNetwork validates Network and Allow together.
func checkNetwork(p *Policy) error {
	switch p.Network {
	case NetworkNone:
		if len(p.Entries()) > 0 {
			return fmt.Errorf("%w: allow has %d entries but network = %q; set network = %q", ErrInvalid, len(p.Entries()), NetworkNone, NetworkAllowlist)
		}
		return nil
	case NetworkAllowlist:
		n := len(p.Entries())
		if n == 0 || n > MaxAllow {
			return fmt.Errorf("%w: allow has %d entries, allowed 1..%d with network = %q", ErrInvalid, n, MaxAllow, NetworkAllowlist)
		}
		var errs []string
		for i, a := range p.Entries() {
			if err := checkAllow(i, a); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
		}
		return nil
	}
	return fmt.Errorf("%w: network = %q, allowed %q or %q", ErrInvalid, p.Network, NetworkNone, NetworkAllowlist)
}

// within reports whether the entry a is permitted by base: a Host entry
// matched by one of base's Host entries (exactly, or a wildcard covering
// it), an IP or CIDR inside one of base's, and every port allowed there.
// An IP or CIDR inside a Special range must lie inside a base entry that is
// itself inside a Special range: the gateway opens such an entry ahead of
// its refusal of special ranges, so a narrowed 169.254.169.254 under a
// policy's 0.0.0.0/0 would reach the cloud metadata service (SSRF), which
// the policy itself never does.
func within(a Allow, base []Allow) bool {
	pa, isPrefix := a.Prefix()
	special := isPrefix && InsideSpecial(pa)
	for _, b := range base {
		ok := false
		switch {
		case a.Host != "" && b.Host != "":
			h := strings.ToLower(a.Host)
			ok = strings.EqualFold(a.Host, b.Host) || (!strings.HasPrefix(h, "*.") && b.MatchHost(h)) ||
				(strings.HasPrefix(h, "*.") && strings.HasPrefix(b.Host, "*.") && b.MatchHost(h[2:]))
		case a.Host == "" && b.Host == "":
			pb, _ := b.Prefix()
			ok = pa.Bits() >= pb.Bits() && pb.Contains(pa.Addr()) && (!special || InsideSpecial(pb))
		}
		if ok && portsWithin(a.Ports, b.Ports) {
			return true
		}
	}
	return false
}

func portsWithin(a, b []uint16) bool {
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

// narrowNetwork applies a request's allowlist: the session gets only the
// entries asked for, each of which the policy must already permit.
func narrowNetwork(p *Policy, allow []Allow) error {
	if p.Network != NetworkAllowlist {
		return fmt.Errorf("%w: allow: the policy's network is %q, a request cannot open it", ErrInvalid, p.Network)
	}
	for i, a := range allow {
		if err := checkAllow(i, a); err != nil {
			return err
		}
		if !within(a, p.Entries()) {
			if pr, ok := a.Prefix(); ok && InsideSpecial(pr) {
				return fmt.Errorf("%w: allow[%d] = %s is a private or special range; allowed only inside an ip or cidr entry of the policy that lies in that range itself (a broad prefix such as 0.0.0.0/0 does not open it)", ErrInvalid, i, pr)
			}
			return fmt.Errorf("%w: allow[%d] is not within the policy's allowlist", ErrInvalid, i)
		}
	}
	narrowed := append([]Allow(nil), allow...)
	p.Allow = &narrowed
	return nil
}
