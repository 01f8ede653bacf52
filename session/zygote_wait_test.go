package session

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestFirstCreateWaitsForTheZygote: a create right after the manager
// starts, before its zygote is ready, waits for it and forks, instead of
// silently taking the import path (seconds slower, and a different
// process image) while the zygote is still starting.
func TestFirstCreateWaitsForTheZygote(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Preload = []string{"json"}; c.NoTemplate = true })
	id := createStarted(t, e.m, StartZygote)
	if out := cellStdout(t, e.m, id, "print(6 * 7)"); strings.TrimSpace(out) != "42" {
		t.Fatalf("first create's cell: %q", out)
	}
	if n := counterOf(t, e.m.Metrics().Fallbacks, "from", StartZygote); n != 0 {
		t.Errorf("jailcell_kernel_start_fallbacks_total{from=zygote} = %v, want 0", n)
	}
}

// TestZygoteFallbackIsCounted: where the zygote cannot fork (here one
// retired after failed forks), a create takes the next path, and the
// fallback is counted with its cause logged, never silent.
func TestZygoteFallbackIsCounted(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Preload = []string{"json"}; c.NoTemplate = true })
	waitZygote(t, e.m)
	z := e.m.warm.zygoteFor(e.m.cfg.Policies["default"])
	z.mu.Lock()
	z.retired = true
	z.mu.Unlock()
	if err := z.unusable(); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("a retired zygote's cause: %v", err)
	}
	id := createStarted(t, e.m, StartImport)
	if out := cellStdout(t, e.m, id, "print(6 * 7)"); !strings.Contains(out, "42") {
		t.Fatalf("cell after the fallback: %q", out)
	}
	if n := counterOf(t, e.m.Metrics().Fallbacks, "from", StartZygote); n != 1 {
		t.Errorf("jailcell_kernel_start_fallbacks_total{from=zygote} = %v, want 1", n)
	}
}

// TestCancelledCreatesDoNotRetireTheZygote: creates whose callers leave
// while their fork starts (a client's deadline) are no failure of the
// zygote's: counted as one, three of them retired it for every caller
// until a restart.
func TestCancelledCreatesDoNotRetireTheZygote(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Preload = []string{"json"}; c.NoTemplate = true })
	waitZygote(t, e.m)
	for _, d := range []time.Duration{2, 5, 10, 20, 40, 80} {
		ctx, cancel := context.WithTimeout(context.Background(), d*time.Millisecond)
		info, err := e.m.Create(ctx, CreateOptions{})
		cancel()
		if err == nil {
			_ = e.m.Close(context.Background(), 0, info.ID)
		}
	}
	z := e.m.warm.zygoteFor(e.m.cfg.Policies["default"])
	z.mu.Lock()
	failures, retired := z.failures, z.retired
	z.mu.Unlock()
	if retired || failures != 0 {
		t.Fatalf("after cancelled creates the zygote counts %d failures (retired %v), want none", failures, retired)
	}
	createStarted(t, e.m, StartZygote)
}
