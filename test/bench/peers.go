package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func rootfsRoot() string {
	for _, p := range []string{filepath.Join(*rootfsFlag, "current", "root"), filepath.Join(*rootfsFlag, "root"), *rootfsFlag} {
		if _, err := os.Stat(filepath.Join(p, "usr/bin/python3")); err == nil {
			return p
		}
	}
	fatal("no rootfs with python3 under %s", *rootfsFlag)
	return ""
}

func timeCmd(name string, args ...string) time.Duration {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t := time.Now()
	if err := cmd.Run(); err != nil {
		fatal("%s %v: %v: %s", name, args, err, stderr.Bytes())
	}
	return time.Since(t)
}

func medianRuns(k int, f func() time.Duration) float64 {
	var ds []time.Duration
	f() // warm the page cache
	for range k {
		ds = append(ds, f())
	}
	return pct(ds, 0.5)
}

const jupyterScript = `
import json, sys, time
from jupyter_client.manager import start_new_kernel
starts = []
for i in range(3):
    t = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3")
    starts.append(time.perf_counter() - t)
    if i < 2:
        kc.stop_channels(); km.shutdown_kernel(now=True)
def run(code):
    t = time.perf_counter()
    r = kc.execute_interactive(code, timeout=300, output_hook=lambda m: None)
    assert r["content"]["status"] == "ok", r["content"]
    return time.perf_counter() - t
run("x = 0")
rts = sorted(run("x += 1") for _ in range(%d))
imp = run("import numpy, pandas, matplotlib.pyplot")
kc.stop_channels(); km.shutdown_kernel(now=True)
starts.sort()
print(json.dumps({"start_ms": starts[1] * 1000, "rt_p50_ms": rts[len(rts) // 2] * 1000,
    "rt_p99_ms": rts[int(round(0.99 * (len(rts) - 1)))] * 1000, "import_ms": imp * 1000}))
`

func benchPeers(dir string) {
	root := rootfsRoot()
	log.Print("peers: chroot, bwrap, runc, Jupyter")
	k := n(15, 3)
	res.Raw["chroot_pass_ms"] = medianRuns(k, func() time.Duration { return timeCmd("chroot", root, "python3", "-c", "pass") })
	res.Raw["bwrap_pass_ms"] = medianRuns(k, func() time.Duration {
		return timeCmd("bwrap", "--ro-bind", root, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
			"--unshare-all", "--die-with-parent", "--new-session", "python3", "-c", "pass")
	})
	res.Raw["runc_pass_ms"] = benchRunc(dir, root, k)

	for k, v := range jupyter(n(500, 50)) {
		res.Raw["jupyter_"+k] = v
	}
}

// jupyter runs jupyterScript with rounds round trips: an ipykernel's start,
// x += 1 round trips (p50, p99) and the stack's import, in ms.
func jupyter(rounds int) map[string]float64 {
	cmd := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(jupyterScript, rounds))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fatal("jupyter: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var j map[string]float64
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &j); err != nil {
		fatal("jupyter output %q: %v", out, err)
	}
	return j
}

// benchRunc times `runc run` of python3 -c pass on the same rootfs,
// read-only, in runc's default namespaces, under an absolute cgroup path.
func benchRunc(dir, root string, k int) float64 {
	bundle := filepath.Join(dir, "runc")
	_ = os.MkdirAll(bundle, 0o755)
	spec := runcSpec(dir, root)
	spec["process"].(map[string]any)["args"] = []string{"python3", "-c", "pass"}
	const cgParent = "/jailcell-bench-runc"
	defer removeCgroup(cgParent)
	i := 0
	return medianRuns(k, func() time.Duration {
		i++
		id := fmt.Sprintf("jailcell-bench-%d-%d", os.Getpid(), i)
		spec["linux"].(map[string]any)["cgroupsPath"] = cgParent + "/" + id
		b, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
			fatal("%v", err)
		}
		return timeCmd("runc", "run", "--bundle", bundle, id)
	})
}

// runcSpec is `runc spec`'s default, on root read-only, without a terminal.
func runcSpec(dir, root string) map[string]any {
	tmp := filepath.Join(dir, "runc-spec")
	_ = os.MkdirAll(tmp, 0o755)
	c := exec.Command("runc", "spec")
	c.Dir = tmp
	if out, err := c.CombinedOutput(); err != nil {
		fatal("runc spec: %v: %s", err, out)
	}
	var spec map[string]any
	b, _ := os.ReadFile(filepath.Join(tmp, "config.json"))
	_ = os.Remove(filepath.Join(tmp, "config.json"))
	if err := json.Unmarshal(b, &spec); err != nil {
		fatal("%v", err)
	}
	// runc refuses a rootfs path through a symlink ("current").
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	spec["root"] = map[string]any{"path": root, "readonly": true}
	spec["process"].(map[string]any)["terminal"] = false
	return spec
}

// removeCgroup removes the (empty) cgroup parent the runc peers ran under,
// in every hierarchy.
func removeCgroup(parent string) {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), parent))
	}
	_ = os.Remove(filepath.Join("/sys/fs/cgroup", parent))
}
