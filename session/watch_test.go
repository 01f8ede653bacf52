package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHostileWatchLimitBeforeScan: with a session's watches at their cap,
// a further start is refused before it scans the workspace (the session's
// scan count does not move), and a freed place is taken again.
func TestHostileWatchLimitBeforeScan(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{Owner: 1000})
	e.exec(t, id, "import os\nfor i in range(2000): open(f'f{i}', 'w').close()", 0)
	s, err := e.m.get(1000, id)
	if err != nil {
		t.Fatal(err)
	}
	scans := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.watchScans
	}
	var first string
	for i := range MaxWatches {
		w, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{})
		if err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
		if first == "" {
			first = w.Watch
		}
	}
	if n := scans(); n != MaxWatches {
		t.Fatalf("%d scans for %d starts", n, MaxWatches)
	}
	for range 3 {
		_, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Recursive: true})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "at most 8") {
			t.Fatalf("a start past the cap: %v, want ErrLimit naming it", err)
		}
	}
	if n := scans(); n != MaxWatches {
		t.Fatalf("starts refused at the cap scanned the workspace: %d scans, want %d", n, MaxWatches)
	}
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Action: WatchStop, Watch: first}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchStartEvery)
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{}); err != nil {
		t.Fatalf("a start after a stop: %v", err)
	}
}

// TestWatchStartRate: a session's watch starts, each a full scan, come at
// most watchStartBurst at once, then one per watchStartEvery; the refusal
// names the limit. Starts are stopped at once, so only the rate refuses.
func TestWatchStartRate(t *testing.T) {
	s := &Session{id: "s1"}
	t0 := time.Now()
	start := func(at time.Duration) error {
		err := admitWatch(s, t0.Add(at))
		if err == nil {
			s.watchStarting-- // started and stopped
		}
		return err
	}
	for i := range watchStartBurst {
		if err := start(0); err != nil {
			t.Fatalf("start %d of the burst: %v", i+1, err)
		}
	}
	err := start(0)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "one every 250ms") {
		t.Fatalf("a start past the burst: %v, want ErrLimit naming the rate", err)
	}
	if err := start(watchStartEvery); err != nil {
		t.Fatalf("a start one interval later: %v", err)
	}
	if err := start(watchStartEvery); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second start in that interval: %v, want ErrLimit", err)
	}
	// A long pause refills the burst, never more.
	for i := range watchStartBurst {
		if err := start(time.Hour); err != nil {
			t.Fatalf("start %d after a pause: %v", i+1, err)
		}
	}
	if err := start(time.Hour); !errors.Is(err, ErrLimit) {
		t.Fatalf("a start past a refilled burst: %v, want ErrLimit", err)
	}
}
