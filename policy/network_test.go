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
