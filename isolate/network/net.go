package network

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/policy"
)

// Egress is how sandboxes with network "allowlist" get out. Each such
// sandbox gets its own gateway network namespace, created and held by
// jailcell (anonymous: it lives only as long as jailcell holds it, so a
// crashed daemon leaves nothing behind), joined to the sandbox by one veth
// pair and to Upstream by another. All filtering happens in the gateway,
// where the sandbox has no capability at all; nothing is installed in the
// host's own tables. See docs/egress.md.
type Egress struct {
	// Upstream is the path of the network namespace gateways are plugged
	// into ("/run/netns/egress", or "/proc/1/ns/net" for the host's own).
	// Routing from there onwards is the operator's. Required for
	// network "allowlist"; without it such sandboxes are refused.
	Upstream string
	// Resolve looks names up on the host; nil uses the system resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Log receives each refused attempt as it happens; nil: slog.Default.
	Log *slog.Logger
}

// Addresses of the two links. The sandbox link is link-local: it is never
// routed anywhere, so it cannot collide with a destination. Uplinks take
// one /30 per uid range (uplinkIndex) from the shared address space in
// Upstream.
var (
	gwAddr   = netip.MustParseAddr("169.254.0.1") // gateway side, and the DNS server
	sbAddr   = netip.MustParseAddr("169.254.0.2") // the sandbox's eth0
	uplinkV4 = netip.MustParseAddr("100.64.0.0")
)

const (
	sbLink   = "sb" // gateway end of the sandbox link
	upLink   = "up" // gateway end of the uplink
	nftTable = "jailcell"
	dnsTTL   = 30
	// maxPins bounds the (address, port) pairs a sandbox's listed names
	// may pin, as the nftables set does: a wildcard under a domain whose
	// name servers answer each query with new addresses cannot grow the
	// daemon's bookkeeping past it.
	maxPins = 65536
	// MaxRefusedSample bounds the distinct refused destinations a cell's
	// usage lists (the most frequent first); RefusedCount has them all.
	// The DNS server keeps at most this many distinct refused names per
	// reading: a cell asking for 100,000 random names costs a count, not a
	// map of names (memory exhaustion of the daemon, and a result of
	// megabytes).
	MaxRefusedSample = 64
	// At most refusedLogBurst "egress refused" lines per sandbox and
	// refusedLogWindow; the rest are counted and summarised once.
	refusedLogBurst  = 20
	refusedLogWindow = 10 * time.Second
)

// UplinkName is the upstream end of uplink index i.
func UplinkName(i int) string { return "jcu" + strconv.Itoa(i) }

// uplinkAddrs returns the upstream and gateway ends of uplink index i.
func uplinkAddrs(i int) (netip.Addr, netip.Addr) {
	b := uplinkV4.As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(i)*4
	binary.BigEndian.PutUint32(b[:], v+1)
	up := netip.AddrFrom4(b)
	binary.BigEndian.PutUint32(b[:], v+2)
	return up, netip.AddrFrom4(b)
}

// ResolvConf is the sandbox's /etc/resolv.conf: the gateway's DNS only.
const ResolvConf = "nameserver 169.254.0.1\noptions timeout:2 attempts:1\n"

// ResolvConfPath is the generated file for a sandbox whose root is root.
func ResolvConfPath(root string) string { return filepath.Join(filepath.Dir(root), "resolv.conf") }

// inNetns runs fn on a thread that has joined ns. The thread is never
// handed back to the scheduler: it ends with the goroutine.
func inNetns(ns netns.NsHandle, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if ns >= 0 {
			if err := netns.Set(ns); err != nil {
				ch <- fmt.Errorf("enter network namespace: %w", err)
				return
			}
		}
		ch <- fn()
	}()
	return <-ch
}

// SandboxNetns opens the network namespace of the sandbox whose init is
// pid. Right after a start the init may still be in execve on a thread
// other than its leader (runc's init is a Go program): until the exec
// completes the leader is a zombie whose namespace links answer ENOENT,
// while the thread group lives on. That window is waited out, at most two
// seconds; an init that has ended is an error at once.
func SandboxNetns(pid int) (netns.NsHandle, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		ns, err := netns.GetFromPid(pid)
		if err == nil {
			return ns, nil
		}
		if !errors.Is(err, unix.ENOENT) || procfs.Exited(pid) || time.Now().After(deadline) {
			return netns.None(), fmt.Errorf("open sandbox network namespace: %w", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// newNetns creates an anonymous network namespace with loopback up, IPv4
// forwarding off (Attach turns it on once the rules are in: setForwarding)
// and IPv6 off.
func newNetns() (netns.NsHandle, error) {
	h := netns.None()
	err := inNetns(-1, func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare network namespace: %w", err)
		}
		for _, kv := range [][2]string{
			{"/proc/sys/net/ipv4/ip_forward", "0"},
			{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "1"},
			{"/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"},
			// Every refusal is answered with an ICMP reject, to the sandbox
			// only; the per-peer ICMP rate limit (6, then one a second)
			// would leave a refused UDP socket waiting for its timeout and
			// a refused connect for a SYN retry. The namespace's global
			// limit (icmp_msgs_per_sec) still bounds them.
			{"/proc/sys/net/ipv4/icmp_ratelimit", "0"},
		} {
			if err := os.WriteFile(kv[0], []byte(kv[1]), 0); err != nil {
				return fmt.Errorf("sysctl %s: %w", kv[0], err)
			}
		}
		var err error
		h, err = netns.Get()
		if err != nil {
			return fmt.Errorf("open network namespace: %w", err)
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("loopback up: %w", err)
		}
		return nil
	})
	if err != nil && h.IsOpen() {
		h.Close()
	}
	return h, err
}

// setForwarding turns IPv4 forwarding in ns on or off.
func setForwarding(ns netns.NsHandle, on bool) error {
	v := []byte("0")
	if on {
		v = []byte("1")
	}
	return inNetns(ns, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", v, 0) })
}

// Gateway is one allowlisted sandbox's gateway namespace and DNS server.
type Gateway struct {
	pol    policy.Policy
	eg     Egress
	ns     netns.NsHandle
	dns    *net.UDPConn
	done   chan struct{}
	closed sync.Once

	nftMu sync.Mutex // one nft at a time

	mu     sync.Mutex
	pinned map[netip.AddrPort]bool // at most maxPins
	names  map[netip.Addr]string   // the name an address was resolved for
	// refused is a sample of the DNS server's refusals since the last
	// usage reading (at most MaxRefusedSample names); refusedN counts them
	// all, for the gateway's life.
	refused  map[RefusedKey]int64
	refusedN int64
	// The log of refusals is rate-limited per sandbox.
	logStart time.Time
	logged   int
	logQuiet int64 // refusals not logged in the current window
}

// rooted is host as a fully qualified name: an allowed name that does
// not resolve must not be tried with the host's search domains appended
// ("api.example.com.corp.internal"), which would reach an internal
// address under an allowed name.
func rooted(host string) string {
	if strings.HasSuffix(host, ".") {
		return host
	}
	return host + "."
}

// Attach builds the gateway for a sandbox whose init is pid and connects
// it to the upstream eg names through uplink index idx. The sandbox's own namespace is owned by its user namespace,
// but its processes hold no capability there, so they cannot change the
// addresses and routes set here; nor could that help them: the gateway
// decides.
func Attach(p policy.Policy, eg Egress, pid, idx int) (_ *Gateway, retErr error) {
	if eg.Resolve == nil {
		eg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip4", rooted(host))
		}
	}
	if eg.Log == nil {
		eg.Log = slog.Default()
	}
	g := &Gateway{pol: p, eg: eg, ns: netns.None(), done: make(chan struct{}),
		pinned: map[netip.AddrPort]bool{}, names: map[netip.Addr]string{}, refused: map[RefusedKey]int64{}}
	defer func() {
		if retErr != nil {
			_ = g.Close()
		}
	}()
	var err error
	if g.ns, err = newNetns(); err != nil {
		return nil, err
	}
	sbNS, err := SandboxNetns(pid)
	if err != nil {
		return nil, err
	}
	defer sbNS.Close()
	upNS, err := netns.GetFromPath(eg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("open egress upstream %s: %w", eg.Upstream, err)
	}
	defer upNS.Close()
	upPeer := UplinkName(idx)
	upAddr, gwUpAddr := uplinkAddrs(idx)

	// The rules first, forwarding after them, the links and routes last:
	// a gateway rebuilt for a sandbox whose code already runs (an
	// adoption after a restart, a restore, a checkpoint that leaves it
	// running) forwarded its packets unfiltered to the upstream while nft
	// ran. The rules name the links, which need not exist yet.
	if err := g.nft(ruleset(p)); err != nil {
		return nil, fmt.Errorf("install gateway rules: %w", err)
	}
	if err := setForwarding(g.ns, true); err != nil {
		return nil, fmt.Errorf("gateway forwarding: %w", err)
	}
	if err := g.links(sbNS, upNS, upPeer, upAddr, gwUpAddr); err != nil {
		return nil, err
	}
	err = inNetns(g.ns, func() error {
		var err error
		g.dns, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(gwAddr, 53)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen for the sandbox's DNS: %w", err)
	}
	go g.serveDNS()
	// Pin what the exact names resolve to now; wildcards are pinned when
	// the sandbox asks for a name.
	for _, a := range p.Entries() {
		if a.Host != "" && !strings.HasPrefix(a.Host, "*.") {
			_, _ = g.resolve(a.Host)
		}
	}
	return g, nil
}

// links creates and addresses both veth pairs.
func (g *Gateway) links(sbNS, upNS netns.NsHandle, upPeer string, upAddr, gwUpAddr netip.Addr) error {
	gw, err := netlink.NewHandleAt(g.ns)
	if err != nil {
		return fmt.Errorf("netlink gateway: %w", err)
	}
	defer gw.Close()
	sb, err := netlink.NewHandleAt(sbNS)
	if err != nil {
		return fmt.Errorf("netlink sandbox: %w", err)
	}
	defer sb.Close()
	up, err := netlink.NewHandleAt(upNS)
	if err != nil {
		return fmt.Errorf("netlink upstream: %w", err)
	}
	defer up.Close()

	pairs := []struct {
		name, peer string
		peerNS     netns.NsHandle
	}{{sbLink, "eth0", sbNS}, {upLink, upPeer, upNS}}
	// A gateway that was just dropped (a daemon that exited, a sandbox of
	// this slot destroyed a moment ago) takes its veth pairs with it only
	// when the kernel gets round to freeing its namespace: remove what is
	// left of them by name. Both names are this sandbox's own: eth0 in its
	// namespace, the uplink by its uid slot.
	for _, stale := range []struct {
		hd   *netlink.Handle
		name string
	}{{sb, "eth0"}, {up, upPeer}} {
		if l, err := stale.hd.LinkByName(stale.name); err == nil {
			// ENODEV: the kernel's own teardown of the old namespace
			// took it between the lookup and the delete. That is the
			// outcome wanted, not a reason to leave the sandbox
			// without a network (the re-adoption flake).
			if err := stale.hd.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("remove stale link %s: %w", stale.name, err)
			}
		}
	}
	for _, pr := range pairs {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: pr.name}, PeerName: pr.peer, PeerNamespace: netlink.NsFd(pr.peerNS)}
		if err := gw.LinkAdd(v); err != nil {
			return fmt.Errorf("create veth %s/%s: %w", pr.name, pr.peer, err)
		}
	}
	addr := func(hd *netlink.Handle, link string, a netip.Addr) error {
		l, err := hd.LinkByName(link)
		if err != nil {
			return fmt.Errorf("find %s: %w", link, err)
		}
		ip := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(30, 32)}
		if err := hd.AddrAdd(l, &netlink.Addr{IPNet: ip}); err != nil {
			return fmt.Errorf("address %s: %w", link, err)
		}
		if err := hd.LinkSetUp(l); err != nil {
			return fmt.Errorf("up %s: %w", link, err)
		}
		return nil
	}
	steps := []error{
		addr(gw, sbLink, gwAddr),
		addr(gw, upLink, gwUpAddr),
		addr(sb, "eth0", sbAddr),
		addr(up, upPeer, upAddr),
	}
	if err := errors.Join(steps...); err != nil {
		return err
	}
	if err := gw.RouteAdd(&netlink.Route{Gw: upAddr.AsSlice()}); err != nil {
		return fmt.Errorf("gateway default route: %w", err)
	}
	if err := sb.RouteAdd(&netlink.Route{Gw: gwAddr.AsSlice()}); err != nil {
		return fmt.Errorf("sandbox default route: %w", err)
	}
	return nil
}

// Close stops the DNS server and drops the gateway namespace; its veths go
// with it (a veth pair dies with either end's namespace).
func (g *Gateway) Close() error {
	g.closed.Do(func() {
		close(g.done)
		if g.dns != nil {
			_ = g.dns.Close()
		}
		g.nftMu.Lock() // no nft runs in the namespace as it goes (nftOut)
		defer g.nftMu.Unlock()
		if g.ns.IsOpen() {
			// Forwarding off before the namespace goes: its teardown,
			// after the last handle, unregisters the rules with the links
			// still up, and a sandbox sending meanwhile got through.
			_ = setForwarding(g.ns, false)
			_ = g.ns.Close()
			g.ns = netns.None()
		}
	})
	return nil
}

// RefusedKey identifies a refused destination: an address and port the
// gateway rejected, a name the DNS server would not answer for, or both
// (a listed name that resolved to a private address).
type RefusedKey struct {
	Addr   string
	Port   uint16
	Name   string
	Reason string
}

// Refused is a refused destination and how many attempts were made.
type Refused struct {
	RefusedKey
	Count int64
	// windowed: counted since the previous reading (the DNS server's
	// sample), not since the gateway was built.
	windowed bool
}

// NetUsage is what a sandbox sent through its gateway, counted there.
// Bytes are IP packet bytes (headers included).
type NetUsage struct {
	SentBytes, ReceivedBytes     int64
	SentPackets, ReceivedPackets int64
	// RefusedCount is every refused attempt: packets the gateway
	// rejected and names its DNS server would not answer for.
	RefusedCount int64
	// Refused is a sample of them by destination. In a reading from
	// Sandbox.NetUsage, the DNS server's part covers the time since the
	// previous reading; Since keeps at most MaxRefusedSample entries, the
	// most frequent.
	Refused []Refused
}

// Since is u minus an earlier reading of the same sandbox, with Refused
// cut to MaxRefusedSample entries.
func (u NetUsage) Since(prev NetUsage) NetUsage {
	before := map[RefusedKey]int64{}
	for _, r := range prev.Refused {
		if !r.windowed {
			before[r.RefusedKey] = r.Count
		}
	}
	d := NetUsage{
		SentBytes: u.SentBytes - prev.SentBytes, ReceivedBytes: u.ReceivedBytes - prev.ReceivedBytes,
		SentPackets: u.SentPackets - prev.SentPackets, ReceivedPackets: u.ReceivedPackets - prev.ReceivedPackets,
		RefusedCount: u.RefusedCount - prev.RefusedCount,
	}
	for _, r := range u.Refused {
		n := r.Count
		if !r.windowed {
			n -= before[r.RefusedKey]
		}
		if n > 0 {
			d.Refused = append(d.Refused, Refused{RefusedKey: r.RefusedKey, Count: n})
		}
	}
	if len(d.Refused) > MaxRefusedSample {
		sort.SliceStable(d.Refused, func(i, j int) bool { return d.Refused[i].Count > d.Refused[j].Count })
		d.Refused = d.Refused[:MaxRefusedSample]
		sortRefused(d.Refused)
	}
	return d
}

func sortRefused(rs []Refused) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.Port < b.Port
	})
}

func (g *Gateway) Usage() (NetUsage, error) {
	out, err := g.nftOut("", "-j", "list", "table", "inet", nftTable)
	if err != nil {
		return NetUsage{}, err
	}
	u, err := parseCounters(out)
	if err != nil {
		return NetUsage{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range u.Refused {
		a, _ := netip.ParseAddr(u.Refused[i].Addr)
		u.Refused[i].Name = g.names[a]
	}
	g.takeDNSRefusals(&u)
	sortRefused(u.Refused)
	return u, nil
}

// takeDNSRefusals adds the DNS server's refusals to u: the count for the
// gateway's life and the sample since the previous reading, which starts
// a new sample.
func (g *Gateway) takeDNSRefusals(u *NetUsage) {
	u.RefusedCount += g.refusedN
	for k, n := range g.refused {
		u.Refused = append(u.Refused, Refused{RefusedKey: k, Count: n, windowed: true})
	}
	clear(g.refused)
}

// refuse records a refusal by the DNS server: always counted, sampled up
// to MaxRefusedSample distinct names per reading, logged at most
// refusedLogBurst times per refusedLogWindow. The name is the cell's own
// choice, so none of this may grow with the number of names it tries.
func (g *Gateway) refuse(k RefusedKey) {
	now := time.Now()
	g.mu.Lock()
	g.refusedN++
	if _, ok := g.refused[k]; ok || len(g.refused) < MaxRefusedSample {
		g.refused[k]++
	}
	var quiet int64
	if now.Sub(g.logStart) >= refusedLogWindow {
		quiet = g.logQuiet
		g.logStart, g.logged, g.logQuiet = now, 0, 0
	}
	log := g.logged < refusedLogBurst
	if log {
		g.logged++
	} else {
		g.logQuiet++
	}
	g.mu.Unlock()
	if quiet > 0 {
		g.eg.Log.Warn("egress refusals not logged", "count", quiet, "window", refusedLogWindow)
	}
	if log {
		g.eg.Log.Info("egress refused", "name", k.Name, "addr", k.Addr, "reason", k.Reason)
	}
}

// resolve looks name up on the host, keeps the addresses the policy
// permits (a listed name resolving into a special range is DNS rebinding
// unless that address is listed itself) and pins them with the name's
// ports. ok is false when the lookup itself failed.
func (g *Gateway) resolve(name string) (_ []netip.Addr, ok bool) {
	ports := g.pol.HostPorts(name)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	addrs, err := g.eg.Resolve(ctx, name)
	if err != nil {
		return nil, false
	}
	var keep []netip.Addr
	var add []string
	var fresh []netip.AddrPort // pinned by this call, in add
	full := false
	g.mu.Lock()
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			continue
		}
		if policy.IsSpecial(a) && !g.pol.Explicit(a) {
			g.mu.Unlock()
			g.refuse(RefusedKey{Addr: a.String(), Name: name, Reason: "name resolves to a private or special address"})
			g.mu.Lock()
			continue
		}
		kept := false
		for _, p := range ports {
			ap := netip.AddrPortFrom(a, p)
			if g.pinned[ap] {
				kept = true
			} else if len(g.pinned) < maxPins {
				g.pinned[ap] = true
				fresh = append(fresh, ap)
				add = append(add, fmt.Sprintf("%s . %d", a, p))
				kept = true
			} else {
				full = true
			}
		}
		if kept {
			keep = append(keep, a)
			g.names[a] = name
		}
	}
	g.mu.Unlock()
	if full {
		g.refuse(RefusedKey{Name: name, Reason: fmt.Sprintf("the sandbox's %d pinned addresses are used up", maxPins)})
	}
	if len(add) > 0 {
		if err := g.nft(fmt.Sprintf("add element inet %s pins { %s }\n", nftTable, strings.Join(add, ", "))); err != nil {
			g.eg.Log.Warn("egress pin", "name", name, "err", err)
			// Not in the set, so not pinned: else every later answer
			// would name an address the gateway then refuses.
			g.mu.Lock()
			for _, ap := range fresh {
				delete(g.pinned, ap)
			}
			g.mu.Unlock()
			return nil, false
		}
	}
	return keep, true
}

// serveDNS answers the sandbox's queries until the gateway closes. Queries
// are handled one at a time: a sandbox that floods it only delays itself.
func (g *Gateway) serveDNS() {
	buf := make([]byte, 1500)
	for {
		n, from, err := g.dns.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := g.answer(buf[:n]); resp != nil {
			_, _ = g.dns.WriteToUDPAddrPort(resp, from)
		}
	}
}

// answer builds the reply to one query, or nil for garbage: anything that
// is not a query with a readable header gets no reply at all.
func (g *Gateway) answer(q []byte) []byte {
	h, question, name, err := parseQuery(q)
	if err != nil {
		if h, herr := new(dnsmessage.Parser).Start(q); herr == nil && !h.Response {
			return reply(h, nil, dnsmessage.RCodeFormatError, nil)
		}
		return nil
	}
	if h.OpCode != 0 { // anything but QUERY
		return reply(h, &question, dnsmessage.RCodeNotImplemented, nil)
	}
	if g.pol.HostPorts(name) == nil {
		g.refuse(RefusedKey{Name: name, Reason: "name not on the allowlist"})
		return reply(h, &question, dnsmessage.RCodeNameError, nil)
	}
	if question.Type != dnsmessage.TypeA { // AAAA and the rest: the name exists, with no such data
		return reply(h, &question, dnsmessage.RCodeSuccess, nil)
	}
	addrs, ok := g.resolve(name)
	if !ok {
		return reply(h, &question, dnsmessage.RCodeServerFailure, nil)
	}
	if len(addrs) == 0 {
		return reply(h, &question, dnsmessage.RCodeNameError, nil)
	}
	return reply(h, &question, dnsmessage.RCodeSuccess, addrs)
}

// errQuery is any query the DNS server will not read.
var errQuery = errors.New("malformed DNS query")

// parseQuery reads the header and the single question of a DNS query (RFC
// 1035 4.1) with dnsmessage, and returns the name in lower case without
// the trailing dot. Anything after the question (an EDNS OPT record) is
// not read. dnsmessage refuses labels over 63 bytes, names over 255, and
// labels holding a dot (golang/go#56246: "a.b" as one label would read as
// the listed name a.b). Compression pointers are refused too: a query has
// no earlier name to point at, so one is a probe, and a name assembled
// from elsewhere in the packet is not the name the cell wrote.
func parseQuery(q []byte) (h dnsmessage.Header, question dnsmessage.Question, name string, err error) {
	var p dnsmessage.Parser
	if h, err = p.Start(q); err != nil || h.Response {
		return h, question, "", errQuery
	}
	if question, err = p.Question(); err != nil {
		return h, question, "", errQuery
	}
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone { // exactly one question
		return h, question, "", errQuery
	}
	// Uncompressed, the question reads back byte for byte as sent.
	b := dnsmessage.NewBuilder(make([]byte, 0, 12+len(q)), dnsmessage.Header{})
	if b.StartQuestions() != nil || b.Question(question) != nil {
		return h, question, "", errQuery
	}
	wire, err := b.Finish()
	if err != nil || len(q) < len(wire) || !bytes.Equal(wire[12:], q[12:len(wire)]) {
		return h, question, "", errQuery
	}
	name = strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	if name == "" {
		return h, question, "", errQuery
	}
	return h, question, name, nil
}

// reply answers query header h: the question echoed (none for a query
// that could not be read), and A records for addrs, each naming the
// question through a compression pointer.
func reply(h dnsmessage.Header, question *dnsmessage.Question, rcode dnsmessage.RCode, addrs []netip.Addr) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if question != nil {
		if err := b.Question(*question); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, a := range addrs {
		rh := dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// DialIn connects to addr ("127.0.0.1:PORT") over TCP from inside ns: the
// socket is made on a thread that has joined ns, so it belongs to ns for
// its life and is used from any thread afterwards. The thread is never
// handed back to the scheduler (inNetns).
func DialIn(ctx context.Context, ns netns.NsHandle, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	return c, err
}
