package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// waitState polls session id's info until its state is want.
func waitState(t *testing.T, m *Manager, id, want string, within time.Duration) *Info {
	t.Helper()
	end := time.Now().Add(within)
	for {
		info, err := m.Info(context.Background(), 1000, id)
		if err == nil && info.State == want {
			return info
		}
		if time.Now().After(end) {
			t.Fatalf("session %s not %s within %s: %+v, %v", id, want, within, info, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHibernateOnIdle: a session created with HibernateOnIdle is
// hibernated at its idle TTL, not ended, and its next cell finds its
// variables; its fork inherits the choice.
func TestHibernateOnIdle(t *testing.T) {
	requiresCriu(t)
	// A restartable daemon: the sessions it leaves hibernated at shutdown
	// are the next daemon's, and its sweep ends them.
	r := newRestartable(t)
	ctx := context.Background()
	e := &env{m: r.startWith(func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })}
	defer e.m.Shutdown(ctx)
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, TTL: time.Second, HibernateOnIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if !info.HibernateOnIdle {
		t.Errorf("create's info: %+v; want hibernate_on_idle", info)
	}
	if res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x = 41"}); err != nil || res.Status != StatusOK {
		t.Fatalf("cell: %+v, %v", res, err)
	}
	waitState(t, e.m, info.ID, "hibernated", 30*time.Second)
	res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "x + 1"})
	if err != nil || res.Value["text/plain"] != "42" {
		t.Fatalf("the cell after the idle TTL: %+v, %v; want x kept", res, err)
	}
	// It goes on running for its next TTL, then hibernates again.
	waitState(t, e.m, info.ID, "hibernated", 30*time.Second)

	plain, err := e.m.Create(ctx, CreateOptions{Owner: 1000, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := e.m.Info(ctx, 1000, plain.ID); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExpired) {
		t.Errorf("a session without it, past its TTL: %v; want it ended", err)
	}
}

// TestHibernateOnIdleFailsClosed: a host without checkpoint/restore
// refuses the option at create, rather than end the session at its TTL
// all the same; and a session whose hibernation fails at its TTL ends,
// saying why, rather than run on past it.
func TestHibernateOnIdleFailsClosed(t *testing.T) {
	testenv.RequiresRoot(t)
	t.Run("no criu", func(t *testing.T) {
		e := newEnvHost(t, func(c *isolate.Config) { c.Criu = "/nonexistent/criu" }, nil)
		_, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000, HibernateOnIdle: true})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "hibernate_on_idle") {
			t.Errorf("create with hibernate_on_idle on a host without criu: %v; want unavailable naming it", err)
		}
	})
	t.Run("a hibernation that fails", func(t *testing.T) {
		requiresCriu(t)
		criu, hang := testenv.HangingCriu(t, isolate.DefaultCriu)
		e := newEnvHost(t, func(c *isolate.Config) { c.Criu, c.CriuTimeout = criu, 2*time.Second },
			func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
		ctx := context.Background()
		info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, TTL: time.Second, HibernateOnIdle: true})
		if err != nil {
			t.Fatal(err)
		}
		hang("swrk")
		end := time.Now().Add(30 * time.Second)
		for {
			_, err := e.m.Info(ctx, 1000, info.ID)
			if err != nil {
				if !strings.Contains(err.Error(), "hibernating it failed") {
					t.Errorf("the session's answer once ended: %v; want it to say hibernating it failed", err)
				}
				break
			}
			if time.Now().After(end) {
				t.Fatal("a session whose hibernation fails still runs 30 s past its 1 s TTL")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestClaimWaitsForIdlePause: a request that comes while the janitor
// hibernates an idle session waits for the hibernation and then runs (its
// op wakes the session); it does not meet busy for work nobody asked for.
func TestClaimWaitsForIdlePause(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.m.get(1000, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	done, ok := s.tryPause()
	if !ok {
		t.Fatal("tryPause of an idle session failed")
	}
	if _, again := s.tryPause(); again {
		t.Fatal("a second pause of the same session was let in")
	}
	got := make(chan error, 1)
	go func() {
		c, err := e.m.claim(ctx, 1000, info.ID)
		if err == nil {
			c.run.Unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("claim during the pause answered at once: %v; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	done()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("claim after the pause: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("claim still waiting after the pause ended")
	}
	// A cell holding the session is still busy, at once.
	s.run.Lock()
	defer s.run.Unlock()
	if _, err := e.m.claim(ctx, 1000, info.ID); !errors.Is(err, ErrBusy) {
		t.Errorf("claim while a cell runs: %v; want busy", err)
	}
}
