package session

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	// libcontainer runs criu from PATH (isolate.Config.Criu).
	_ = os.Setenv("PATH", isolate.CriuPATH(isolate.DefaultCriu, os.Getenv("PATH")))
	code := m.Run()
	if strays := testenv.EndStrayCriu(); len(strays) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: criu still running after the tests (killed now):\n  %s\n", strings.Join(strays, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	// This process's cgroup root, if no test left a sandbox under it (a
	// leftover keeps it, for make test's leak check to report).
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + testCgroupRoot)
	for _, d := range append(dirs, "/sys/fs/cgroup"+testCgroupRoot) {
		_ = os.Remove(d)
	}
	os.Exit(code)
}

// testCgroupRoot is this test process's own: a manager reconciles every
// cgroup under its root (killing what runs there), so neither packages
// tested in parallel nor two runs of this package at once may share one.
// Per process, a leftover is not swept away by the next run either: it
// stays for `make test`'s leak check to report.
var testCgroupRoot = "/jailcell-test-session-" + strconv.Itoa(os.Getpid())

type env struct {
	m     *Manager
	host  *isolate.Host
	state string
}

// newEnv builds a real host and manager (privileged tier).
func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	return newEnvHost(t, nil, mod)
}

// newEnvHost is newEnv with hostMod changing the host's configuration.
func newEnvHost(t testing.TB, hostMod func(*isolate.Config), mod func(*Config)) *env {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	hc := isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: testCgroupRoot}
	if hostMod != nil {
		hostMod(&hc)
	}
	h, err := isolate.NewHost(hc)
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	p.Pids = 64
	p.DiskBytes = 64 << 20
	p.OutputBytes = 64 << 10
	p.InterruptGrace = time.Second
	small := p
	small.Name = "small"
	cfg := Config{StateDir: filepath.Join(state, "sessions"), Policies: map[string]policy.Policy{"default": p}, StoreDir: filepath.Join(state, "store"), Logger: testLogger()}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg, h)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		assertNothingLeft(t, state)
		unmountLeft(t, state)
		if err := h.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return &env{m: m, host: h, state: state}
}

// unmountLeft detaches what a failed test left mounted under state (a
// session's disk stays mounted while it is hibernated, and a test that
// failed after a hibernation ended there): reported already, it must not
// outlive the test and fail the next run's check-leaks.
func unmountLeft(t testing.TB, state string) {
	disks, _ := filepath.Glob(filepath.Join(state, "isolate", "sandboxes", "*", "disk"))
	for _, d := range disks {
		if err := unix.Unmount(d, unix.MNT_DETACH); err == nil {
			t.Logf("unmounted %s, left by the test", d)
		}
	}
}

// assertNothingLeft checks the host for anything a sandbox could leave:
// mounts under the state dir, cgroups under the test cgroup root, sandbox
// processes, sandbox and session directories.
func assertNothingLeft(t testing.TB, state string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], state) {
			t.Errorf("mount left behind: %s", f[4])
		}
	}
	for _, d := range []string{"/sys/fs/cgroup/memory" + testCgroupRoot, "/sys/fs/cgroup/pids" + testCgroupRoot, "/sys/fs/cgroup" + testCgroupRoot} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("cgroup left behind: %s/%s", d, e.Name())
			}
		}
	}
	for _, d := range []string{filepath.Join(state, "isolate", "sandboxes"), filepath.Join(state, "isolate", "containers"), filepath.Join(state, "sessions", "sessions")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			t.Errorf("directory left behind: %s/%s", d, e.Name())
		}
	}
	if pids := sandboxProcs(); len(pids) > 0 {
		var desc []string
		for _, p := range pids {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "Name:") || strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "PPid:") || strings.HasPrefix(l, "NSpid:") {
					keep = append(keep, strings.Join(strings.Fields(l), " "))
				}
			}
			desc = append(desc, fmt.Sprintf("%d(%s)", p, strings.Join(keep, "; ")))
		}
		t.Errorf("sandbox processes left behind: %v", desc)
	}
}

// sandboxProcs lists host processes in this package's sandbox cgroups
// (other packages' tests run sandboxes at the same time under their own
// roots).
func sandboxProcs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && strings.Contains(string(b), ":"+testCgroupRoot+"/") && !orphanZombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// orphanZombie says whether pid has exited and was handed to the host's
// init: a helper criu forked during a restore and left when it exited. It
// holds no resources and is no longer ours to reap; init reaps it (the
// init of some machines, lazily).
func orphanZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // gone
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	return ok && len(f) > 1 && f[0] == "Z" && f[1] == "1"
}

func (e *env) create(t *testing.T, opt CreateOptions) string {
	t.Helper()
	info, err := e.m.Create(context.Background(), opt)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return info.ID
}

func (e *env) exec(t *testing.T, id, code string, timeout time.Duration) *Result {
	t.Helper()
	res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: code, Timeout: timeout})
	if err != nil {
		t.Fatalf("Exec(%q): %v", code, err)
	}
	return res
}

func wantStatus(t *testing.T, res *Result, status string) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status = %q, want %q; stdout=%q stderr=%q error=%+v", res.Status, status, res.Stdout, res.Stderr, res.Error)
	}
}

func TestSessionStatePersistsAcrossCells(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, "import json\nx = 41\nopen('notes.txt','w').write('hi')", 0), StatusOK)
	res := e.exec(t, id, "x += 1\nprint(x, json.dumps([1]), open('notes.txt').read())", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "42 [1] hi\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
	res = e.exec(t, id, "x", 0)
	if res.Value["text/plain"] != "42" {
		t.Fatalf("value = %v", res.Value)
	}
}

func TestRichOutputs(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, "import matplotlib.pyplot as plt\nplt.plot([1,2,3])\nplt.title('t')", 60*time.Second)
	wantStatus(t, res, StatusOK)
	if len(res.Display) != 1 || res.Display[0].MIME != "image/png" {
		t.Fatalf("display = %+v", res.Display)
	}
	png, err := base64.StdEncoding.DecodeString(res.Display[0].Data)
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") || len(png) < 1000 {
		t.Fatalf("not a PNG: %v, %d bytes", err, len(png))
	}
	res = e.exec(t, id, "import pandas as pd\ndf = pd.DataFrame({'a':[1,2],'b':[3,4]})\ndf.to_csv('out.csv')\ndf", 60*time.Second)
	wantStatus(t, res, StatusOK)
	if html, _ := res.Value["text/html"].(string); !strings.Contains(html, "<table") {
		t.Fatalf("value has no text/html table: %v", res.Value)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "out.csv" || res.Files[0].Change != "created" || res.Files[0].Size == 0 {
		t.Fatalf("files = %+v", res.Files)
	}
	res = e.exec(t, id, "1/0", 0)
	wantStatus(t, res, StatusError)
	if res.Error == nil || res.Error.Type != "ZeroDivisionError" || !strings.Contains(res.Error.Traceback, "1/0") {
		t.Fatalf("error = %+v", res.Error)
	}
	if res.State != StateKept {
		t.Fatalf("state = %q", res.State)
	}
}

func TestTimeoutKeepsState(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	e.exec(t, id, "keep = 'still here'", 0)
	start := time.Now()
	res := e.exec(t, id, "import time\ntime.sleep(100)", time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout verdict after %s, want within timeout+2s", d)
	}
	wantStatus(t, res, StatusTimeout)
	if res.State != StateKept {
		t.Fatalf("state = %q (%s), want kept", res.State, res.StateReason)
	}
	if res := e.exec(t, id, "print(keep)", 0); res.Stdout != "still here\n" {
		t.Fatalf("after timeout: %+v", res)
	}
}

func TestTimeoutIgnoringInterruptLosesStateLoudly(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	e.exec(t, id, "v = 1", 0)
	start := time.Now()
	res := e.exec(t, id, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", time.Second)
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("verdict after %s", d)
	}
	wantStatus(t, res, StatusTimeout)
	if res.State != StateLost || res.StateReason == "" {
		t.Fatalf("state = %q %q, want lost with a reason", res.State, res.StateReason)
	}
	res = e.exec(t, id, "print('v' in globals())", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "False\n" {
		t.Fatalf("fresh kernel expected, got %q", res.Stdout)
	}
}

func TestKernelSuicideReportsLost(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	e.exec(t, id, "open('kept.txt','w').write('x')", 0)
	res := e.exec(t, id, "import os\nos.kill(os.getpid(), 9)", 0)
	if res.State != StateLost {
		t.Fatalf("state = %q, want lost: %+v", res.State, res)
	}
	res = e.exec(t, id, "print(open('kept.txt').read())", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "x\n" {
		t.Fatalf("workspace lost with the kernel: %q", res.Stdout)
	}
}

func TestMemoryLimitGivesOOM(t *testing.T) {
	e := newEnv(t, nil)
	wantOOM(t, e, e.create(t, CreateOptions{}))
}

// wantOOM: a cell of session id that writes past the memory limit gets
// an oom verdict (or a MemoryError) with what it printed before the
// kill, and the session lives on.
func wantOOM(t *testing.T, e *env, id string) {
	t.Helper()
	res := e.exec(t, id, "print('before the hog', flush=True)\nb = bytearray(8 << 30)\nb[::4096] = b'x' * (len(b) // 4096)", 60*time.Second)
	if res.Status != StatusOOM && !(res.Status == StatusError && res.Error != nil && res.Error.Type == "MemoryError") {
		t.Fatalf("status = %q error=%+v, want oom (or MemoryError)", res.Status, res.Error)
	}
	if res.Stdout != "before the hog\n" {
		t.Errorf("stdout %q: the output printed before the OOM kill was lost", res.Stdout)
	}
	wantStatus(t, e.exec(t, id, "print('alive')", 0), StatusOK)
}

func TestPidsLimitBites(t *testing.T) {
	e := newEnv(t, nil)
	wantForkBombStopped(t, e, e.create(t, CreateOptions{}))
}

// wantForkBombStopped: a fork bomb in session id stops at the pids limit,
// said in the cell's limits.
func wantForkBombStopped(t *testing.T, e *env, id string) {
	t.Helper()
	res := e.exec(t, id, `
import os, time
kids, err = [], None
try:
    for i in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(30); os._exit(0)
        kids.append(pid)
except OSError as e:
    err = e
print(type(err).__name__, len(kids))
for k in kids: os.kill(k, 9); os.waitpid(k, 0)
`, 60*time.Second)
	wantStatus(t, res, StatusOK)
	if !strings.HasPrefix(res.Stdout, "BlockingIOError") {
		t.Fatalf("fork bomb not stopped by pids limit: %q", res.Stdout)
	}
	if !contains(res.Limits, "pids") {
		t.Errorf("limits = %v, want pids", res.Limits)
	}
}

func TestDiskLimitBites(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, `
try:
    with open('big', 'wb') as f:
        for i in range(200):
            f.write(b'x' * (1 << 20))
    print('wrote all')
except OSError as e:
    print('OSError', e.errno)
`, 60*time.Second)
	wantStatus(t, res, StatusOK)
	if !strings.HasPrefix(res.Stdout, "OSError 28") && !strings.HasPrefix(res.Stdout, "OSError 27") {
		t.Fatalf("disk limit did not bite: %q", res.Stdout)
	}
}

func TestOutputCap(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, "import sys\nfor i in range(100000): print('x' * 100)\nsys.stdout.write('y' * 10_000_000)", 60*time.Second)
	wantStatus(t, res, StatusOK)
	if !res.StdoutTruncated || len(res.Stdout) > 64<<10 {
		t.Fatalf("stdout %d bytes, truncated=%v", len(res.Stdout), res.StdoutTruncated)
	}
}

func TestNetworkIsLoopbackOnly(t *testing.T) {
	e := newEnv(t, nil)
	// A service on the host's loopback must not be reachable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, fmt.Sprintf(`
import os, socket
print(sorted(os.listdir('/sys/class/net')))
print(open('/proc/net/route').read().strip().count('\n'))
s = socket.socket(); s.settimeout(2)
try:
    s.connect(('127.0.0.1', %d)); print('connected')
except OSError as e:
    print('refused', e.errno)
`, port), 30*time.Second)
	wantStatus(t, res, StatusOK)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 3 || lines[0] != "['lo']" || lines[1] != "0" || !strings.HasPrefix(lines[2], "refused") {
		t.Fatalf("network posture: %q", res.Stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if accepted != 0 {
		t.Fatalf("host loopback listener accepted %d connections from the sandbox", accepted)
	}
}

func TestHostFilesInvisible(t *testing.T) {
	e := newEnv(t, nil)
	marker := filepath.Join(e.state, "host-secret")
	if err := os.WriteFile(marker, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, fmt.Sprintf(`
import os
print(os.path.exists(%q), os.path.exists('/etc/jailcell'), os.path.exists('/root/go'))
print(open('/etc/os-release').read().count('bookworm') > 0)
`, marker), 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "False False False\nTrue\n" {
		t.Fatalf("host visible: %q", res.Stdout)
	}
}

func TestSessionsAreIsolatedFromEachOther(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(t, CreateOptions{})
	b := e.create(t, CreateOptions{})
	e.exec(t, a, "secret = 'a'\nopen('a.txt','w').write('a')", 0)
	res := e.exec(t, b, "import os\nprint('secret' in globals(), os.path.exists('a.txt'), os.listdir('/work'))", 0)
	if res.Stdout != "False False []\n" {
		t.Fatalf("session b sees a: %q", res.Stdout)
	}
}

func TestTTLExpiryLeavesNothing(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
	id := e.create(t, CreateOptions{TTL: time.Second})
	e.exec(t, id, "x = 1", 0)
	deadline := time.Now().Add(10 * time.Second)
	for len(e.m.List(context.Background(), 0)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.m.List(context.Background(), 0)); n != 0 {
		t.Fatalf("%d sessions alive after TTL", n)
	}
	// The janitor tears down after unlisting; give it a moment.
	for time.Now().Before(deadline) {
		if ents, _ := os.ReadDir(filepath.Join(e.state, "sessions", "sessions")); len(ents) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "x"})
	if err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("exec after expiry: %v, want not_found saying it expired", err)
	}
	assertNothingLeft(t, e.state)
}

// TestMaxLifetimePerSession: a session's own lifetime ends it however
// busy it is, and a longer one than configured is cut to the ceiling.
func TestMaxLifetimePerSession(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 50 * time.Millisecond; c.MaxLifetime = time.Hour })
	info, err := e.m.Create(context.Background(), CreateOptions{MaxLifetime: 1500 * time.Millisecond, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(info.ExpiresAt); left > 2*time.Second || left < 0 {
		t.Fatalf("expires_at %v away, want the 1.5 s lifetime", left)
	}
	// Idle TTL 2 h: only the lifetime, cut to the 1 h ceiling, ends it
	// sooner.
	long, err := e.m.Create(context.Background(), CreateOptions{MaxLifetime: 48 * time.Hour, TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(long.ExpiresAt); left > 61*time.Minute || left < 59*time.Minute {
		t.Fatalf("a 48 h lifetime was not cut: expires in %v", left)
	}
	if _, err := e.m.Create(context.Background(), CreateOptions{MaxLifetime: -time.Second}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("negative lifetime: %v", err)
	}
	// Busy all along: a cell every 200 ms, well inside the idle TTL.
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if _, last = e.m.Exec(context.Background(), 0, info.ID, ExecRequest{Code: "x = 1"}); last != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !errors.Is(last, ErrExpired) || !strings.Contains(last.Error(), "max_lifetime 1.5s reached at") {
		t.Fatalf("a session past its lifetime still runs cells: %v, want expired naming the limit", last)
	}
	if len(e.m.List(context.Background(), 0)) != 1 {
		t.Fatalf("sessions: %+v, want only the long-lived one", e.m.List(context.Background(), 0))
	}
}

func TestPersistedWorkspaceComesBack(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{Persist: "proj"})
	e.exec(t, id, "import os\nos.makedirs('data', exist_ok=True)\nopen('data/model.txt','w').write('v1')\nv = 1", 0)
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Restored) != 1 || info.Restored[0] != "data/model.txt" || info.Survives == "" {
		t.Fatalf("create info: %+v", info)
	}
	res := e.exec(t, info.ID, "print(open('data/model.txt').read(), 'v' in globals())", 0)
	if res.Stdout != "v1 False\n" {
		t.Fatalf("restored: %q", res.Stdout)
	}
}

func TestUploadDownloadConfined(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	if _, err := e.m.Workspace().Upload(context.Background(), 0, id, "in/data.txt", []byte("payload"), nil); err != nil {
		t.Fatal(err)
	}
	res := e.exec(t, id, "print(open('in/data.txt').read())\nopen('in/data.txt','a').write('!')", 0)
	if res.Stdout != "payload\n" {
		t.Fatalf("uploaded file not visible or not writable: %+v", res)
	}
	d, err := e.m.Workspace().Download(context.Background(), 0, id, "in/data.txt")
	if err != nil || string(d.Data) != "payload!" || d.SHA256 == "" {
		t.Fatalf("download: %v %+v", err, d)
	}
	for _, bad := range []string{"../etc/passwd", "/etc/passwd", "a/../../x", ""} {
		if _, err := e.m.Workspace().Download(context.Background(), 0, id, bad); err == nil {
			t.Errorf("download %q allowed", bad)
		}
		if _, err := e.m.Workspace().Upload(context.Background(), 0, id, bad, []byte("x"), nil); err == nil {
			t.Errorf("upload %q allowed", bad)
		}
	}
}

// A cell plants symlinks to host files; neither download nor upload may
// follow them out of the sandbox (Judge0 CVE-2024-28185/28189 class).
func TestSymlinkPlantedByCellCannotReachHost_CVE_2024_28185(t *testing.T) {
	e := newEnv(t, nil)
	hostFile := filepath.Join(e.state, "host-owned.txt")
	if err := os.WriteFile(hostFile, []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, fmt.Sprintf(`
import os
os.symlink(%q, 'leak')
os.symlink('/etc/shadow', 'shadow')
os.symlink('/', 'rootlink')
os.symlink(%q, 'overwrite')
`, hostFile, hostFile), 0)
	wantStatus(t, res, StatusOK)
	for _, p := range []string{"leak", "shadow", "rootlink/etc/passwd"} {
		if d, err := e.m.Workspace().Download(context.Background(), 0, id, p); err == nil && strings.Contains(string(d.Data), "host data") {
			t.Fatalf("download %s read a host file", p)
		}
	}
	_, _ = e.m.Workspace().Upload(context.Background(), 0, id, "overwrite", []byte("pwned"), nil)
	_, _ = e.m.Workspace().Upload(context.Background(), 0, id, "rootlink/tmp/x", []byte("pwned"), nil)
	if b, _ := os.ReadFile(hostFile); string(b) != "host data" {
		t.Fatalf("host file overwritten through a planted symlink: %q", b)
	}
}

func TestRunOnceReturnsFiles(t *testing.T) {
	e := newEnv(t, nil)
	res, err := e.m.RunOnce(context.Background(), 0, "", ExecRequest{
		Code:  "print(open('in.txt').read())\nopen('out.txt','w').write('result')",
		Files: []File{{Path: "in.txt", Data: []byte("input")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusOK)
	if res.Stdout != "input\n" || len(res.Files) != 1 || string(res.Files[0].Data) != "result" {
		t.Fatalf("one-shot: %+v", res)
	}
}

func TestBusySession(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.exec(t, id, "import time\ntime.sleep(2)", 0)
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "1"}); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("concurrent exec: %v, want busy", err)
	}
	<-done
}

func TestOwnerIsolation(t *testing.T) {
	e := newEnv(t, nil)
	info, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Exec(context.Background(), 1001, info.ID, ExecRequest{Code: "1"})
	if err == nil || !strings.Contains(err.Error(), `session "`+info.ID+`" not found`) {
		t.Fatalf("other owner: %v", err)
	}
	if n := len(e.m.List(context.Background(), 1001)); n != 0 {
		t.Fatalf("other owner lists %d sessions", n)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCancelledRequestInterruptsCell(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	e.exec(t, id, "kept = 1", 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	res, err := e.m.Exec(ctx, 0, id, ExecRequest{Code: "import time\ntime.sleep(30)"})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled cell ran %s", d)
	}
	wantStatus(t, res, StatusKilled)
	if res.State != StateKept {
		t.Errorf("state = %q, want kept (the cell stopped at its interrupt)", res.State)
	}
	if r := e.exec(t, id, "print(kept)", 0); r.Stdout != "1\n" {
		t.Fatalf("after cancel: %+v", r)
	}
}

func TestMaxSessionsIsALimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxSessions = 1 })
	e.create(t, CreateOptions{})
	_, err := e.m.Create(context.Background(), CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "sessions.max") {
		t.Fatalf("second create: %v, want a limit error naming sessions.max", err)
	}
}

// TestHostileOneOwnerTakesEveryPlace: one owner creating sessions until
// sessions.max is reached used to refuse every other caller's creates.
// sessions.max_per_owner stops it at its share, naming the key; one-shot
// cells count too; another owner is still served; a closed session gives
// its place back.
func TestHostileOneOwnerTakesEveryPlace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxSessions = 4; c.MaxPerOwner = 2 })
	ctx := context.Background()
	first := e.create(t, CreateOptions{Owner: 1000})
	e.create(t, CreateOptions{Owner: 1000})
	_, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "sessions.max_per_owner") {
		t.Fatalf("owner 1000's third create: %v, want ErrLimit naming sessions.max_per_owner", err)
	}
	if _, err := e.m.RunOnce(ctx, 1000, "", ExecRequest{Code: "print(1)"}); !errors.Is(err, ErrLimit) {
		t.Fatalf("owner 1000's one-shot cell at its share: %v, want ErrLimit", err)
	}
	other := e.create(t, CreateOptions{Owner: 1001})
	if r := e.execAs(t, 1001, other, "print(6*7)"); r.Stdout != "42\n" {
		t.Fatalf("owner 1001's cell beside owner 1000's full share: %+v", r)
	}
	if err := e.m.Close(ctx, 1000, first); err != nil {
		t.Fatal(err)
	}
	e.create(t, CreateOptions{Owner: 1000})
}

// A daemon that died without cleaning up leaves sandboxes, mounts, cgroups
// and directories; the next start reconciles them away.
func TestStartReconcilesLeftovers(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	build := func() *Manager {
		h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: testCgroupRoot})
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(Config{StateDir: filepath.Join(state, "sessions")}, h)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	crashed := build()
	info, err := crashed.Create(context.Background(), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Exec(context.Background(), 0, info.ID, ExecRequest{Code: "import os\nos.fork() or __import__('time').sleep(1)"}); err != nil {
		t.Fatal(err)
	}
	// No Shutdown: the first manager "crashed". The next one starts over.
	crash(crashed)
	next := build()
	if err := next.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, state)
}

// A one-shot cell still running when the shutdown grace runs out is killed
// and cleaned up, not orphaned.
func TestShutdownKillsRunningOneShot(t *testing.T) {
	e := newEnv(t, nil)
	done := make(chan *Result, 1)
	go func() {
		res, _ := e.m.RunOnce(context.Background(), 0, "", ExecRequest{Code: "import time\ntime.sleep(60)"})
		done <- res
	}()
	for i := 0; i < 200 && len(e.m.oneshotIDs()) == 0; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.m.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case res := <-done:
		if res != nil && res.Status == StatusOK {
			t.Fatalf("one-shot finished ok after a 60 s sleep: %+v", res)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("one-shot cell still running after shutdown")
	}
	assertNothingLeft(t, e.state)
}

func (m *Manager) oneshotIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id := range m.oneshots {
		ids = append(ids, id)
	}
	return ids
}

// testLogger shows the manager's warnings in the test output when
// JAILCELL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("JAILCELL_TEST_LOG") == "" {
		return nil
	}
	level := slog.LevelInfo
	if os.Getenv("JAILCELL_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// TestPeakMemoryIsPerCell: a cell's peak memory is its own, not the peak
// of an earlier cell, where the host can reset the cgroup's high-water mark
// (v1; v2 from Linux 6.12, per open file of memory.peak), and the result
// says "cell"; where it cannot (v2 before 6.12) the figure is the
// sandbox's lifetime peak and the result says "session". Which path runs
// is decided by a probe of the host, independent of the code under test,
// and printed.
func TestPeakMemoryIsPerCell(t *testing.T) {
	resettable, why := peakResettable(t)
	t.Logf("this host: %s", why)
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	big := e.exec(t, id, "b = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\ndel b", 0)
	small := e.exec(t, id, "x = 1", 0)
	if big.Usage.PeakMemoryBytes < 150<<20 {
		t.Fatalf("a cell that touched 150 MiB peaked at %d bytes", big.Usage.PeakMemoryBytes)
	}
	if !resettable {
		for _, r := range []*Result{big, small} {
			if r.Usage.PeakMemoryScope != PeakScopeSession {
				t.Errorf("peak_memory_scope %q on a host that cannot reset the peak, want %q", r.Usage.PeakMemoryScope, PeakScopeSession)
			}
		}
		if small.Usage.PeakMemoryBytes < big.Usage.PeakMemoryBytes {
			t.Errorf("lifetime peak went down: %d after %d", small.Usage.PeakMemoryBytes, big.Usage.PeakMemoryBytes)
		}
		return
	}
	for _, r := range []*Result{big, small} {
		if r.Usage.PeakMemoryScope != PeakScopeCell {
			t.Errorf("peak_memory_scope %q on a host that resets the peak, want %q", r.Usage.PeakMemoryScope, PeakScopeCell)
		}
	}
	if small.Usage.PeakMemoryBytes >= big.Usage.PeakMemoryBytes-100<<20 {
		t.Fatalf("the next cell's peak %d is the earlier cell's %d, not its own", small.Usage.PeakMemoryBytes, big.Usage.PeakMemoryBytes)
	}
}

// peakResettable probes whether this host can reset a cgroup's memory
// high-water mark: always on v1 (memory.max_usage_in_bytes), on v2 from
// Linux 6.12 (a writable memory.peak).
func peakResettable(t *testing.T) (bool, string) {
	t.Helper()
	if !cgroups.IsCgroup2UnifiedMode() {
		return true, "cgroup v1 memory controller: memory.max_usage_in_bytes can be reset"
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(uts.Release[:])
	var maj, min int
	if _, err := fmt.Sscanf(rel, "%d.%d", &maj, &min); err != nil {
		t.Fatalf("kernel release %q: %v", rel, err)
	}
	if maj > 6 || maj == 6 && min >= 12 {
		return true, "cgroup v2 on Linux " + rel + ": memory.peak can be reset per open file (>= 6.12)"
	}
	return false, "cgroup v2 on Linux " + rel + ": memory.peak cannot be reset before 6.12"
}
