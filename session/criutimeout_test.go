package session

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// TestHibernateHungCriuBounded: with a criu that hangs (as dumps did on
// this host before runtime/criu-patches/0002), hibernate, snapshot and
// fork answer unavailable naming the timeout within their bound, the
// session keeps its kernel and runs cells, and no criu is left. Before
// the bound, hibernate waited forever with the session held.
func TestHibernateHungCriuBounded(t *testing.T) {
	requiresCriu(t)
	criu, hang := testenv.HangingCriu(t, isolate.DefaultCriu)
	const bound = 5 * time.Second
	e := newEnvHost(t, func(c *isolate.Config) { c.Criu, c.CriuTimeout = criu, bound }, nil)
	ctx := context.Background()
	if err := e.m.Durability().HibernationAvailable(); err != nil {
		t.Fatalf("criu through the wrapper: %v", err)
	}
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	run := func(code string) string {
		t.Helper()
		res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: code})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("cell %q: %v %+v", code, err, res)
		}
		return res.Stdout
	}
	run("x = 42")
	hang("swrk")
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"hibernate", func() error { _, err := e.m.Durability().Hibernate(ctx, 1000, info.ID); return err }},
		{"snapshot", func() error { _, err := e.m.Durability().Snapshot(ctx, 1000, info.ID); return err }},
		{"fork", func() error { _, err := e.m.Durability().Fork(ctx, 1000, info.ID); return err }},
	} {
		start := time.Now()
		err := op.do()
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) || Sentinel(err) != ErrUnavailable || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("%s with a hung criu: %v, want ErrUnavailable naming the timeout", op.name, err)
		}
		// One try (not three), within the bound and the kill's wait.
		if took > bound+15*time.Second {
			t.Fatalf("%s took %v, bound %v", op.name, took, bound)
		}
		if got := run("print(x)"); got != "42\n" {
			t.Fatalf("after a hung %s the kernel lost x: %q", op.name, got)
		}
	}
	// No criu of this process is left running.
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		stat, _ := os.ReadFile("/proc/" + ent.Name() + "/stat")
		s := string(stat)
		rp := strings.LastIndexByte(s, ')')
		if rp < 0 || !strings.HasSuffix(s[:rp], "(criu") {
			continue
		}
		if f := strings.Fields(s[rp+1:]); len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("criu left running: pid %s", ent.Name())
		}
	}
}

// TestSandboxSlotsExhaustedIsLimit: out of sandbox slots is the limit
// code on every path (it was unavailable through NewDisk, limit through
// ReplaceDisk).
func TestSandboxSlotsExhaustedIsLimit(t *testing.T) {
	e := newEnvHost(t, func(c *isolate.Config) { c.Slots = 1 }, nil)
	ctx := context.Background()
	if _, err := e.m.Create(ctx, CreateOptions{Owner: 1000}); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if !errors.Is(err, ErrLimit) || errors.Is(err, ErrUnavailable) || !errors.Is(err, isolate.ErrExhausted) {
		t.Fatalf("second session with one slot: %v, want ErrLimit (slots exhausted)", err)
	}
}
