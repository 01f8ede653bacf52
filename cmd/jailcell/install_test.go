package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The installed layout (docs/service.md): a socket directory that the
// daemon owns whoever starts it, a daemon configuration its clients
// need not read, and front doors that never drop a flag in favour of a
// running service.

// nobody is a user who is not root and in no group of the host's.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}

// TestClaimDirTakesClaimsLayout: serve claims the socket directory when
// the uid-claims directory was made in it first (0700, root's), as build
// does on the default paths; the claims stay private. A directory holding
// anything else is still left alone.
func TestClaimDirTakesClaimsLayout(t *testing.T) {
	testenv.RequiresRoot(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const gid = 64135
	dir := filepath.Join(t.TempDir(), "run")
	// What ClaimUIDRange leaves on a fresh /run/jailcell: MkdirAll 0700.
	if err := os.MkdirAll(filepath.Join(dir, "claims"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := claimDir(dir, map[string]bool{"jailcell.sock": true, "claims": true}, gid, log); err != nil {
		t.Fatal(err)
	}
	wantMode(t, dir, 0o750, 0, gid)
	wantMode(t, filepath.Join(dir, "claims"), 0o700, 0, 0)

	// The default socket directory counts the claims directory as its own.
	if !ownEntries("/run/jailcell", "jailcell.sock")["claims"] || ownEntries("/tmp", "j.sock")["claims"] {
		t.Errorf("ownEntries: the claims directory is jailcell's only in %s", "/run/jailcell")
	}

	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(filepath.Join(shared, "claims"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := claimDir(shared, map[string]bool{"jailcell.sock": true, "claims": true}, gid, log); err != nil {
		t.Fatal(err)
	}
	wantMode(t, shared, 0o755, 0, 0)
}

func wantMode(t *testing.T, path string, mode os.FileMode, uid, gid int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != mode || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s: %v %d:%d, want %v %d:%d", path, fi.Mode().Perm(), st.Uid, st.Gid, mode, uid, gid)
	}
}

// binForNobody is a copy of this test binary that nobody can run (the
// original's directory is root's alone).
func binForNobody(t *testing.T) string {
	t.Helper()
	dir := testenv.StateDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "jailcell")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// installedConfig writes a daemon configuration as make install leaves
// it: 0640 root:root, so a member of the socket group cannot read it.
// The test binary, run as jailcell, takes it as its default file.
func installedConfig(t *testing.T, body string) string {
	t.Helper()
	dir := testenv.StateDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

// asUser runs bin with args as cred (nil: root) in an environment of
// nothing but the test's: the default config file is def, not the host's.
func asUser(t *testing.T, cred *syscall.Credential, bin, def string, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "JAILCELL_TEST_MAIN=1",
		"JAILCELL_TEST_DEFAULT_CONFIG=" + def}, env...)
	cmd.Dir = "/"
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		home := testenv.StateDir(t)
		if err := os.Chown(home, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "HOME="+home)
	}
	return testenv.Run(t, cmd, stdin)
}

// TestFrontDoorsUnreadableDaemonConfig: a user who cannot read the
// daemon's configuration (0640 root:root, as make install leaves it) still
// gets every front door: the file is skipped, the socket comes from
// JAILCELL_SOCKET or --connect, and the error when no service answers
// says what is missing instead of "permission denied". A file the user
// names is read or refused.
func TestFrontDoorsUnreadableDaemonConfig(t *testing.T) {
	testenv.RequiresRoot(t)
	bin := binForNobody(t)
	def := installedConfig(t, "socket: /run/jailcell-test-never/j.sock\nsessions:\n  max: 3\n")
	nowhere := filepath.Join(testenv.StateDir(t), "none.sock") // a directory nobody may search
	for _, tc := range []struct {
		name  string
		env   []string
		stdin string
		args  []string
		code  int
		want  []string // in stderr, or stdout for status 0
	}{
		{name: "json connects where told", args: []string{"json", "--connect=" + nowhere}, code: 1,
			want: []string{"--connect", nowhere}},
		// The form an MCP client's args array takes: the value as the
		// next argument.
		{name: "mcp --connect PATH", args: []string{"mcp", "--connect", nowhere}, code: 1,
			want: []string{"--connect: no jailcell service answers on " + nowhere}},
		{name: "json --connect PATH", args: []string{"json", "--connect", nowhere}, code: 1,
			want: []string{"--connect: no jailcell service answers on " + nowhere}},
		{name: "mcp --connect NOT-A-SOCKET says how to write it", args: []string{"mcp", "--connect", "/nonexistent/x"}, code: 1,
			want: []string{"write --connect=/nonexistent/x"}},
		{name: "json, socket from JAILCELL_SOCKET", env: []string{"JAILCELL_SOCKET=" + nowhere}, args: []string{"json"}, code: 1,
			want: []string{"no jailcell service answers on " + nowhere, "needs root"}},
		{name: "mcp", env: []string{"JAILCELL_SOCKET=" + nowhere}, args: []string{"mcp"}, code: 1,
			want: []string{"no jailcell service answers on " + nowhere, "needs root"}},
		{name: "run", env: []string{"JAILCELL_SOCKET=" + nowhere}, stdin: "print(1)", args: []string{"run", "-"}, code: exitRunFailed,
			want: []string{"no jailcell service answers on " + nowhere, "needs root"}},
		{name: "kernel", args: []string{"kernel", "--connect=" + nowhere, "-f", "/nonexistent.json"}, code: 1,
			want: []string{"/nonexistent.json"}},
		{name: "kernelspec install", args: []string{"kernelspec", "install", "--user", "--connect=" + nowhere}, code: 0,
			want: []string{"kernels/jailcell"}},
		{name: "a named file must be readable", args: []string{"json", "--config", def}, code: 1,
			want: []string{"read config file", "permission denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := asUser(t, nobody, bin, def, tc.env, tc.stdin, tc.args...)
			out := stderr
			if tc.code == 0 {
				out = stdout
			}
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q missing:\n%s", w, out)
				}
			}
			if tc.name != "a named file must be readable" && strings.Contains(stderr, "permission denied") {
				t.Errorf("the daemon's unreadable config stopped a client:\n%s", stderr)
			}
		})
	}

	// root reads the file and, with no service, would build sandboxes
	// with it: its keys apply (a bad one is still fatal).
	bad := installedConfig(t, "sessions:\n  max: lots\n")
	code, _, stderr := asUser(t, nil, bin, bad, []string{"JAILCELL_SOCKET=" + nowhere}, "", "json")
	if code == 0 || !strings.Contains(stderr, "sessions.max") {
		t.Errorf("root with an invalid default config: exit %d, want the key named:\n%s", code, stderr)
	}
}

// TestEngineFlagsRefusedWithConnect: --connect with a setting for
// sandboxes built here is refused, naming the setting, before any socket
// is tried: the service would ignore it.
func TestEngineFlagsRefusedWithConnect(t *testing.T) {
	testenv.RequiresRoot(t)
	bin := binForNobody(t)
	def := filepath.Join(t.TempDir(), "absent.yaml")
	engineFile := installedConfig(t, "state_dir: /tmp/jc-elsewhere\n")
	if err := os.Chmod(engineFile, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		named string
	}{
		{"json --rootfs", nil, []string{"json", "--connect=" + sock, "--rootfs", "/x"}, "rootfs (flag --rootfs)"},
		{"mcp --state-dir", nil, []string{"mcp", "--connect=" + sock, "--state-dir", "/x"}, "state_dir (flag --state-dir)"},
		{"run --rootfs", nil, []string{"run", "--connect=" + sock, "--rootfs", "/x", "-"}, "rootfs (flag --rootfs)"},
		{"json env", []string{"JAILCELL_ROOTFS=/x"}, []string{"json", "--connect=" + sock}, "rootfs (env JAILCELL_ROOTFS)"},
		{"json --config", nil, []string{"json", "--connect=" + sock, "--config", engineFile}, "state_dir (file " + engineFile + ")"},
		{"json policy in the environment", []string{"JAILCELL_POLICIES_DEFAULT_PIDS=32"}, []string{"json", "--connect=" + sock}, "policies.default.pids (env JAILCELL_POLICIES_DEFAULT_PIDS)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cred := range []*syscall.Credential{nil, nobody} {
				code, stdout, stderr := asUser(t, cred, bin, def, tc.env, "print(1)", tc.args...)
				if code == 0 || !strings.Contains(stderr, tc.named) || !strings.Contains(stderr, "would ignore") {
					t.Errorf("as %v: exit %d, want a refusal naming %q\nstdout: %s\nstderr: %s", who(cred), code, tc.named, stdout, stderr)
				}
			}
		})
	}
	// Without --connect, a user who cannot build sandboxes is refused too,
	// naming the flag, rather than being sent to a service that ignores it.
	code, _, stderr := asUser(t, nobody, bin, def, []string{"JAILCELL_SOCKET=" + sock}, "", "json", "--rootfs", "/x")
	if code == 0 || !strings.Contains(stderr, "rootfs (flag --rootfs)") || !strings.Contains(stderr, "needs root") {
		t.Errorf("json --rootfs as nobody: exit %d, want the flag named:\n%s", code, stderr)
	}
}

func who(cred *syscall.Credential) string {
	if cred == nil {
		return "root"
	}
	return fmt.Sprintf("uid %d", cred.Uid)
}

// TestCheckUnits: doctor's unit check on a tree of its own: no systemd,
// units missing, installed but not enabled, enabled (the link systemctl
// enable makes).
func TestCheckUnits(t *testing.T) {
	dir := t.TempDir()
	if c := checkUnits(dir, false); c.status != statusOK || !strings.Contains(c.found, "Without systemd") && !strings.Contains(c.found, "no systemd") {
		t.Errorf("without systemd: %+v", c)
	}
	if c := checkUnits(dir, true); c.status != statusNote || !strings.Contains(c.fix, "make install") {
		t.Errorf("no units: %+v", c)
	}
	for _, u := range []string{"jailcell.service", "jailcell.socket"} {
		if err := os.WriteFile(filepath.Join(dir, u), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c := checkUnits(dir, true); c.status != statusWarn || !strings.Contains(c.fix, "systemctl enable --now jailcell.socket") {
		t.Errorf("not enabled: %+v", c)
	}
	if err := os.Mkdir(filepath.Join(dir, "sockets.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "jailcell.socket"), filepath.Join(dir, "sockets.target.wants", "jailcell.socket")); err != nil {
		t.Fatal(err)
	}
	if c := checkUnits(dir, true); c.status != statusOK || !strings.Contains(c.found, "enabled") {
		t.Errorf("enabled: %+v", c)
	}
}

// TestHostileSharedSocketDirWritableByOthers: the socket is chowned and
// chmodded by its path once it listens. In a shared directory another
// user could write without the sticky bit (or one they own), they could
// swap it for a symlink in between, and root chowned its target (say
// /etc/shadow) to the socket group, mode 0660. Such a directory is now
// refused; a sticky one (/tmp) and root's own are still used as shared.
func TestHostileSharedSocketDirWritableByOthers(t *testing.T) {
	testenv.RequiresRoot(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ours := map[string]bool{"jailcell.sock": true}
	mk := func(mode os.FileMode, uid int) string {
		d := filepath.Join(t.TempDir(), "sockdir")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "other"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int
		ok   bool
	}{
		{"world-writable, no sticky bit", 0o777, 0, false},
		{"group-writable", 0o775, 0, false},
		{"another user's", 0o755, 65534, false},
		{"sticky, as /tmp", 0o777 | os.ModeSticky, 0, true},
		{"root's own", 0o755, 0, true},
	} {
		err := claimDir(mk(tc.mode, tc.uid), ours, 64135, log)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
