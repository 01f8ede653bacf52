package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
)

// Host-side file access into a session must never block: a cell can put a
// FIFO where the host expects a directory or a file, or swap one in while
// the host walks. Each operation below runs with a deadline inside the test,
// so that a regression fails instead of hanging the run; on a timeout the
// FIFOs are opened for writing from the host, which releases a blocked open
// so that the cleanup can still end the session.

// within runs op and fails the test if it does not return within d.
func within(t *testing.T, d time.Duration, what string, release func(), op func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		op()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not return within %s: a host-side operation blocked", what, d)
	}
	// Unblock it so the session can still be torn down.
	for {
		release()
		select {
		case <-done:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fifoRelease returns a function that opens each FIFO name of session id's
// workspace for writing, through the overlay and through its upper layer
// (a FIFO of an overlay is its own pipe): a host open blocked on it
// returns.
func fifoRelease(e *env, id string, names ...string) func() {
	s, err := e.m.get(0, id)
	if err != nil {
		return func() {}
	}
	return func() {
		for _, base := range []string{s.disk.RootDir(), s.disk.UpperDir()} {
			for _, n := range names {
				if fd, err := unix.Open(filepath.Join(base, "work", n), unix.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
					unix.Close(fd)
				}
			}
		}
	}
}

// TestHostileFIFOInUploadPath: a FIFO as a directory of an upload path, as
// the file uploaded, in an exec's files and as a download is refused at
// once (bad request naming the path), and the session keeps working.
func TestHostileFIFOInUploadPath(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	// The planted link names a host directory holding a decoy passwd, never
	// the host's /etc: if confinement regressed, the upload of l/passwd
	// must damage only the decoy (an earlier version of this class of test
	// overwrote the host's /etc/passwd when its opener was broken on purpose).
	decoy := t.TempDir()
	if err := os.WriteFile(filepath.Join(decoy, "passwd"), []byte(testenv.DecoyPasswd), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if b, err := os.ReadFile(filepath.Join(decoy, "passwd")); err != nil || string(b) != testenv.DecoyPasswd {
			t.Errorf("the decoy behind the planted symlink was written (%q, %v): a host-side write followed the cell's link", b, err)
		}
	}()
	wantStatus(t, e.exec(t, id, fmt.Sprintf("import os\nos.mkfifo('p')\nos.mkfifo('q')\nos.symlink(%q, 'l')\nimport socket\nsocket.socket(socket.AF_UNIX).bind('sock')", decoy), 0), StatusOK)
	release := fifoRelease(e, id, "p", "q")
	const bound = 10 * time.Second

	badRequest := func(what, path string, err error) {
		t.Helper()
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want a bad request naming %s", what, err, path)
		}
	}
	for _, p := range []string{"p/x.txt", "p/a/b/x.txt", "q", "sock", "sock/x", "l/x.txt", "l"} {
		var err error
		start := time.Now()
		if within(t, bound, "Upload "+p, release, func() { _, err = e.m.Workspace().Upload(context.Background(), 0, id, p, []byte("data"), nil) }) {
			badRequest("Upload "+p, p, err)
			if d := time.Since(start); d > time.Second {
				t.Errorf("Upload %s took %s", p, d)
			}
		}
	}
	for _, p := range []string{"p/x.txt", "q", "sock", "l/passwd"} {
		var err error
		if within(t, bound, "Exec with file "+p, release, func() {
			_, err = e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "pass", Files: []File{{Path: p, Data: []byte("x")}}})
		}) {
			badRequest("Exec with file "+p, p, err)
		}
	}
	for _, p := range []string{"p/x.txt", "q", "sock"} {
		var err error
		if within(t, bound, "Download "+p, release, func() { _, err = e.m.Workspace().Download(context.Background(), 0, id, p) }) {
			badRequest("Download "+p, p, err)
		}
	}

	// The same while the session has no kernel (files go to the upper
	// layer directly): a hibernated or restarting session.
	s, _ := e.m.get(0, id)
	within(t, bound, "Upload into the upper layer", release, func() {
		err := e.m.ws.placeFiles(&Session{disk: s.disk}, []File{{Path: "p/x.txt", Data: []byte("x")}}, nil)
		badRequest("placeFiles into the upper layer", "p/x.txt", err)
	})

	// Still usable: a cell, an upload, a download, a listing.
	if _, err := e.m.Workspace().Upload(context.Background(), 0, id, "ok/fine.txt", []byte("fine"), nil); err != nil {
		t.Fatalf("Upload after refusals: %v", err)
	}
	d, err := e.m.Workspace().Download(context.Background(), 0, id, "ok/fine.txt")
	if err != nil || string(d.Data) != "fine" {
		t.Fatalf("Download after refusals = %v, %v", d, err)
	}
	res := e.exec(t, id, "print(open('ok/fine.txt').read())", 0)
	wantStatus(t, res, StatusOK)
	if strings.TrimSpace(res.Stdout) != "fine" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
	var ents []Entry
	if within(t, bound, "Files", release, func() { ents, err = e.m.Workspace().Files(context.Background(), 0, id) }) {
		var paths []string
		for _, en := range ents {
			paths = append(paths, en.Path)
		}
		for _, want := range []string{"p", "q", "ok/fine.txt"} {
			if err != nil || !slices.Contains(paths, want) {
				t.Errorf("Files = %v, %v; want %s listed", paths, err, want)
			}
		}
	}
}

// exchangeLoop swaps directory d (holding inner.txt) and FIFO f with
// renameat2(RENAME_EXCHANGE) in a background thread of the kernel until
// the global _stop is set, between stable files on either side.
const exchangeLoop = `
import os, ctypes, threading
os.makedirs('sub', exist_ok=True)
open('a_keep.txt', 'w').write('a')
open('sub/keep.txt', 'w').write('s')
os.mkdir('d'); open('d/inner.txt', 'w').write('i')
os.mkfifo('f')
open('z_keep.txt', 'w').write('z')
_libc = ctypes.CDLL(None, use_errno=True)
_stop = False
_swaps = 0
def _swap():
    global _swaps
    while not _stop:
        if _libc.renameat2(-100, b'd', -100, b'f', 2) == 0:  # RENAME_EXCHANGE
            _swaps += 1
threading.Thread(target=_swap, daemon=True).start()
`

// TestHostileExchangeDirFIFOWhileListing: a cell swaps a directory and a
// FIFO in a loop (renameat2 RENAME_EXCHANGE) while the client lists the
// workspace and runs cells: no listing hangs, none leaves out a file that
// exists, no cell reports deleted a file that exists, and the persisted
// copy keeps every file.
func TestHostileExchangeDirFIFOWhileListing(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{Persist: "exchange"})
	release := fifoRelease(e, id, "d", "f")
	const bound = 10 * time.Second
	var res *Result
	if !within(t, bound, "the setup cell", release, func() { res = e.exec(t, id, exchangeLoop, 0) }) {
		return
	}
	wantStatus(t, res, StatusOK)
	stable := []string{"a_keep.txt", "sub/keep.txt", "z_keep.txt"}
	checkNoneDeleted := func(what string, changes []FileChange) {
		t.Helper()
		for _, c := range changes {
			if c.Change == "deleted" && slices.Contains(stable, c.Path) {
				t.Errorf("%s reported %s deleted; it exists", what, c.Path)
			}
		}
	}
	checkNoneDeleted("the setup cell", res.Files)

	listed, busy := 0, 0
	end := time.Now().Add(4 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		var ents []Entry
		var err error
		if !within(t, bound, "Files during the exchange loop", release, func() { ents, err = e.m.Workspace().Files(context.Background(), 0, id) }) {
			return
		}
		switch {
		case errors.Is(err, ErrBusy):
			busy++
		case err != nil:
			t.Fatalf("Files: %v", err)
		default:
			listed++
			var paths []string
			for _, en := range ents {
				paths = append(paths, en.Path)
			}
			for _, want := range stable {
				if !slices.Contains(paths, want) {
					t.Errorf("Files left out %s, which exists: %v", want, paths)
				}
			}
			if slices.Contains(paths, "d/inner.txt") == slices.Contains(paths, "f/inner.txt") {
				t.Errorf("Files lists inner.txt under neither or both names: %v", paths)
			}
		}
		if i%4 == 0 {
			var r *Result
			if !within(t, bound, "a cell during the exchange loop", release, func() {
				r, err = e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "print(_swaps)"})
			}) {
				return
			}
			if err != nil {
				t.Fatalf("Exec during the exchange loop: %v", err)
			}
			wantStatus(t, r, StatusOK)
			checkNoneDeleted("a cell during the exchange loop", r.Files)
		}
	}
	if !within(t, bound, "the stopping cell", release, func() { res = e.exec(t, id, "_stop = True\nimport time; time.sleep(0.2)\nprint(_swaps)", 0) }) {
		return
	}
	wantStatus(t, res, StatusOK)
	checkNoneDeleted("the stopping cell", res.Files)
	t.Logf("%d listings, %d refused as busy; %s swaps", listed, busy, strings.TrimSpace(res.Stdout))
	if strings.TrimSpace(res.Stdout) == "0" {
		t.Fatal("the cell never swapped: the race was not run")
	}
	// Quiet now: a listing succeeds.
	if ents, err := e.m.Workspace().Files(context.Background(), 0, id); err != nil || len(ents) == 0 {
		t.Fatalf("Files once quiet = %v, %v", ents, err)
	}
	// The store kept every stable file: a new session restores them.
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "exchange"})
	if err != nil {
		t.Fatalf("Create restoring: %v", err)
	}
	for _, want := range stable {
		if !slices.Contains(info.Restored, want) {
			t.Errorf("restored %v: %s missing (deleted from the store)", info.Restored, want)
		}
	}
}

// TestHostileStuckSessionDoesNotStopExpiry: a session whose run lock is
// held by a stuck host-side operation (simulated: the test holds it) does
// not stop the janitor: the other sessions expire on time, the stuck one
// is ended and reported once it was held idleHoldWait past its TTL, and
// Shutdown returns within its bound with the stuck session named.
func TestHostileStuckSessionDoesNotStopExpiry(t *testing.T) {
	old, oldHold := endLockWait, idleHoldWait
	endLockWait, idleHoldWait = 2*time.Second, time.Second
	t.Cleanup(func() { endLockWait, idleHoldWait = old, oldHold })
	e := newEnv(t, func(c *Config) { c.JanitorInterval = 100 * time.Millisecond })
	stuckID := e.create(t, CreateOptions{TTL: time.Hour})
	otherID := e.create(t, CreateOptions{TTL: time.Hour})
	lastID := e.create(t, CreateOptions{TTL: time.Hour})
	var ss []*Session
	for _, id := range []string{stuckID, otherID, lastID} {
		s, err := e.m.get(0, id)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	stuck, other, last := ss[0], ss[1], ss[2]
	stuck.run.Lock()
	last.run.Lock()
	// The stuck one expires first, the other 2 s later.
	start := time.Now()
	for s, ttl := range map[*Session]time.Duration{stuck: time.Second, other: 3 * time.Second} {
		s.mu.Lock()
		s.lastUsed, s.ttl = start, ttl
		s.mu.Unlock()
	}
	var unlocked bool
	unlock := func() {
		if !unlocked {
			unlocked = true
			stuck.run.Unlock()
			last.run.Unlock()
		}
	}
	// Before the env's Shutdown and leftovers check: let the stuck
	// sessions' destroys run and wait for them.
	t.Cleanup(func() {
		unlock()
		deadline := time.Now().Add(30 * time.Second)
		for _, s := range []*Session{stuck, last} {
			for {
				var st unix.Stat_t
				if err := unix.Stat(s.dir, &st); err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("stuck session %s not destroyed after its lock was released", s.id)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})

	// The other session expires at 3 s; allow the janitor's interval and
	// the teardown, but not an unbounded wait behind the stuck one.
	deadline := start.Add(3*time.Second + 5*time.Second)
	for {
		_, err := e.m.get(0, otherID)
		if errors.Is(err, ErrNotFound) && strings.Contains(err.Error(), "expired") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("session %s did not expire while another session was stuck: %v", otherID, err)
			unlock() // let the janitor go, so that the test ends
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.m.get(0, stuckID); !errors.Is(err, ErrNotFound) {
		t.Errorf("stuck session still live after its TTL: %v", err)
	}

	// Shutdown with the last session stuck: bounded, and it says which.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start = time.Now()
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		serr = e.m.Shutdown(ctx)
	}()
	select {
	case <-done:
	case <-time.After(endLockWait + 20*time.Second):
		t.Errorf("Shutdown did not return within %s with a session stuck", endLockWait+20*time.Second)
		unlock()
		<-done
		return
	}
	t.Logf("Shutdown returned in %s: %v", time.Since(start).Round(time.Millisecond), serr)
	if serr == nil || !strings.Contains(serr.Error(), lastID) || !strings.Contains(serr.Error(), "stuck") {
		t.Errorf("Shutdown = %v, want an error naming stuck session %s", serr, lastID)
	}
}
