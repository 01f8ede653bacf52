package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

// testNet is a network namespace of the test's own standing in for the
// network beyond the gateways: every "host" is an address on its loopback
// interface, with no route anywhere else, so no packet leaves this
// machine.
type testNet struct {
	name, path string
	// hits counts accepted connections per listener address, and
	// datagrams per UDP listener ("udp/" + address).
	hits map[string]*atomic.Int64
	sunk atomic.Int64 // bytes the sink received
}

const (
	pypiAddr      = "192.0.2.10" // pypi.test
	wildcardAddr  = "192.0.2.30" // mirror.pkgs.test: pinned only when the sandbox asks for the name
	forbiddenAddr = "192.0.2.20" // forbidden.test (not listed)
	rebindAddr    = "10.99.0.5"  // rebind.test: listed name, private address
	intranetAddr  = "10.99.0.6"  // intranet.test: listed name and listed address
	metadataAddr  = "169.254.169.254"
	blobSize      = 300_000
	sinkSize      = 200_000
)

var testNames = map[string]string{
	"pypi.test": pypiAddr, "mirror.pkgs.test": wildcardAddr, "forbidden.test": forbiddenAddr,
	"rebind.test": rebindAddr, "intranet.test": intranetAddr,
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newTestNet builds the test hosts: an HTTP server with a PEP 503 index
// and a byte sink on pypi.test, other servers on a second port, on a
// forbidden host, on the rebinding target, on an explicitly listed private
// host and on the metadata address. Everything is removed on cleanup.
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("requires nftables (nft): apt-get install nftables")
	}
	tn := &testNet{name: fmt.Sprintf("jcegress%d", os.Getpid()), hits: map[string]*atomic.Int64{}}
	tn.path = "/run/netns/" + tn.name
	ipCmd(t, "netns", "add", tn.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", tn.name).Run() })
	ipCmd(t, "-n", tn.name, "link", "set", "lo", "up")
	for _, a := range []string{pypiAddr, wildcardAddr, forbiddenAddr, rebindAddr, intranetAddr, metadataAddr} {
		ipCmd(t, "-n", tn.name, "addr", "add", a+"/32", "dev", "lo")
	}

	// The package index: /simple/<project>/ lists the project's wheels.
	root := t.TempDir()
	files := filepath.Join(root, "files")
	os.MkdirAll(filepath.Join(root, "simple", "jcnet"), 0o755)
	os.MkdirAll(files, 0o755)
	writeWheel(t, files, "jcnet", "1.0", "VALUE = 'through the mirror'\n")
	os.WriteFile(filepath.Join(root, "simple", "index.html"), []byte(`<html><body><a href="jcnet/">jcnet</a></body></html>`), 0o644)
	os.WriteFile(filepath.Join(root, "simple", "jcnet", "index.html"),
		[]byte(`<html><body><a href="../../files/jcnet-1.0-py3-none-any.whl">jcnet-1.0-py3-none-any.whl</a></body></html>`), 0o644)
	os.WriteFile(filepath.Join(root, "blob"), make([]byte, blobSize), 0o644)
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(root)))
	mux.HandleFunc("/sink", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		tn.sunk.Add(n)
		fmt.Fprint(w, n)
	})

	for _, addr := range []string{pypiAddr + ":8080", pypiAddr + ":8081", wildcardAddr + ":8080", wildcardAddr + ":8081",
		forbiddenAddr + ":8080", rebindAddr + ":8080", intranetAddr + ":8080", metadataAddr + ":80"} {
		l := tn.listen(t, addr)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	// UDP: an echo on a listed host's port, a counter on a forbidden one.
	for _, addr := range []string{pypiAddr + ":8080", forbiddenAddr + ":5353"} {
		c := tn.listenUDP(t, addr)
		n := tn.hits["udp/"+addr]
		go func() {
			buf := make([]byte, 512)
			for {
				k, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				n.Add(1)
				_, _ = c.WriteToUDPAddrPort(buf[:k], from)
			}
		}()
		t.Cleanup(func() { c.Close() })
	}
	return tn
}

// inTestNet runs fn on a thread that joins the test namespace and is then
// thrown away.
func (tn *testNet) inTestNet(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.GetFromPath(tn.path)
		if err == nil {
			err = netns.Set(ns)
			ns.Close()
		}
		if err == nil {
			err = fn()
		}
		ch <- err
	}()
	return <-ch
}

// listenUDP opens a UDP socket inside the test namespace; hits counts its
// datagrams under "udp/" + addr.
func (tn *testNet) listenUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := tn.inTestNet(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	})
	if err != nil {
		t.Fatalf("listen udp %s in test netns: %v", addr, err)
	}
	tn.hits["udp/"+addr] = &atomic.Int64{}
	return c
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// listen opens a TCP listener inside the test namespace, from a thread
// that joins it and is then thrown away.
func (tn *testNet) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	type res struct {
		l   net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.GetFromPath(tn.path)
		if err == nil {
			err = netns.Set(ns)
			ns.Close()
		}
		if err != nil {
			ch <- res{nil, err}
			return
		}
		l, err := net.Listen("tcp4", addr)
		ch <- res{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen %s in test netns: %v", addr, r.err)
	}
	n := &atomic.Int64{}
	tn.hits[addr] = n
	return countingListener{r.l, n}
}

func (tn *testNet) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := testNames[strings.TrimSuffix(host, ".")]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func egressPolicy() policy.Policy {
	p := policy.Default()
	p.Name = "egress"
	p.MemoryBytes = 256 << 20
	p.Pids = 64
	p.DiskBytes = 64 << 20
	p.OutputBytes = 64 << 10
	p.Network = policy.NetworkAllowlist
	p.Allow = &[]policy.Allow{
		{Host: "pypi.test", Ports: []uint16{8080}},
		{Host: "*.pkgs.test", Ports: []uint16{8080}},
		{Host: "rebind.test", Ports: []uint16{8080}},
		{Host: "intranet.test", Ports: []uint16{8080}},
		{IP: intranetAddr, Ports: []uint16{8080}},
	}
	return p
}

func newEgressEnv(t *testing.T) (*env, *testNet) {
	t.Helper()
	tn := newTestNet(t)
	e := newEnv(t, func(c *Config) { c.Policies["egress"] = egressPolicy() })
	e.host.SetEgress(isolate.Egress{Upstream: tn.path, Resolve: tn.resolve})
	return e, tn
}

// pyJSON runs code that prints one JSON object and decodes it.
func pyJSON(t *testing.T, e *env, id, code string, out any) *Result {
	t.Helper()
	res := e.exec(t, id, code, 60*time.Second)
	wantStatus(t, res, StatusOK)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), out); err != nil {
		t.Fatalf("decode %q: %v", res.Stdout, err)
	}
	return res
}

// probeCode tries every way out and reports each outcome as "ok" or the
// exception's type, name and errno.
const probeCode = `
import json, socket, time, urllib.request, urllib.error, os
out = {}
def attempt(key, fn):
    t0 = time.monotonic()
    try:
        out[key] = "ok:" + str(fn())
    except Exception as e:
        out[key] = "%s:%s" % (type(e).__name__, getattr(e, "errno", None) if not isinstance(e, urllib.error.URLError) else type(e.reason).__name__)
    out[key + "_s"] = round(time.monotonic() - t0, 3)
def resolve(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, 8080, socket.AF_INET, socket.SOCK_STREAM)})
def connect(host, port):
    s = socket.create_connection((host, port), timeout=5)
    s.close()
    return "connected"
def get(url, proxies=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies or {}))
    return len(opener.open(url, timeout=5).read())
# A wildcard's address is pinned when the sandbox asks for the name, not
# before.
attempt("wildcard before dns", lambda: connect("192.0.2.30", 8080))
for n in ["pypi.test", "mirror.pkgs.test", "forbidden.test", "rebind.test", "intranet.test", "pkgs.test", "metadata.google.internal"]:
    attempt("dns " + n, lambda n=n: resolve(n))
attempt("get wildcard", lambda: get("http://mirror.pkgs.test:8080/blob"))
attempt("wildcard other port", lambda: connect("mirror.pkgs.test", 8081))
attempt("get pypi", lambda: get("http://pypi.test:8080/blob"))
attempt("get intranet", lambda: get("http://intranet.test:8080/blob"))
attempt("direct forbidden", lambda: connect("192.0.2.20", 8080))
attempt("other port", lambda: connect("192.0.2.10", 8081))
attempt("other port by name", lambda: connect("pypi.test", 8081))
attempt("rebind direct", lambda: connect("10.99.0.5", 8080))
attempt("metadata", lambda: connect("169.254.169.254", 80))
# The proxy variables name an allowed host; the cell ignores them.
os.environ["http_proxy"] = "http://pypi.test:8080"
attempt("proxy bypass", lambda: get("http://192.0.2.20:8080/blob", proxies={}))
attempt("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
import fcntl, struct
# SIOCSIFFLAGS: the sandbox cannot take its own link down or change it.
attempt("ifdown", lambda: fcntl.ioctl(socket.socket(), 0x8914, struct.pack("16sH22x", b"eth0", 0)))
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect((host, port))
    s.send(b"ping")
    try:
        return s.recv(64).decode()
    finally:
        s.close()
# UDP to a listed name's port is forwarded (the echo answers); to anything
# else the gateway's ICMP reject reaches the connected socket at once.
attempt("udp allowed", lambda: udp("pypi.test", 8080))
attempt("udp forbidden", lambda: udp("192.0.2.20", 5353))
print(json.dumps(out))
`

func TestEgressAllowlist(t *testing.T) {
	e, tn := newEgressEnv(t)
	info, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var out map[string]any
	res := pyJSON(t, e, info.ID, probeCode, &out)
	t.Logf("probe: %v", out)
	want := map[string]string{
		"dns pypi.test":                "ok:['192.0.2.10']",
		"dns mirror.pkgs.test":         "ok:['192.0.2.30']",
		"get wildcard":                 "ok:" + strconv.Itoa(blobSize),
		"udp allowed":                  "ok:ping",
		"udp forbidden":                "OSError:113", // EHOSTUNREACH from the gateway's admin-prohibited reject
		"dns intranet.test":            "ok:['10.99.0.6']",
		"dns forbidden.test":           "gaierror:-2", // EAI_NONAME: NXDOMAIN, not a timeout (EAI_AGAIN)
		"dns rebind.test":              "gaierror:-2",
		"dns pkgs.test":                "gaierror:-2", // *.pkgs.test does not match pkgs.test
		"dns metadata.google.internal": "gaierror:-2",
		"get pypi":                     "ok:" + strconv.Itoa(blobSize),
		"get intranet":                 "ok:" + strconv.Itoa(blobSize),
		"raw socket":                   "PermissionError:1",
		"packet socket":                "PermissionError:1",
		"ifdown":                       "PermissionError:1",
	}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("%s = %v, want %s", k, out[k], v)
		}
	}
	for _, k := range []string{"direct forbidden", "other port", "other port by name", "rebind direct", "metadata", "proxy bypass",
		"wildcard before dns", "wildcard other port"} {
		if s, _ := out[k].(string); strings.HasPrefix(s, "ok") || strings.HasPrefix(s, "timeout") || strings.Contains(s, "timeout") {
			t.Errorf("%s = %v, want refused at once", k, out[k])
		}
	}
	// At once: under a second, so neither a SYN retry nor a UDP timeout
	// waited for an ICMP reject held back by rate limiting.
	for _, k := range []string{"direct forbidden", "other port", "other port by name", "rebind direct", "metadata",
		"wildcard before dns", "wildcard other port", "udp forbidden"} {
		if s, _ := out[k+"_s"].(float64); s >= 0.9 {
			t.Errorf("%s took %.3f s, want refused at once", k, s)
		}
	}
	for _, addr := range []string{forbiddenAddr + ":8080", pypiAddr + ":8081", rebindAddr + ":8080", metadataAddr + ":80",
		wildcardAddr + ":8081", "udp/" + forbiddenAddr + ":5353"} {
		if n := tn.hits[addr].Load(); n != 0 {
			t.Errorf("%s accepted %d connections or datagrams, want 0", addr, n)
		}
	}
	// Exactly the connection made after the name was asked for.
	if n := tn.hits[wildcardAddr+":8080"].Load(); n != 1 {
		t.Errorf("%s:8080 (mirror.pkgs.test) accepted %d connections, want 1 (after its DNS query, none before)", wildcardAddr, n)
	}
	if n := tn.hits["udp/"+pypiAddr+":8080"].Load(); n != 1 {
		t.Errorf("the listed host's UDP echo got %d datagrams, want 1", n)
	}
	nu := res.Usage.Network
	if nu == nil {
		t.Fatalf("usage has no network: %+v", res.Usage)
	}
	refused := map[string]bool{}
	for _, r := range nu.Refused {
		refused[fmt.Sprintf("%s|%d|%s", r.Addr, r.Port, r.Name)] = true
	}
	t.Logf("refused: %+v", nu.Refused)
	for _, k := range []string{"|0|forbidden.test", rebindAddr + "|0|rebind.test", forbiddenAddr + "|8080|", pypiAddr + "|8081|pypi.test", metadataAddr + "|80|",
		wildcardAddr + "|8080|mirror.pkgs.test", wildcardAddr + "|8081|mirror.pkgs.test", forbiddenAddr + "|5353|"} {
		if !refused[k] {
			t.Errorf("refused attempts lack %s: %+v", k, nu.Refused)
		}
	}

	// Packages through it: pip against the index on the test host.
	res = e.exec(t, info.ID, `import subprocess, sys, os
env = dict(os.environ, PIP_NO_INDEX="0")
r = subprocess.run([sys.executable, "-m", "pip", "install", "--index-url", "http://pypi.test:8080/simple/", "--trusted-host", "pypi.test", "jcnet"], capture_output=True, text=True, env=env)
print(r.returncode, r.stdout[-2000:], r.stderr[-2000:])
import jcnet
print(jcnet.VALUE)`, 120*time.Second)
	if !strings.HasSuffix(res.Stdout, "through the mirror\n") {
		t.Fatalf("pip install from the allowlisted index: %+v", res)
	}
}

func TestEgressAccounting(t *testing.T) {
	e, tn := newEgressEnv(t)
	info, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var out map[string]int
	res := pyJSON(t, e, info.ID, fmt.Sprintf(`import json, urllib.request
op = urllib.request.build_opener(urllib.request.ProxyHandler({}))
got = len(op.open("http://pypi.test:8080/blob", timeout=10).read())
sunk = int(op.open(urllib.request.Request("http://pypi.test:8080/sink", data=b"x" * %d), timeout=10).read())
print(json.dumps({"got": got, "sunk": sunk}))`, sinkSize), &out)
	if out["got"] != blobSize || out["sunk"] != sinkSize || tn.sunk.Load() != sinkSize {
		t.Fatalf("transfer: %v, sink saw %d", out, tn.sunk.Load())
	}
	nu := res.Usage.Network
	if nu == nil {
		t.Fatalf("no network usage")
	}
	t.Logf("network usage: %+v", *nu)
	// IP bytes: payload plus headers (~3%% on full segments) plus the other
	// direction's ACKs and the HTTP requests and responses.
	bound := func(what string, got, payload, other int64) {
		if lo, hi := payload, payload+payload/10+other/20+16<<10; got < lo || got > hi {
			t.Errorf("%s = %d, want %d..%d", what, got, lo, hi)
		}
	}
	bound("sent_bytes", nu.SentBytes, sinkSize, blobSize)
	bound("received_bytes", nu.ReceivedBytes, blobSize, sinkSize)
	if len(nu.Refused) != 0 {
		t.Errorf("refused = %+v, want none", nu.Refused)
	}
	// A cell that does nothing costs nothing.
	res = e.exec(t, info.ID, "1", 0)
	if nu := res.Usage.Network; nu == nil || nu.SentBytes != 0 || nu.ReceivedBytes != 0 {
		t.Errorf("idle cell network usage = %+v, want zero", nu)
	}
}

// TestEgressClosed: the same hosts, the same upstream, but a sandbox with
// network "none" and one whose allowlist (narrowed per session) does not
// name them reach nothing.
func TestEgressClosed(t *testing.T) {
	e, tn := newEgressEnv(t)
	none, err := e.m.Create(context.Background(), CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	narrowed, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress",
		Override: &policy.Override{Allow: &[]policy.Allow{{Host: "intranet.test", Ports: []uint16{8080}}, {IP: intranetAddr, Ports: []uint16{8080}}}}})
	if err != nil {
		t.Fatalf("create narrowed: %v", err)
	}
	code := `
import json, socket
out = {}
for key, fn in [("dns", lambda: socket.getaddrinfo("pypi.test", 8080, socket.AF_INET)),
                ("direct", lambda: socket.create_connection(("192.0.2.10", 8080), timeout=5)),
                ("intranet", lambda: socket.create_connection(("10.99.0.6", 8080), timeout=5))]:
    try:
        fn(); out[key] = "ok"
    except Exception as e:
        out[key] = "%s:%s" % (type(e).__name__, e.errno)
print(json.dumps(out))`
	var o map[string]string
	res := pyJSON(t, e, none.ID, code, &o)
	t.Logf("none: %v", o)
	// No resolver and no route: both fail at once.
	if o["dns"] == "ok" || o["direct"] != "OSError:101" || o["intranet"] != "OSError:101" {
		t.Errorf("network none: %v, want no name and ENETUNREACH", o)
	}
	if res.Usage.Network != nil {
		t.Errorf("network none has network usage %+v", res.Usage.Network)
	}
	o = nil
	pyJSON(t, e, narrowed.ID, code, &o)
	t.Logf("narrowed: %v", o)
	if o["dns"] != "gaierror:-2" || o["direct"] == "ok" || o["intranet"] != "ok" {
		t.Errorf("narrowed allowlist: %v, want NXDOMAIN, refused, ok", o)
	}
	if n := tn.hits[pypiAddr+":8080"].Load(); n != 0 {
		t.Errorf("pypi.test accepted %d connections", n)
	}
	// A request cannot widen the policy.
	_, err = e.m.Create(context.Background(), CreateOptions{Policy: "egress",
		Override: &policy.Override{Allow: &[]policy.Allow{{Host: "forbidden.test", Ports: []uint16{8080}}}}})
	if err == nil {
		t.Errorf("override outside the policy's allowlist accepted")
	}
}

// TestEgressCleanup: destroying a session leaves no gateway behind: its
// uplink veth in the upstream namespace is gone.
func TestEgressCleanup(t *testing.T) {
	e, tn := newEgressEnv(t)
	info, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	links := func() string {
		out, _ := exec.Command("ip", "-n", tn.name, "-o", "link", "show").CombinedOutput()
		return string(out)
	}
	if !strings.Contains(links(), "jcu") {
		t.Fatalf("no uplink in the upstream namespace: %s", links())
	}
	if err := e.m.Close(context.Background(), 0, info.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(links(), "jcu") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if l := links(); strings.Contains(l, "jcu") {
		t.Errorf("uplink left behind after delete: %s", l)
	}
}

// TestEgressFailsClosed: an allowlist policy on a host with no egress
// upstream is refused, never run with some other network.
func TestEgressFailsClosed(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Policies["egress"] = egressPolicy() })
	_, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress"})
	if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "egress upstream") {
		t.Fatalf("create without an upstream: %v, want unavailable naming the upstream", err)
	}
}

// TestEgressSurvivesReadoption: a session with an allowlist network that a
// new daemon re-adopts gets a new gateway (the old one died with its
// daemon), with the same allowlist: the listed host answers, others are
// still refused.
func TestEgressSurvivesReadoption(t *testing.T) {
	r := newRestartable(t)
	tn := newTestNet(t)
	r.hostMod = func(h *isolate.Host) { h.SetEgress(isolate.Egress{Upstream: tn.path, Resolve: tn.resolve}) }
	withEgress := func(c *Config) {
		c.KeepOnShutdown = true
		c.Logger = testLogger()
		c.Policies = map[string]policy.Policy{"default": policy.Default(), "egress": egressPolicy()}
	}
	ctx := context.Background()
	m1 := r.startWith(withEgress)
	info, err := m1.Create(ctx, CreateOptions{Owner: 1000, Policy: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	probe := `import socket, urllib.request
def get(url):
    try:
        return len(urllib.request.urlopen(url, timeout=5).read())
    except Exception as e:
        return type(e).__name__
x = locals().get("x", 0) + 1
print(x, get("http://pypi.test:8080/blob"), get("http://192.0.2.20:8080/blob"))`
	run := func(m *Manager) string {
		t.Helper()
		res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: probe, Timeout: 60 * time.Second})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("probe: %v %+v", err, res)
		}
		return strings.TrimSpace(res.Stdout)
	}
	if got, want := run(m1), fmt.Sprintf("1 %d URLError", blobSize); got != want {
		t.Fatalf("before the restart: %q, want %q", got, want)
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The second daemon is the last: it ends the session at shutdown, and
	// the host must hold nothing of it afterwards (each run of this test
	// used to leave the session's disk and root mounted).
	m2 := r.startWith(func(c *Config) { withEgress(c); c.KeepOnShutdown = false })
	defer func() {
		if err := m2.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		assertNothingLeft(t, r.state)
	}()
	if got, want := run(m2), fmt.Sprintf("2 %d URLError", blobSize); got != want {
		t.Fatalf("after re-adoption: %q, want %q (variables kept, listed host reachable, others refused)", got, want)
	}
	if n := tn.hits[forbiddenAddr+":8080"].Load(); n != 0 {
		t.Errorf("the forbidden host accepted %d connections", n)
	}
}

// TestEgressThroughCheckpoints: an allowlist session hibernates, restores,
// forks and rolls back with its allowlist: each sandbox that runs after a
// checkpoint has a gateway of its own that lets the listed host through and
// refuses the rest.
func TestEgressThroughCheckpoints(t *testing.T) {
	e, tn := newEgressEnv(t)
	requiresCriu(t)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	probe := `import urllib.request
def get(url):
    try:
        return len(urllib.request.urlopen(url, timeout=5).read())
    except Exception as e:
        return type(e).__name__
print(x, get("http://pypi.test:8080/blob"), get("http://192.0.2.20:8080/blob"))`
	check := func(id, step string, x int) {
		t.Helper()
		res := e.exec(t, id, probe, 60*time.Second)
		if want := fmt.Sprintf("%d %d URLError", x, blobSize); strings.TrimSpace(res.Stdout) != want || res.State != StateKept {
			t.Fatalf("%s: %q (%s), want %q", step, res.Stdout, res.State, want)
		}
	}
	e.exec(t, info.ID, "x = 1", 0)
	check(info.ID, "before", 1)
	// An open connection is not carried: the dump takes it closed, as a
	// paused machine's peers see theirs end (criu's tcp-close; it used to
	// refuse the whole hibernation), and the restored session goes on with
	// its network.
	e.exec(t, info.ID, "import socket\nconn = socket.create_connection(('pypi.test', 8080), timeout=5)", 0)
	if _, err := e.m.Durability().Hibernate(context.Background(), 0, info.ID); err != nil {
		t.Fatalf("Hibernate with an open TCP connection: %v", err)
	}
	check(info.ID, "after hibernate and restore", 1)
	res := e.exec(t, info.ID, `try:
    conn.settimeout(5)
    conn.sendall(b"GET /blob HTTP/1.0\r\nHost: pypi.test\r\n\r\n")
    print("open" if conn.recv(1) else "closed")
except OSError:
    print("closed")
conn.close()`, 0)
	if got := strings.TrimSpace(res.Stdout); got != "closed" {
		t.Fatalf("the connection open at the hibernation, after the restore: %q, want closed", got)
	}
	if _, err := e.m.Durability().Hibernate(context.Background(), 0, info.ID); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	check(info.ID, "after a second hibernate and restore", 1)
	e.exec(t, info.ID, "x = 2", 0)
	if _, err := e.m.Durability().Snapshot(ctx, 0, info.ID); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	check(info.ID, "the parent after its snapshot", 2)
	fi, err := e.m.Durability().Fork(ctx, 0, info.ID)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	check(fi.ID, "the fork", 2)
	check(info.ID, "the parent after the fork", 2)
	e.exec(t, info.ID, "x = 3", 0)
	if _, err := e.m.Durability().Rollback(ctx, 0, info.ID); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	check(info.ID, "after rollback", 2)
	if n := tn.hits[forbiddenAddr+":8080"].Load(); n != 0 {
		t.Errorf("the forbidden host accepted %d connections", n)
	}
}

// TestHostileRefusedDNSFlood: a cell asking the gateway's DNS server for
// 100,000 distinct unlisted names gets NXDOMAIN for each, and its result
// carries their count and a sample of at most isolate.MaxRefusedSample
// names, not every name (a 7.8 MiB result and daemon memory growing with
// each cell). The next cell's sample is its own.
func TestHostileRefusedDNSFlood(t *testing.T) {
	e, _ := newEgressEnv(t)
	info, err := e.m.Create(context.Background(), CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	const flood = 100_000
	query := `
import json, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("169.254.0.1", 53))
s.settimeout(5)
def ask(i, name):
    q = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l for l in name.encode().split(b".")) + b"\0" + struct.pack(">HH", 1, 1)
    s.send(q)
    return s.recv(512)[3] & 0x0f
`
	var out map[string]int
	res := pyJSON(t, e, info.ID, query+fmt.Sprintf(`
nx = sum(1 for i in range(%d) if ask(i, "n%%d.flood.test" %% i) == 3)
print(json.dumps({"nx": nx}))`, flood), &out)
	if out["nx"] != flood {
		t.Errorf("%d of %d unlisted names got NXDOMAIN", out["nx"], flood)
	}
	nu := res.Usage.Network
	if nu == nil {
		t.Fatalf("no network usage")
	}
	b, _ := json.Marshal(res)
	t.Logf("refused_count %d, %d sampled, result %d bytes", nu.RefusedCount, len(nu.Refused), len(b))
	if len(nu.Refused) > isolate.MaxRefusedSample || nu.RefusedCount != flood {
		t.Errorf("refused: count %d, %d sampled; want %d and at most %d", nu.RefusedCount, len(nu.Refused), flood, isolate.MaxRefusedSample)
	}
	if len(b) > 64<<10 {
		t.Errorf("result is %d bytes, want under 64 KiB", len(b))
	}
	res = pyJSON(t, e, info.ID, query+`print(json.dumps({"rcode": ask(1, "later.test")}))`, &out)
	if nu := res.Usage.Network; out["rcode"] != 3 || nu == nil || nu.RefusedCount != 1 || len(nu.Refused) != 1 || nu.Refused[0].Name != "later.test" {
		t.Errorf("the next cell: rcode %d, network %+v; want later.test refused once", out["rcode"], nu)
	}
}

// TestHostileNarrowToMetadata: under a policy whose only entry is
// 0.0.0.0/0, a request cannot narrow to the cloud metadata address, a
// private or loopback range or the shared address space (SSRF through the
// narrowing), and the policy itself reaches none of them.
func TestHostileNarrowToMetadata(t *testing.T) {
	tn := newTestNet(t)
	broad := egressPolicy()
	broad.Name = "broad"
	broad.Allow = &[]policy.Allow{{CIDR: "0.0.0.0/0", Ports: []uint16{80, 8080}}}
	e := newEnv(t, func(c *Config) { c.Policies["broad"] = broad })
	e.host.SetEgress(isolate.Egress{Upstream: tn.path, Resolve: tn.resolve})
	ctx := context.Background()
	for _, a := range []policy.Allow{
		{IP: metadataAddr, Ports: []uint16{80}},
		{CIDR: "169.254.0.0/16", Ports: []uint16{80}},
		{CIDR: "10.0.0.0/8", Ports: []uint16{8080}},
		{IP: rebindAddr, Ports: []uint16{8080}},
		{CIDR: "127.0.0.0/8", Ports: []uint16{80}},
		{IP: "100.64.0.1", Ports: []uint16{80}},
	} {
		info, err := e.m.Create(ctx, CreateOptions{Policy: "broad", Override: &policy.Override{Allow: &[]policy.Allow{a}}})
		if err == nil {
			t.Errorf("narrowing to %+v accepted (session %s): opens a special range the policy does not", a, info.ID)
		} else if !errors.Is(err, ErrBadRequest) {
			t.Errorf("narrowing to %+v: %v, want a bad request", a, err)
		}
	}
	info, err := e.m.Create(ctx, CreateOptions{Policy: "broad"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var o map[string]string
	pyJSON(t, e, info.ID, `
import json, socket
out = {}
for key, addr in [("metadata", ("169.254.169.254", 80)), ("private", ("10.99.0.5", 8080)), ("public", ("192.0.2.10", 8080))]:
    try:
        socket.create_connection(addr, timeout=5).close(); out[key] = "ok"
    except OSError as e:
        out[key] = "%s:%s" % (type(e).__name__, e.errno)
print(json.dumps(out))`, &o)
	if o["metadata"] != "OSError:113" || o["private"] != "OSError:113" || o["public"] != "ok" {
		t.Errorf("under 0.0.0.0/0: %v, want metadata and private refused (EHOSTUNREACH), public reached", o)
	}
	for _, addr := range []string{metadataAddr + ":80", rebindAddr + ":8080"} {
		if n := tn.hits[addr].Load(); n != 0 {
			t.Errorf("%s accepted %d connections, want 0", addr, n)
		}
	}
}

// TestEgressClosedWhileTheGatewayIsRebuilt: a sandbox whose code keeps
// sending to a forbidden host while its gateway is rebuilt (here by
// daemon restarts: each adoption builds the gateway anew for the running
// sandbox, as a restore and a snapshot do) gets nothing through: the
// gateway forwarded unfiltered while its rules were loaded, its links and
// routes already up.
func TestEgressClosedWhileTheGatewayIsRebuilt(t *testing.T) {
	tn := newTestNet(t)
	r := newRestartable(t)
	r.hostMod = func(h *isolate.Host) { h.SetEgress(isolate.Egress{Upstream: tn.path, Resolve: tn.resolve}) }
	start := func() *Manager {
		return r.startWith(func(c *Config) {
			c.KeepOnShutdown = true
			c.Policies = map[string]policy.Policy{"default": policy.Default(), "egress": egressPolicy()}
		})
	}
	ctx := context.Background()
	m := start()
	info, err := m.Create(ctx, CreateOptions{Policy: "egress"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	res, err := m.Exec(ctx, 0, info.ID, ExecRequest{Code: `import socket, threading, time
stop = threading.Event()
sent = [0]
def flood():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    while not stop.is_set():
        try:
            s.sendto(b"x", ("` + forbiddenAddr + `", 5353))
            sent[0] += 1
        except OSError:
            pass
        time.sleep(0.0002)
threading.Thread(target=flood, daemon=True).start()
time.sleep(0.2)
print(sent[0] > 0)
`})
	if err != nil || res.Status != StatusOK || res.Stdout != "True\n" {
		t.Fatalf("flood cell: %v %+v", err, res)
	}
	for i := range 5 {
		if err := m.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown %d: %v", i, err)
		}
		m = start()
	}
	res, err = m.Exec(ctx, 0, info.ID, ExecRequest{Code: "stop.set(); time.sleep(0.1); print(sent[0])"})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("stop cell: %v %+v", err, res)
	}
	t.Logf("datagrams the sandbox sent to the forbidden host: %s", strings.TrimSpace(res.Stdout))
	if err := m.Close(ctx, 0, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tn.hits["udp/"+forbiddenAddr+":5353"].Load(); n != 0 {
		t.Fatalf("the forbidden host received %d datagrams while the gateway was rebuilt", n)
	}
}
