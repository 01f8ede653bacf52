package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInfoTimeoutMetrics: get_info, set_timeout and get_metrics on a real
// session: the timeout moves expires_at and is refused past max_idle_ttl
// and past the lifetime; the metrics are the cgroup's and the disk's.
func TestInfoTimeoutMetrics(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	got, err := e.m.Info(ctx, 1000, id)
	if err != nil || got.ID != id || got.State != "ready" || got.Policy != "default" {
		t.Fatalf("info = %+v, %v", got, err)
	}
	if _, err := e.m.Info(ctx, 1001, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's info: %v, want ErrNotFound", err)
	}
	before := time.Now()
	got, err = e.m.SetTimeout(ctx, 1000, id, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ExpiresAt.Sub(before); d < 89*time.Second || d > 95*time.Second {
		t.Errorf("expires_at %s after set_timeout(90): %s from now, want about 90 s", got.ExpiresAt, d)
	}
	if _, err := e.m.SetTimeout(ctx, 1000, id, e.m.cfg.MaxIdleTTL+time.Second); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "max_idle_ttl") {
		t.Errorf("past max_idle_ttl: %v, want ErrBadRequest naming max_idle_ttl", err)
	}
	if e.m.cfg.MaxIdleTTL > time.Hour {
		if _, err := e.m.SetTimeout(ctx, 1000, id, time.Hour+time.Minute); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "max lifetime") {
			t.Errorf("past the lifetime: %v, want ErrBadRequest naming the max lifetime", err)
		}
	}
	if _, err := e.m.SetTimeout(ctx, 1000, id, 0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("timeout 0: %v, want ErrBadRequest", err)
	}

	// Burn CPU and memory, write to disk: the sample shows them.
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "import time\nblob = bytearray(64 << 20)\nopen('f.bin', 'wb').write(b'x' * (8 << 20))\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"}); err != nil {
		t.Fatal(err)
	}
	mt, err := e.m.SessionMetrics(ctx, 1000, id)
	if err != nil {
		t.Fatal(err)
	}
	p := e.m.cfg.Policies["default"]
	if !mt.Running || mt.CPUSeconds < 0.5 || mt.MemUsed < 64<<20 || mt.MemTotal != p.MemoryBytes || mt.CPUCount != p.CPUs ||
		mt.DiskUsed < 8<<20 || mt.DiskTotal < mt.DiskUsed || mt.CPUUsedPct <= 0 || mt.CPUUsedPct > 100 {
		t.Errorf("metrics = %+v, want >= 0.5 s CPU, >= 64 MiB memory of %d, >= 8 MiB disk", mt, p.MemoryBytes)
	}
}

// TestFileOpsAndWatch: stat, remove and make_dir through the confined
// workspace, and a directory watch that sees a cell create, write, rename
// and remove files, bounded in number.
func TestFileOpsAndWatch(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	created, err := e.m.Workspace().MakeDir(ctx, 1000, id, "a/b")
	if err != nil || !created {
		t.Fatalf("make_dir a/b = %v, %v", created, err)
	}
	if created, err := e.m.Workspace().MakeDir(ctx, 1000, id, "/work/a/b"); err != nil || created {
		t.Errorf("make_dir again = %v, %v; want false, nil", created, err)
	}
	res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "import os\nopen('a/b/f.txt', 'w').write('hi')\nos.symlink('/etc', 'link')\nos.stat('a/b').st_uid"})
	if err != nil || res.Status != StatusOK || res.Value["text/plain"] != "0" {
		t.Fatalf("the cell uses the new directory as its root: %+v, %v", res, err)
	}
	if st, err := e.m.Workspace().Stat(ctx, 1000, id, "a/b/f.txt"); err != nil || st.Size != 2 || st.Dir {
		t.Errorf("stat a/b/f.txt = %+v, %v", st, err)
	}
	if st, err := e.m.Workspace().Stat(ctx, 1000, id, "a"); err != nil || !st.Dir {
		t.Errorf("stat a = %+v, %v", st, err)
	}
	if _, err := e.m.Workspace().Stat(ctx, 1000, id, "missing"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("stat missing: %v, want ErrNotFound naming it", err)
	}
	if _, err := e.m.Workspace().Stat(ctx, 1000, id, "link/passwd"); errors.Is(err, ErrNotFound) || err == nil {
		t.Errorf("stat through a planted symlink: %v, want a refusal", err)
	}
	if _, err := e.m.Workspace().MakeDir(ctx, 1000, id, "link/x"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("make_dir through a planted symlink: %v, want ErrBadRequest", err)
	}
	if err := e.m.Workspace().Remove(ctx, 1000, id, "link"); err != nil {
		t.Errorf("remove the symlink itself: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "", "/work"} {
		if err := e.m.Workspace().Remove(ctx, 1000, id, bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("remove %q: %v, want ErrBadRequest", bad, err)
		}
	}

	w, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Path: "a", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "open('a/new.txt', 'w').write('n')\nopen('a/b/f.txt', 'a').write('!')\nos.rename('a/new.txt', 'a/moved.txt')\nos.makedirs('a/c')"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchMinInterval)
	got, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Action: WatchPoll, Watch: w.Watch})
	if err != nil {
		t.Fatal(err)
	}
	want := []WatchEvent{{Name: "b/f.txt", Type: EventWrite}, {Name: "c", Type: EventCreate}, {Name: "moved.txt", Type: EventCreate}, {Name: "moved.txt", Type: EventWrite}}
	if !slices.Equal(got.Events, want) {
		t.Errorf("events = %v, want %v", got.Events, want)
	}
	if err := e.m.Workspace().Remove(ctx, 1000, id, "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "os.rename('a/moved.txt', 'a/c/m.txt')"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchMinInterval)
	got, err = e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Action: WatchPoll, Watch: w.Watch})
	want = []WatchEvent{{Name: "b", Type: EventRemove}, {Name: "b/f.txt", Type: EventRemove}, {Name: "c/m.txt", Type: EventCreate}, {Name: "c/m.txt", Type: EventWrite}, {Name: "moved.txt", Type: EventRename}}
	if err != nil || !slices.Equal(got.Events, want) {
		t.Errorf("events = %v, %v; want %v", got.Events, err, want)
	}
	if _, err := e.m.Workspace().Stat(ctx, 1000, id, "a/b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a/b after remove: %v", err)
	}

	// Bounded: MaxWatches per session; a stopped one is gone.
	for i := 1; i < MaxWatches; i++ {
		if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{}); !errors.Is(err, ErrLimit) {
		t.Errorf("watch %d: %v, want ErrLimit", MaxWatches+1, err)
	}
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Action: WatchStop, Watch: w.Watch}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Action: WatchPoll, Watch: w.Watch}); !errors.Is(err, ErrNotFound) {
		t.Errorf("poll of a stopped watch: %v, want ErrNotFound", err)
	}
	if _, err := e.m.Workspace().Watch(ctx, 1000, id, WatchRequest{Path: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("watch of a missing directory: %v, want ErrNotFound", err)
	}
}

// TestWatchDiffBound: a flood of changes is cut at MaxWatchEvents and
// said to be.
func TestWatchDiffBound(t *testing.T) {
	after := map[string]fileStamp{}
	for i := range MaxWatchEvents + 5 {
		after[fmt.Sprintf("f%05d", i)] = fileStamp{ino: uint64(i + 1)}
	}
	evs, overflow := watchDiff(map[string]fileStamp{}, after)
	if len(evs) != MaxWatchEvents || !overflow {
		t.Errorf("%d events, overflow %v; want %d, true", len(evs), overflow, MaxWatchEvents)
	}
}
