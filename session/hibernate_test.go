package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// criuProbe is the criu probe's verdict, once per test binary.
var criuProbe = sync.OnceValue(func() error { return isolate.ProbeCriu(isolate.DefaultCriu) })

func requiresCriu(t *testing.T) {
	t.Helper()
	if err := criuProbe(); err != nil {
		t.Skip("requires a working criu (make criu): " + err.Error())
	}
}

// sessionCgroups lists the memory cgroups of session id's sandboxes.
func sessionCgroups(id string) []string { return sessionCgroupsUnder(testCgroupRoot, id) }

// criuDaemon starts a daemon on r (mod may change its config) with one
// session of owner 1000 that ran code; it needs a working criu.
func criuDaemon(t *testing.T, r *restartable, mod func(*Config), code string) (*Manager, string) {
	t.Helper()
	requiresCriu(t)
	if mod == nil {
		mod = func(*Config) {}
	}
	m := r.startWith(mod)
	info, err := m.Create(context.Background(), CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Exec(context.Background(), 1000, info.ID, ExecRequest{Code: code})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	return m, info.ID
}

const hibernateState = `import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.arange(1_000_000, dtype=np.float64)
df = pd.DataFrame({"x": range(1000), "y": [i * i for i in range(1000)]})
class Thing:
    def __init__(self): self.tag = "kept"
thing = Thing()
f = open("notes.txt", "w")
f.write("before ")
f.flush()
`

const hibernateCheck = `f.write("after")
f.close()
print(a.sum(), int(df.y.sum()), thing.tag, open("notes.txt").read())
`

// TestHibernateSurvivesRestart: numpy arrays, a DataFrame, an open file and a
// module-level object survive hibernation and a daemon restart; the
// hibernated session holds no memory (its cgroup is gone).
func TestHibernateSurvivesRestart(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1, id := criuDaemon(t, r, nil, hibernateState)
	if len(sessionCgroups(id)) == 0 {
		t.Fatal("no cgroup for the live session")
	}
	if ls := m1.List(context.Background(), 1000); len(ls) != 1 || ls[0].MemoryBytes < 50<<20 {
		t.Fatalf("a live numpy+pandas session charged %+v", ls)
	}
	start := time.Now()
	hi, err := m1.Durability().Hibernate(context.Background(), 1000, id)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	dump := time.Since(start)
	image := dirBytes(filepath.Join(r.state, "sessions", "sessions", id, imagesName))
	if hi.State != "hibernated" {
		t.Errorf("state after Hibernate %q, want hibernated", hi.State)
	}
	if cg := sessionCgroups(id); len(cg) != 0 {
		t.Errorf("hibernated session still has cgroups (memory not released): %v", cg)
	}
	if ls := m1.List(context.Background(), 1000); len(ls) != 1 || ls[0].State != "hibernated" || ls[0].MemoryBytes != 0 {
		t.Errorf("a hibernated session listed as %+v, want state hibernated and no memory", ls)
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	m2 := r.start(false)
	defer m2.Shutdown(ctx)
	ls := m2.List(context.Background(), 1000)
	if len(ls) != 1 || ls[0].State != "hibernated" {
		t.Fatalf("sessions after restart: %+v", ls)
	}
	start = time.Now()
	res, err := m2.Exec(ctx, 1000, id, ExecRequest{Code: hibernateCheck})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("cell after restore: %v %+v", err, res)
	}
	wake := time.Since(start)
	if want := "499999500000.0 332833500 kept before after"; strings.TrimSpace(res.Stdout) != want || res.State != StateKept {
		t.Fatalf("after restore: %q state %q %s, want %q", res.Stdout, res.State, res.StateReason, want)
	}
	t.Logf("numpy+pandas+matplotlib session: checkpoint %v, restore+cell %v, image %.1f MiB", dump, wake, float64(image)/(1<<20))
}

// TestHibernateRestoreP50 measures restore time of a loaded session.
func TestHibernateRestoreP50(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, hibernateState)
	defer m.Shutdown(ctx)
	var dumps, restores []time.Duration
	var image int64
	const rounds = 5
	for i := 0; i < rounds; i++ {
		start := time.Now()
		if _, err := m.Durability().Hibernate(context.Background(), 1000, id); err != nil {
			t.Fatalf("Hibernate: %v", err)
		}
		dumps = append(dumps, time.Since(start))
		image = dirBytes(filepath.Join(r.state, "sessions", "sessions", id, imagesName))
		start = time.Now()
		ri, err := m.Durability().Restore(ctx, 1000, id)
		if err != nil || ri.State != "ready" {
			t.Fatalf("Restore: %v %+v", err, ri)
		}
		restores = append(restores, time.Since(start))
	}
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "print(thing.tag, len(df))"})
	if err != nil || strings.TrimSpace(res.Stdout) != "kept 1000" {
		t.Fatalf("after restores: %v %+v", err, res)
	}
	p50 := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	t.Logf("numpy+pandas+matplotlib session, %d round(s): checkpoint p50 %v, restore p50 %v (incl. kernel reconnect), image %.1f MiB",
		rounds, p50(dumps), p50(restores), float64(image)/(1<<20))
}

// TestHibernateCorruptImageIsLost: a restore that fails reports state
// "lost", keeps the workspace files and leaves no sandbox behind.
func TestHibernateCorruptImageIsLost(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, "x = 42\nopen('keep.txt', 'w').write('kept')")
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(context.Background(), 1000, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	images := filepath.Join(r.state, "sessions", "sessions", id, imagesName)
	ents, _ := os.ReadDir(images)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pages-") || strings.HasPrefix(e.Name(), "core-") {
			if err := os.WriteFile(filepath.Join(images, e.Name()), []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "print(open('keep.txt').read(), 'x' in globals())"})
	if err != nil {
		t.Fatalf("cell after failed restore: %v", err)
	}
	if res.State != StateLost || !strings.Contains(res.StateReason, "restor") {
		t.Errorf("state %q (%s), want lost", res.State, res.StateReason)
	}
	if got := strings.TrimSpace(res.Stdout); got != "kept False" {
		t.Errorf("fresh kernel saw %q, want the file and no variable", got)
	}
	if _, err := os.Stat(images); !os.IsNotExist(err) {
		t.Errorf("images left after the failed restore: %v", err)
	}
	if cg := sessionCgroups(id); len(cg) != 1 {
		t.Errorf("cgroups after failed restore and fresh start: %v, want one", cg)
	}
}

// reboot does to r's state what a host reboot does: every mount of a
// sandbox disk (tmpfs) is gone; the state directory on disk stays.
func (r *restartable) reboot() {
	r.t.Helper()
	mi, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		r.t.Fatal(err)
	}
	var mps []string
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], r.state+"/") {
			mps = append(mps, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mps)))
	for _, mp := range mps {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
			r.t.Fatalf("unmount %s: %v", mp, err)
		}
	}
	if len(mps) == 0 {
		r.t.Fatal("no disk mounted: the reboot proves nothing")
	}
}

// TestHibernateSurvivesReboot: a hibernated session whose disk (a tmpfs)
// is gone comes back on a new disk from its saved files, with its
// variables, its open file and everything in its workspace.
func TestHibernateSurvivesReboot(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1, id := criuDaemon(t, r, nil, hibernateState+"\nimport os; os.makedirs('d/e'); open('d/e/deep.txt', 'w').write('deep')\nos.symlink('d/e/deep.txt', 'link')")
	if _, err := m1.Durability().Hibernate(context.Background(), 1000, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	// A file uploaded while hibernated is in the saved copy too.
	if _, err := m1.Workspace().Upload(context.Background(), 1000, id, "uploaded.txt", []byte("while asleep"), nil); err != nil {
		t.Fatalf("Upload to hibernated: %v", err)
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r.reboot()

	m2 := r.start(false)
	defer m2.Shutdown(ctx)
	if ls := m2.List(context.Background(), 1000); len(ls) != 1 || ls[0].State != "hibernated" {
		t.Fatalf("sessions after reboot: %+v", ls)
	}
	res, err := m2.Exec(ctx, 1000, id, ExecRequest{Code: hibernateCheck + "print(open('link').read(), open('uploaded.txt').read())\n"})
	if err != nil || res.Status != StatusOK || res.State != StateKept {
		t.Fatalf("cell after reboot: %v %+v", err, res)
	}
	if want := "499999500000.0 332833500 kept before after\ndeep while asleep"; strings.TrimSpace(res.Stdout) != want {
		t.Fatalf("after reboot: %q, want %q", res.Stdout, want)
	}
}

// TestHibernateOnShutdown: with HibernateOnShutdown a daemon that stops
// hibernates its live sessions; the next one restores them on first use.
func TestHibernateOnShutdown(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	hibernating := func(c *Config) { c.HibernateOnShutdown = true }
	m1, id := criuDaemon(t, r, hibernating, "import numpy as np\nv = np.ones(10)")
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sessionCgroups(id)) != 0 {
		t.Fatal("the session still runs after a hibernating shutdown")
	}
	m2 := r.startWith(hibernating)
	defer m2.Shutdown(ctx)
	if ls := m2.List(context.Background(), 1000); len(ls) != 1 || ls[0].State != "hibernated" {
		t.Fatalf("sessions after restart: %+v", ls)
	}
	res, err := m2.Exec(ctx, 1000, id, ExecRequest{Code: "print(v.sum())"})
	if err != nil || strings.TrimSpace(res.Stdout) != "10.0" || res.State != StateKept {
		t.Fatalf("after restart: %v %+v", err, res)
	}
}

// TestForkDiverges: a fork starts with its parent's variables, imports,
// open file and workspace; afterwards neither sees the other's changes,
// and each runs under its own uid slot.
func TestForkDiverges(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, parent := criuDaemon(t, r, nil, hibernateState+"\nx = 1\nopen('shared.txt', 'w').write('original')")
	defer m.Shutdown(ctx)
	// A hibernated parent is woken first; its restored sandbox is then
	// frozen while its files are copied.
	if _, err := m.Durability().Hibernate(context.Background(), 1000, parent); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	fi, err := m.Durability().Fork(ctx, 1000, parent)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	child := fi.ID
	if child == parent || fi.ForkedFrom != parent || fi.State != "ready" {
		t.Fatalf("fork info %+v", fi)
	}
	if _, err := m.Durability().Fork(ctx, 1001, parent); err == nil {
		t.Fatal("another owner forked the session")
	}
	// The fork has everything, then changes it.
	res, err := m.Exec(ctx, 1000, child, ExecRequest{Code: "x = 2\nf.write('fork ')\nf.flush()\nopen('shared.txt', 'w').write('changed by fork')\nprint(a.sum(), len(df), thing.tag)"})
	if err != nil || res.Status != StatusOK || strings.TrimSpace(res.Stdout) != "499999500000.0 1000 kept" {
		t.Fatalf("fork cell: %v %+v", err, res)
	}
	// The parent has not seen it.
	res, err = m.Exec(ctx, 1000, parent, ExecRequest{Code: "f.write('parent'); f.flush()\nprint(x, open('shared.txt').read(), open('notes.txt').read())"})
	if err != nil || res.Status != StatusOK || strings.TrimSpace(res.Stdout) != "1 original before parent" {
		t.Fatalf("parent after fork: %v %+v", err, res)
	}
	res, err = m.Exec(ctx, 1000, child, ExecRequest{Code: "print(x, open('shared.txt').read(), open('notes.txt').read())"})
	if err != nil || res.Status != StatusOK || strings.TrimSpace(res.Stdout) != "2 changed by fork before fork" {
		t.Fatalf("fork after parent's cell: %v %+v", err, res)
	}
	ps, _ := m.get(0, parent)
	cs, _ := m.get(0, child)
	if ps.disk.HostID() == cs.disk.HostID() {
		t.Fatal("fork shares its parent's uid slot")
	}
	if got := testenv.HostUID(t, cs.k.sb.Pid()); got != cs.disk.HostID() {
		t.Errorf("fork runs as host uid %d, want its own slot's %d", got, cs.disk.HostID())
	}
	if len(m.List(context.Background(), 1000)) != 2 {
		t.Errorf("sessions: %+v", m.List(context.Background(), 1000))
	}
	// Closing the parent leaves the fork alone.
	if err := m.Close(context.Background(), 1000, parent); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Exec(ctx, 1000, child, ExecRequest{Code: "print(x)"}); err != nil || strings.TrimSpace(res.Stdout) != "2" {
		t.Fatalf("fork after its parent closed: %v %+v", err, res)
	}
}

// TestSnapshotRollback: a snapshot taken before a cell that breaks things
// brings back, in place and as often as asked, the variables, the open
// file and the workspace as they were.
func TestSnapshotRollback(t *testing.T) {
	r := newRestartable(t)
	requiresCriu(t)
	ctx := context.Background()
	m := r.start(false)
	defer m.Shutdown(ctx)
	info, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if _, err := m.Durability().Rollback(ctx, 1000, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollback without a snapshot: %v", err)
	}
	if res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "x = 1\nopen('a.txt', 'w').write('one')\nf = open('log.txt', 'w'); f.write('s'); f.flush()"}); err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	breaking := "import os\nx = 2\nos.remove('a.txt')\nopen('b.txt', 'w').write('new')\nf.close()"
	if res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: breaking, Snapshot: true}); err != nil || res.Status != StatusOK {
		t.Fatalf("cell with snapshot: %v %+v", err, res)
	}
	if ls := m.List(context.Background(), 1000); len(ls) != 1 || ls[0].SnapshotAt == nil {
		t.Fatalf("no snapshot_at after a snapshot: %+v", ls)
	}
	check := "import os\nf.write('+'); f.flush()\nprint(x, open('a.txt').read(), os.path.exists('b.txt'), open('log.txt').read())"
	for round := 0; round < 2; round++ {
		ri, err := m.Durability().Rollback(ctx, 1000, id)
		if err != nil || ri.State != "ready" {
			t.Fatalf("Rollback %d: %v %+v", round, err, ri)
		}
		res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: check})
		if err != nil || res.Status != StatusOK || res.State != StateKept {
			t.Fatalf("after rollback %d: %v %+v", round, err, res)
		}
		if got := strings.TrimSpace(res.Stdout); got != "1 one False s+" {
			t.Fatalf("after rollback %d: %q, want %q", round, got, "1 one False s+")
		}
		files, _ := m.Workspace().Files(context.Background(), 1000, id)
		for _, f := range files {
			if f.Path == "b.txt" {
				t.Fatalf("rollback %d left a file created after the snapshot", round)
			}
		}
		// Break it again for the next round.
		if res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: breaking}); err != nil || res.Status != StatusOK {
			t.Fatalf("breaking cell: %v %+v", err, res)
		}
	}
}

// TestForkWithBackgroundWriter: a kernel thread that keeps appending to an
// open file between cells does not break a fork or a snapshot: the kernel
// is frozen from before the dump until its files are copied, so the copy
// matches the image.
func TestForkWithBackgroundWriter(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, `import threading, time
f = open("bg.log", "a")
def writer():
    while True:
        f.write("x" * 100); f.flush(); time.sleep(0.002)
threading.Thread(target=writer, daemon=True).start()`)
	defer m.Shutdown(ctx)
	for i := 0; i < 3; i++ {
		fi, err := m.Durability().Fork(ctx, 1000, id)
		if err != nil {
			t.Fatalf("fork %d of a session with a background writer: %v", i, err)
		}
		res, err := m.Exec(ctx, 1000, fi.ID, ExecRequest{Code: "import os, time\nn = os.path.getsize('bg.log'); time.sleep(0.05)\nprint(os.path.getsize('bg.log') > n)"})
		if err != nil || strings.TrimSpace(res.Stdout) != "True" {
			t.Fatalf("fork %d: its writer does not go on: %v %+v", i, err, res)
		}
		if err := m.Close(context.Background(), 1000, fi.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Durability().Snapshot(ctx, 1000, id); err != nil {
		t.Fatalf("snapshot of a session with a background writer: %v", err)
	}
	if _, err := m.Durability().Rollback(ctx, 1000, id); err != nil {
		t.Fatalf("rollback: %v", err)
	}
}

// TestHibernatedSessionsDoNotCountTowardMax: a hibernated session holds no
// sandbox, so it leaves its place under MaxSessions to another; waking it
// needs a place again, and hibernated sessions have a cap of their own.
func TestHibernatedSessionsDoNotCountTowardMax(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, a := criuDaemon(t, r, func(c *Config) { c.MaxSessions = 2; c.MaxHibernated = 1 }, "x = 'a'")
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(context.Background(), 1000, a); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	var live []string
	for i := 0; i < 2; i++ {
		info, err := m.Create(ctx, CreateOptions{Owner: 1000})
		if err != nil {
			t.Fatalf("create %d next to a hibernated session (max 2): %v", i, err)
		}
		live = append(live, info.ID)
	}
	if _, err := m.Create(ctx, CreateOptions{Owner: 1000}); !errors.Is(err, ErrLimit) {
		t.Fatalf("a third live session: %v, want the limit", err)
	}
	// Two live: the hibernated one cannot wake, and says why.
	if _, err := m.Exec(ctx, 1000, a, ExecRequest{Code: "x"}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "hibernated") {
		t.Fatalf("waking past the limit: %v", err)
	}
	if ls := m.List(context.Background(), 1000); len(ls) != 3 {
		t.Fatalf("sessions: %+v", ls)
	}
	// The hibernated cap: one already.
	if _, err := m.Durability().Hibernate(context.Background(), 1000, live[0]); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second hibernated session (cap 1): %v", err)
	}
	if err := m.Close(context.Background(), 1000, live[1]); err != nil {
		t.Fatal(err)
	}
	res, err := m.Exec(ctx, 1000, a, ExecRequest{Code: "print(x)"})
	if err != nil || strings.TrimSpace(res.Stdout) != "a" || res.State != StateKept {
		t.Fatalf("waking with a place free: %v %+v", err, res)
	}
}

// TestShutdownHibernationIsBounded: a shutdown spends at most its
// hibernation budget on checkpoints (one criu at a time, so a host with
// many sessions would pass its supervisor's stop timeout); the sessions it
// did not reach are kept running, and the next daemon re-adopts them with
// their state.
func TestShutdownHibernationIsBounded(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	bounded := func(c *Config) {
		c.HibernateOnShutdown, c.KeepOnShutdown = true, true
		c.ShutdownHibernateBudget = time.Nanosecond
	}
	m1, id := criuDaemon(t, r, bounded, "v = 41")
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sessionCgroups(id)) == 0 {
		t.Fatal("the session past the budget was neither hibernated nor kept running")
	}
	m2 := r.startWith(bounded)
	defer m2.Shutdown(ctx)
	if ls := m2.List(ctx, 1000); len(ls) != 1 || ls[0].State == "hibernated" {
		t.Fatalf("sessions after restart: %+v (want the kept one, re-adopted, not hibernated)", ls)
	}
	res, err := m2.Exec(ctx, 1000, id, ExecRequest{Code: "print(v + 1)"})
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("after restart: %v %+v", err, res)
	}
}

// TestRestoreOfALongHibernatedSessionIsKept: a session hibernated longer
// than its idle TTL, then restored by Restore (no cell), stays: it was
// ended by the janitor's next sweep, its idle time counted from its last
// cell, and the state just restored was lost.
func TestRestoreOfALongHibernatedSessionIsKept(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, func(c *Config) {
		c.IdleTTL, c.HibernatedTTL, c.JanitorInterval = 2*time.Second, time.Hour, 100*time.Millisecond
	}, hibernateState)
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past the idle TTL, hibernated
	info, err := m.Durability().Restore(ctx, 1000, id)
	if err != nil || info.State == StateLost {
		t.Fatalf("restore: %v %+v", err, info)
	}
	time.Sleep(time.Second) // several sweeps
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: hibernateCheck})
	if err != nil || res.Status != StatusOK || res.State != StateKept {
		t.Fatalf("cell after the restore: %v %+v", err, res)
	}
}

// TestRestoreOutlivesItsCaller: a restore whose caller leaves midway (a
// client's deadline, a disconnect) still restores the session: it was
// cancelled with the caller, its images removed as for a failed restore,
// and the next cell, a fresh kernel's, answered "kept".
func TestRestoreOutlivesItsCaller(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, hibernateState)
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	info, err := m.Durability().Restore(short, 1000, id)
	t.Logf("restore with a 50 ms deadline: %v, %+v", err, info)
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: hibernateCheck})
	if err != nil || res.Status != StatusOK || res.State != StateKept {
		t.Fatalf("cell after a restore its caller left: %v %+v", err, res)
	}
	if want := "499999500000.0 332833500 kept before after"; strings.TrimSpace(res.Stdout) != want {
		t.Fatalf("state after a restore its caller left: %q, want %q", res.Stdout, want)
	}
}

// TestRollbackOfAHibernatedSessionCountsForItsOwner: rolling a hibernated
// session back makes it live, so it counts toward its owner's share as a
// wake does: an owner at max_per_owner is refused (it went one over, as
// often as it had hibernated sessions with snapshots).
func TestRollbackOfAHibernatedSessionCountsForItsOwner(t *testing.T) {
	r := newRestartable(t)
	requiresCriu(t)
	ctx := context.Background()
	m := r.startWith(func(c *Config) { c.MaxPerOwner = 1 })
	defer m.Shutdown(ctx)
	a, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Durability().Snapshot(ctx, 1000, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Durability().Hibernate(ctx, 1000, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateOptions{Owner: 1000}); err != nil {
		t.Fatalf("a second session while the first is hibernated: %v", err)
	}
	if _, err := m.Durability().Rollback(ctx, 1000, a.ID); !errors.Is(err, ErrLimit) {
		t.Fatalf("rollback of the hibernated session with its owner at max_per_owner: %v, want ErrLimit", err)
	}
}

// TestHibernationsSideBySideKeepTheCap: hibernations asked for at once
// hold sessions.max_hibernated between them (each checked the count, then
// wrote its checkpoint: all three of three passed a cap of one).
func TestHibernationsSideBySideKeepTheCap(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, first := criuDaemon(t, r, func(c *Config) { c.MaxHibernated = 1 }, "x = 1")
	defer m.Shutdown(ctx)
	ids := []string{first}
	for range 2 {
		info, err := m.Create(ctx, CreateOptions{Owner: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			_, err := m.Durability().Hibernate(ctx, 1000, id)
			errs <- err
		}()
	}
	ok := 0
	for range ids {
		switch err := <-errs; {
		case err == nil:
			ok++
		case !errors.Is(err, ErrLimit):
			t.Errorf("hibernate: %v, want success or the limit", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d hibernations at once went through a cap of 1", ok, len(ids))
	}
}

// TestHostileHibernatedDisksAreBounded: a hibernated session's disk (a
// tmpfs) stays in memory, charged to no sandbox once its cgroup is gone.
// One owner who filled workspaces and hibernated them pinned
// max_hibernated disks of RAM that no limit saw. Now the disks of
// hibernated sessions hold at most HibernatedDiskBytes together: a
// hibernation past it is refused (limit) and its session keeps running,
// its state whole.
func TestHostileHibernatedDisksAreBounded(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	fill := "open('/work/ballast', 'wb').write(b'x' * (24 << 20)); x = 1"
	m, first := criuDaemon(t, r, func(c *Config) { c.HibernatedDiskBytes = 40 << 20 }, fill)
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(ctx, 1000, first); err != nil {
		t.Fatalf("the first hibernation, within the bound: %v", err)
	}
	info, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: fill})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("fill the second: %v %+v", err, res)
	}
	_, err = m.Durability().Hibernate(ctx, 1000, info.ID)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "hibernated sessions' disks") {
		t.Fatalf("a second 24 MiB disk past a 40 MiB bound: %v, want a limit naming it", err)
	}
	res, err = m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x + 1"})
	if err != nil || res.Status != StatusOK || !strings.Contains(res.Value["text/plain"].(string), "2") {
		t.Fatalf("the refused session after the refusal: %v %+v, want its state whole", err, res)
	}
}
