package session

import (
	"context"
	"errors"
	"testing"
	"time"
)

// gateStarts holds every kernel start until release is called (or the
// start's ctx ends) and reports each start as it begins.
func gateStarts(t *testing.T) (began <-chan struct{}, release func()) {
	t.Helper()
	b := make(chan struct{}, 16)
	open := make(chan struct{})
	startGate = func(ctx context.Context) error {
		b <- struct{}{}
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	var once bool
	release = func() {
		if !once {
			once = true
			close(open)
		}
	}
	t.Cleanup(func() { release(); startGate = nil })
	return b, release
}

// TestLostVerdictDoesNotWaitForKernelStart: a cell that kills its kernel
// gets its verdict while the replacement kernel is still starting (a
// verdict used to wait for a new kernel and its preload: 47-62 s p50 for
// exit, OOM and fork-bomb cells in the soak under load). The session's next
// cell waits for that start instead of answering busy, and runs in the new
// kernel; a close during the start cancels it and returns promptly.
func TestLostVerdictDoesNotWaitForKernelStart(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, "x = 1", 0), StatusOK)

	began, release := gateStarts(t)
	var res *Result
	if !within(t, 30*time.Second, "the lost verdict while its replacement's start is held", release, func() {
		res = e.exec(t, id, "import os\nos._exit(3)", 0)
	}) {
		return
	}
	if res.State != StateLost || res.Status != StatusKilled {
		t.Fatalf("verdict = %s/%s (%s), want killed/lost", res.Status, res.State, res.StateReason)
	}
	select {
	case <-began:
	case <-time.After(30 * time.Second):
		t.Fatal("no kernel start began after the lost verdict")
	}

	// The next cell waits for the held start: not busy, not an error.
	next := make(chan error, 1)
	var nextRes *Result
	go func() {
		r, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "print('x' in globals())"})
		nextRes = r
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("the next cell returned (%v) while its kernel was still starting", err)
	case <-time.After(300 * time.Millisecond):
	}
	// A caller that gives up gets busy naming the restart, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := e.m.Exec(ctx, 0, id, ExecRequest{Code: "1"})
	cancel()
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Exec with a short deadline during the start: %v, want busy", err)
	}
	release()
	if err := <-next; err != nil {
		t.Fatalf("next cell: %v", err)
	}
	wantStatus(t, nextRes, StatusOK)
	if nextRes.Stdout != "False\n" {
		t.Fatalf("next cell ran in %q, want a fresh kernel (False)", nextRes.Stdout)
	}

	// Lost again, and closed while its replacement is held: the close
	// cancels the start and returns promptly.
	began, _ = gateStarts(t)
	res = e.exec(t, id, "import os\nos._exit(4)", 0)
	if res.State != StateLost {
		t.Fatalf("second verdict state %q, want lost", res.State)
	}
	<-began
	start := time.Now()
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatalf("Close during a held start: %v", err)
	}
	if d := time.Since(start); d > endLockWait {
		t.Fatalf("Close took %s: it waited on the held start", d)
	}
}
