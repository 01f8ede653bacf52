package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The "defaults" section: what a user who changed nothing gets:
// a server with an empty configuration (pool "auto", the template where
// criu works, the default preload), against the peers that do the same
// work, measured in this run.

// benchDefaults: sequential create + first cell, a burst of 20 creates,
// idle memory per session, and the like-for-like runc burst.
func benchDefaults(dir string) {
	log.Print("defaults: a fresh install's configuration, waiting for its pool")
	s := startServer(dir, "d", nil, poolDefault)
	waitPoolFull(s)
	// Create, run `1`, close; ten times in a row, 0.3 s apart: the pool
	// refills in the background meanwhile, as it would between an agent's
	// sessions.
	var seq []time.Duration
	for i := 0; i < n(10, 4); i++ {
		t := time.Now()
		id, _ := s.create()
		s.exec(id, "1")
		seq = append(seq, time.Since(t))
		s.close(id)
		time.Sleep(300 * time.Millisecond)
	}
	res.Raw["defaults_create_first_cell_p50_ms"] = pct(seq, 0.5)

	log.Print("defaults: 20 creates at once, each until it answered 1+1")
	time.Sleep(2 * time.Second)
	waitPoolFull(s)
	ids := make([]string, 20)
	errs := make([]error, 20)
	var wg sync.WaitGroup
	t := time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, _, err := s.tryCreate()
			if err == nil {
				out, cerr := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": "1+1"})
				if cerr != nil || status(out) != "ok" {
					err = fmt.Errorf("1+1: %v %v", cerr, out)
				}
			}
			ids[i], errs[i] = id, err
		}()
	}
	wg.Wait()
	res.Raw["defaults_burst20_ms"] = ms(time.Since(t))
	failed := 0
	var ok []string
	for i, err := range errs {
		if err != nil {
			failed++
			log.Printf("defaults burst: %v", err)
			continue
		}
		ok = append(ok, ids[i])
	}
	res.Raw["defaults_burst20_ms_failed"] = float64(failed)
	res.Raw["defaults_template_starts"], res.Raw["defaults_import_starts"] = startPaths(s)
	time.Sleep(2 * time.Second)
	idleMemory(s, ok, "_defaults")
	s.stop()

	log.Print("defaults: Python client over jailcell json, x += 1")
	res.Raw["defaults_py_jsonl_rt_p50_ms"] = pythonJSONL(dir)

	log.Print("peer: 20 runc run at once importing the stack on the same rootfs")
	res.Raw["runc_burst20_stack_ms"] = runcBurst(dir, rootfsRoot(), 20,
		[]string{"python3", "-c", "import numpy, pandas, matplotlib.pyplot; print(1+1)"})
}

// poolDefault asks writeConfig for no pool and preload keys at all.
const poolDefault = -1

// waitPoolFull waits for the server's "warm pool full" line, at most 5 min.
func waitPoolFull(s *server) {
	for len(s.poolFull) > 1 {
		<-s.poolFull
	}
	select {
	case <-s.poolFull:
	case <-time.After(5 * time.Minute):
		fatal("pool did not fill in 5 min")
	}
}

// startPaths reads how many kernels started from the template and by
// importing, from /metrics.
func startPaths(s *server) (template, imported float64) {
	r, err := s.hc.Get("http://jailcell/metrics")
	if err != nil {
		return 0, 0
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, `jailcell_kernel_starts_total{path="template"} %g`, &v); err == nil {
			template = v
		}
		if _, err := fmt.Sscanf(line, `jailcell_kernel_starts_total{path="import"} %g`, &v); err == nil {
			imported = v
		}
	}
	return template, imported
}

// pythonJSONLScript drives `jailcell json` from Python as an agent's client
// would: one request line out, one response line in, timed around both.
const pythonJSONLScript = `
import json, subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # buffered, as any client
r = p.stdout
n = 0
def call(req):
    global n
    n += 1
    req["id"] = n
    p.stdin.write((json.dumps(req) + "\n").encode())
    p.stdin.flush()
    out = json.loads(r.readline())
    if not out.get("ok", True) or out.get("error"):
        raise SystemExit("jailcell json: %r" % out)
    return out
sid = call({"op": "create"})["session"]
call({"op": "exec", "session": sid, "code": "x = 0"})
rts = []
for _ in range(int(ROUNDS)):
    t = time.perf_counter()
    call({"op": "exec", "session": sid, "code": "x += 1"})
    rts.append(time.perf_counter() - t)
p.stdin.close()
p.wait()
rts.sort()
print(json.dumps({"rt_p50_ms": rts[len(rts) // 2] * 1000}))
`

// pythonJSONL returns the p50 of x += 1 from a Python client over a
// `jailcell json` with the default configuration.
func pythonJSONL(dir string) float64 {
	d := filepath.Join(dir, "pyj")
	_ = os.MkdirAll(d, 0o755)
	cfg := filepath.Join(d, "config.yaml")
	writeConfig(cfg, nil, poolDefault)
	return pythonJSONLWith(cfg, filepath.Join(d, "state"))
}

// pythonJSONLWith is pythonJSONL against a `jailcell json` with the
// configuration file cfg on the state directory state.
func pythonJSONLWith(cfg, state string) float64 {
	cmd := exec.Command("/usr/bin/python3", "-c", strings.Replace(pythonJSONLScript, "ROUNDS", strconv.Itoa(n(1000, 100)), 1),
		*binFlag, "json", "--config", cfg, "--state-dir", state, "--rootfs", *rootfsFlag)
	child(cmd)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fatal("python client: %v", err)
	}
	var v map[string]float64
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		fatal("python client output %q: %v", out, err)
	}
	return v["rt_p50_ms"]
}

// mplConfig is where the rootfs keeps matplotlib's prebuilt font cache,
// the MPLCONFIGDIR of every jailcell kernel (session/kernel.go).
const mplConfig = "/root/.config/matplotlib"

// runcBurst starts k `runc run` of args at once, each in its own bundle on
// the same read-only rootfs, and returns the time until all have exited.
func runcBurst(dir, root string, k int, args []string) float64 {
	spec := runcSpec(dir, root)
	proc := spec["process"].(map[string]any)
	proc["args"] = args
	proc["env"] = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "MPLBACKEND=Agg", "HOME=/tmp", "MPLCONFIGDIR=" + mplConfig}
	// As a jailcell sandbox has: a writable /tmp on a read-only root.
	mounts := append(spec["mounts"].([]any), map[string]any{
		"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777", "size=64m"}})
	const cgParent = "/jailcell-bench-runc-burst"
	defer removeCgroup(cgParent)
	cmds := make([]*exec.Cmd, k)
	for i := range cmds {
		bundle := filepath.Join(dir, fmt.Sprintf("runc-burst-%d", i))
		if err := os.MkdirAll(bundle, 0o755); err != nil {
			fatal("%v", err)
		}
		id := fmt.Sprintf("jailcell-bench-burst-%d-%d", os.Getpid(), i)
		spec["linux"].(map[string]any)["cgroupsPath"] = cgParent + "/" + id
		// And as a jailcell kernel has: the rootfs's prebuilt matplotlib
		// font cache, writable (matplotlib ignores a read-only config
		// directory and rebuilds the cache in a temporary one, a second
		// or more that a kernel never pays): a copy per container.
		mpl := filepath.Join(bundle, "mpl")
		if out, err := exec.Command("cp", "-a", filepath.Join(root, mplConfig), mpl).CombinedOutput(); err != nil {
			fatal("copy the rootfs's matplotlib cache: %v: %s", err, out)
		}
		spec["mounts"] = append(mounts, map[string]any{
			"destination": mplConfig, "type": "bind", "source": mpl, "options": []string{"rbind", "rw"}})
		b, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
			fatal("%v", err)
		}
		cmds[i] = exec.Command("runc", "run", "--bundle", bundle, id)
		cmds[i].Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	}
	var wg sync.WaitGroup
	errs := make([]error, k)
	t := time.Now()
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr bytes.Buffer
			c.Stderr = &stderr
			if out, err := c.Output(); err != nil || strings.TrimSpace(string(out)) != "2" {
				errs[i] = fmt.Errorf("%v: %q, stderr %q", err, out, stderr.Bytes())
			}
		}()
	}
	wg.Wait()
	d := ms(time.Since(t))
	for _, err := range errs {
		if err != nil {
			fatal("runc burst: %v", err)
		}
	}
	return d
}
