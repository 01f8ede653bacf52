package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// Faults through the real binary: each gives a clear error, leaves nothing
// behind, and the daemon keeps serving.

// fakeRootfs makes a rootfs version directory with a manifest and a tiny
// tree; mod edits the manifest text, tree=false leaves the tree out.
func fakeRootfs(t *testing.T, version, manifest string, tree bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), version)
	if tree {
		if err := os.MkdirAll(filepath.Join(dir, "root/usr/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "root/usr/bin/python3"), []byte("#!/bin/false\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFaultRootfsMissingOrCorruptRefusesStart: serve and json refuse to
// start on a rootfs that is not there or whose manifest is not one, naming
// the path and how to get a good one.
func TestFaultRootfsMissingOrCorruptRefusesStart(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	good := `{"version":"v1","content_hash":"sha256:` + strings.Repeat("0", 64) + `"}`
	missing := filepath.Join(t.TempDir(), "no-such-rootfs")
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"missing", missing, []string{missing, "make rootfs", "jailcell rootfs import"}},
		{"manifest not JSON", fakeRootfs(t, "v1", "{not json", true), []string{"rootfs corrupt", "parse manifest"}},
		{"manifest of another version", fakeRootfs(t, "v2", good, true), []string{"rootfs corrupt", `manifest is for version "v1"`}},
		{"manifest without a hash", fakeRootfs(t, "v1", `{"version":"v1"}`, true), []string{"rootfs corrupt", "content_hash"}},
		{"tree missing", fakeRootfs(t, "v1", good, false), []string{"make rootfs", "jailcell rootfs import"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testenv.StateDir(t)
			cfg := filepath.Join(dir, "config.yaml")
			c := strings.Replace(serveConfig(t, dir, "root", ""), "rootfs: "+r.Root, "rootfs: "+tc.path, 1)
			if err := os.WriteFile(cfg, []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"serve", "--config", cfg},
				{"json", "--rootfs", tc.path, "--state-dir", dir + "/json-state"},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, os.Args[0], args...)
				cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + dir + "/review")
				out, err := cmd.CombinedOutput()
				cancel()
				if err == nil {
					t.Fatalf("%s started on %s", args[0], tc.path)
				}
				for _, w := range append(tc.want, tc.path) {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s on %s: output %q does not say %q", args[0], tc.name, out, w)
					}
				}
				if _, err := os.Stat(dir + "/run/j.sock"); err == nil {
					t.Errorf("%s left a socket behind", args[0])
				}
			}
		})
	}
}

// TestFaultSessionLimitIs429: at sessions.max, a create is answered 429
// with code limit naming the setting, and a place freed is a place usable.
func TestFaultSessionLimitIs429(t *testing.T) {
	srv := startServe(t, "root", "")
	var ids []string
	for i := 0; ; i++ {
		status, body := curl(t, srv.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", "{}")
		if status == 429 {
			w := wantError(t, status, body, 429, "limit")
			if !strings.Contains(w.Error.Message, "max_sessions") && !strings.Contains(w.Error.Message, "sessions.max") {
				t.Errorf("limit message does not name the setting: %q", w.Error.Message)
			}
			break
		}
		if status != 201 {
			t.Fatalf("create %d: %d %s", i, status, body)
		}
		ids = append(ids, decode(t, body).Session)
		if i > 6 {
			t.Fatalf("no 429 after %d creates with sessions.max 6", i+1)
		}
	}
	if len(ids) != 6 {
		t.Errorf("429 after %d sessions, want 6 (sessions.max)", len(ids))
	}
	if status, body := curl(t, srv.Sock, "-X", "DELETE", "http://jailcell/v1/sessions/"+ids[0]); status != 200 {
		t.Fatalf("close: %d %s", status, body)
	}
	status, body := curl(t, srv.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", "{}")
	if status != 201 {
		t.Fatalf("create after a close: %d %s", status, body)
	}
}

// TestFaultHTTPClientVanishesMidStream: a client that drops its
// connection during a streamed exec gets its cell interrupted (the
// session's state is kept and it is free again at once); a one-shot
// cell's sandbox is torn down; the daemon keeps serving.
func TestFaultHTTPClientVanishesMidStream(t *testing.T) {
	// No pool: the test counts the sandboxes on the host.
	srv := startServe(t, "root", "pool:\n  size: 0\n")
	status, body := curl(t, srv.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", "{}")
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	id := decode(t, body).Session
	long := `import time\nx = 41\nprint('started', flush=True)\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)`
	resp, sc := startStream(t, srv.Sock, "/v1/sessions/"+id+"/exec", `{"code":"`+long+`"}`)
	sc.Scan()
	resp.Body.Close()
	start := time.Now()
	var last string
	if !eventually(func() bool {
		status, body := curl(t, srv.Sock, "http://jailcell/v1/sessions/"+id+"/exec", "-d", `{"code":"x += 1\nprint(x)"}`)
		last = fmt.Sprint(status, " ", body)
		return status == 200 && decode(t, body).Result.Stdout == "42\n"
	}) {
		t.Fatalf("session after the client vanished: %s", last)
	}
	t.Logf("session free again %s after the client vanished", time.Since(start).Round(time.Millisecond))
	srv.WaitLog(t, `"session":"`+id, `"status":"killed"`)

	resp, sc = startStream(t, srv.Sock, "/v1/exec", `{"code":"`+long+`"}`)
	sc.Scan()
	resp.Body.Close()
	if !eventually(func() bool {
		ents, _ := os.ReadDir(filepath.Join(srv.State, "sandboxes"))
		return len(ents) == 1 // the session's
	}) {
		ents, _ := os.ReadDir(filepath.Join(srv.State, "sandboxes"))
		t.Fatalf("one-shot sandbox not torn down after its client vanished: %d sandboxes", len(ents))
	}
	if status, _ := curl(t, srv.Sock, "http://jailcell/healthz"); status != 200 {
		t.Fatalf("healthz: %d", status)
	}
	status, body = curl(t, srv.Sock, "http://jailcell/v1/exec", "-d", `{"code":"print(6*7)"}`)
	if status != 200 || decode(t, body).Result.Stdout != "42\n" {
		t.Fatalf("exec after: %d %s", status, body)
	}
}

// TestFaultJSONClientVanishesMidStream: the parent of `jailcell json`
// dies during a streamed cell (its stdin and stdout close). The next
// event's write fails, which cancels the cell; jailcell then tears every
// sandbox down and exits with an error, rather than being killed by
// SIGPIPE with its sandboxes left running.
func TestFaultJSONClientVanishesMidStream(t *testing.T) {
	cmd, state, stderr := jsonCommand(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("json stderr:\n%s", stderr.String())
		}
	})
	lines := bufio.NewScanner(stdout)
	fmt.Fprintln(stdin, `{"id":1,"op":"create"}`)
	if !lines.Scan() {
		t.Fatalf("no create response: %v", lines.Err())
	}
	var created struct {
		OK      bool   `json:"ok"`
		Session string `json:"session"`
	}
	if err := json.Unmarshal(lines.Bytes(), &created); err != nil || !created.OK {
		t.Fatalf("create: %s", lines.Text())
	}
	fmt.Fprintln(stdin, `{"id":2,"op":"exec","stream":true,"session":"`+created.Session+`","code":"import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)"}`)
	for i := 0; i < 3; i++ {
		if !lines.Scan() || !strings.Contains(lines.Text(), "tick") && !strings.Contains(lines.Text(), "started") {
			t.Fatalf("event %d: %q", i, lines.Text())
		}
	}
	// The parent dies: both pipes close.
	stdin.Close()
	stdout.Close()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("jailcell json still running 60 s after its client vanished")
	}
	var ee *exec.ExitError
	if errors.As(exitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("jailcell json was killed by %v when its client vanished (sandboxes not torn down)", ws.Signal())
		}
	}
	t.Logf("jailcell json exited: %v", exitErr)
	for _, d := range []string{"sessions", "sandboxes", "containers"} {
		if ents, _ := os.ReadDir(filepath.Join(state, d)); len(ents) != 0 {
			t.Errorf("state dir %s after the client vanished: %d entries", d, len(ents))
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], state+"/") {
			t.Errorf("mount left behind: %s", f[4])
		}
	}
	if pids := procsInCgroup(cgroupRootFor(state)); len(pids) > 0 {
		t.Errorf("sandbox processes left behind: %v", pids)
	}
}

// TestFaultJSONStdinClosedMidCell: EOF on stdin alone is a pipeline's end,
// not a vanished client: the running cell finishes and is answered, then
// jailcell exits 0 with nothing left.
func TestFaultJSONStdinClosedMidCell(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cmd := exec.Command(os.Args[0], "json", "--rootfs", r.Root, "--state-dir", state)
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
	cmd.Stdin = strings.NewReader(`{"id":1,"op":"exec","code":"import time\ntime.sleep(1)\nprint('done')"}` + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	if !strings.Contains(string(out), `"stdout":"done\n"`) {
		t.Fatalf("cell not answered after EOF: %s", out)
	}
	for _, d := range []string{"sessions", "sandboxes", "containers"} {
		if ents, _ := os.ReadDir(filepath.Join(state, d)); len(ents) != 0 {
			t.Errorf("state dir %s: %d entries", d, len(ents))
		}
	}
}

// procsInCgroup lists processes whose cgroup path is under root.
func procsInCgroup(root string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err == nil && strings.Contains(string(b), ":"+root+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// TestFaultNoCriu: with no criu where the configuration says, the
// checkpoint ops answer unavailable and name what is missing and how to get
// it, and sessions work as without them.
func TestFaultNoCriu(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cmd := exec.Command(os.Args[0], "json", "--rootfs", r.Root, "--state-dir", state)
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR="+state+"/review", "JAILCELL_CRIU="+state+"/no/criu")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	ask := func(line string) map[string]any {
		t.Helper()
		fmt.Fprintln(stdin, line)
		if !lines.Scan() {
			t.Fatalf("no answer to %s", line)
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return m
	}
	c := ask(`{"id":"c","op":"create"}`)
	id, _ := c["session"].(string)
	if id == "" {
		t.Fatalf("create: %v", c)
	}
	for _, op := range []string{"hibernate", "fork", "snapshot"} {
		a := ask(`{"id":"` + op + `","op":"` + op + `","session":"` + id + `"}`)
		e, _ := a["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if a["ok"] != false || e["code"] != "unavailable" || !strings.Contains(msg, "make criu") || !strings.Contains(msg, "no/criu") {
			t.Errorf("%s without criu: %v", op, a)
		}
	}
	a := ask(`{"id":"x","op":"exec","session":"` + id + `","code":"print(6 * 7)"}`)
	if res, _ := a["result"].(map[string]any); a["ok"] != true || res["stdout"] != "42\n" {
		t.Fatalf("a cell without criu: %v", a)
	}
}

// jsonCommand is `jailcell json` (this test binary) on the real rootfs and
// state, a state dir of the test's own, its stderr kept for the failure
// log. It needs root.
func jsonCommand(t *testing.T) (cmd *exec.Cmd, state string, stderr *testenv.LockedBuffer) {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state = testenv.StateDir(t)
	cmd = exec.Command(os.Args[0], "json", "--rootfs", r.Root, "--state-dir", state)
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
	stderr = &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	return cmd, state, stderr
}
