package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// execAs runs one cell in session id on behalf of owner.
func (e *env) execAs(t *testing.T, owner int, id, code string) *Result {
	t.Helper()
	res, err := e.m.Exec(context.Background(), owner, id, ExecRequest{Code: code})
	if err != nil {
		t.Fatalf("Exec(%q) as uid %d: %v", code, owner, err)
	}
	return res
}

// TestHostileKernelExitsBetweenCells: a cell leaves a timer that ends the
// kernel after the cell returned. The next cell must run (in a new kernel)
// and say the state was lost and why, not come back "killed" for code that
// never ran.
func TestHostileKernelExitsBetweenCells(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, "import os, threading\nx = 1\nthreading.Timer(0.5, os._exit, (0,)).start()", 0), StatusOK)
	time.Sleep(1500 * time.Millisecond)
	res := e.exec(t, id, "open('ran.txt', 'w').write('yes')\nprint('x' in globals())", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "False\n" {
		t.Fatalf("stdout %q, want False (a fresh kernel)", res.Stdout)
	}
	if res.State != StateLost || !strings.Contains(res.StateReason, "exited with 0 after the previous cell") {
		t.Fatalf("state %q (%q), want lost: the kernel exited after the previous cell", res.State, res.StateReason)
	}
	if d, err := e.m.Workspace().Download(context.Background(), 0, id, "ran.txt"); err != nil || string(d.Data) != "yes" {
		t.Fatalf("the cell's code did not run: %v", err)
	}
	// The new kernel keeps its state as usual.
	wantStatus(t, e.exec(t, id, "y = 2", 0), StatusOK)
	if res := e.exec(t, id, "print(y)", 0); res.Stdout != "2\n" || res.State != StateKept {
		t.Fatalf("after the restart: %+v", res)
	}
}

// TestHostileKernelLinkCutBetweenCells: a cell cuts its kernel's link to
// the host and the kernel lives on. The next cell is sent on a dead link,
// so the kernel never acknowledges it: the host must tell that from a
// cell that died while running, and run the cell in a new kernel.
func TestHostileKernelLinkCutBetweenCells(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, `import gc, socket, threading, time
x = 1
_l = [o for o in gc.get_objects() if type(o).__name__ == "_Link"][0]
def _cut():
    time.sleep(0.3)
    _l.sock.shutdown(socket.SHUT_RDWR)
threading.Thread(target=_cut).start()`, 0), StatusOK)
	time.Sleep(time.Second)
	res := e.exec(t, id, "open('ran.txt', 'w').write('yes')\nprint('x' in globals())", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "False\n" || res.State != StateLost || !strings.Contains(res.StateReason, "after the previous cell") {
		t.Fatalf("result %+v, want the cell run in a fresh kernel, state lost with the reason", res)
	}
	if d, err := e.m.Workspace().Download(context.Background(), 0, id, "ran.txt"); err != nil || string(d.Data) != "yes" {
		t.Fatalf("the cell's code did not run: %v", err)
	}
}

// TestHostileRequestTimeoutPastSessionLimit: a session created with
// limits.timeout_s may not be given more time by a later request.
func TestHostileRequestTimeoutPastSessionLimit(t *testing.T) {
	e := newEnv(t, nil)
	two := 2.0
	id := e.create(t, CreateOptions{Override: &policy.Override{TimeoutS: &two}})
	start := time.Now()
	res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "import time\ntime.sleep(8)", Timeout: 30 * time.Second})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "timeout_s = 30") || !strings.Contains(err.Error(), "allowed up to 2") {
		t.Fatalf("exec asking 30 s in a 2 s session: res %+v, err %v; want bad_request naming timeout_s and the limit", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusal took %s: the cell ran", d)
	}
	// The limit is the default too, and a request within it is served.
	start = time.Now()
	wantStatus(t, e.exec(t, id, "import time\ntime.sleep(8)", 0), StatusTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("default timeout: the cell ran %s in a 2 s session", d)
	}
	wantStatus(t, e.exec(t, id, "print(1)", 2*time.Second), StatusOK)
}

// TestHostilePersistAcrossOwners: persist names are chosen by callers, so
// another user naming the same one must neither restore (read) nor
// overwrite the first user's saved workspace.
func TestHostilePersistAcrossOwners(t *testing.T) {
	e := newEnv(t, nil)
	const alice, bob = 1000, 2000
	a := e.create(t, CreateOptions{Owner: alice, Persist: "proj"})
	wantStatus(t, e.execAs(t, alice, a, "open('secret.txt', 'w').write('alice')"), StatusOK)
	if err := e.m.Close(context.Background(), alice, a); err != nil {
		t.Fatal(err)
	}

	info, err := e.m.Create(context.Background(), CreateOptions{Owner: bob, Persist: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Restored) != 0 {
		t.Fatalf("uid %d restored uid %d's workspace: %v", bob, alice, info.Restored)
	}
	res := e.execAs(t, bob, info.ID, "import os\nprint(os.path.exists('secret.txt'))\nopen('secret.txt', 'w').write('bob')")
	if res.Stdout != "False\n" {
		t.Fatalf("uid %d sees uid %d's file: %q", bob, alice, res.Stdout)
	}
	if err := e.m.Close(context.Background(), bob, info.ID); err != nil {
		t.Fatal(err)
	}

	info, err = e.m.Create(context.Background(), CreateOptions{Owner: alice, Persist: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Restored) != 1 || info.Restored[0] != "secret.txt" {
		t.Fatalf("restored %v, want alice's secret.txt", info.Restored)
	}
	if res := e.execAs(t, alice, info.ID, "print(open('secret.txt').read())"); res.Stdout != "alice\n" {
		t.Fatalf("alice's workspace holds %q: overwritten by another uid", res.Stdout)
	}
}

// TestHostileKernelStalledBetweenCells: a thread an earlier cell left
// takes the kernel's link lock, so the kernel can never acknowledge the
// next cell. The host kills it at the deadline; the answer is an error
// saying the cell did not run, never a timeout verdict for it.
func TestHostileKernelStalledBetweenCells(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, `import gc, threading, time
_l = [o for o in gc.get_objects() if type(o).__name__ == "_Link"][0]
def _hold():
    time.sleep(0.3)
    _l.lock.acquire()
threading.Thread(target=_hold, daemon=True).start()`, 0), StatusOK)
	time.Sleep(time.Second)
	res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: "open('ran.txt', 'w').write('yes')", Timeout: time.Second})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the cell did not run") {
		t.Fatalf("result %+v, err %v: want an error saying the cell did not run", res, err)
	}
	if _, err := e.m.Workspace().Download(context.Background(), 0, id, "ran.txt"); err == nil {
		t.Fatal("the cell ran after all")
	}
	if res := e.exec(t, id, "print('fresh')", 0); res.Stdout != "fresh\n" {
		t.Fatalf("next cell: %+v", res)
	}
}
