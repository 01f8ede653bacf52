package session

import (
	"context"
	"strings"
	"testing"
	"time"
)

// withZygotes is a config change: the preload and no templates, so
// creates fork from a zygote or import.
func withZygotes(c *Config) { c.Preload = testPreload; c.NoTemplate = true }

// waitZygote waits for the default policy's zygote to start and fails the
// test if it did not.
func waitZygote(t *testing.T, m *Manager) {
	t.Helper()
	e := m.warm.zygoteFor(m.cfg.Policies["default"])
	if e == nil {
		t.Fatal("no zygote for the default policy although the preload is set")
	}
	select {
	case <-e.ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("zygote not started in 2 min")
	}
	if !e.usable() {
		t.Fatalf("zygote not usable: %v", e.err)
	}
}

// TestZygoteSessionsKeepStateAndDoNotShareRandomness: a session forked
// from the zygote has the preload imported, keeps its variables between
// cells, and draws its own numbers from every generator seeded at import.
func TestZygoteSessionsKeepStateAndDoNotShareRandomness(t *testing.T) {
	e := newEnv(t, withZygotes)
	waitZygote(t, e.m)
	draw := `import random, sys, tempfile, numpy as np
print(random.random(), np.random.rand(), next(tempfile._get_candidate_names()), sorted(m for m in ("numpy", "pandas", "matplotlib.pyplot") if m in sys.modules), hash("jailcell"))`
	var outs [][]string
	var ids []string
	for range 2 {
		id := createStarted(t, e.m, StartZygote)
		ids = append(ids, id)
		outs = append(outs, strings.Fields(cellStdout(t, e.m, id, draw)))
	}
	a, b := outs[0], outs[1]
	if len(a) != 7 || len(b) != 7 {
		t.Fatalf("unexpected output %q / %q", a, b)
	}
	for i, what := range []string{"random.random()", "numpy.random.rand()", "tempfile names"} {
		if a[i] == b[i] {
			t.Errorf("%s is the same in two sessions from one zygote: %s", what, a[i])
		}
	}
	if got := strings.Join(a[3:6], " "); got != "['matplotlib.pyplot', 'numpy', 'pandas']" {
		t.Errorf("preloaded modules in a zygote session: %s", got)
	}
	if a[6] != b[6] {
		t.Errorf("str hash secret: SECURITY.md documents it as shared by the sessions of one zygote; update it")
	}
	cellStdout(t, e.m, ids[0], "x = 41\nopen('/work/f.txt', 'w').write('kept')")
	if out := cellStdout(t, e.m, ids[0], "x += 1\nprint(x, open('/work/f.txt').read())"); strings.TrimSpace(out) != "42 kept" {
		t.Errorf("state between cells of a zygote session: %q", out)
	}
	if out := cellStdout(t, e.m, ids[1], "print('x' in dir())"); strings.TrimSpace(out) != "False" {
		t.Errorf("a sibling sees another session's variable: %q", out)
	}
	_ = context.Background()
}

// TestZygoteSessionHibernatesAndForks: a session forked from a zygote is
// checkpointed and restored by criu like any other: hibernated with its
// numpy array, DataFrame and open file and woken; forked (a criu fork of
// it); and adopted by a restarted daemon.
func TestZygoteSessionHibernatesAndForks(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	requiresCriu(t)
	m := r.startWith(withZygotes)
	waitZygote(t, m)
	id := createStarted(t, m, StartZygote)
	cellStdout(t, m, id, hibernateState)
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	fi, err := m.Durability().Fork(ctx, 1000, id)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if out := cellStdout(t, m, fi.ID, "print(a.sum(), len(df), thing.tag)"); strings.TrimSpace(out) != "499999500000.0 1000 kept" {
		t.Errorf("criu fork of a zygote session: %q", out)
	}
	if out := cellStdout(t, m, id, hibernateCheck); strings.TrimSpace(out) != "499999500000.0 332833500 kept before after" {
		t.Errorf("zygote session after hibernation: %q", out)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestZygoteLimitsBite: a zygote session's own cgroup limits bite on what
// it writes: memory past the policy's is an oom (and the session lives
// on), a fork bomb stops at the pids limit. The preload is light (json):
// the cgroup v2 guest runs this under emulation.
func TestZygoteLimitsBite(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Preload = []string{"json"}; c.NoTemplate = true })
	waitZygote(t, e.m)
	id := createStarted(t, e.m, StartZygote)
	wantOOM(t, e, id)
	wantForkBombStopped(t, e, id)
}

// TestZygoteSessionSurvivesRestartAndZygoteDeath: a zygote session keeps
// its variables when its zygote dies (it is in no namespace of the
// zygote's), the next create gets a new zygote (or the next path while it
// starts, said in start), and a restarted daemon re-adopts the session
// with its state.
func TestZygoteSessionSurvivesRestartAndZygoteDeath(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	keep := func(c *Config) { withZygotes(c); c.KeepOnShutdown = true }
	m1 := r.startWith(keep)
	waitZygote(t, m1)
	id := createStarted(t, m1, StartZygote)
	cellStdout(t, m1, id, "import numpy as np\na = np.arange(5)")

	e := m1.warm.zygoteFor(m1.cfg.Policies["default"])
	if err := e.z.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.z.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("zygote not gone 10 s after SIGKILL")
	}
	if out := cellStdout(t, m1, id, "print(a.sum())"); strings.TrimSpace(out) != "10" {
		t.Fatalf("zygote session after its zygote died: %q", out)
	}
	info, err := m1.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatalf("create after the zygote died: %v", err)
	}
	if info.Start == "" {
		t.Fatal("create after the zygote died says no start path")
	}
	waitZygote(t, m1)
	createStarted(t, m1, StartZygote)

	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := r.startWith(keep)
	defer m2.Shutdown(ctx)
	if out := cellStdout(t, m2, id, "print(a.sum() + 1)"); strings.TrimSpace(out) != "11" {
		t.Fatalf("zygote session after a daemon restart: %q", out)
	}
}
