package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// lifeBound is how far past its lifetime a session may still answer or run
// anything: a refusal is immediate (lookup); a cell's end waits for its
// interrupt (or its kill after the grace), measured on a loaded host and
// scaled on a slower machine (testenv.TimeScale).
var lifeBound = time.Second * testenv.TimeScale()

// waitGone waits until p no longer exists.
func waitGone(t *testing.T, p string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := os.Stat(p)
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there after %s (%v)", p, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantExpired fails t unless err is the expired answer naming the limit.
func wantExpired(t *testing.T, what string, err error, life time.Duration) {
	t.Helper()
	if !errors.Is(err, ErrExpired) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "max_lifetime "+life.String()+" reached at") {
		t.Fatalf("%s: %v, want expired naming max_lifetime %s", what, err, life)
	}
}

// TestHostileLifetimeEndsBusySession: back-to-back cells keep a session
// busy past its max_lifetime (seen: a 14 s session ran 23 cells until
// 34.7 s); from its lifetime on, every request is refused as expired
// naming the limit, the janitor ends it although it was never idle, and
// the id keeps answering expired.
func TestHostileLifetimeEndsBusySession(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
	ctx := context.Background()
	life := 3 * time.Second * testenv.TimeScale()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, MaxLifetime: life, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	end := info.CreatedAt.Add(life)
	if !info.ExpiresAt.Equal(end) {
		t.Errorf("expires_at %s, want the lifetime's end %s", info.ExpiresAt, end)
	}
	cells := 0
	var refused error
	for deadline := end.Add(10 * time.Second); time.Now().Before(deadline); {
		res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x = 1"})
		if err != nil {
			refused = err
			break
		}
		if res.Status != StatusOK {
			t.Logf("cell %d at the lifetime: %s %+v", cells+1, res.Status, res.Error)
		}
		if late := time.Since(end); late > lifeBound {
			t.Fatalf("cell %d ended %s after the session's lifetime", cells+1, late)
		}
		cells++
	}
	late := time.Since(end)
	wantExpired(t, "a cell past the lifetime", refused, life)
	if late < 0 || late > lifeBound {
		t.Fatalf("refused %s after the lifetime's end, want within [0, %s]", late, lifeBound)
	}
	if cells == 0 {
		t.Fatal("no cell ran within the lifetime: the test proved nothing")
	}
	t.Logf("%d back-to-back cells, then refused %s after the lifetime", cells, late.Round(time.Millisecond))
	// Every other request too, before and after the janitor ends it.
	if _, err := e.m.Workspace().Files(ctx, 1000, info.ID); !errors.Is(err, ErrExpired) {
		t.Errorf("files past the lifetime: %v, want expired", err)
	}
	if _, err := e.m.Interrupt(ctx, 1000, info.ID); !errors.Is(err, ErrExpired) {
		t.Errorf("interrupt past the lifetime: %v, want expired", err)
	}
	waitGone(t, filepath.Join(e.state, "sessions", "sessions", info.ID), 3*time.Second)
	if ls := e.m.List(ctx, 0); len(ls) != 0 {
		t.Fatalf("sessions after the lifetime: %+v", ls)
	}
	_, err = e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x"})
	wantExpired(t, "a cell after the janitor ended it", err, life)
}

// TestHostileLifetimeEndsLongCell: a cell that would outlive its session
// is interrupted at the session's lifetime, and one that ignores the
// interrupt is killed after the grace, as at a cell timeout; both results
// say the session reached its max_lifetime and lost its state, and the
// session then answers expired.
func TestHostileLifetimeEndsLongCell(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
	ctx := context.Background()
	life := 3 * time.Second * testenv.TimeScale()
	grace := e.m.cfg.Policies["default"].InterruptGrace
	cases := []struct {
		name, code string
		errType    string
		bound      time.Duration // how long past the lifetime the result may come
	}{
		{"sleep", "import time\ntime.sleep(60)", "KeyboardInterrupt", lifeBound},
		{"ignores SIGINT", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.1)", "Timeout", grace + lifeBound + time.Second},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, MaxLifetime: life, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := info.CreatedAt.Add(life)
			res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: tc.code, Timeout: 30 * time.Second})
			late := time.Since(end)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			if res.Status != StatusTimeout || res.Error == nil || res.Error.Type != tc.errType ||
				!strings.Contains(res.Error.Message, "max_lifetime ("+life.String()+")") || res.State != StateLost || !strings.Contains(res.StateReason, "expired") {
				t.Errorf("%s: %s %+v state %s (%s); want a timeout naming the max_lifetime, state lost", tc.name, res.Status, res.Error, res.State, res.StateReason)
			}
			if late < 0 || late > tc.bound {
				t.Errorf("%s: its result came %s after the lifetime, want within [0, %s]", tc.name, late, tc.bound)
			}
			t.Logf("%s: %s %s, %s after the lifetime", tc.name, res.Status, res.Error.Type, late.Round(time.Millisecond))
			_, err = e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "1"})
			wantExpired(t, tc.name+": the next cell", err, life)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for len(e.m.List(ctx, 0)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ls := e.m.List(ctx, 0); len(ls) != 0 {
		t.Fatalf("sessions past their lifetime still listed: %+v", ls)
	}
}

// TestHostileLifetimeHibernatedNeverWakes: a hibernated session's expiry
// is its lifetime, not its last use plus hibernated_ttl (seen: hibernated
// at 10 s of a 10 s lifetime, woken at 18 s with its variables); past it,
// a cell, a restore and a wake itself are refused, and the next daemon's
// janitor ends it, images and all. A fork of it ends when it would.
func TestHostileLifetimeHibernatedNeverWakes(t *testing.T) {
	requiresCriu(t)
	r := newRestartable(t)
	ctx := context.Background()
	m1 := r.startWith(func(c *Config) { c.JanitorInterval = time.Hour })
	const life = 8 * time.Second
	info, err := m1.Create(ctx, CreateOptions{Owner: 1000, MaxLifetime: life, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id, end := info.ID, info.CreatedAt.Add(life)
	if res, err := m1.Exec(ctx, 1000, id, ExecRequest{Code: "x = 42"}); err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	// A fork copies the state, not a new lifetime: it ends when its
	// parent would.
	child, err := m1.Durability().Fork(ctx, 1000, id)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if child.ExpiresAt.After(end) {
		t.Errorf("the fork expires at %s, after its parent's lifetime ends (%s)", child.ExpiresAt, end)
	}
	if err := m1.Close(ctx, 1000, child.ID); err != nil {
		t.Fatal(err)
	}
	hi, err := m1.Durability().Hibernate(ctx, 1000, id)
	if err != nil {
		t.Fatal(err)
	}
	if !hi.ExpiresAt.Equal(end) {
		t.Errorf("hibernated session expires %s, want its lifetime's end %s (not hibernated_ttl from now)", hi.ExpiresAt, end)
	}
	dir := filepath.Join(r.state, "sessions", "sessions", id)
	if _, err := os.Stat(filepath.Join(dir, imagesName)); err != nil {
		t.Fatalf("no checkpoint images: %v", err)
	}
	time.Sleep(time.Until(end) + 100*time.Millisecond)

	res, err := m1.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
	if err == nil {
		t.Fatalf("a hibernated session past its lifetime woke: %+v", res)
	}
	wantExpired(t, "a cell", err, life)
	_, err = m1.Durability().Restore(ctx, 1000, id)
	wantExpired(t, "restore", err, life)
	s, err := m1.get(1000, id)
	if err != nil {
		t.Fatal(err)
	}
	s.run.Lock()
	_, err = m1.dur.wake(ctx, s)
	s.run.Unlock()
	wantExpired(t, "wake", err, life)
	s.mu.Lock()
	woke := s.k != nil || !s.hibernated
	s.mu.Unlock()
	if woke {
		t.Fatal("wake restored a session past its lifetime")
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The next daemon adopts it from disk and its janitor ends it.
	m2 := r.startWith(func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
	defer m2.Shutdown(ctx)
	waitGone(t, dir, 5*time.Second)
	_, err = m2.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
	wantExpired(t, "a cell on the next daemon", err, life)
}

// TestHostileLifetimeStoredNotRestored: a session hibernated into a shared
// store and asked for on another node past its lifetime is not restored
// there: the taker reads its creation and lifetime first, answers expired,
// and removes it from the store.
func TestHostileLifetimeStoredNotRestored(t *testing.T) {
	fx := fileFixture(t)
	ctx := context.Background()
	mA := fx.ra.startWith(fx.cfg("na"))
	defer mA.Shutdown(ctx)
	const life = 5 * time.Second
	info, err := mA.Create(ctx, CreateOptions{Owner: 1000, MaxLifetime: life, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id, end := info.ID, info.CreatedAt.Add(life)
	if res, err := mA.Exec(ctx, 1000, id, ExecRequest{Code: "x = 42"}); err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	if _, err := mA.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("hibernate into the store: %v", err)
	}
	lease := filepath.Join(fx.dir, leaseKey(id))
	if _, err := os.Stat(lease); err != nil {
		t.Fatalf("not in the store: %v", err)
	}
	time.Sleep(time.Until(end) + 100*time.Millisecond)

	mB := fx.rb.startWith(fx.cfg("nb"))
	defer mB.Shutdown(ctx)
	res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
	if err == nil {
		t.Fatalf("node B restored a stored session past its lifetime: %+v", res)
	}
	wantExpired(t, "node B", err, life)
	if _, err := os.Stat(filepath.Join(fx.rb.state, "sessions", "sessions", id)); !os.IsNotExist(err) {
		t.Errorf("node B kept a directory for it: %v", err)
	}
	waitGone(t, lease, 10*time.Second)
	_, err = mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
	wantExpired(t, "node B again", err, life)
}

// TestIdleExpiryWaitsForAnOperationHoldingTheSession: hibernate, restore,
// fork, snapshots and file operations hold a session without marking it
// busy. One that outlasts the idle TTL (a criu dump under load took longer
// than a 2 s TTL) must not have the janitor kill the sandbox under it and
// end the session once it returns: that ended a session its caller had
// just hibernated, its state lost. Here the operation is the run lock held
// past the TTL, then the use recorded as an operation records it.
func TestIdleExpiryWaitsForAnOperationHoldingTheSession(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 50 * time.Millisecond })
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x = 41"}); err != nil {
		t.Fatal(err)
	}
	s, err := e.m.claim(ctx, 1000, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	k := s.k
	s.mu.Unlock()
	time.Sleep(2500 * time.Millisecond) // the TTL passes, many sweeps, while the operation holds it
	select {
	case <-k.sb.Done():
		t.Error("the janitor killed the sandbox under an operation holding the session")
	default:
	}
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
	s.run.Unlock()
	time.Sleep(300 * time.Millisecond) // sweeps after the operation
	res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x + 1"})
	if err != nil || res.Status != StatusOK || res.Value["text/plain"] != "42" || res.State != StateKept {
		t.Fatalf("after an operation that outlasted the idle TTL: %v %+v", err, res)
	}
}
