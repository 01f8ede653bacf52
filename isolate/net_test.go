package isolate

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/policy"
)

// query builds a DNS query for name and qtype.
func query(id uint16, name string, qtype uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD, one question
	for _, l := range strings.Split(name, ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, qtype)
	return binary.BigEndian.AppendUint16(b, 1)
}

var dnsSeeds = [][]byte{
	query(1, "pypi.test", 1),
	query(2, "Mirror.PKGS.test", 28),
	query(3, "forbidden.test", 1),
	{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1}, // compression pointer
	{0, 1, 0x81, 0, 0, 1},                                        // a response, truncated
	query(4, strings.Repeat("a", 64)+".test", 1),                 // label too long
}

func testGateway() *gateway {
	p := policy.Default()
	p.Network = policy.NetworkAllowlist
	p.Allow = &[]policy.Allow{
		{Host: "pypi.test", Ports: []uint16{443}},
		{Host: "*.pkgs.test", Ports: []uint16{443}},
		{Host: "rebind.test", Ports: []uint16{443}},
	}
	names := map[string]string{"pypi.test": "192.0.2.1", "mirror.pkgs.test": "192.0.2.2", "rebind.test": "10.0.0.1"}
	return &gateway{pol: p, eg: Egress{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Resolve: func(_ context.Context, h string) ([]netip.Addr, error) {
			if a, ok := names[h]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, errors.New("no such host")
		},
	}, pinned: map[netip.AddrPort]bool{
		// Pre-pinned so answer() never runs nft in a unit test.
		netip.MustParseAddrPort("192.0.2.1:443"): true, netip.MustParseAddrPort("192.0.2.2:443"): true,
	}, names: map[netip.Addr]string{}, refused: map[RefusedKey]int64{}}
}

func TestDNSAnswer(t *testing.T) {
	g := testGateway()
	cases := []struct {
		q      []byte
		rcode  byte
		answer string
	}{
		{query(7, "pypi.test", 1), 0, "192.0.2.1"},
		{query(8, "MIRROR.pkgs.test", 1), 0, "192.0.2.2"},
		{query(9, "pypi.test", 28), 0, ""}, // AAAA: no data, the name exists
		{query(10, "pkgs.test", 1), 3, ""}, // the wildcard does not match its own apex
		{query(11, "forbidden.test", 1), 3, ""},
		{query(12, "rebind.test", 1), 3, ""}, // resolves to a private address
	}
	for _, c := range cases {
		r := g.answer(c.q)
		if len(r) < 12 || r[0] != c.q[0] || r[1] != c.q[1] || r[2]&0x80 == 0 {
			t.Fatalf("reply %x to %x: bad header", r, c.q)
		}
		if got := r[3] & 0x0f; got != c.rcode {
			t.Errorf("%x: rcode %d, want %d", c.q, got, c.rcode)
		}
		an := binary.BigEndian.Uint16(r[6:])
		if c.answer == "" && an != 0 || c.answer != "" && an != 1 {
			t.Fatalf("%x: %d answers, want %q", c.q, an, c.answer)
		}
		if c.answer != "" {
			if a := netip.AddrFrom4([4]byte(r[len(r)-4:])); a.String() != c.answer {
				t.Errorf("answer %s, want %s", a, c.answer)
			}
		}
	}
	u := map[string]bool{}
	for k := range g.refused {
		u[k.Name+"|"+k.Addr] = true
	}
	for _, k := range []string{"pkgs.test|", "forbidden.test|", "rebind.test|10.0.0.1"} {
		if !u[k] {
			t.Errorf("refusal %q not recorded: %v", k, g.refused)
		}
	}
	for _, s := range dnsSeeds[3:] {
		if r := g.answer(s); r != nil && r[3]&0x0f != 1 {
			t.Errorf("malformed %x answered %x", s, r)
		}
	}
}

// FuzzDNSQuery: no query makes the parser or the reply builder panic, and
// only names on the list are ever answered with an address.
func FuzzDNSQuery(f *testing.F) {
	for _, s := range dnsSeeds {
		f.Add(s)
	}
	g := testGateway()
	f.Fuzz(func(t *testing.T, q []byte) {
		r := g.answer(q)
		if r == nil || len(r) < 12 || binary.BigEndian.Uint16(r[6:]) == 0 {
			return
		}
		name, _, _, err := parseQuery(q)
		if err != nil || g.pol.HostPorts(name) == nil {
			t.Fatalf("answered %x for unlisted or malformed %x", r, q)
		}
	})
}

func TestRuleset(t *testing.T) {
	p := policy.Default()
	p.Network = policy.NetworkAllowlist
	p.Allow = &[]policy.Allow{
		{CIDR: "0.0.0.0/0", Ports: []uint16{443}},
		{IP: "10.1.2.3", Ports: []uint16{5432, 5433}},
	}
	rs := ruleset(p)
	special := strings.Index(rs, "@special goto refuse")
	private := strings.Index(rs, "ip daddr 10.1.2.3/32 th dport { 5432, 5433 }")
	broad := strings.Index(rs, "ip daddr 0.0.0.0/0 th dport { 443 }")
	if special < 0 || private < 0 || broad < 0 || !(private < special && special < broad) {
		t.Fatalf("want the explicit private entry before the special ranges' refusal and the broad prefix after it:\n%s", rs)
	}
}

func TestUplinkAddrs(t *testing.T) {
	up, gw := uplinkAddrs(0)
	if up.String() != "100.64.0.1" || gw.String() != "100.64.0.2" {
		t.Errorf("slot 0: %s %s", up, gw)
	}
	up, gw = uplinkAddrs(4095)
	if up.String() != "100.64.63.253" || gw.String() != "100.64.63.254" {
		t.Errorf("slot 4095: %s %s", up, gw)
	}
}
