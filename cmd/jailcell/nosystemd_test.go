package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The group of the test service's socket and its allowed group: numbers
// only, no host group is made (as in test/pyclient/python_notroot_test.go).
const installGID = 64137

// member is a user who is not root and is in the service's group, as the
// README's AGENTUSER after `usermod -aG jailcell`.
var member = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{installGID}}

// docCommands are the lines of docs/service.md's "Without systemd" block
// that start and stop the service.
func docCommands(t *testing.T) (start, stop []string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Without systemd\n")
	if !ok {
		t.Fatal(`docs/service.md has no "## Without systemd" section`)
	}
	sc := bufio.NewScanner(strings.NewReader(rest))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "start-stop-daemon --start "):
			start = strings.Fields(line)
		case strings.HasPrefix(line, "start-stop-daemon --stop "):
			stop = strings.Fields(line)
		}
		if start != nil && stop != nil {
			return start, stop
		}
	}
	t.Fatal(`docs/service.md's "Without systemd" section has no start-stop-daemon --start and --stop lines`)
	return nil, nil
}

// substitute puts the test's paths where the doc has the installed ones.
func substitute(args []string, paths map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if p, ok := paths[a]; ok {
			a = p
		}
		out[i] = a
	}
	return out
}

// TestServeWithoutSystemd starts `jailcell serve` as docs/service.md says
// for a host without systemd (start-stop-daemon, its two lines verbatim
// but for the paths), as root, with the daemon's config 0640 root:root as
// make install leaves it; then a user who is not root, only a member of
// the socket's group, uses it: health with curl, `jailcell run`,
// `jailcell json`, the Python client installed from its wheel into the
// user's own venv, and `jailcell doctor`, which reports the path as it
// is. A user outside the group is told how to get in. The doc's stop line
// drains the service.
func TestServeWithoutSystemd(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	if _, err := exec.LookPath("start-stop-daemon"); err != nil {
		t.Skipf("requires start-stop-daemon (Debian's dpkg): %v", err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("requires curl: %v", err)
	}
	start, stop := docCommands(t)
	bin := binForNobody(t)
	dir := testenv.StateDir(t)
	runDir := filepath.Join(dir, "run", "jailcell")                    // made by serve, as /run/jailcell
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o755); err != nil { // as /run
		t.Fatal(err)
	}
	sock := filepath.Join(runDir, "jailcell.sock")
	cfg := installedConfig(t, testenv.ServeConfig(dir, strconv.Quote(strconv.Itoa(installGID)), r.Root)+
		fmt.Sprintf("allowed_gids: [%d]\nlog:\n  level: debug\nsessions:\n  max: 4\ndrain_grace: 20s\npolicies:\n", installGID)+testenv.DefaultPolicy)
	// ServeConfig puts the socket at DIR/run/j.sock; the installed name
	// and a directory serve must create are what this test is about.
	b, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "socket: "+dir+"/run/j.sock", "socket: "+sock, 1)), 0o640); err != nil {
		t.Fatal(err)
	}
	pidfile, logfile := filepath.Join(dir, "jailcell.pid"), filepath.Join(dir, "jailcell.log")
	paths := map[string]string{"/usr/local/bin/jailcell": bin, "/etc/jailcell/config.yaml": cfg,
		"/run/jailcell.pid": pidfile, "/var/log/jailcell.log": logfile}

	startCmd := exec.Command(start[0], substitute(start[1:], paths)...)
	startCmd.Env = jailcellEnv()
	stopped := false
	stopService := func() (string, error) {
		cmd := exec.Command(stop[0], substitute(stop[1:], paths)...)
		out, err := cmd.CombinedOutput()
		stopped = true
		return string(out), err
	}
	t.Cleanup(func() {
		if !stopped {
			if out, err := stopService(); err != nil {
				t.Errorf("stop the service: %v\n%s", err, out)
			}
		}
		if t.Failed() {
			log, _ := os.ReadFile(logfile)
			t.Logf("serve log:\n%s", log)
		}
	})
	if out, err := startCmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logfile)
		t.Fatalf("%s: %v\n%s\nserve log:\n%s", strings.Join(startCmd.Args, " "), err, out, log)
	}
	// --notify-await returned: serve said READY=1, so it listens now.
	wantMode(t, runDir, 0o750, 0, installGID)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no socket at %s after start: %v", sock, err)
	}
	wantMode(t, sock, 0o660, 0, installGID)

	env := []string{"JAILCELL_SOCKET=" + sock}
	t.Run("curl health", func(t *testing.T) {
		status, body := curlAs(t, member, sock, "http://jailcell/healthz")
		if status != 200 || !strings.Contains(body, `"ok":true`) {
			t.Fatalf("healthz as a member: %d %s", status, body)
		}
	})
	t.Run("jailcell run", func(t *testing.T) {
		code, stdout, stderr := asUser(t, member, bin, cfg, env, "x = 6 * 7\nprint(x)", "run", "-")
		if code != 0 || strings.TrimSpace(stdout) != "42" {
			t.Fatalf("run as a member: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
	})
	t.Run("jailcell json", func(t *testing.T) {
		code, stdout, stderr := asUser(t, member, bin, cfg, env, `{"id":1,"op":"exec","code":"print(2+3)"}`+"\n", "json")
		if code != 0 || !strings.Contains(stdout, `"ok":true`) || !strings.Contains(stdout, `5\n`) {
			t.Fatalf("json as a member: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
	})
	t.Run("python client", func(t *testing.T) {
		python := installWheelAs(t, member)
		cmd := exec.Command(python, "-c", `from jailcell import Sandbox
with Sandbox() as s:
    s.run_code("y = 20")
    print("got", s.run_code("y + 22").text)`)
		cmd.Env = append(testenv.ChildEnv(env...), "HOME=/nonexistent")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "got 42") {
			t.Fatalf("the Python client as a member: %v\n%s", err, out)
		}
	})
	t.Run("doctor", func(t *testing.T) {
		_, stdout, _ := asUser(t, member, bin, cfg, env, "", "doctor")
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^ok\s+socket dir\s+` + regexp.QuoteMeta(runDir) + ` -rwxr-x--- 0:` + strconv.Itoa(installGID)),
			regexp.MustCompile(`(?m)^ok\s+socket\s+` + regexp.QuoteMeta(sock) + ` .*-rw-rw---- 0:` + strconv.Itoa(installGID)),
			regexp.MustCompile(`(?m)^ok\s+reach service\s+uid \S+ reached ` + regexp.QuoteMeta(sock) + ` and was admitted`),
			regexp.MustCompile(`(?m)^ok\s+client config\s+` + regexp.QuoteMeta(cfg) + `: unreadable to this user .*permission denied.*; clients use JAILCELL_SOCKET`),
		} {
			if !want.MatchString(stdout) {
				t.Errorf("doctor as a member: no line matching %s:\n%s", want, stdout)
			}
		}
		// Not in the group: told how to get in.
		_, stdout, _ = asUser(t, nobody, bin, cfg, env, "", "doctor")
		if !regexp.MustCompile(`(?m)^FAIL\s+reach service\s+uid \S+ may not connect: .*permission denied.* — fix: usermod -aG ` + strconv.Itoa(installGID)).MatchString(stdout) {
			t.Errorf("doctor outside the group:\n%s", stdout)
		}
	})

	pid, _ := os.ReadFile(pidfile)
	out, err := stopService()
	if err != nil {
		t.Fatalf("the doc's stop line: %v\n%s", err, out)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(pid))); n <= 0 || syscall.Kill(n, 0) == nil {
		t.Errorf("serve (pid %q) still running after the stop line", pid)
	}
	if _, err := os.Stat(pidfile); err == nil {
		t.Errorf("pid file %s left after --remove-pidfile", pidfile)
	}
	log, _ := os.ReadFile(logfile)
	if !strings.Contains(string(log), "stopped") {
		t.Errorf("serve did not drain and stop cleanly:\n%s", log)
	}
}

// installWheelAs builds the Python client's wheel as make install does (as
// root, from a copy: the checkout stays clean) and installs it as cred
// into a venv of theirs, as the README says. Returns the venv's python.
func installWheelAs(t *testing.T, cred *syscall.Credential) string {
	t.Helper()
	for _, probe := range [][]string{{"-m", "venv", "--help"}, {"-m", "pip", "--version"}, {"-c", "import setuptools, wheel"}} {
		if out, err := exec.Command("/usr/bin/python3", probe...).CombinedOutput(); err != nil {
			t.Skipf("host lacks python3-venv, python3-pip or python3-setuptools/python3-wheel (make deps installs them): %v\n%s", err, out)
		}
	}
	build := t.TempDir()
	pipEnv := testenv.ChildEnv("PIP_CONFIG_FILE="+os.DevNull, "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", "../..", "python-wheel", "WHEEL_DIR="+build)
	cmd.Env = pipEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make python-wheel: %v\n%s", err, out)
	}
	wheels, _ := filepath.Glob(filepath.Join(build, "jailcell-*.whl"))
	if len(wheels) != 1 {
		t.Fatalf("make python-wheel left %v in %s", wheels, build)
	}
	shared := testenv.StateDir(t)
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	whl := filepath.Join(shared, filepath.Base(wheels[0]))
	b, err := os.ReadFile(wheels[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(whl, b, 0o644); err != nil {
		t.Fatal(err)
	}
	home := testenv.StateDir(t)
	if err := os.Chown(home, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(home, "venv")
	for _, args := range [][]string{
		{"/usr/bin/python3", "-m", "venv", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--no-index", whl},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = append(pipEnv, "HOME="+home), home
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		ctx := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s as uid %d (%s): %v\n%s", strings.Join(args, " "), cred.Uid, time.Since(ctx), err, out)
		}
	}
	return filepath.Join(venv, "bin", "python")
}

// TestDocStopLineSparesReusedPid: the doc's stop line signals only a
// jailcell. By the pidfile alone, a stale pidfile (serve crashed; nothing
// restarts it without systemd) whose pid the kernel gave to another
// program had that program terminated, then killed.
func TestDocStopLineSparesReusedPid(t *testing.T) {
	if _, err := exec.LookPath("start-stop-daemon"); err != nil {
		t.Skipf("requires start-stop-daemon (Debian's dpkg): %v", err)
	}
	_, stop := docCommands(t)
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { other.Wait(); close(exited) }()
	defer func() { other.Process.Kill(); <-exited }()
	pidfile := filepath.Join(t.TempDir(), "jailcell.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Not to wait 90 s for a process that would not end: TERM, then look.
	args := substitute(stop[1:], map[string]string{"/run/jailcell.pid": pidfile, "TERM/90/KILL/5": "TERM/1/KILL/1"})
	out, _ := exec.Command(stop[0], args...).CombinedOutput()
	select {
	case <-exited:
		t.Fatalf("the doc's stop line (%s) ended pid %d, a sleep that only reused the pidfile's number: %s", strings.Join(stop, " "), other.Process.Pid, out)
	case <-time.After(100 * time.Millisecond):
	}
}
