package session

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/store"
)

// twoNodes is two daemons on this machine with their own state
// directories, cgroup roots and uid ranges, and one S3 store (a real
// versitygw on loopback) between them.
func twoNodes(t *testing.T) (a, b *restartable, cfg func(node string) func(*Config), srv *testenv.S3) {
	requiresCriu(t)
	srv = testenv.StartS3(t)
	srv.SetEnv(t)
	a, b = newRestartable(t), newRestartable(t)
	b.isoMod = func(c *isolate.Config) {
		c.CgroupRoot = testCgroupRoot + "-b"
		c.UIDBase = 0x50000000
		c.Slots = 64
	}
	cfg = func(node string) func(*Config) {
		return func(c *Config) {
			st, err := store.Open(store.Options{URL: "s3://" + srv.Bucket + "/fleet", Timeout: 20 * time.Second,
				S3: store.S3Options{Endpoint: srv.Endpoint, Region: "us-east-1"}, Keys: fleetKeys(t)})
			if err != nil {
				t.Fatal(err)
			}
			c.Store, c.NodeID = st, node
		}
	}
	return a, b, cfg, srv
}

// TestHibernateIntoSharedStore: a session hibernated by node A into S3 is
// restored by id on node B (another state directory, the same store) with
// its variables, open file and workspace; A forgets it; a request on A
// afterwards is refused naming B; another user does not see it; and of
// two nodes racing to take it, exactly one wins.
func TestHibernateIntoSharedStore(t *testing.T) {
	ra, rb, cfg, srv := twoNodes(t)
	ctx := context.Background()
	mA, id := criuDaemon(t, ra, cfg("na1"), hibernateState+"\nimport os; os.makedirs('d/e'); open('d/e/deep.txt', 'w').write('deep')\nos.symlink('d/e/deep.txt', 'link')")
	defer mA.Shutdown(ctx)
	info, err := mA.Durability().Hibernate(ctx, 1000, id)
	if err != nil {
		t.Fatalf("Hibernate into the store: %v", err)
	}
	if info.State != "hibernated" {
		t.Fatalf("hibernated session's state: %q", info.State)
	}
	// A forgot it: nothing of it on A's side.
	if ls := mA.List(ctx, 1000); len(ls) != 0 {
		t.Fatalf("node A still lists %+v", ls)
	}
	if _, err := os.Stat(filepath.Join(ra.state, "sessions", "sessions")); err != nil {
		t.Fatal(err) // the parent is there: the check below can fail
	}
	if _, err := os.Stat(filepath.Join(ra.state, "sessions", "sessions", id)); !os.IsNotExist(err) {
		t.Fatalf("node A kept the session's directory: %v", err)
	}
	if len(sessionCgroups(id)) != 0 {
		t.Fatal("the hibernated session still has a cgroup")
	}
	// In the store: a lease, a manifest, images and the workspace; nothing
	// readable by key outside the prefix.
	objs, err := mA.dur.objects.List(ctx, "hibernated/"+id+"/", 1000)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, o := range objs {
		keys[strings.TrimPrefix(o.Key, "hibernated/"+id+"/")] = true
	}
	for _, k := range []string{"lease", "g1/manifest.json", "g1/meta.json", "g1/upper.tar", "g1/images/inventory.img"} {
		if !keys[k] {
			t.Errorf("store lacks %s (has %v)", k, keys)
		}
	}

	mB := rb.startWith(cfg("nb2"))
	defer mB.Shutdown(ctx)
	// Another user asking B for it: as if it did not exist.
	if _, err := mB.Lookup(ctx, 1001, id); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "node") {
		t.Fatalf("another owner's lookup: %v, want a plain not found", err)
	}
	// Taken over, its saved files are on B's disk: charged to B's state
	// quota as a hibernation's are.
	if _, err := mB.Lookup(ctx, 1000, id); err != nil {
		t.Fatalf("node B takes it: %v", err)
	}
	if n := chargedFor(mB.dur.stateQuota, id+"/"+savedName); n <= 0 {
		t.Errorf("node B's state quota charges %d bytes for the taken session's saved files", n)
	}
	start := time.Now()
	res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: hibernateCheck + "print(open('link').read())\n"})
	if err != nil || res.Status != StatusOK || res.State != StateKept {
		t.Fatalf("first cell on node B: %v %+v", err, res)
	}
	t.Logf("node B: first cell of the moved session after %s", time.Since(start).Round(time.Millisecond))
	if want := "499999500000.0 332833500 kept before after\ndeep"; strings.TrimSpace(res.Stdout) != want {
		t.Fatalf("on node B: %q, want %q", res.Stdout, want)
	}
	// B runs it under B's own cgroup root.
	if cg := sessionCgroupsUnder(testCgroupRoot+"-b", id); len(cg) != 1 {
		t.Fatalf("session's cgroups under node B's root: %v", cg)
	}
	// A forgot it; asking A now is refused, naming B.
	if _, err := mA.Exec(ctx, 1000, id, ExecRequest{Code: "print(1)"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nb2"`) {
		t.Fatalf("node A after B took it: %v, want not found naming nb2", err)
	}

	// B hibernates it again (generation 2); A and B race to take it.
	if _, err := mB.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("Hibernate on B: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, m := range []*Manager{mA, mB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Lookup(ctx, 1000, id)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, ErrNotFound) && strings.Contains(err.Error(), `node "n`):
			t.Logf("taker %d refused: %v", i, err)
		default:
			t.Errorf("taker %d: %v, want success or not found naming the winner", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 2 racing nodes took the session, want exactly 1 (%v)", won, errs)
	}
	winner := mA
	if errs[1] == nil {
		winner = mB
	}
	res, err = winner.Exec(ctx, 1000, id, ExecRequest{Code: "print(thing.tag, a[:3].tolist())"})
	if err != nil || strings.TrimSpace(res.Stdout) != "kept [0.0, 1.0, 2.0]" {
		t.Fatalf("winner's cell: %v %+v", err, res)
	}
	_ = srv
}

// TestSharedStoreDownKeepsSessionLocal: with the store down, hibernate
// answers unavailable naming the store, the session stays hibernated on
// this node and its next cell brings it back here.
func TestSharedStoreDownKeepsSessionLocal(t *testing.T) {
	ra, _, cfg, srv := twoNodes(t)
	ctx := context.Background()
	m, id := criuDaemon(t, ra, cfg("na1"), "x = 41")
	defer m.Shutdown(ctx)
	// Another session keeps running cells while the store is down.
	other, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = m.Durability().Hibernate(ctx, 1000, id)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), m.dur.objects.Name()) {
		t.Fatalf("hibernate with the store down: %v, want unavailable naming %s", err, m.dur.objects.Name())
	}
	res, err := m.Exec(ctx, 1000, other.ID, ExecRequest{Code: "print('still running')"})
	if err != nil || strings.TrimSpace(res.Stdout) != "still running" {
		t.Fatalf("another session's cell with the store down: %v %+v", err, res)
	}
	if ls := m.List(ctx, 1000); len(ls) != 2 {
		t.Fatalf("sessions after a failed store hibernation: %+v", ls)
	}
	// The store is back: hibernating the (locally hibernated) session again
	// moves it there.
	srv.Start(t)
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("hibernate again with the store back: %v", err)
	}
	if ls := m.List(ctx, 1000); len(ls) != 1 || ls[0].ID != other.ID {
		t.Fatalf("sessions after storing it: %+v", ls)
	}
	res, err = m.Exec(ctx, 1000, id, ExecRequest{Code: "print(x + 1)"})
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("the session taken back from the store: %v %+v", err, res)
	}
}

// TestHibernateOnShutdownIntoSharedStore: a node that stops with
// hibernate_on_shutdown (a drain) puts its live sessions into the shared
// store and leaves nothing behind; another node serves them. Against S3
// and against a file store marked shared (store.shared).
func TestHibernateOnShutdownIntoSharedStore(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		ra, rb, cfg, _ := twoNodes(t)
		drainAndMove(t, ra, rb, cfg, nil)
	})
	t.Run("file", func(t *testing.T) {
		f := fileFixture(t)
		ra, rb, cfg, dir := f.ra, f.rb, f.cfg, f.dir
		drainAndMove(t, ra, rb, cfg, func(id string) {
			if _, err := os.Stat(filepath.Join(dir, "hibernated", id, "lease")); err != nil {
				t.Fatalf("no lease in the file store: %v", err)
			}
		})
	})
}

// drainAndMove drains node A with a session in it, calls drained (if
// set) with the session's id, and runs a cell of it on node B.
func drainAndMove(t *testing.T, ra, rb *restartable, cfg func(string) func(*Config), drained func(id string)) {
	ctx := context.Background()
	draining := func(c *Config) { cfg("na1")(c); c.HibernateOnShutdown = true }
	mA, id := criuDaemon(t, ra, draining, "import numpy as np\nv = np.arange(10)")
	if err := mA.Shutdown(ctx); err != nil {
		t.Fatalf("draining shutdown: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(ra.state, "sessions", "sessions")); err != nil || len(ents) != 0 {
		t.Fatalf("node A left %d session directories (%v)", len(ents), err)
	}
	if drained != nil {
		drained(id)
	}
	mB := rb.startWith(cfg("nb2"))
	defer mB.Shutdown(ctx)
	res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(int(v.sum()))"})
	if err != nil || strings.TrimSpace(res.Stdout) != "45" || res.State != StateKept {
		t.Fatalf("on node B after A's drain: %v %+v", err, res)
	}
}

// sessionCgroupsUnder lists the memory cgroups of session id's sandboxes
// under cgroup root.
func sessionCgroupsUnder(root, id string) []string {
	base := filepath.Join("/sys/fs/cgroup/memory", root)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		base = filepath.Join("/sys/fs/cgroup", root)
	}
	var out []string
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), diskID(id)+"-") { // cgroups are named by disk id
			out = append(out, e.Name())
		}
	}
	return out
}

// TestHibernatedExpireInStore: a session hibernated into the store is
// expired there after sessions.hibernated_ttl, counted from its
// hibernation, by any node (no node holds it any more); a live lease is
// never expired; a lease that changed since it was read is left alone
// (the taker won); an expired lease left by a sweeper that died midway is
// finished after the grace; and the janitor runs the sweep by itself.
func TestHibernatedExpireInStore(t *testing.T) {
	ra, rb, cfg, _ := twoNodes(t)
	ctx := context.Background()
	mA, id := criuDaemon(t, ra, cfg("na1"), "x = 41")
	defer mA.Shutdown(ctx)
	live, err := mA.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mA.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("hibernate into the store: %v", err)
	}
	l, _, err := mA.dur.readLease(ctx, id)
	if err != nil || l.State != leaseHib {
		t.Fatalf("lease after hibernation: %+v %v", l, err)
	}
	stored := func(id string) int {
		t.Helper()
		objs, err := mA.dur.objects.List(ctx, "hibernated/"+id+"/", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	n := stored(id)
	ttl := mA.cfg.HibernatedTTL

	mB := rb.startWith(cfg("nb2"))
	defer mB.Shutdown(ctx)
	if ids, err := mB.dur.sweepStored(ctx, l.At.Add(ttl-time.Minute)); err != nil || len(ids) != 0 {
		t.Fatalf("sweep before the TTL: %v %v", ids, err)
	}
	if stored(id) != n {
		t.Fatal("a sweep before the TTL removed objects")
	}
	far := l.At.Add(ttl + time.Minute)
	if err := mB.dur.expireStored(ctx, l, `"stale"`, far); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("expiring a lease that changed since it was read: %v, want a conflict", err)
	}
	if stored(id) != n {
		t.Fatal("a lost expiry removed objects")
	}
	ids, err := mB.dur.sweepStored(ctx, far)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("sweep past the TTL: %v %v, want [%s]", ids, err, id)
	}
	if k := stored(id); k != 0 {
		t.Fatalf("%d objects of the expired session left in the store", k)
	}
	if _, err := mB.Lookup(ctx, 1000, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup of an expired session: %v", err)
	}
	// The live session's lease is never expired, however old.
	if ll, _, err := mA.dur.readLease(ctx, live.ID); err != nil || ll.State != leaseLive {
		t.Fatalf("live lease after the sweep: %+v %v", ll, err)
	}
	if _, err := mA.Exec(ctx, 1000, live.ID, ExecRequest{Code: "1"}); err != nil {
		t.Fatalf("the live session after the sweep: %v", err)
	}

	// A sweeper that died after its swap: the session answers expired,
	// and after the grace any node finishes the removal.
	if _, err := mA.Durability().Hibernate(ctx, 1000, live.ID); err != nil {
		t.Fatal(err)
	}
	l2, ver2, err := mA.dur.readLease(ctx, live.ID)
	if err != nil {
		t.Fatal(err)
	}
	e := l2
	e.Node, e.State, e.At = "gone", leaseExpired, time.Now().UTC()
	b, _ := json.Marshal(e)
	if _, err := mA.dur.objects.Swap(ctx, leaseKey(live.ID), ver2, b); err != nil {
		t.Fatal(err)
	}
	if _, err := mB.Lookup(ctx, 1000, live.ID); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("lookup of a session being expired: %v, want not found saying expired", err)
	}
	if ids, err := mB.dur.sweepStored(ctx, time.Now()); err != nil || len(ids) != 0 {
		t.Fatalf("sweep within the grace: %v %v", ids, err)
	}
	if ids, err := mB.dur.sweepStored(ctx, time.Now().Add(expiredGrace+time.Minute)); err != nil || len(ids) != 1 {
		t.Fatalf("sweep after the grace: %v %v", ids, err)
	}
	if k := stored(live.ID); k != 0 {
		t.Fatalf("%d objects of the half-removed session left", k)
	}

	// The janitor sweeps by itself: node C, in B's place, with a
	// one-second TTL.
	if err := mB.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mC := rb.startWith(func(c *Config) {
		cfg("nc3")(c)
		c.HibernatedTTL, c.StoreSweepInterval = time.Second, 200*time.Millisecond
	})
	defer mC.Shutdown(ctx)
	third, err := mA.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mA.Durability().Hibernate(ctx, 1000, third.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); stored(third.ID) != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node C's janitor did not expire a session hibernated past its TTL")
		}
	}
}

// chargedFor is what q charges for paths ending in suffix.
func chargedFor(q *quota, suffix string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var n int64
	for k, v := range q.items {
		if strings.HasSuffix(k, "/"+suffix) {
			n += v
		}
	}
	return n
}
