package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

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
	{0, 5, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 9, 'p', 'y', 'p', 'i', '.', 't', 'e', 's', 't', 0, 0, 1, 0, 1},           // "pypi.test" as one label
	append(query(6, "pypi.test", 1)[:5:5], append([]byte{2}, query(6, "pypi.test", 1)[6:]...)...),                 // two questions, one sent
	{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x12, 0, 1, 0, 1, 4, 'p', 'y', 'p', 'i', 4, 't', 'e', 's', 't', 0}, // points past the question at a listed name
}

func testGateway() *Gateway {
	p := policy.Default()
	p.Network = policy.NetworkAllowlist
	p.Allow = &[]policy.Allow{
		{Host: "pypi.test", Ports: []uint16{443}},
		{Host: "*.pkgs.test", Ports: []uint16{443}},
		{Host: "rebind.test", Ports: []uint16{443}},
	}
	names := map[string]string{"pypi.test": "192.0.2.1", "mirror.pkgs.test": "192.0.2.2", "rebind.test": "10.0.0.1"}
	return &Gateway{pol: p, eg: Egress{
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

// FuzzDNSQuery: no query makes the parser or the reply builder panic,
// every reply is a well-formed DNS response to the query's ID with at most
// the query's own question, and only names on the list are ever answered
// with an address.
func FuzzDNSQuery(f *testing.F) {
	for _, s := range dnsSeeds {
		f.Add(s)
	}
	g := testGateway()
	f.Fuzz(func(t *testing.T, q []byte) {
		r := g.answer(q)
		if r == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(r)
		if err != nil || !h.Response || len(q) < 2 || h.ID != binary.BigEndian.Uint16(q) {
			t.Fatalf("reply %x to %x: header %+v, %v", r, q, h, err)
		}
		qs, err := p.AllQuestions()
		if err != nil || len(qs) > 1 {
			t.Fatalf("reply %x to %x: questions %v, %v", r, q, qs, err)
		}
		ans, err := p.AllAnswers()
		if err != nil {
			t.Fatalf("reply %x to %x: answers: %v", r, q, err)
		}
		if len(ans) == 0 {
			return
		}
		_, question, name, err := parseQuery(q)
		if err != nil || g.pol.HostPorts(name) == nil || len(qs) != 1 || qs[0] != question {
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
	up, gw = uplinkAddrs(0xffff)
	if up.String() != "100.67.255.253" || gw.String() != "100.67.255.254" {
		t.Errorf("index 65535: %s %s", up, gw)
	}
}

// lineCounter counts log lines.
type lineCounter struct{ n atomic.Int64 }

func (c *lineCounter) Write(b []byte) (int, error) {
	c.n.Add(int64(strings.Count(string(b), "\n")))
	return len(b), nil
}

// TestHostileRefusedDNSNames: a cell asking the gateway's DNS server for
// 100,000 distinct unlisted names costs the daemon a count, a sample of at
// most MaxRefusedSample names and a rate-limited log, not a map entry, a
// result entry and a log line per name (memory exhaustion of the daemon,
// results of megabytes, a flooded log).
func TestHostileRefusedDNSNames(t *testing.T) {
	g := testGateway()
	var lines lineCounter
	g.eg.Log = slog.New(slog.NewTextHandler(&lines, nil))
	const flood = 100_000
	start := time.Now()
	for i := range flood {
		q := query(uint16(i), fmt.Sprintf("n%d.flood.test", i), 1)
		if r := g.answer(q); r == nil || dnsmessage.RCode(r[3]&0x0f) != dnsmessage.RCodeNameError {
			t.Fatalf("%d: answer %x, want NXDOMAIN", i, r)
		}
	}
	windows := int64(time.Since(start)/refusedLogWindow) + 1
	if len(g.refused) > MaxRefusedSample {
		t.Fatalf("the DNS server keeps %d refused names, want at most %d", len(g.refused), MaxRefusedSample)
	}
	if n := lines.n.Load(); n > windows*(refusedLogBurst+1) {
		t.Errorf("%d log lines for %d refusals, want at most %d per %s", n, flood, refusedLogBurst+1, refusedLogWindow)
	}
	var u NetUsage
	g.takeDNSRefusals(&u)
	if u.RefusedCount != flood || len(u.Refused) != MaxRefusedSample {
		t.Fatalf("reading: count %d, %d sampled; want %d, %d", u.RefusedCount, len(u.Refused), flood, MaxRefusedSample)
	}
	// The next reading samples afresh: a later cell's names are listed.
	g.answer(query(1, "later.test", 1))
	g.answer(query(2, "later.test", 1))
	var u2 NetUsage
	g.takeDNSRefusals(&u2)
	d := u2.Since(u)
	if d.RefusedCount != 2 || len(d.Refused) != 1 || d.Refused[0].Name != "later.test" || d.Refused[0].Count != 2 {
		t.Fatalf("the next cell's refusals: %+v, want later.test twice", d)
	}
}

// TestNetUsageSince: gateway refusals are counted since the gateway was
// built and subtracted; DNS samples already cover one reading; the result
// lists at most MaxRefusedSample destinations, the most frequent.
func TestNetUsageSince(t *testing.T) {
	prev := NetUsage{SentBytes: 10, RefusedCount: 5, Refused: []Refused{
		{RefusedKey: RefusedKey{Addr: "192.0.2.1", Port: 80}, Count: 3},
		{RefusedKey: RefusedKey{Name: "a.test"}, Count: 2, windowed: true},
	}}
	cur := NetUsage{SentBytes: 30, RefusedCount: 5 + 1 + 1 + 4*MaxRefusedSample, Refused: []Refused{
		{RefusedKey: RefusedKey{Addr: "192.0.2.1", Port: 80}, Count: 3}, // nothing new
		{RefusedKey: RefusedKey{Addr: "192.0.2.2", Port: 80}, Count: 5},
		{RefusedKey: RefusedKey{Name: "a.test"}, Count: 3, windowed: true},
	}}
	for i := range 2 * MaxRefusedSample {
		cur.Refused = append(cur.Refused, Refused{RefusedKey: RefusedKey{Addr: fmt.Sprintf("198.51.100.%d", i), Port: 443}, Count: 2})
	}
	d := cur.Since(prev)
	if d.SentBytes != 20 || d.RefusedCount != cur.RefusedCount-5 || len(d.Refused) != MaxRefusedSample {
		t.Fatalf("Since: %+v", d)
	}
	got := map[string]int64{}
	for _, r := range d.Refused {
		got[r.Addr+r.Name] = r.Count
	}
	if got["192.0.2.2"] != 5 || got["a.test"] != 3 || got["192.0.2.1"] != 0 {
		t.Errorf("Since kept %v, want 192.0.2.2 x5 and a.test x3 first and nothing for 192.0.2.1", got)
	}
}

// TestPinsBounded: a wildcard whose name servers answer every query with
// new addresses cannot pin more than maxPins pairs.
func TestPinsBounded(t *testing.T) {
	g := testGateway()
	g.pinned = map[netip.AddrPort]bool{}
	for i := range maxPins {
		g.pinned[netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 443)] = true
	}
	g.eg.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
	}
	if addrs, ok := g.resolve("new.pkgs.test"); !ok || len(addrs) != 0 || len(g.pinned) != maxPins {
		t.Fatalf("resolve past the pin limit: %v %v, %d pins", addrs, ok, len(g.pinned))
	}
	if len(g.refused) != 1 {
		t.Errorf("refusal at the pin limit not recorded: %v", g.refused)
	}
}

// TestParseCounters reads the counters and the refused set the way
// `nft -j list table` prints them (nft 1.0.6, Debian 12).
func TestParseCounters(t *testing.T) {
	out := `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "inet", "name": "jailcell"}},
{"counter": {"family": "inet", "name": "tx", "table": "jailcell", "packets": 3, "bytes": 180}},
{"counter": {"family": "inet", "name": "rx", "table": "jailcell", "packets": 2, "bytes": 120}},
{"counter": {"family": "inet", "name": "refusedall", "table": "jailcell", "packets": 7, "bytes": 420}},
{"set": {"family": "inet", "name": "refused", "table": "jailcell", "type": ["ipv4_addr", "inet_service"], "flags": ["dynamic"],
 "elem": [{"elem": {"val": {"concat": ["192.0.2.9", 80]}, "counter": {"packets": 5, "bytes": 300}}},
          {"elem": {"val": {"concat": ["192.0.2.8", 443]}, "counter": {"packets": 0, "bytes": 0}}},
          {"elem": {"val": "garbage"}}]}}]}`
	u, err := parseCounters([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if u.SentBytes != 180 || u.SentPackets != 3 || u.ReceivedBytes != 120 || u.RefusedCount != 7 || len(u.Refused) != 2 {
		t.Fatalf("parseCounters = %+v", u)
	}
	if r := u.Refused[0]; r.Addr != "192.0.2.9" || r.Port != 80 || r.Count != 5 {
		t.Errorf("first refused = %+v", r)
	}
	if r := u.Refused[1]; r.Addr != "192.0.2.8" || r.Port != 443 || r.Count != 1 {
		t.Errorf("refused without a count yet = %+v, want counted once", r)
	}
	if _, err := parseCounters([]byte("{")); err == nil {
		t.Error("truncated JSON accepted")
	}
}

// TestClosedGatewayRunsNoNft: nft is never run for a gateway whose
// namespace is released (a DNS answer pinned as the gateway closed ran it
// with the handle at -1, in the daemon's own namespace, or with a reused
// number, in another sandbox's gateway).
func TestClosedGatewayRunsNoNft(t *testing.T) {
	g := testGateway()
	g.ns, g.done = netns.None(), make(chan struct{})
	_, err := g.nftOut("add element inet jailcell pins { 192.0.2.9 . 443 }\n")
	if err == nil || !strings.Contains(err.Error(), "the gateway is closed") {
		t.Fatalf("nft on a closed gateway: %v, want it refused before it runs", err)
	}
}

// TestAllowedNamesResolveRooted: an allowed name is looked up as a fully
// qualified name, so a name that does not resolve is not tried again with
// the host's search domains appended (an internal name, reached under an
// allowed one).
func TestAllowedNamesResolveRooted(t *testing.T) {
	for in, want := range map[string]string{"api.example.com": "api.example.com.", "api.example.com.": "api.example.com.", "localhost": "localhost."} {
		if got := rooted(in); got != want {
			t.Errorf("rooted(%q) = %q, want %q", in, got, want)
		}
	}
}
