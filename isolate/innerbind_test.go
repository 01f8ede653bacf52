package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// innerProbe writes what the sandbox sees at /home/user: whether it is a
// mount of the overlay's /work, and whether a file written there is the
// workspace's.
const innerProbe = `
import os, sys
out = sys.argv[1]
lines = [l.split()[3] + " " + l.split()[4] for l in open("/proc/self/mountinfo") if l.split()[4] == "/home/user"]
try:
    open("/home/user/via-home", "w").write("x")
    same = os.path.exists("/work/via-home")
except OSError as e:
    same = "error " + str(e)
entries = sorted(os.listdir("/home/user")) if os.path.isdir("/home/user") else "absent"
with open(out + ".tmp", "w") as f:
    f.write("mounts %r\nsame %r\nentries %r\n" % (lines, same, entries))
os.rename(out + ".tmp", out)
`

// runInner runs innerProbe in a cold sandbox (or a fork of z) on d with
// the workspace bound inside at /home/user, and returns what it wrote.
func runInner(t *testing.T, h *Host, d *Disk, z *Zygote, p policy.Policy) string {
	t.Helper()
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "probe.py"), []byte(innerProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Policy: p,
		Args:   []string{"/usr/bin/python3", "-s", "/out/probe.py", "/out/result"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/", // not /work: a disk of the symlink case has none
		Binds:  []Bind{{Source: out, Dest: "/out", Writable: true}, {Source: "/work", Dest: "/home/user", Writable: true, Inner: true}},
	}
	var sb *Sandbox
	var err error
	if z != nil {
		spec.Args = append([]string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py"}, "/out/unused")
		sb, err = d.Fork(z, spec)
	} else {
		sb, err = d.Create(spec)
	}
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	if z != nil {
		return "" // the fork's posture check passed with the inner bind; its view is TestZygoteInnerBind's
	}
	var b []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err = os.ReadFile(filepath.Join(out, "result")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the probe wrote nothing: %v", err)
	}
	return string(b)
}

// TestInnerBind: an Inner bind shows a directory of the sandbox's own root
// under a second name (the workspace at /home/user), in a cold start and
// past its posture check. A disk whose /work an earlier sandbox replaced
// by a symlink (here to a host directory) gets no such mount: the host would
// have bound what the link points to (the runc mount-symlink escapes,
// CVE-2021-30465), so the bind is left out and the sandbox sees only what
// it made.
func TestInnerBind(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	got := runInner(t, h, testDisk(t, h, p, "inner"), nil, p)
	if !strings.Contains(got, "mounts ['/work /home/user']") || !strings.Contains(got, "same True") {
		t.Errorf("cold start sees:\n%s\nwant /home/user a mount of the root's /work, one directory", got)
	}

	// A host directory with a secret in it: resolved on the host, the
	// link would bind it into the sandbox.
	secret := t.TempDir()
	if err := os.WriteFile(filepath.Join(secret, "host-secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := testDisk(t, h, p, "innerlink")
	if err := os.Symlink(secret, filepath.Join(d.UpperDir(), "work")); err != nil {
		t.Fatal(err)
	}
	got = runInner(t, h, d, nil, p)
	if !strings.Contains(got, "mounts []") || strings.Contains(got, "host-secret") {
		t.Errorf("with /work a symlink to a host directory, the sandbox sees:\n%s\nwant no mount at /home/user and nothing of the host's", got)
	}
	if _, err := os.Stat(filepath.Join(secret, "via-home")); err == nil {
		t.Errorf("the sandbox wrote into the host directory its /work linked to")
	}
}

// TestZygoteInnerBind: a fork makes the inner bind too, and passes the
// posture check that compares its mounts with a cold start's.
func TestZygoteInnerBind(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	z := startTestZygote(t, h, p)
	runInner(t, h, testDisk(t, h, p, "zinner"), z, p)
}
