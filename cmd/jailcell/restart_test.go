package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jailcell/jailcell/isolate"
)

// TestServeRestartReadoptsSessions: a session's kernel outlives the
// service, by kill -9 and by a drain with sessions.survive_restart; the
// next start re-adopts it with its variables, and once the sessions end
// the host holds nothing of them.
func TestServeRestartReadoptsSessions(t *testing.T) {
	p := startServe(t, "root", "")
	status, body := curl(t, p.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	sid := decode(t, body).Session
	if status != 201 || sid == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	exec := func(sock, code string) wire { t.Helper(); return execIn(t, sock, sid, code) }
	exec(p.Sock, "x = 41\nopen('f.txt', 'w').write('kept')")

	// kill -9: nothing is torn down.
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	q := p.Restart(t, "JAILCELL_SESSIONS_SURVIVE_RESTART=true")
	q.WaitLog(t, "session re-adopted", sid)
	if w := exec(q.Sock, "x += 1\nprint(x, open('f.txt').read())"); w.Result.Stdout != "42 kept\n" {
		t.Fatalf("after kill -9: %+v", w.Result)
	}

	// A drain that keeps sessions.
	q.Stop()
	if q.Err() != nil {
		t.Fatalf("drain exited with %v", q.Err())
	}
	r := q.Restart(t)
	r.WaitLog(t, "session re-adopted", sid)
	if w := exec(r.Sock, "print(x)"); w.Result.Stdout != "42\n" {
		t.Fatalf("after a drain: %+v", w.Result)
	}

	// Without survive_restart the drain tears everything down.
	r.Stop()
	if r.Err() != nil {
		t.Fatalf("drain exited with %v", r.Err())
	}
	for _, d := range []string{"sessions", "sandboxes", "containers"} {
		if ents, _ := os.ReadDir(filepath.Join(r.State, d)); len(ents) != 0 {
			t.Errorf("state dir %s after teardown: %v", d, ents)
		}
	}
	mi, _ := os.ReadFile("/proc/thread-self/mountinfo")
	if strings.Contains(string(mi), r.State) {
		t.Errorf("mounts left under %s", r.State)
	}
}

// execIn runs code in session sid through the service on sock.
func execIn(t *testing.T, sock, sid, code string) wire {
	t.Helper()
	status, body := curl(t, sock, "-X", "POST", "http://jailcell/v1/sessions/"+sid+"/exec", "-d", `{"code":`+quote(code)+`}`)
	w := decode(t, body)
	if status != 200 || !w.OK || w.Result == nil {
		t.Fatalf("exec %q: %d %s", code, status, body)
	}
	return w
}

func quote(s string) string {
	b := []byte{'"'}
	for _, c := range []byte(s) {
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// TestServeHibernatesOnShutdownAcrossReboot: with
// sessions.hibernate_on_shutdown a stopping service hibernates its
// sessions; after a reboot (every sandbox disk, a tmpfs, is gone) the next
// start restores one on its first cell with its variables and files.
func TestServeHibernatesOnShutdownAcrossReboot(t *testing.T) {
	if err := isolate.ProbeCriu(isolate.DefaultCriu); err != nil {
		t.Skip("requires a working criu (make criu): " + err.Error())
	}
	first := startServe(t, "root", "")
	first.Stop()
	p := first.Restart(t, "JAILCELL_SESSIONS_HIBERNATE_ON_SHUTDOWN=true")
	status, body := curl(t, p.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	sid := decode(t, body).Session
	if status != 201 || sid == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	exec := func(sock, code string) wire { t.Helper(); return execIn(t, sock, sid, code) }
	exec(p.Sock, "import numpy as np\nv = np.arange(10)\nf = open('log.txt', 'w'); f.write('a'); f.flush()")
	p.Stop()
	if p.Err() != nil {
		t.Fatalf("drain exited with %v", p.Err())
	}
	p.WaitLog(t, "session hibernated", sid)
	// The reboot: every mount under the state directory goes.
	mi, _ := os.ReadFile("/proc/thread-self/mountinfo")
	var mps []string
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], p.State+"/") {
			mps = append(mps, f[4])
		}
	}
	if len(mps) == 0 {
		t.Fatal("no sandbox disk mounted after the drain: nothing for the reboot to take")
	}
	for i := len(mps) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mps[i], syscall.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
	}
	q := p.Restart(t)
	q.WaitLog(t, "hibernated session re-adopted", sid)
	w := exec(q.Sock, "f.write('b'); f.flush()\nprint(v.sum(), open('log.txt').read())")
	if w.Result.Stdout != "45 ab\n" {
		t.Fatalf("after a reboot: %+v", w.Result)
	}
}
