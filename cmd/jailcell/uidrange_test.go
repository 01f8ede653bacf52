package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// TestServeRestartKeepsStateDirUIDRange: a state dir keeps the uid range
// of its first use. While its daemon is down, another daemon's first use
// on the default leaves that range alone; a daemon that holds it (a
// configured uid_base) makes the restart fail naming its pid, never a
// silent move that would strand the sessions; once it is gone the restart
// takes the recorded range and re-adopts the session.
func TestServeRestartKeepsStateDirUIDRange(t *testing.T) {
	claims := t.TempDir() // only this test's daemons
	env := []string{"JAILCELL_TEST_MAIN=1", "JAILCELL_SANDBOX_CLAIM_DIR=" + claims}
	start := func(extra string, more ...string) *testenv.Service {
		return testenv.StartServe(t, testenv.Serve{Env: append(more, env...),
			Config: func(dir string) string { return serveConfig(t, dir, "root", extra) }})
	}
	a := start("", "JAILCELL_SESSIONS_SURVIVE_RESTART=true")
	rec, err := isolate.RecordedUIDBase(a.State)
	if err != nil || rec != 0x40000000 {
		t.Fatalf("first use recorded %d, %v; want the default 1073741824", rec, err)
	}
	status, body := curl(t, a.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	sid := decode(t, body).Session
	if status != 201 || sid == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	execIn(t, a.Sock, sid, "x = 41")
	a.Stop() // a drain that keeps the session
	// A's daemon is down: B's first use on the default takes another range.
	b := start("")
	if rec, _ := isolate.RecordedUIDBase(b.State); rec == 0x40000000 || rec == 0 {
		t.Fatalf("a first use beside a down daemon's range recorded %d; want another range", rec)
	}
	b.Stop()
	// C is configured onto A's range and holds it.
	c := start("sandbox:\n  uid_base: 1073741824\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "serve", "--config", a.Config)
	cmd.Env = testenv.ChildEnv(append([]string{"JAILCELL_SESSIONS_SURVIVE_RESTART=true"}, env...)...)
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf("pid %d", c.Cmd.Process.Pid)
	if err == nil || !strings.Contains(string(out), "sandbox.uid_base") || !strings.Contains(string(out), want) || !strings.Contains(string(out), a.State) {
		t.Fatalf("restart onto a range another daemon holds: %v; want a refusal naming sandbox.uid_base, %s and %s:\n%s", err, want, a.State, out)
	}
	if rec, _ := isolate.RecordedUIDBase(a.State); rec != 0x40000000 {
		t.Fatalf("the refused start moved the state dir to %d", rec)
	}
	c.Stop()
	q := a.Restart(t)
	q.WaitLog(t, "session re-adopted", sid)
	if w := execIn(t, q.Sock, sid, "print(x + 1)"); w.Result.Stdout != "42\n" {
		t.Fatalf("after the restart: %+v", w.Result)
	}
	if rec, _ := isolate.RecordedUIDBase(q.State); rec != 0x40000000 {
		t.Fatalf("restart recorded %d", rec)
	}
	ents, _ := os.ReadDir(claims)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !strings.Contains(strings.Join(names, " "), "uids-1073741824-1342177280."+strconv.Itoa(q.Cmd.Process.Pid)) {
		t.Errorf("claims %v: want the restarted daemon's on 1073741824", names)
	}
	status, _ = curl(t, q.Sock, "-X", "DELETE", "http://jailcell/v1/sessions/"+sid)
	if status != 200 && status != 204 {
		t.Errorf("close: %d", status)
	}
}
