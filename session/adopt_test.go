package session

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// restartable builds managers over one state dir, as successive daemons.
type restartable struct {
	t     *testing.T
	state string
	root  string
	hosts []*isolate.Host
	// hostMod, if set, configures each daemon's host before its manager
	// adopts anything (an egress upstream).
	hostMod func(*isolate.Host)
	// isoMod, if set, changes each host's configuration: a second node on
	// this machine needs its own cgroup root and uid range.
	isoMod func(*isolate.Config)
}

func newRestartable(t *testing.T) *restartable {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	rs := &restartable{t: t, state: testenv.StateDir(t), root: r.Root}
	t.Cleanup(rs.sweep)
	return rs
}

// sweep is the last daemon on r's state: whatever a test left to "the next
// daemon" (sessions kept at shutdown, a crash, a failure halfway) it adopts
// and ends, then checks the host holds nothing of it. Without it each such
// test left a sandbox's disk and root mounted under its temporary dir (the
// dir's removal cannot take a mount) and its kernel running.
func (r *restartable) sweep() {
	t := r.t
	h, err := isolate.NewHost(r.isoConfig())
	if err != nil {
		t.Errorf("sweep: NewHost: %v", err)
		return
	}
	m, err := New(Config{StateDir: filepath.Join(r.state, "sessions"), StoreDir: filepath.Join(r.state, "store")}, h)
	if err != nil {
		t.Errorf("sweep: New: %v", err)
		return
	}
	for _, s := range m.List(context.Background(), 0) {
		if err := m.Close(context.Background(), 0, s.ID); err != nil {
			t.Errorf("sweep: close session %s: %v", s.ID, err)
		}
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Errorf("sweep: Shutdown: %v", err)
	}
	assertNothingLeft(t, r.state)
	for _, h := range append(r.hosts, h) {
		if err := h.Close(); err != nil {
			t.Errorf("sweep: host Close: %v", err)
		}
	}
}

func (r *restartable) isoConfig() isolate.Config {
	c := isolate.Config{StateDir: filepath.Join(r.state, "isolate"), Rootfs: r.root, CgroupRoot: testCgroupRoot}
	if r.isoMod != nil {
		r.isoMod(&c)
	}
	return c
}

func (r *restartable) start(keep bool) *Manager {
	r.t.Helper()
	return r.startWith(func(c *Config) { c.KeepOnShutdown = keep })
}

// startWith starts a daemon on r's state with mod applied to its config.
func (r *restartable) startWith(mod func(*Config)) *Manager {
	r.t.Helper()
	h, err := isolate.NewHost(r.isoConfig())
	if err != nil {
		r.t.Fatal(err)
	}
	r.hosts = append(r.hosts, h)
	if r.hostMod != nil {
		r.hostMod(h)
	}
	cfg := Config{StateDir: filepath.Join(r.state, "sessions"), StoreDir: filepath.Join(r.state, "store")}
	mod(&cfg)
	m, err := New(cfg, h)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// TestSessionSurvivesDaemonRestart: a drained daemon (KeepOnShutdown) and
// a crashed one both leave their sessions to the next daemon, variables,
// files and all; afterwards the host holds exactly the live sessions.
func TestSessionSurvivesDaemonRestart(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()

	m1 := r.start(true)
	info, err := m1.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	res, err := m1.Exec(ctx, 1000, id, ExecRequest{Code: "import numpy as np\na = np.arange(5)\nf = open('log.txt', 'w')\nf.write('one ')"})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	// Clean drain, sessions kept.
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	m2 := r.start(true)
	res, err = m2.Exec(ctx, 1000, id, ExecRequest{Code: "f.write('two'); f.flush()\nprint(a.sum(), open('log.txt').read())"})
	if err != nil {
		t.Fatalf("exec after restart: %v", err)
	}
	if res.Status != StatusOK || res.Stdout != "10 one two\n" {
		t.Fatalf("after a drain the session lost state: %+v", res)
	}
	if _, err := m2.Exec(ctx, 1001, id, ExecRequest{Code: "1"}); err == nil {
		t.Fatal("owner not kept across the restart")
	}

	// A crash: the manager simply stops existing (no Shutdown), like kill -9.
	crash(m2)
	m2.mu.Lock()
	for _, s := range m2.sessions {
		s.k.conn.Close()
		s.k.listener.Close()
	}
	m2.mu.Unlock()

	m3 := r.start(false)
	res, err = m3.Exec(ctx, 1000, id, ExecRequest{Code: "print(a.sum() + 1)"})
	if err != nil || res.Stdout != "11\n" {
		t.Fatalf("after a crash: %v %+v", err, res)
	}
	if got := len(m3.List(context.Background(), 0)); got != 1 {
		t.Fatalf("%d sessions after two restarts, want 1", got)
	}
	if err := m3.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, r.state)
	for _, h := range r.hosts {
		h.Close()
	}
}

// A session whose kernel died while no daemon ran is cleaned up and
// reported as lost, its persisted files kept.
func TestUnadoptableSessionIsReportedLost(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1 := r.start(true)
	info, err := m1.Create(ctx, CreateOptions{Persist: "keepme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Exec(ctx, 0, info.ID, ExecRequest{Code: "open('saved.txt','w').write('x')"}); err != nil {
		t.Fatal(err)
	}
	s, _ := m1.get(0, info.ID)
	pid := s.k.sb.Pid()
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The kernel dies between daemons. Dead means exited (gone, or a
	// zombie nobody reaped): a process with SIGKILL pending still looks
	// running, and on a loaded host the next daemon would adopt it.
	p, _ := os.FindProcess(pid)
	p.Kill()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
		if _, after, ok := strings.Cut(string(b), ") "); err != nil || ok && strings.HasPrefix(after, "Z") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox init %d still alive 20 s after SIGKILL", pid)
		}
	}

	m2 := r.start(false)
	_, err = m2.Exec(ctx, 0, info.ID, ExecRequest{Code: "1"})
	if err == nil || !strings.Contains(err.Error(), "lost when jailcell restarted") || !errors.Is(err, ErrLost) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("exec on a lost session: %v, want ErrLost (an ErrNotFound) saying why", err)
	}
	if got := lostCount(t, m2, LostRestart); got != 1 {
		t.Errorf("jailcell_sessions_lost_total{reason=restart} = %v, want 1", got)
	}
	closed, err := m2.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Close(ctx, 0, closed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Exec(ctx, 0, closed.ID, ExecRequest{Code: "1"}); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrLost) {
		t.Fatalf("exec on a closed session: %v, want ErrNotFound, not ErrLost", err)
	}
	if b, err := os.ReadFile(filepath.Join(r.state, "store", "uid=0", "keepme", "saved.txt")); err != nil || string(b) != "x" {
		t.Fatalf("persisted file not kept: %q %v", b, err)
	}
	if err := m2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, r.state)
	for _, h := range r.hosts {
		h.Close()
	}
}

func itoa(n int) string {
	b := []byte{}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// TestSessionEndedAtShutdownAnswersLost: a session a shutdown did not keep
// (KeepOnShutdown off) answers ErrLost saying when and why, not a bare
// not_found, after the restart and after the one after it (the list is in
// the state dir), until its id would have expired; each loss is counted
// by reason.
func TestSessionEndedAtShutdownAnswersLost(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1 := r.startWith(func(c *Config) { c.IdleTTL = time.Hour })
	info, err := m1.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lostCount(t, m1, LostShutdown); got != 1 {
		t.Errorf("jailcell_sessions_lost_total{reason=shutdown} = %v, want 1", got)
	}
	for i := 0; i < 2; i++ {
		m := r.start(false)
		_, err = m.Exec(ctx, 0, info.ID, ExecRequest{Code: "1"})
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "ended when jailcell shut down at") || !strings.Contains(err.Error(), "sessions.survive_restart is off") {
			t.Fatalf("restart %d: exec on a session the shutdown ended: %v, want ErrLost saying when and why", i+1, err)
		}
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Past the time its id would have lived, it is an unknown id again.
	path := filepath.Join(r.state, "sessions", lostName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []lostEntry
	if err := json.Unmarshal(b, &entries); err != nil || len(entries) != 1 || entries[0].ID != info.ID ||
		entries[0].Until.Before(time.Now().Add(50*time.Minute)) || entries[0].Until.After(time.Now().Add(time.Hour)) {
		t.Fatalf("lost list %s: %v %+v; want the session until about an hour after its last use", b, err, entries)
	}
	entries[0].Until = time.Now().Add(-time.Second)
	b, _ = json.Marshal(entries)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := r.start(false)
	if _, err = m.Exec(ctx, 0, info.ID, ExecRequest{Code: "1"}); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrLost) {
		t.Fatalf("exec on a lost session past its lifetime: %v, want a plain ErrNotFound", err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("an empty lost list left in place: %v", err)
	}
	assertNothingLeft(t, r.state)
	for _, h := range r.hosts {
		h.Close()
	}
}

// lostCount reads jailcell_sessions_lost_total{reason} of m.
func lostCount(t *testing.T, m *Manager, reason string) float64 {
	t.Helper()
	return counterOf(t, m.Metrics().Lost, "reason", reason)
}

// counterOf reads the counter of c whose label name is value (-1: none).
func counterOf(t *testing.T, c *prometheus.CounterVec, name, value string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestHibernateOnShutdownNeedsStateQuota: a hibernate_on_shutdown that the
// state quota cannot hold once is refused at start naming
// state_quota_bytes; as the service's default it falls back to keeping
// sessions running.
func TestHibernateOnShutdownNeedsStateQuota(t *testing.T) {
	r := newRestartable(t)
	h, err := isolate.NewHost(r.isoConfig())
	if err != nil {
		t.Fatal(err)
	}
	r.hosts = append(r.hosts, h)
	cfg := Config{StateDir: filepath.Join(r.state, "sessions"), HibernateOnShutdown: true, KeepOnShutdown: true, StateQuota: 64 << 20}
	if _, err := New(cfg, h); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "state_quota_bytes = 64 MiB") || !strings.Contains(err.Error(), "hibernate_on_shutdown") {
		t.Fatalf("hibernate_on_shutdown with a 64 MiB state quota: %v, want a refusal naming state_quota_bytes", err)
	}
	cfg.HibernateIfAble = true
	m, err := New(cfg, h)
	if err != nil {
		t.Fatalf("the default hibernate_on_shutdown with a 64 MiB state quota: %v, want a start that keeps sessions running", err)
	}
	if m.cfg.HibernateOnShutdown || !m.cfg.KeepOnShutdown {
		t.Errorf("fallback: hibernate %v keep %v, want false, true", m.cfg.HibernateOnShutdown, m.cfg.KeepOnShutdown)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, h := range r.hosts {
		h.Close()
	}
}

// crash makes m stop existing as a kill -9 would, in process: its
// background work stops (the janitor, and template builds, whose criu would
// otherwise go on dumping a kernel the next manager reconciles away, and
// outlive the test), and its sessions, their sandboxes and files stay as
// they are for the next manager.
func crash(m *Manager) {
	close(m.stop)
	<-m.janitorDone
	m.warm.closeTemplates()
}

// TestCellOutlivingADrainKeepsItsSession: a cell still running when a
// drain that keeps sessions hands its session on loses only its
// connection; its sandbox runs on and the next daemon adopts the session
// with its state (the cell's end killed the handed-on sandbox 5 s later).
func TestCellOutlivingADrainKeepsItsSession(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1 := r.start(true)
	info, err := m1.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m1.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x = 41"}); err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m1.Exec(ctx, 1000, info.ID, ExecRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(8)"})
	}()
	time.Sleep(500 * time.Millisecond)
	drain, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = m1.Shutdown(drain)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cell that outlived the drain did not return")
	}
	m2 := r.start(false)
	defer m2.Shutdown(ctx)
	res, err := m2.Exec(ctx, 1000, info.ID, ExecRequest{Code: "print(x + 1)"})
	if err != nil || strings.TrimSpace(res.Stdout) != "42" || res.State != StateKept {
		t.Fatalf("the session after a drain its cell outlived: %v %+v", err, res)
	}
}
