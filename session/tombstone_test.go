package session

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTombstoneRecordBounded: the record of closed sessions keeps at most
// its cap (oldest out first), forgets entries past its TTL, survives a
// reload from disk, leaves no temporary file, and refuses a file it cannot
// trust (too large, not its format, not session ids) rather than start
// without it.
func TestTombstoneRecordBounded(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, closedName)
	c, err := loadClosed(p, 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	for i, id := range []string{"a1", "a2", "a3", "a4"} {
		if err := c.add(id, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, c *closedSet, now time.Time, want map[string]bool) {
		t.Helper()
		for id, w := range want {
			if _, got := c.has(id, now); got != w {
				t.Errorf("%s: has(%s) = %v, want %v", what, id, got, w)
			}
		}
	}
	now := t0.Add(5 * time.Second)
	check("after 4 adds to a cap of 3", c, now, map[string]bool{"a1": false, "a2": true, "a3": true, "a4": true})
	c2, err := loadClosed(p, 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	check("reloaded", c2, now, map[string]bool{"a1": false, "a2": true, "a3": true, "a4": true})
	check("past the TTL", c2, t0.Add(2*time.Hour), map[string]bool{"a2": false, "a4": false})
	// A second close of an id moves it to the newest: a5 pushes out a3.
	if err := c2.add("a2", now); err != nil {
		t.Fatal(err)
	}
	if err := c2.add("a5", now); err != nil {
		t.Fatal(err)
	}
	check("re-added", c2, now, map[string]bool{"a2": true, "a3": false, "a4": true, "a5": true})
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("state dir holds %d files, want only %s", len(ents), closedName)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record's mode: %v %v, want 0600", fi.Mode(), err)
	}
	// Entries past the TTL are dropped at load.
	c3, err := loadClosed(p, 3, time.Nanosecond)
	if err != nil || len(c3.ents) != 0 {
		t.Errorf("load with every entry past the TTL: %d entries, %v", len(c3.ents), err)
	}

	for name, b := range map[string][]byte{
		"too large": bytes.Repeat([]byte(" "), maxClosedFile+1),
		"not JSON":  []byte("{"),
		"version":   []byte(`{"version":2,"closed":[]}`),
		"bad id":    []byte(`{"version":1,"closed":[{"id":"../x","at":"2026-01-01T00:00:00Z"}]}`),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadClosed(p, 3, time.Hour); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: loadClosed = %v, want an error naming the file", name, err)
		}
	}
	if _, err := loadClosed(filepath.Join(dir, "none"), 3, time.Hour); err != nil {
		t.Errorf("no record yet: %v", err)
	}
}

// TestHostileTombstoneClosedStaysClosed: the owner closes a session that
// lives in the shared store; a writer of the store then puts its earlier,
// validly signed objects back. The node that closed it refuses the id and
// leaves the objects alone, also after a restart on the same state dir;
// another node refuses them once older than sessions.hibernated_ttl.
func TestHostileTombstoneClosedStaysClosed(t *testing.T) {
	fx := fileFixture(t)
	ctx := context.Background()
	cfgA := fx.cfg("na")
	mA, id := criuDaemon(t, fx.ra, cfgA, "x = 41")
	if _, err := mA.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("hibernate into the store: %v", err)
	}
	// The attacker's copy of every object, as the store holds them (with
	// their signature headers).
	saved := map[string][]byte{}
	root := filepath.Join(fx.dir, "hibernated", id)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		key, _ := filepath.Rel(fx.dir, p)
		saved[key] = fx.atk.read(key)
		return nil
	})
	if err != nil || saved[leaseKey(id)] == nil || len(saved) < 4 {
		t.Fatalf("stored objects: %d, %v", len(saved), err)
	}
	if err := mA.Close(ctx, 1000, id); err != nil {
		t.Fatalf("close: %v", err)
	}
	lease := filepath.Join(fx.dir, leaseKey(id))
	waitGone(t, lease, 10*time.Second)
	for k, b := range saved {
		fx.atk.write(k, b)
	}

	refused := func(m *Manager, what string) {
		t.Helper()
		res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
		if err == nil {
			t.Fatalf("%s: the closed session ran again with its old state: %+v", what, res)
		}
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("%s: %v, want not found saying it was closed", what, err)
		}
		if _, err := m.Lookup(ctx, 1000, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: lookup %v, want not found", what, err)
		}
		if b, err := os.ReadFile(lease); err != nil || !bytes.Equal(b, saved[leaseKey(id)]) {
			t.Fatalf("%s: the put-back lease was taken or changed (%v)", what, err)
		}
		if _, err := os.Stat(filepath.Join(m.cfg.StateDir, "sessions", id)); !os.IsNotExist(err) {
			t.Fatalf("%s: a directory for the closed session: %v", what, err)
		}
	}
	refused(mA, "same daemon")
	if err := mA.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mA2 := fx.ra.startWith(cfgA)
	defer mA2.Shutdown(ctx)
	refused(mA2, "after a restart")

	// A node that never saw the close is not protected by the record, but
	// a put-back lease older than sessions.hibernated_ttl is refused there
	// too (and expired in the store), as the sweep would: what bounds the
	// record's own TTL.
	mB := fx.rb.startWith(func(c *Config) { fx.cfg("nb")(c); c.HibernatedTTL = time.Second })
	defer mB.Shutdown(ctx)
	time.Sleep(time.Second)
	res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
	if err == nil || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "hibernated_ttl") {
		t.Fatalf("node B, lease older than hibernated_ttl: %v %+v, want not found naming hibernated_ttl", err, res)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("the old lease was left in the store: %v", err)
	}
}
