package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func allowlist(a ...Allow) Policy {
	p := Default()
	p.Network = NetworkAllowlist
	p.Allow = &a
	return p
}

func TestNetworkValidate(t *testing.T) {
	ok := allowlist(Allow{Host: "pypi.org", Ports: []uint16{443}}, Allow{Host: "*.example.com", Ports: []uint16{80, 443}},
		Allow{IP: "10.0.0.5", Ports: []uint16{5432}}, Allow{CIDR: "192.0.2.0/24", Ports: []uint16{8080}})
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid allowlist: %v", err)
	}
	cases := []struct {
		name string
		p    Policy
		want string
	}{
		{"mode", func() Policy { p := Default(); p.Network = "host"; return p }(), `network = "host", allowed "none" or "allowlist"`},
		{"empty", allowlist(), "allow has 0 entries"},
		{"none with entries", func() Policy { p := ok; p.Network = NetworkNone; return p }(), "allow has 4 entries but network"},
		{"two kinds", allowlist(Allow{Host: "a.b", IP: "1.2.3.4", Ports: []uint16{1}}), "exactly one of host, ip, cidr"},
		{"no ports", allowlist(Allow{Host: "a.b"}), "allow[0].ports"},
		{"port 0", allowlist(Allow{Host: "a.b", Ports: []uint16{0}}), "port 0"},
		{"bad host", allowlist(Allow{Host: "a..b", Ports: []uint16{1}}), `allow[0].host = "a..b"`},
		{"inner wildcard", allowlist(Allow{Host: "a.*.b", Ports: []uint16{1}}), "allow[0].host"},
		{"ipv6", allowlist(Allow{IP: "::1", Ports: []uint16{1}}), "want an IPv4 address"},
		{"bad cidr", allowlist(Allow{CIDR: "10.0.0.0/33", Ports: []uint16{1}}), "allow[0].cidr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want %q", err, c.want)
			}
		})
	}
}

func TestMatchHost(t *testing.T) {
	cases := []struct {
		entry, name string
		want        bool
	}{
		{"pypi.org", "pypi.org", true},
		{"pypi.org", "PyPI.org.", true},
		{"pypi.org", "files.pypi.org", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
	}
	for _, c := range cases {
		if got := (Allow{Host: c.entry}).MatchHost(c.name); got != c.want {
			t.Errorf("%s matches %s = %v, want %v", c.entry, c.name, got, c.want)
		}
	}
}

func TestSpecial(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "fd00::1"} {
		if !IsSpecial(netip.MustParseAddr(a)) {
			t.Errorf("%s not special", a)
		}
	}
	for _, a := range []string{"1.1.1.1", "192.0.2.10", "151.101.0.223"} {
		if IsSpecial(netip.MustParseAddr(a)) {
			t.Errorf("%s special", a)
		}
	}
	p := allowlist(Allow{CIDR: "0.0.0.0/0", Ports: []uint16{443}}, Allow{IP: "10.0.0.5", Ports: []uint16{5432}})
	if !p.Explicit(netip.MustParseAddr("10.0.0.5")) {
		t.Error("listed private address not explicit")
	}
}

func TestNetworkOverride(t *testing.T) {
	base := allowlist(Allow{Host: "*.example.com", Ports: []uint16{80, 443}}, Allow{CIDR: "192.0.2.0/24", Ports: []uint16{8080}})
	good := []Allow{{Host: "api.example.com", Ports: []uint16{443}}, {Host: "*.cdn.example.com", Ports: []uint16{80}}, {IP: "192.0.2.7", Ports: []uint16{8080}}}
	p, err := (&Override{Allow: &good}).Apply(base)
	if err != nil || len(p.Entries()) != 3 || len(base.Entries()) != 2 {
		t.Fatalf("narrowing: %v %v", p.Entries(), err)
	}
	off := []Allow{}
	if p, err := (&Override{Allow: &off}).Apply(base); err != nil || p.Network != NetworkNone || p.Allow != nil {
		t.Fatalf("empty allow: %+v %v", p, err)
	}
	for _, bad := range [][]Allow{
		{{Host: "example.com", Ports: []uint16{443}}},
		{{Host: "api.example.com", Ports: []uint16{22}}},
		{{CIDR: "192.0.0.0/16", Ports: []uint16{8080}}},
		{{Host: "*.com", Ports: []uint16{443}}},
	} {
		if _, err := (&Override{Allow: &bad}).Apply(base); err == nil {
			t.Errorf("override %+v widened the policy", bad)
		}
	}
	if _, err := (&Override{Allow: &good}).Apply(Default()); err == nil {
		t.Error("override opened a network-none policy")
	}
}

// TestHostileNarrowOpensSpecialRange: a request narrowing a policy whose
// only broad entry is 0.0.0.0/0 must not open a special range (the cloud
// metadata address, RFC 1918, loopback, shared address space): the gateway
// opens an entry inside a special range ahead of its refusal of those
// ranges, so accepting it would be an SSRF the policy itself never allows.
// An explicit entry of the policy inside the range still narrows.
func TestHostileNarrowOpensSpecialRange(t *testing.T) {
	base := allowlist(Allow{CIDR: "0.0.0.0/0", Ports: []uint16{80, 443}},
		Allow{IP: "10.20.0.15", Ports: []uint16{5432}}, Allow{CIDR: "172.16.4.0/24", Ports: []uint16{443}})
	for _, bad := range []Allow{
		{CIDR: "10.0.0.0/8", Ports: []uint16{443}},
		{IP: "169.254.169.254", Ports: []uint16{80}},
		{CIDR: "169.254.169.254/32", Ports: []uint16{80}},
		{IP: "100.64.0.1", Ports: []uint16{443}},
		{CIDR: "127.0.0.0/8", Ports: []uint16{80}},
		{IP: "127.0.0.1", Ports: []uint16{443}},
		{IP: "192.168.1.1", Ports: []uint16{443}},
		{IP: "10.20.0.15", Ports: []uint16{443}},      // listed, but not on this port
		{CIDR: "10.20.0.0/24", Ports: []uint16{5432}}, // wider than the listed address
		{CIDR: "172.16.0.0/16", Ports: []uint16{443}}, // wider than the listed prefix
		{IP: "224.0.0.1", Ports: []uint16{80}},
	} {
		allow := []Allow{bad}
		p, err := (&Override{Allow: &allow}).Apply(base)
		if err == nil {
			t.Errorf("narrowing to %+v accepted (%v): opens a special range the policy does not", bad, p.Entries())
		} else if !strings.Contains(err.Error(), "special range") {
			t.Errorf("narrowing to %+v: %v, want an error naming the special range", bad, err)
		}
	}
	for _, good := range []Allow{
		{IP: "10.20.0.15", Ports: []uint16{5432}},
		{CIDR: "10.20.0.15/32", Ports: []uint16{5432}},
		{CIDR: "172.16.4.128/25", Ports: []uint16{443}},
		{IP: "203.0.113.7", Ports: []uint16{443}},
		{CIDR: "0.0.0.0/1", Ports: []uint16{80}}, // covers 10/8, but only its public part is opened
	} {
		allow := []Allow{good}
		if _, err := (&Override{Allow: &allow}).Apply(base); err != nil {
			t.Errorf("narrowing to %+v: %v", good, err)
		}
	}
	// The DNS side: a listed name resolving into a special range is
	// rebinding unless an entry inside that range lists the address.
	for a, want := range map[string]bool{"169.254.169.254": false, "10.0.0.1": false, "127.0.0.1": false,
		"10.20.0.15": true, "172.16.4.9": true, "203.0.113.7": true} {
		if got := base.Explicit(netip.MustParseAddr(a)); got != want && IsSpecial(netip.MustParseAddr(a)) {
			t.Errorf("Explicit(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestInsideSpecial(t *testing.T) {
	for pr, want := range map[string]bool{"10.0.0.0/8": true, "10.1.0.0/16": true, "169.254.169.254/32": true,
		"0.0.0.0/0": false, "8.0.0.0/6": false, "224.0.0.0/3": false, "203.0.113.0/24": false, "0.0.0.0/8": true} {
		if got := InsideSpecial(netip.MustParsePrefix(pr)); got != want {
			t.Errorf("InsideSpecial(%s) = %v, want %v", pr, got, want)
		}
	}
}
