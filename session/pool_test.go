package session

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

var testPreload = []string{"numpy", "pandas", "matplotlib.pyplot"}

// waitPool waits until the default pool holds n ready members.
func waitPool(t *testing.T, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for m.PoolReady()["default"] != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d ready members after 2 min, want %d", m.PoolReady()["default"], n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// poolMembers returns the ids and sandbox ids of the default pool's members.
func poolMembers(m *Manager) (ids, sandboxes []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.warm.pool.ready["default"] {
		ids = append(ids, s.id)
		s.mu.Lock()
		sandboxes = append(sandboxes, s.k.sb.ID)
		s.mu.Unlock()
	}
	return ids, sandboxes
}

func sandboxOf(t *testing.T, m *Manager, id string) string {
	t.Helper()
	s, err := m.get(0, id)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.k.sb.ID
}

func inList(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func TestPoolCreateIsFreshAndPreloaded(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Preload = testPreload
		c.Pool = map[string]int{"default": 2}
	})
	waitPool(t, e.m, 2)
	ids, _ := poolMembers(e.m)
	info, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000, TTL: time.Minute})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !inList(ids, info.ID) {
		t.Fatalf("session %s did not come from the pool %v", info.ID, ids)
	}
	if info.State != "ready" || info.Policy != "default" || info.Cells != 0 {
		t.Fatalf("info = %+v", info)
	}
	// The owner and TTL are the create's, not the pool's.
	if _, err := e.m.Exec(context.Background(), 1001, info.ID, ExecRequest{Code: "1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's exec: %v, want ErrNotFound", err)
	}
	if got := info.ExpiresAt.Sub(info.CreatedAt); got > time.Minute+time.Second || got < time.Minute-time.Second {
		t.Fatalf("expires %s after creation, want the requested 1m", got)
	}
	res, err := e.m.Exec(context.Background(), 1000, info.ID, ExecRequest{Code: `import sys
print(sorted(m for m in ("numpy", "pandas", "matplotlib.pyplot") if m in sys.modules), "x" in globals())
import os; print(sorted(os.listdir(".")))`})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusOK)
	want := "['matplotlib.pyplot', 'numpy', 'pandas'] False\n[]\n"
	if res.Stdout != want {
		t.Fatalf("stdout = %q, want %q (preloaded, no variables, empty workspace)", res.Stdout, want)
	}
	if res.Usage.WallMS > 0 && testing.Verbose() {
		t.Logf("first cell after a pooled create: %d ms", res.Usage.WallMS)
	}
	// The first pandas cell needs no import time.
	res, err = e.m.Exec(context.Background(), 1000, info.ID, ExecRequest{Code: "import pandas as pd\npd.DataFrame({'a': [1, 2]}).a.sum()"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Value["text/plain"] != "3" {
		t.Fatalf("value = %v", res.Value)
	}
	// A create the pool cannot serve (an override) still works, cold.
	mem := int64(200 << 20)
	cold, err := e.m.Create(context.Background(), CreateOptions{Override: &policy.Override{MemoryBytes: &mem}})
	if err != nil {
		t.Fatalf("cold Create: %v", err)
	}
	if inList(ids, cold.ID) {
		t.Fatalf("a create with an override took pool member %s", cold.ID)
	}
	waitPool(t, e.m, 2)
}

func TestPoolMemberServesOneSession(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Preload = []string{"json"}
		c.Pool = map[string]int{"default": 1}
	})
	seen := map[string]bool{}
	seenSB := map[string]bool{}
	for i := 0; i < 3; i++ {
		waitPool(t, e.m, 1)
		ids, sbs := poolMembers(e.m)
		for j, id := range ids {
			if seen[id] || seenSB[sbs[j]] {
				t.Fatalf("pool offers %s (sandbox %s), which already served a session", id, sbs[j])
			}
		}
		id := e.create(t, CreateOptions{})
		sb := sandboxOf(t, e.m, id)
		if seen[id] || seenSB[sb] {
			t.Fatalf("create %d got session %s / sandbox %s again", i, id, sb)
		}
		seen[id], seenSB[sb] = true, true
		// No trace of an earlier session's variables or files.
		res := e.exec(t, id, "import os\nprint('x' in globals(), os.listdir('.'))", 0)
		if res.Stdout != "False []\n" {
			t.Fatalf("create %d: stdout = %q, want a fresh kernel and workspace", i, res.Stdout)
		}
		wantStatus(t, e.exec(t, id, "x = 'mine'\nopen('mine.txt', 'w').write('x')", 0), StatusOK)
		if err := e.m.Close(context.Background(), 0, id); err != nil {
			t.Fatal(err)
		}
	}
	// Members are never in the live set, and closed sessions' sandboxes
	// are gone from the host.
	if n := len(e.m.List(context.Background(), 0)); n != 0 {
		t.Fatalf("%d sessions listed, want 0", n)
	}
}

// TestPoolCountsTowardLimit: members hold places under sessions.max, but
// give them up to creates the pool cannot serve; the pool never refills
// past the limit.
func TestPoolCountsTowardLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxSessions = 3
		c.Pool = map[string]int{"default": 2}
	})
	waitPool(t, e.m, 2)
	mem := int64(200 << 20)
	cold := CreateOptions{Override: &policy.Override{MemoryBytes: &mem}}
	if _, err := e.m.Create(context.Background(), cold); err != nil {
		t.Fatalf("cold create into the one free place: %v", err)
	}
	for i := range 2 {
		if _, err := e.m.Create(context.Background(), cold); err != nil {
			t.Fatalf("cold create %d, into a place a pool member gives up: %v", i+2, err)
		}
	}
	if _, err := e.m.Create(context.Background(), cold); !errors.Is(err, ErrLimit) {
		t.Fatalf("cold create past 3 sessions of 3: %v, want ErrLimit", err)
	}
	if _, err := e.m.Create(context.Background(), CreateOptions{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("create with 3 sessions of 3: %v, want ErrLimit", err)
	}
	// The pool cannot refill past the limit.
	time.Sleep(2 * poolRetry)
	e.m.mu.Lock()
	n, r := len(e.m.sessions), e.m.reserved
	e.m.mu.Unlock()
	if n+r > 3 {
		t.Fatalf("%d sessions + %d reserved, over sessions.max 3", n, r)
	}
	// A freed place is filled again by the pool.
	ss := e.m.List(context.Background(), 0)
	if err := e.m.Close(context.Background(), 0, ss[0].ID); err != nil {
		t.Fatal(err)
	}
	waitPool(t, e.m, 1)
}

func TestPoolShutdownWhileFilling(t *testing.T) {
	// newEnv's cleanup checks that Shutdown leaves nothing behind: no
	// mount, cgroup, process or directory, whether the members are built,
	// half built or handed out.
	e := newEnv(t, func(c *Config) {
		c.Preload = testPreload
		c.Pool = map[string]int{"default": 3}
	})
	time.Sleep(300 * time.Millisecond)
	if err := e.m.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := e.m.Create(context.Background(), CreateOptions{}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("create after shutdown: %v", err)
	}
	e.m.mu.Lock()
	r := e.m.reserved
	e.m.mu.Unlock()
	if r != 0 {
		t.Fatalf("%d places still reserved after shutdown", r)
	}
}

func TestPoolConfig(t *testing.T) {
	for _, tc := range []struct {
		pool map[string]int
		want string
	}{
		{map[string]int{"nope": 1}, `no such policy`},
		{map[string]int{"default": 99}, `want 0..64`},
		{map[string]int{"default": -1}, `want 0..64`},
	} {
		_, err := New(Config{StateDir: t.TempDir(), Pool: tc.pool, MaxSessions: 64}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pool %v: %v, want %q", tc.pool, err, tc.want)
		}
	}
}

// benchSession starts a manager with one session for a benchmark.
func benchSession(b *testing.B) (*Manager, string) {
	b.Helper()
	testenv.RequiresRoot(b)
	r := testenv.Rootfs(b)
	state := testenv.StateDir(b)
	h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: testCgroupRoot})
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(Config{StateDir: filepath.Join(state, "sessions")}, h)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	info, err := m.Create(context.Background(), CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return m, info.ID
}

// BenchmarkExecTrivial measures the host side of a trivial cell in a live
// session, without a transport: go test -tags seccomp -run NONE -bench
// ExecTrivial ./session/. It reports a time and never asserts one.
func BenchmarkExecTrivial(b *testing.B) {
	m, id := benchSession(b)
	if _, err := m.Exec(context.Background(), 0, id, ExecRequest{Code: "x = 0"}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := m.Exec(context.Background(), 0, id, ExecRequest{Code: "x += 1"})
		if err != nil || res.Status != StatusOK {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
}

// BenchmarkCellOverhead times the host-side steps every cell pays besides
// the kernel round trip, on a live session with an empty workspace.
func BenchmarkCellOverhead(b *testing.B) {
	m, id := benchSession(b)
	s, _ := m.get(0, id)
	k := s.k
	b.Run("usage", func(b *testing.B) {
		for b.Loop() {
			k.sb.Usage()
		}
	})
	b.Run("reset-peak", func(b *testing.B) {
		for b.Loop() {
			k.sb.ResetPeak()
		}
	})
	b.Run("disk-full", func(b *testing.B) {
		for b.Loop() {
			diskFull(s.disk.UpperDir())
		}
	})
	b.Run("scan-empty", func(b *testing.B) {
		for b.Loop() {
			m.ws.rescan(s)
		}
	})
	if _, err := m.Exec(context.Background(), 0, id, ExecRequest{Code: "import os\nfor i in range(50): open(f'f{i}.txt', 'w').write('x')"}); err != nil {
		b.Fatal(err)
	}
	b.Run("scan-50-files", func(b *testing.B) {
		for b.Loop() {
			m.ws.rescan(s)
		}
	})
	b.Run("round-trip", func(b *testing.B) {
		for b.Loop() {
			o := runCell(context.Background(), k, "b", "x = 1", nil, time.Minute, time.Second, 1<<16, nil, nil, nil)
			if o.err != nil {
				b.Fatal(o.err)
			}
		}
	})
}

// TestAlmostReady: a create waits for the pool's member in flight only when
// it is past half its expected build time and not overdue.
func TestAlmostReady(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	for _, c := range []struct {
		took, elapsed, want time.Duration
	}{
		{0, 10 * ms, 0},               // nothing measured: start your own
		{200 * ms, 10 * ms, 0},        // just started: own start is as quick
		{200 * ms, 99 * ms, 0},        // not yet half way
		{200 * ms, 150 * ms, 50 * ms}, // past half: wait the rest
		{200 * ms, 200 * ms, 0},       // due now: overdue next
		{200 * ms, 900 * ms, 0},       // overdue: something is slow, start your own
	} {
		if got := almostReady(t0, c.took, t0.Add(c.elapsed)); got != c.want {
			t.Errorf("took %v, elapsed %v: wait %v, want %v", c.took, c.elapsed, got, c.want)
		}
	}
}

// TestAutoPoolSize: the pool a fresh install gets is sized from the machine
// and bounded by sessions.max.
func TestAutoPoolSize(t *testing.T) {
	n := AutoPoolSize(64)
	if n < 1 || n > 8 || n > 2*runtime.NumCPU() {
		t.Errorf("AutoPoolSize(64) = %d on %d CPUs, want 1..min(8, 2 per CPU)", n, runtime.NumCPU())
	}
	if got := AutoPoolSize(4); got != 1 {
		t.Errorf("AutoPoolSize(4) = %d, want 1 (a quarter of sessions.max)", got)
	}
	if got := AutoPoolSize(1); got != 1 {
		t.Errorf("AutoPoolSize(1) = %d, want 1", got)
	}
}

// TestPoolMemberYieldsItsPlace: with every place under sessions.max held by
// a waiting pool member, a create the pool cannot serve (an override) still
// gets its place: the member gives it up.
func TestPoolMemberYieldsItsPlace(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Preload = []string{"json"}
		c.MaxSessions = 1
		c.Pool = map[string]int{"default": 1}
	})
	waitPool(t, e.m, 1)
	mem := int64(200 << 20)
	info, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000, Override: &policy.Override{MemoryBytes: &mem}})
	if err != nil {
		t.Fatalf("create with an override while a pool member holds the only place: %v", err)
	}
	if info.Pooled {
		t.Fatal("an override was served from the pool")
	}
	if _, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000}); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second create past sessions.max = 1: %v, want a limit error", err)
	}
}

// TestRefillWait: a refill waits for creates to settle, for a cold create's
// start to end, and never longer than poolMaxDefer in all.
func TestRefillWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	never := time.Time{}
	for _, c := range []struct {
		name          string
		sinceCreate   time.Duration
		creating      bool
		deferredSince time.Time
		want          time.Duration
	}{
		{"quiet", time.Hour, false, never, 0},
		{"a create just handed over", 0, false, never, poolSettle},
		{"settling", poolSettle - 40*ms, false, never, 40 * ms},
		{"settled", poolSettle, false, never, 0},
		{"a cold create starting, creates long quiet", time.Hour, true, never, poolSettle},
		{"a cold create starting, just after a create", 10 * ms, true, never, poolSettle},
		{"held back to the limit", 0, true, t0.Add(-poolMaxDefer), 0},
		{"near the limit", 0, false, t0.Add(-poolMaxDefer + 30*ms), 30 * ms},
	} {
		if got := refillWait(t0, t0.Add(-c.sinceCreate), c.creating, c.deferredSince, false); got != c.want {
			t.Errorf("%s: wait %v, want %v", c.name, got, c.want)
		}
	}
}

// TestGrowthWaitsLonger: a member beyond the pool's size waits for
// growSettle of quiet and is never forced by poolMaxDefer.
func TestGrowthWaitsLonger(t *testing.T) {
	t0 := time.Unix(1000, 0)
	if got := refillWait(t0, t0.Add(-poolSettle), false, time.Time{}, true); got != growSettle-poolSettle {
		t.Errorf("growth %v after a create: wait %v, want %v", poolSettle, got, growSettle-poolSettle)
	}
	if got := refillWait(t0, t0, false, t0.Add(-time.Hour), true); got != growSettle {
		t.Errorf("growth held back an hour, a create just now: wait %v, want %v", got, growSettle)
	}
	if got := refillWait(t0, t0.Add(-growSettle), false, time.Time{}, true); got != 0 {
		t.Errorf("growth after %v of quiet: wait %v, want 0", growSettle, got)
	}
}

// TestPoolRefillYieldsToCreates: after a member is handed over, the pool
// starts no build while creates have not settled (here a long settle, so
// the check does not race the machine's speed), and refills after it.
func TestPoolRefillYieldsToCreates(t *testing.T) {
	settle, maxDefer := poolSettle, poolMaxDefer
	poolSettle, poolMaxDefer = 3*time.Second, time.Minute
	t.Cleanup(func() { poolSettle, poolMaxDefer = settle, maxDefer }) // after the manager's own cleanup
	e := newEnv(t, func(c *Config) {
		c.Preload = []string{"json"}
		c.Pool = map[string]int{"default": 1}
	})
	waitPool(t, e.m, 1)
	info, err := e.m.Create(context.Background(), CreateOptions{})
	if err != nil || !info.Pooled {
		t.Fatalf("create: %+v %v, want a pooled session", info, err)
	}
	handed := time.Now()
	time.Sleep(poolSettle / 2)
	e.m.mu.Lock()
	building, ready := e.m.warm.pool.filling["default"], len(e.m.warm.pool.ready["default"])
	e.m.mu.Unlock()
	if time.Since(handed) < poolSettle && (building > 0 || ready > 0) {
		t.Fatalf("%v after a hand-over (settle %v): %d building, %d ready; the refill did not wait", time.Since(handed), poolSettle, building, ready)
	}
	waitPool(t, e.m, 1)
}

// TestPoolTarget: a pool grows to the most creates seen in one window,
// within its size and its growth bound, and falls back to its size once
// that peak is older than demandHold.
func TestPoolTarget(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	d := &poolDemand{}
	if got := poolTarget(4, 24, nil, t0); got != 4 {
		t.Errorf("no demand: %d, want the size 4", got)
	}
	for i := range 10 {
		d.note(t0.Add(time.Duration(i)*time.Second), 24)
	}
	if got := poolTarget(4, 24, d, t0.Add(10*time.Second)); got != 10 {
		t.Errorf("10 creates in a window: %d, want 10", got)
	}
	if got := poolTarget(4, 6, d, t0.Add(10*time.Second)); got != 6 {
		t.Errorf("10 creates, growth bound 6: %d, want 6", got)
	}
	if got := poolTarget(4, 4, d, t0.Add(10*time.Second)); got != 4 {
		t.Errorf("a fixed pool (growth = size): %d, want 4", got)
	}
	// Spread out, creates do not add up: one every two windows.
	sparse := &poolDemand{}
	for i := range 10 {
		sparse.note(t0.Add(time.Duration(i)*2*demandWindow), 24)
	}
	if got := poolTarget(4, 24, sparse, t0.Add(20*demandWindow)); got != 4 {
		t.Errorf("one create a window: %d, want the size 4", got)
	}
	// The peak is held, then forgotten.
	later := t0.Add(10*time.Second + demandHold/2)
	if got := poolTarget(4, 24, d, later); got != 10 {
		t.Errorf("within demandHold of the peak: %d, want 10", got)
	}
	if got := poolTarget(4, 24, d, t0.Add(10*time.Second+demandHold)); got != 4 {
		t.Errorf("demandHold after the peak: %d, want the size 4", got)
	}
	// A create after the hold starts a new peak from what is in the window.
	d.note(t0.Add(10*time.Second+demandHold), 24)
	if d.peak != 1 {
		t.Errorf("a create after the hold: peak %d, want 1", d.peak)
	}
	// Only as many times as the pool may grow to are kept.
	if len(d.recent) > 24 {
		t.Errorf("%d create times kept, want at most 24", len(d.recent))
	}
}

// TestAutoPoolGrow: an auto pool may grow past its size, never below it,
// within a quarter of sessions.max.
func TestAutoPoolGrow(t *testing.T) {
	for _, maxS := range []int{1, 4, 64, 1024} {
		for _, zyg := range []bool{true, false} {
			g := AutoPoolGrow(maxS, zyg)
			if g < AutoPoolSize(maxS) || g > max(AutoPoolSize(maxS), maxS/4) || g > 24 {
				t.Errorf("AutoPoolGrow(%d, zygote %v) = %d, size %d", maxS, zyg, g, AutoPoolSize(maxS))
			}
		}
	}
}

// TestPoolGrowsWithDemandAndShrinksAfter: creates beyond the pool's size
// grow it (the next burst is served from it), and once the demand is
// older than demandHold the members beyond its size are retired.
func TestPoolGrowsWithDemandAndShrinksAfter(t *testing.T) {
	settle, hold := poolSettle, demandHold
	poolSettle, demandHold = 10*time.Millisecond, 12*time.Second
	t.Cleanup(func() { poolSettle, demandHold = settle, hold })
	e := newEnv(t, func(c *Config) {
		c.Preload = []string{"json"}
		c.Pool = map[string]int{"default": 1}
		c.PoolGrow = map[string]int{"default": 3}
	})
	waitPool(t, e.m, 1)
	for range 3 {
		info, err := e.m.Create(context.Background(), CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.m.Close(context.Background(), 0, info.ID)
	}
	waitPool(t, e.m, 3)
	pooled := 0
	for range 3 {
		info, err := e.m.Create(context.Background(), CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.m.Close(context.Background(), 0, info.ID)
		if info.Pooled {
			pooled++
		}
	}
	if pooled != 3 {
		t.Errorf("the second round of 3 creates: %d served from the grown pool, want 3", pooled)
	}
	// Grown again after the second round, then the demand ages out
	// (demandHold after its peak) and the pool is back to its size.
	waitPool(t, e.m, 3)
	waitPool(t, e.m, 1)
}
