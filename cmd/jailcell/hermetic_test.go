package main

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// requests counts the HTTP requests a debug-logging serve has answered.
func requests(svc *testenv.Service) int {
	return strings.Count(svc.Log.String(), `"msg":"http request"`) + strings.Count(svc.Log.String(), `msg="http request"`)
}

// TestEngineFlagsWithServiceRunning: with a real service answering on the
// socket a front door would use, engine flags make `jailcell json` build
// its sandboxes itself (root): the cell runs and the service sees no
// request at all. The same command without them goes to the service
// (the control: the count can move).
func TestEngineFlagsWithServiceRunning(t *testing.T) {
	svc := startServe(t, "root", "")
	r := testenv.Rootfs(t)
	env := jailcellEnv("JAILCELL_SOCKET=" + svc.Sock)
	exec1 := `{"id":1,"op":"exec","code":"print(6*7)"}` + "\n"

	before := requests(svc)
	state := testenv.StateDir(t)
	cmd := exec.Command(os.Args[0], "json", "--rootfs", r.Root, "--state-dir", state)
	cmd.Env = append(env, "JAILCELL_REVIEW_DIR="+state+"/review") // an engine key too
	code, stdout, stderr := testenv.Run(t, cmd, exec1)
	if code != 0 || !strings.Contains(stdout, `42\n`) {
		t.Fatalf("json --rootfs --state-dir beside a service: exit %d\n%s\n%s", code, stdout, stderr)
	}
	time.Sleep(200 * time.Millisecond) // a request's log line follows its answer
	if n := requests(svc) - before; n != 0 {
		t.Errorf("json with engine flags sent %d requests to the service:\n%s", n, svc.Log.Tail(20))
	}
	if _, err := os.Stat(filepath.Join(state, lockName)); err != nil {
		t.Errorf("json with --state-dir did not use it: %v", err)
	}

	// The control: no engine flag, the service is used.
	cmd = exec.Command(os.Args[0], "json")
	cmd.Env = env
	code, stdout, stderr = testenv.Run(t, cmd, exec1)
	if code != 0 || !strings.Contains(stdout, `42\n`) {
		t.Fatalf("json beside a service: exit %d\n%s\n%s", code, stdout, stderr)
	}
	svc.WaitLog(t, "http request", "exec")
}

// TestInstalledServiceNotUsedByTests: a real `jailcell serve` on the
// DEFAULT socket with /etc/jailcell/config.yaml in place (0640 root:root,
// as make install leaves it): what the tests start never finds either.
// The test's own configuration is the hermetic one, a test's jailcell
// looking for "the configured socket" does not reach the service, and
// the service answers no request but the test's own health check. Runs
// only when those paths are free, and removes all it made.
func TestInstalledServiceNotUsedByTests(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	for _, p := range []string{"/etc/jailcell", defaultSocket} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Skipf("requires %s to be free (jailcell is installed here; the service it runs is already what this test builds): %v", p, err)
		}
	}
	runFi, runErr := os.Lstat("/run/jailcell")
	t.Cleanup(func() {
		os.RemoveAll("/etc/jailcell")
		if runErr == nil { // serve made it 0750 root:socket_group; as it was
			st := runFi.Sys().(*syscall.Stat_t)
			os.Chown("/run/jailcell", int(st.Uid), int(st.Gid))
			os.Chmod("/run/jailcell", runFi.Mode().Perm())
			os.Remove(defaultSocket)
		}
		if errors.Is(runErr, fs.ErrNotExist) {
			// Only what serve made: the socket and an idle claims directory.
			os.Remove(defaultSocket)
			os.Remove("/run/jailcell/claims/claims.lock")
			os.Remove("/run/jailcell/claims")
			os.Remove("/run/jailcell")
		}
	})
	if err := os.Mkdir("/etc/jailcell", 0o755); err != nil {
		t.Fatal(err)
	}
	state := testenv.StateDir(t)
	cfg := "state_dir: " + state + "\nrootfs: " + r.Root + "\nsocket_group: root\nlog:\n  level: debug\n  format: json\nsessions:\n  max: 2\npolicies:\n" + testenv.DefaultPolicy
	if err := os.WriteFile("/etc/jailcell/config.yaml", []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
	// As the unit file starts it.
	log := &testenv.LockedBuffer{}
	serve := exec.Command(os.Args[0], "serve", "--config", "/etc/jailcell/config.yaml")
	serve.Env = append(os.Environ(), "JAILCELL_TEST_MAIN=1") // as an installed service: no test environment
	serve.Stderr = log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = serve.Process.Kill()
			<-done
			t.Errorf("serve on the default socket did not stop")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", log.Tail(40))
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("unix", defaultSocket); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve on %s did not listen:\n%s", defaultSocket, log.String())
		}
	}
	if status, body := curl(t, defaultSocket, "http://jailcell/healthz"); status != 200 {
		t.Fatalf("healthz on the default socket: %d %s", status, body)
	}
	wantMode(t, "/run/jailcell", 0o750, 0, 0)

	// This test process: the hermetic configuration, not the host's.
	c, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != testenv.HermeticConfig() || c.Socket != testenv.NoServiceSocket {
		t.Errorf("the test process reads %q, socket %q; want the hermetic %q, %q", c.File, c.Socket, testenv.HermeticConfig(), testenv.NoServiceSocket)
	}
	// A test's jailcell asked for "the configured socket" finds none.
	for _, args := range [][]string{{"json", "--connect"}, {"mcp", "--connect"}, {"run", "--connect", "-"}} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = jailcellEnv()
		code, stdout, stderr := testenv.Run(t, cmd, "print(1)\n")
		if code == 0 || !strings.Contains(stderr, testenv.NoServiceSocket) {
			t.Errorf("%v in a test's environment: exit %d, want no service at %s\nstdout: %s\nstderr: %s", args, code, testenv.NoServiceSocket, stdout, stderr)
		}
	}
	// A test's `jailcell config` shows the hermetic file, not /etc/jailcell.
	cmd := exec.Command(os.Args[0], "config")
	cmd.Env = jailcellEnv()
	_, stdout, _ := testenv.Run(t, cmd, "")
	if strings.Contains(stdout, "/etc/jailcell") || !strings.Contains(stdout, testenv.HermeticConfig()) {
		t.Errorf("a test's jailcell config:\n%s", stdout)
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(log.String(), `"msg":"http request"`); n != 1 { // the health check above
		t.Errorf("the service on the default socket answered %d requests, want only the test's own health check:\n%s", n, log.Tail(20))
	}
}
