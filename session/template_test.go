package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// withTemplates is a config change: the preload, so templates are built,
// and no zygote, which creates would take first.
func withTemplates(c *Config) { c.Preload = testPreload; c.NoZygote = true }

// waitTemplate waits for the default policy's template build to end and
// fails the test if it did not succeed.
func waitTemplate(t *testing.T, m *Manager) {
	t.Helper()
	tp := m.warm.templateFor(m.cfg.Policies["default"])
	if tp == nil {
		t.Fatal("no template for the default policy although criu works and the preload is set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp.wait(ctx)
	if !tp.usable() {
		t.Fatalf("template not usable: %v", tp.err)
	}
}

func createStarted(t *testing.T, m *Manager, want string) string {
	t.Helper()
	info, err := m.Create(context.Background(), CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if info.Start != want {
		t.Fatalf("create started by %q, want %q", info.Start, want)
	}
	return info.ID
}

func cellStdout(t *testing.T, m *Manager, id, code string) string {
	t.Helper()
	res, err := m.Exec(context.Background(), 1000, id, ExecRequest{Code: code})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("cell %q: %v %+v", code, err, res)
	}
	return res.Stdout
}

// TestTemplateSessionsDoNotShareRandomness: two sessions restored from one
// template draw different numbers from every generator seeded at import
// (without the kernel's reseed they draw the same), and keep the state
// they were given: the preload is imported, a cell runs as in a cold one.
// The str hash secret is the one thing they share (SECURITY.md).
func TestTemplateSessionsDoNotShareRandomness(t *testing.T) {
	requiresCriu(t)
	e := newEnv(t, withTemplates)
	waitTemplate(t, e.m)
	draw := `import random, sys, tempfile, numpy as np
print(random.random(), np.random.rand(), next(tempfile._get_candidate_names()), sorted(m for m in ("numpy", "pandas", "matplotlib.pyplot") if m in sys.modules), hash("jailcell"))`
	var outs [][]string
	for range 2 {
		id := createStarted(t, e.m, StartTemplate)
		outs = append(outs, strings.Fields(cellStdout(t, e.m, id, draw)))
	}
	a, b := outs[0], outs[1]
	if len(a) != 7 || len(b) != 7 {
		t.Fatalf("unexpected output %q / %q", a, b)
	}
	for i, what := range []string{"random.random()", "numpy.random.rand()", "tempfile names"} {
		if a[i] == b[i] {
			t.Errorf("%s is the same in two sessions from one template: %s", what, a[i])
		}
	}
	if got := strings.Join(a[3:6], " "); got != "['matplotlib.pyplot', 'numpy', 'pandas']" {
		t.Errorf("preloaded modules in a template session: %s", got)
	}
	if a[6] != b[6] {
		t.Logf("str hashes differ between template sessions (%s, %s): SECURITY.md says they are shared", a[6], b[6])
		t.Errorf("str hash secret: SECURITY.md documents it as shared by sessions of one template; update it")
	}
}

// posture is what a kernel sees of its confinement, minus what differs by
// design between any two sessions (pids, the uid slot's host ids).
const posture = `import ctypes, os, socket
st = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    if k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
        st[k] = v.split()
print("status", sorted(st.items()))
print("uid_map", [(l.split()[0], l.split()[2]) for l in open("/proc/self/uid_map")])
print("mounts", sorted((f[4], f[-3], f[5].split(",")[0]) for f in (l.split() for l in open("/proc/self/mountinfo"))))
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
print("limits", [l.strip() for l in open("/proc/self/limits")][1:])
print("hostname", socket.gethostname())
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (("unshare-userns", 272, (0x10000000,)), ("keyctl", 250, (0, 0)), ("mount", 165, (0, 0, 0, 0, 0)), ("bpf", 321, (0, 0, 0))):
    r = libc.syscall(nr, *args)
    print("syscall", name, r, os.strerror(ctypes.get_errno()) if r < 0 else "")
try:
    open("/usr/jailcell-probe", "w")
    print("rootfs writable")
except OSError as e:
    print("rootfs", e.strerror)
`

// TestTemplatePostureMatchesCold: a kernel restored from a template, and
// one forked from a zygote, are confined exactly as one started cold:
// identity, capabilities, no_new_privs, its seccomp filter and what it
// refuses, mounts, network, rlimits, and the cgroup limits the host set.
func TestTemplatePostureMatchesCold(t *testing.T) {
	requiresCriu(t)
	seen := map[string]string{}
	for _, c := range []struct {
		start string
		mod   func(*Config)
	}{
		{StartImport, func(c *Config) { c.Preload = testPreload; c.NoTemplate = true; c.NoZygote = true }},
		{StartTemplate, withTemplates},
		{StartZygote, withZygotes},
	} {
		t.Run(c.start, func(t *testing.T) {
			e := newEnv(t, c.mod)
			switch c.start {
			case StartTemplate:
				waitTemplate(t, e.m)
			case StartZygote:
				waitZygote(t, e.m)
			}
			id := createStarted(t, e.m, c.start)
			got := cellStdout(t, e.m, id, posture)
			for _, cg := range sessionCgroups(id) {
				for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
					if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", testCgroupRoot, cg, f)); err == nil {
						got += f + " " + string(b)
					}
					if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", testCgroupRoot, cg, f)); err == nil {
						got += f + " " + string(b)
					}
				}
			}
			if !strings.Contains(got, "Seccomp', ['2']") || !strings.Contains(got, "NoNewPrivs', ['1']") || !strings.Contains(got, "memory.") {
				t.Fatalf("posture probe did not see the confinement it should:\n%s", got)
			}
			seen[c.start] = got
		})
	}
	for _, other := range []string{StartTemplate, StartZygote} {
		if seen[StartImport] == "" || seen[other] == "" {
			continue // a subtest failed and said why
		}
		cold, got := strings.Split(seen[StartImport], "\n"), strings.Split(seen[other], "\n")
		if len(cold) != len(got) {
			t.Errorf("posture differs:\ncold:\n%s\n%s:\n%s", seen[StartImport], other, seen[other])
			continue
		}
		for i := range cold {
			if cold[i] != got[i] {
				t.Errorf("posture differs:\n cold:     %s\n %s: %s", cold[i], other, got[i])
			}
		}
	}
}

// TestTemplateSurvivesRestartAndRefreshes: a second daemon restores the
// template the first built; a daemon with another preload list removes it
// and builds its own.
func TestTemplateSurvivesRestartAndRefreshes(t *testing.T) {
	requiresCriu(t)
	r := newRestartable(t)
	m1 := r.startWith(withTemplates)
	waitTemplate(t, m1)
	first := m1.warm.templateFor(m1.cfg.Policies["default"]).images
	if err := m1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	m2 := r.startWith(withTemplates)
	tp := m2.warm.templateFor(m2.cfg.Policies["default"])
	if tp.images != first || !tp.usable() {
		t.Fatalf("second daemon did not reuse the template at %s (has %s, usable %v)", first, tp.images, tp.usable())
	}
	id := createStarted(t, m2, StartTemplate)
	if out := cellStdout(t, m2, id, "import pandas; print(pandas.DataFrame({'a': [1, 2]}).a.sum())"); strings.TrimSpace(out) != "3" {
		t.Fatalf("cell in a session from a reused template: %q", out)
	}
	if err := m2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	m3 := r.startWith(func(c *Config) { c.Preload = []string{"numpy"}; c.NoZygote = true })
	defer m3.Shutdown(context.Background())
	waitTemplate(t, m3)
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the template of another preload list is still there: %v", err)
	}
	id = createStarted(t, m3, StartTemplate)
	if out := cellStdout(t, m3, id, "import sys; print('pandas' in sys.modules, 'numpy' in sys.modules)"); strings.TrimSpace(out) != "False True" {
		t.Errorf("the refreshed template does not follow the new preload list: %q", out)
	}
}

// BenchmarkTemplateStart measures a create restored from the template
// (go test -tags seccomp -run NONE -bench TemplateStart ./session/; with
// JAILCELL_TEST_LOG=debug the log shows each restore's phases).
func BenchmarkTemplateStart(b *testing.B) {
	if err := criuProbe(); err != nil {
		b.Skip("requires a working criu (make criu): " + err.Error())
	}
	for _, path := range []string{StartTemplate, StartImport} {
		b.Run(path, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { withTemplates(c); c.NoTemplate = path == StartImport })
			if path == StartTemplate {
				tp := e.m.warm.templateFor(e.m.cfg.Policies["default"])
				tp.wait(context.Background())
				if !tp.usable() {
					b.Fatalf("template: %v", tp.err)
				}
			}
			startOne(b, e, path)
		})
	}
}

func startOne(b *testing.B, e *env, path string) {
	b.ResetTimer()
	for range b.N {
		info, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000})
		if err != nil || info.Start != path {
			b.Fatalf("create: %v %+v", err, info)
		}
		b.StopTimer()
		_ = e.m.Close(context.Background(), 1000, info.ID)
		b.StartTimer()
	}
}

// BenchmarkTemplateBurst20 measures 20 creates at once restored from the
// template, no pool: the wall time until all are ready.
func BenchmarkTemplateBurst20(b *testing.B) {
	if err := criuProbe(); err != nil {
		b.Skip("requires a working criu (make criu): " + err.Error())
	}
	for _, path := range []string{StartTemplate, StartImport} {
		b.Run(path, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { withTemplates(c); c.MaxSessions = 32; c.NoTemplate = path == StartImport })
			if path == StartTemplate {
				tp := e.m.warm.templateFor(e.m.cfg.Policies["default"])
				tp.wait(context.Background())
				if !tp.usable() {
					b.Fatalf("template: %v", tp.err)
				}
			}
			burst20(b, e)
		})
	}
}

func burst20(b *testing.B, e *env) {
	b.ResetTimer()
	for range b.N {
		ids := make([]string, 20)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				info, err := e.m.Create(context.Background(), CreateOptions{Owner: 1000})
				if err != nil {
					b.Error(err)
					return
				}
				ids[i] = info.ID
			}()
		}
		wg.Wait()
		b.StopTimer()
		for _, id := range ids {
			if id != "" {
				_ = e.m.Close(context.Background(), 1000, id)
			}
		}
		b.StartTimer()
	}
}
