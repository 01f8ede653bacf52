package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// TestServeKeepsSessionsByDefault: the built binary with an EMPTY config
// (only its paths hermetic: socket, state dir, claim dir) keeps a
// session's variables across what a routine restart sends, SIGTERM, and
// across kill -9: x = 41, then x + 1 is 42 after each. Closed at the end,
// the session leaves nothing behind.
func TestServeKeepsSessionsByDefault(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	bin := testenv.Jailcell(t)
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sock, state := filepath.Join(dir, "run", "j.sock"), filepath.Join(dir, "state")
	// The tests' environment without their opt-out of keeping sessions:
	// every sessions.* key at its default.
	var env []string
	for _, kv := range testenv.ChildEnv("JAILCELL_SANDBOX_CLAIM_DIR=" + t.TempDir()) {
		if !strings.HasPrefix(kv, "JAILCELL_SESSIONS_") {
			env = append(env, kv)
		}
	}
	type daemon struct {
		cmd  *exec.Cmd
		log  *testenv.LockedBuffer
		done chan error
	}
	var cur *daemon
	start := func() *daemon {
		t.Helper()
		d := &daemon{log: &testenv.LockedBuffer{}, done: make(chan error, 1)}
		d.cmd = exec.Command(bin, "serve", "--config", cfg, "--socket", sock, "--state-dir", state, "--rootfs", r.Root)
		d.cmd.Env, d.cmd.Stderr = env, d.log
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { d.done <- d.cmd.Wait() }()
		cur = d
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				return d
			}
			select {
			case err := <-d.done:
				t.Fatalf("serve exited at start: %v\n%s", err, d.log.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve did not listen within 60 s:\n%s", d.log.String())
			}
		}
	}
	stop := func(d *daemon, sig syscall.Signal) {
		t.Helper()
		_ = d.cmd.Process.Signal(sig)
		select {
		case err := <-d.done:
			if sig == syscall.SIGTERM && err != nil {
				t.Fatalf("serve exited with %v after SIGTERM, want 0:\n%s", err, d.log.String())
			}
		case <-time.After(2 * time.Minute):
			_ = d.cmd.Process.Kill()
			t.Fatalf("serve did not stop within 2 min of %v:\n%s", sig, d.log.String())
		}
	}
	t.Cleanup(func() {
		if cur != nil && cur.cmd.ProcessState == nil {
			stop(cur, syscall.SIGTERM)
		}
		if t.Failed() && cur != nil {
			t.Logf("last serve's log:\n%s", cur.log.String())
		}
	})

	d := start()
	status, body := curl(t, sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	sid := decode(t, body).Session
	if status != 201 || sid == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	execIn(t, sock, sid, "x = 41")

	stop(d, syscall.SIGTERM) // systemctl restart, an upgrade, a reboot
	// Where criu works the stop hibernates the session (it would survive
	// a reboot too); elsewhere its kernel is left running for re-adoption.
	how := "session re-adopted"
	if isolate.ProbeCriu(isolate.DefaultCriu) == nil {
		how = "hibernated session re-adopted"
		if !strings.Contains(d.log.String(), "session hibernated") {
			t.Errorf("criu works here, but the stop did not hibernate the session:\n%s", d.log.String())
		}
	}
	d = start()
	waitLog(t, d.log, how, sid)
	if w := execIn(t, sock, sid, "print(x + 1)"); w.Result.Stdout != "42\n" {
		t.Fatalf("after SIGTERM and a start: %+v", w.Result)
	}

	stop(d, syscall.SIGKILL) // a crash
	d = start()
	if w := execIn(t, sock, sid, "print(x + 1)"); w.Result.Stdout != "42\n" {
		t.Fatalf("after kill -9 and a start: %+v", w.Result)
	}

	if status, body := curl(t, sock, "-X", "DELETE", "http://jailcell/v1/sessions/"+sid); status != 200 {
		t.Fatalf("close: %d %s", status, body)
	}
	stop(d, syscall.SIGTERM)
	for _, sub := range []string{"sessions", "sandboxes", "containers"} {
		if ents, _ := os.ReadDir(filepath.Join(state, sub)); len(ents) != 0 {
			t.Errorf("state dir %s after the session closed and serve stopped: %v", sub, ents)
		}
	}
	if mi, _ := os.ReadFile("/proc/thread-self/mountinfo"); strings.Contains(string(mi), state) {
		t.Errorf("mounts left under %s", state)
	}
}

// waitLog waits up to 15 s for a line of log holding every part.
func waitLog(t *testing.T, log *testenv.LockedBuffer, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(log.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return
			}
		}
	}
	t.Fatalf("no log line with %q within 15 s:\n%s", parts, log.String())
}
