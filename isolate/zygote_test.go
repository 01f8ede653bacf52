package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// zygoteProbe is the program forks run in these tests: it writes what the
// sandbox looks like from inside into the writable bind, then sleeps.
const zygoteProbe = `import os, sys, time
out = sys.argv[1]
lines = []
lines.append("uid %d gid %d pid %d" % (os.getuid(), os.getgid(), os.getpid()))
lines.append("hostname " + os.uname().nodename)
lines.append("json " + str("json" in sys.modules))
with open("/proc/self/status") as f:
    for l in f:
        if l.split(":")[0] in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
            lines.append(l.strip().replace("\t", " "))
lines.append("fds " + " ".join(sorted(os.listdir("/proc/self/fd"))))
with open(out + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
os.rename(out + ".tmp", out)
time.sleep(600)
`

func startTestZygote(t *testing.T, h *Host, p policy.Policy) *Zygote {
	t.Helper()
	z, err := h.StartZygote(ZygoteSpec{
		Policy:  p,
		Command: []string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py"},
		Dir:     "/run/jailcell",
		Prepare: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "probe.py"), []byte(zygoteProbe), 0o644)
		},
		Preload: []string{"json"},
		Env:     []string{"PATH=/usr/bin:/bin", "OPENBLAS_NUM_THREADS=1"},
	})
	if err != nil {
		t.Fatalf("StartZygote: %v", err)
	}
	t.Cleanup(func() {
		if err := z.Close(); err != nil {
			t.Errorf("zygote Close: %v", err)
		}
	})
	return z
}

func forkProbe(t *testing.T, h *Host, z *Zygote, p policy.Policy) (*Sandbox, map[string]string) {
	t.Helper()
	d, err := h.NewDisk("zyg"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(); err != nil {
			t.Errorf("destroy disk: %v", err)
		}
	})
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	sb, err := d.Fork(z, Spec{
		Policy: p,
		Args:   []string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py", "/out/probe"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/work",
		Binds:  []Bind{{Source: out, Dest: "/out", Writable: true}},
	})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	var b []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err = os.ReadFile(filepath.Join(out, "probe")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the fork's probe wrote nothing: %v", err)
	}
	view := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		view[strings.TrimSuffix(k, ":")] = strings.TrimSpace(v)
	}
	return sb, view
}

func TestZygoteForkPassesPosture(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	z := startTestZygote(t, h, p)
	sb, view := forkProbe(t, h, z, p)
	t.Logf("view: %v", view)
	for k, want := range map[string]string{
		"CapEff": zeroCaps, "CapBnd": zeroCaps, "NoNewPrivs": "1", "Seccomp": "2", "Seccomp_filters": "1",
		"hostname": "sandbox", "json": "True", "fds": "0 1 2 3",
	} {
		if view[k] != want {
			t.Errorf("%s = %q inside the fork, want %q", k, view[k], want)
		}
	}
	if !strings.HasPrefix(view["uid"], "0 gid 0 pid 1") {
		t.Errorf("uid line %q, want root of its own namespace, pid 1", view["uid"])
	}
	cfg := sb.container.Config()
	if err := h.verifyPosture(sb, &cfg); err != nil {
		t.Errorf("posture: %v", err)
	}
}
