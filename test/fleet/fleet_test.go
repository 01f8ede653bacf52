package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestMain removes the binary the fleet built.
func TestMain(m *testing.M) { testenv.Main(m) }

// haproxyCfg is the file under test, used as it is.
func haproxyCfg(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "configs", "haproxy.cfg")
}

// haproxyBin finds Debian's haproxy (make deps installs it), or skips
// saying so; under CI its absence is a failure.
func haproxyBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("haproxy missing under CI: %v", err)
		}
		t.Skipf("requires haproxy (apt-get install haproxy; make deps installs it): %v", err)
	}
	return p
}

// haproxyEnv is the environment configs/haproxy.cfg reads: the front
// address, each node's, and the (empty) map file of moved sessions, made
// in dir.
func haproxyEnv(t *testing.T, dir, front string, nodes map[string]string) []string {
	owners := filepath.Join(dir, "jailcell-owners.map")
	if err := os.WriteFile(owners, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "JC_FRONT="+front, "JC_OWNERS="+owners)
	for id, addr := range nodes {
		env = append(env, "JC_NODE_"+strings.ToUpper(id)+"="+addr)
	}
	return env
}

// TestHAProxyConfigChecks: configs/haproxy.cfg is real HAProxy syntax
// (haproxy -c), and the check can fail: without a node's address it does.
func TestHAProxyConfigChecks(t *testing.T) {
	bin := haproxyBin(t)
	nodes := map[string]string{"n1": "127.0.0.1:17001", "n2": "127.0.0.1:17002", "n3": "127.0.0.1:17003"}
	cmd := exec.Command(bin, "-c", "-f", haproxyCfg(t))
	cmd.Env = haproxyEnv(t, t.TempDir(), "127.0.0.1:17000", nodes)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Configuration file is valid") || strings.Contains(string(out), "WARNING") {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	delete(nodes, "n2")
	cmd = exec.Command(bin, "-c", "-f", haproxyCfg(t))
	cmd.Env = haproxyEnv(t, t.TempDir(), "127.0.0.1:17000", nodes)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("haproxy -c passed without JC_NODE_N2:\n%s", out)
	}
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// node is one `jailcell serve` of the fleet.
type node struct {
	id   string
	addr string
	svc  *testenv.Service
}

type fleet struct {
	t      *testing.T
	dir    string
	token  string // owner 1000
	other  string // owner 1001
	front  string
	nodes  map[string]*node
	hp     *exec.Cmd
	hpLog  *testenv.LockedBuffer
	client *http.Client
}

// uidBases are the nodes' disjoint uid ranges (2^28 apart), none of them
// the default one a service or another test on this host may be using.
var uidBases = map[string]int{"n1": 0x50000000, "n2": 0x60000000, "n3": 0x70000000}

func newFleet(t *testing.T, ids ...string) *fleet {
	t.Helper()
	testenv.RequiresRoot(t)
	hp := haproxyBin(t)
	r := testenv.Rootfs(t)
	bin := testenv.Jailcell(t)
	f := &fleet{t: t, dir: testenv.StateDir(t), token: "t1000-" + randHex(20), other: "t1001-" + randHex(20),
		nodes: map[string]*node{}, client: &http.Client{Timeout: 3 * time.Minute}}
	// The nodes' shared store: S3 on a versitygw on loopback.
	srv := testenv.StartS3(t)
	// The fleet key (store.key_file) every node shares: a shared
	// store is refused without one.
	storeKey := filepath.Join(f.dir, "store.keys")
	if err := os.WriteFile(storeKey, []byte("fleet-test "+base64.StdEncoding.EncodeToString([]byte(strings.Repeat("f", 32)))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(f.dir, "tokens")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("# the test client\n%s 1000\n%s 1001\n", f.token, f.other)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for _, id := range ids {
		n := &node{id: id, addr: freePort(t)}
		n.svc = testenv.StartServe(t, testenv.Serve{
			Bin: bin,
			// A drain hibernates into the store (set after the tests'
			// opt-out, which it overrides).
			Env:      append(srv.Env(), "JAILCELL_SESSIONS_HIBERNATE_ON_SHUTDOWN=true"),
			StopWait: 3 * time.Minute,
			Config: func(dir string) string {
				return testenv.ServeConfig(dir, "root", r.Root) + fmt.Sprintf(`listen: tcp://%s
auth:
  tokens_file: %s
node:
  id: %s
sandbox:
  uid_base: %d
store:
  url: s3://%s/fleet
  key_file: %s
  s3:
    endpoint: %s
    region: us-east-1
log:
  level: info
preload: []
pool:
  size: 0
sessions:
  max: 40
  template: false
drain_notice: 5s
drain_grace: 60s
policies:
`, n.addr, tokens, id, uidBases[id], srv.Bucket, storeKey, srv.Endpoint) + testenv.DefaultPolicy
			},
		})
		f.nodes[id] = n
		addrs[id] = n.addr
	}
	for _, n := range f.nodes {
		f.waitReady(n)
	}
	// A node stopped at the end hibernates what it holds
	// (hibernate_on_shutdown), leaving its sessions' disks mounted in its
	// state dir: whatever a failed test left open is closed first.
	t.Cleanup(func() {
		for _, n := range f.nodes {
			select {
			case <-n.svc.Done():
				continue
			default:
			}
			f.closeAll(n)
		}
	})
	f.front = freePort(t)
	cfg := filepath.Join(f.dir, "haproxy.cfg")
	b, err := os.ReadFile(haproxyCfg(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f.hpLog = &testenv.LockedBuffer{}
	f.hp = exec.Command(hp, "-db", "-f", cfg)
	f.hp.Env = haproxyEnv(t, f.dir, f.front, addrs)
	f.hp.Stdout, f.hp.Stderr = f.hpLog, f.hpLog
	if err := f.hp.Start(); err != nil {
		t.Fatal(err)
	}
	hpDone := make(chan struct{})
	go func() { _ = f.hp.Wait(); close(hpDone) }()
	t.Cleanup(func() {
		_ = f.hp.Process.Signal(syscall.SIGTERM)
		select {
		case <-hpDone:
		case <-time.After(30 * time.Second):
			_ = f.hp.Process.Kill()
			<-hpDone
		}
		if t.Failed() {
			t.Logf("haproxy log:\n%s", f.hpLog.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, _, _ := f.call("GET", "http://"+f.front+"/readyz", "", nil); st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not answer on %s:\n%s", f.front, f.hpLog.String())
		}
	}
	return f
}

// waitReady waits for a node's /readyz (its rootfs check done).
func (f *fleet) waitReady(n *node) {
	f.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if st, _, _ := f.call("GET", "http://"+n.addr+"/readyz", "", nil); st == 200 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("node %s not ready within 2 min:\n%s", n.id, n.svc.Log.String())
		}
	}
}

// reply is the part of a response the fleet test reads.
type reply struct {
	OK       bool     `json:"ok"`
	Session  string   `json:"session"`
	Restored []string `json:"restored"`
	Result   *struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
		State  string `json:"state"`
	} `json:"result"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		State   string `json:"state"`
	} `json:"error"`
	Sessions []struct {
		ID string `json:"session"`
	} `json:"sessions"`
	raw string
}

// call sends one request and returns its status, the node that answered
// (X-Jailcell-Node) and the decoded reply.
func (f *fleet) call(method, url, token string, body any) (int, string, *reply) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, "", &reply{raw: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	r := &reply{raw: string(b)}
	_ = json.Unmarshal(b, r)
	return resp.StatusCode, resp.Header.Get("X-Jailcell-Node"), r
}

// sess is one session of the test with what it must keep.
type sess struct {
	id, node, tok, persist string
	cells                  int
}

func (f *fleet) url(path string) string { return "http://" + f.front + path }

// exec runs code in s through the proxy.
func (f *fleet) exec(s *sess, code string) (int, string, *reply) {
	return f.call("POST", f.url("/v1/sessions/"+s.id+"/exec"), f.token, map[string]any{"code": code, "timeout_s": 60})
}

// check runs the session's own cell: it prints its token and its count of
// cells, so an answer from any other session's kernel (a routing mix-up)
// or a kernel that lost its variables shows.
func (f *fleet) check(s *sess) (string, error) {
	st, by, r := f.exec(s, "n += 1\nprint(tok, n)")
	if st != 200 || r.Result == nil || r.Result.Status != "ok" {
		return by, fmt.Errorf("session %s: %d %s", s.id, st, r.raw)
	}
	s.cells++
	if want := fmt.Sprintf("%s %d\n", s.tok, s.cells); r.Result.Stdout != want {
		return by, fmt.Errorf("session %s answered %q, want %q (another session's answer, or lost variables)", s.id, r.Result.Stdout, want)
	}
	return by, nil
}

// parallel runs fn for each item with at most width at once and returns
// the errors.
func parallel[T any](items []T, width int, fn func(T) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, width)
	)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestFleet: three nodes behind HAProxy on loopback. 30 sessions created
// through the proxy land on all three, each with its own variables and
// files; every request reaches the session's own node; a second owner sees
// none of them; a draining node turns not ready, refuses creates, and still
// answers its sessions until it exits; a node killed with -9 takes its
// live sessions with it while their persisted files come back; a bounded
// soak through the proxy never gets a wrong session's answer.
func TestFleet(t *testing.T) {
	f := newFleet(t, "n1", "n2", "n3")
	const count = 30
	sessions := make([]*sess, count)
	for i := range sessions {
		sessions[i] = &sess{tok: randHex(8), persist: fmt.Sprintf("p%02d-%s", i, randHex(4))}
	}
	// Creates through the proxy, each with its own variables and a file
	// saved to the shared store (persist).
	var createMu sync.Mutex
	var createTimes []time.Duration
	phase := time.Now()
	errs := parallel(sessions, 6, func(s *sess) error {
		t0 := time.Now()
		st, by, r := f.call("POST", f.url("/v1/sessions"), f.token, map[string]any{"ttl_s": 1800, "persist": s.persist})
		createMu.Lock()
		createTimes = append(createTimes, time.Since(t0))
		createMu.Unlock()
		if st != 201 || r.Session == "" {
			return fmt.Errorf("create: %d %s", st, r.raw)
		}
		s.id = r.Session
		s.node, _, _ = strings.Cut(r.Session, "-")
		if s.node != by {
			return fmt.Errorf("session %s created by node %q", s.id, by)
		}
		st, _, r = f.exec(s, fmt.Sprintf("tok = %q\nn = 0\nopen('own.txt', 'w').write(tok)", s.tok))
		if st != 200 || r.Result == nil || r.Result.Status != "ok" {
			return fmt.Errorf("first cell of %s: %d %s", s.id, st, r.raw)
		}
		return nil
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d creates failed; first: %v", len(errs), count, errs[0])
	}
	t.Logf("FIGURES create: %d sessions through the proxy, 6 at a time, in %s; median create %s",
		count, time.Since(phase).Round(time.Millisecond), median(createTimes))
	perNode := map[string][]*sess{}
	for _, s := range sessions {
		perNode[s.node] = append(perNode[s.node], s)
	}
	for id := range f.nodes {
		if len(perNode[id]) == 0 {
			t.Fatalf("no session on node %s: creates are not spread (%v)", id, counts(perNode))
		}
	}
	t.Logf("sessions per node: %v", counts(perNode))
	// Every session's next cell comes from its own node.
	errs = parallel(sessions, 6, func(s *sess) error {
		by, err := f.check(s)
		if err == nil && by != s.node {
			err = fmt.Errorf("session %s of node %s answered by %s", s.id, s.node, by)
		}
		return err
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d routed cells failed; first: %v", len(errs), count, errs[0])
	}
	// Another owner, through the same proxy, sees nothing of them.
	if st, _, r := f.call("GET", f.url("/v1/sessions"), f.other, nil); st != 200 || len(r.Sessions) != 0 {
		t.Errorf("owner 1001 lists %d sessions (%d %s), want none", len(r.Sessions), st, r.raw)
	}
	if st, _, r := f.call("POST", f.url("/v1/sessions/"+sessions[0].id+"/exec"), f.other, map[string]any{"code": "print(tok)"}); st != 404 || r.Error == nil || r.Error.Code != "not_found" {
		t.Errorf("owner 1001 ran a cell in owner 1000's session: %d %s", st, r.raw)
	}
	if st, _, _ := f.call("GET", f.url("/v1/sessions"), "", nil); st != 401 {
		t.Errorf("no token through the proxy: %d, want 401", st)
	}

	// One of n1's sessions carries a loaded kernel (numpy, pandas and a
	// 6.4 MB frame) into the drain: the migration figure for a session an
	// agent has worked in, beside the plain ones.
	loaded := perNode["n1"][0]
	st, _, r := f.exec(loaded, loadedCell)
	if st != 200 || r.Result == nil || r.Result.Status != "ok" || strings.TrimSpace(r.Result.Stdout) == "" {
		t.Fatalf("loading session %s: %d %s", loaded.id, st, r.raw)
	}
	loadedSig := r.Result.Stdout

	// Drain n1: not ready, refusing creates, answering its sessions, then
	// gone with its sessions hibernated.
	n1 := f.nodes["n1"]
	drainStart := time.Now()
	if err := n1.svc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	f.sweepAfter(n1)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, _, r := f.call("GET", "http://"+n1.addr+"/readyz", "", nil)
		if st == 503 {
			break
		}
		if time.Now().After(deadline) || st == 0 {
			t.Fatalf("draining n1's readyz: %d %s, want 503 before it stops listening", st, r.raw)
		}
	}
	if st, _, r := f.call("POST", "http://"+n1.addr+"/v1/sessions", f.token, map[string]any{}); st != 503 || r.Error == nil || r.Error.Code != "unavailable" || !strings.Contains(r.Error.Message, "draining") {
		t.Errorf("create on draining n1: %d %s, want 503 unavailable naming the drain", st, r.raw)
	}
	// Creates through the proxy meanwhile go elsewhere (its readyz check,
	// or a retry of n1's 503).
	for i := 0; i < 3; i++ {
		st, by, r := f.call("POST", f.url("/v1/sessions"), f.token, map[string]any{"ttl_s": 600})
		if st != 201 || by == "n1" || strings.HasPrefix(r.Session, "n1-") {
			t.Errorf("create through the proxy during n1's drain: %d by %q: %s", st, by, r.raw)
		}
		if r.Session != "" {
			f.call("DELETE", f.url("/v1/sessions/"+r.Session), f.token, nil)
		}
	}
	select {
	case <-n1.svc.Done():
	case <-time.After(3 * time.Minute):
		t.Fatalf("n1 did not exit within 3 min of SIGTERM:\n%s", n1.svc.Log.String())
	}
	if err := n1.svc.Err(); err != nil {
		t.Errorf("n1 exited with %v after its drain, want 0", err)
	}
	t.Logf("FIGURES drain: n1 with %d sessions, SIGTERM to exit %s (drain_notice 5s included); checkpoint images %d bytes in all",
		len(perNode["n1"]), time.Since(drainStart).Round(time.Millisecond), imageBytes(n1.svc.Log.String(), ""))
	if got, want := strings.Count(n1.svc.Log.String(), `msg="session hibernated" session=n1-`), len(perNode["n1"]); got != want {
		t.Errorf("n1 logged %d sessions hibernated at shutdown, want %d:\n%s", got, want, n1.svc.Log.String())
	}
	// MIGRATION: each of n1's
	// sessions answering its next cell from another node with its
	// variables intact needs the shared store's cross-node restore; see
	// migrateDrained below, called once that has landed.
	migrateDrained(t, f, perNode["n1"], loaded, loadedSig)

	// Kill n2 with -9: its live sessions are lost; their files are not.
	n2 := f.nodes["n2"]
	if err := n2.svc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.sweepAfter(n2)
	<-n2.svc.Done()
	lost := map[*sess]*reply{}
	for _, s := range perNode["n2"] {
		st, by, r := f.exec(s, "print(tok)")
		if st != 404 || r.Error == nil || r.Error.Code != "not_found" || by == "n2" {
			t.Errorf("session %s of killed n2: %d by %q %s, want not_found from another node", s.id, st, by, r.raw)
		}
		lost[s] = r
		st, by, r = f.call("POST", f.url("/v1/sessions"), f.token, map[string]any{"ttl_s": 600, "persist": s.persist})
		if st != 201 || !contains(r.Restored, "own.txt") {
			t.Errorf("persist %s after n2's death: %d by %s, restored %v: %s", s.persist, st, by, r.Restored, r.raw)
			continue
		}
		back := &sess{id: r.Session, tok: s.tok}
		if st, _, r := f.exec(back, "print(open('own.txt').read())"); st != 200 || r.Result == nil || r.Result.Stdout != s.tok+"\n" {
			t.Errorf("persisted file of %s in %s: %d %s", s.id, back.id, st, r.raw)
		}
		f.call("DELETE", f.url("/v1/sessions/"+back.id), f.token, nil)
	}

	lostStates(t, lost)

	// A bounded soak through the proxy on the sessions that live: every
	// answer is its own session's.
	live := perNode["n3"]
	var jobs []*sess
	for round := 0; round < 30; round++ {
		jobs = append(jobs, live...)
	}
	// One session's cells run one at a time (busy otherwise): each worker
	// takes whole rounds of distinct sessions.
	rounds := make([][]*sess, 0)
	for i := 0; i < len(jobs); i += len(live) {
		rounds = append(rounds, jobs[i:i+len(live)])
	}
	start := time.Now()
	cells := 0
	for _, rd := range rounds {
		errs := parallel(rd, 6, func(s *sess) error {
			by, err := f.check(s)
			if err == nil && by != s.node {
				err = fmt.Errorf("session %s of %s answered by %s", s.id, s.node, by)
			}
			return err
		})
		cells += len(rd)
		if len(errs) > 0 {
			t.Fatalf("soak: %d of %d cells failed; first: %v", len(errs), len(rd), errs[0])
		}
	}
	t.Logf("FIGURES soak: %d cells through the proxy on %d sessions, 6 at a time, in %s", cells, len(live), time.Since(start).Round(time.Millisecond))
	for _, s := range live {
		f.call("DELETE", f.url("/v1/sessions/"+s.id), f.token, nil)
	}
}

// sweepAfter has a node that was drained or killed started again on its
// own state when the test ends: a killed node's kernels live on for the
// next daemon to re-adopt, and a drained node's hibernated sessions (their
// disks mounted) wait in its state dir. That daemon takes them, the test
// closes each, and it stops without hibernating anything.
func (f *fleet) sweepAfter(n *node) {
	f.t.Cleanup(func() {
		<-n.svc.Done()
		n.svc = n.svc.Restart(f.t, "JAILCELL_SESSIONS_HIBERNATE_ON_SHUTDOWN=false", "JAILCELL_DRAIN_NOTICE=0s")
		f.waitReady(n)
		f.closeAll(n)
	})
}

// closeAll closes every session of the test's owner on node n.
func (f *fleet) closeAll(n *node) {
	st, _, r := f.call("GET", "http://"+n.addr+"/v1/sessions", f.token, nil)
	if st != 200 {
		f.t.Errorf("sweep %s: list sessions: %d %s", n.id, st, r.raw)
	}
	for _, s := range r.Sessions {
		if st, _, r := f.call("DELETE", "http://"+n.addr+"/v1/sessions/"+s.ID, f.token, nil); st != 200 {
			f.t.Errorf("sweep %s: close %s: %d %s", n.id, s.ID, st, r.raw)
		}
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2].Round(time.Millisecond)
}

func counts(m map[string][]*sess) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// TestUIDRangeOverlapRefused: a second daemon on this host asking for a
// uid range a live one holds is refused at start, naming the key; on a
// range of its own it starts.
func TestUIDRangeOverlapRefused(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	bin := testenv.Jailcell(t)
	conf := func(base int) func(string) string {
		return func(dir string) string {
			return testenv.ServeConfig(dir, "root", r.Root) + fmt.Sprintf("sandbox:\n  uid_base: %d\npool:\n  size: 0\nsessions:\n  template: false\n", base)
		}
	}
	testenv.StartServe(t, testenv.Serve{Bin: bin, Config: conf(0x50000000), CleanExit: true})
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(conf(0x58000000)(dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Bounded: a serve that wrongly starts is killed, and fails below.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg)
	cmd.Env = testenv.ChildEnv()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "sandbox.uid_base") || !strings.Contains(string(out), "overlaps") {
		t.Fatalf("serve on an overlapping uid range: %v, want a refusal naming sandbox.uid_base:\n%s", err, out)
	}
	testenv.StartServe(t, testenv.Serve{Bin: bin, Config: conf(0x60000000), CleanExit: true})
}
