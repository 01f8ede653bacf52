package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/client"
)

// The "zygote" section: the zygote's targets, each measured beside
// its peer in this run, with a fresh install's configuration and no pool.
// Sessions forked from a preloaded zygote are what should meet them; until
// that start path exists, kernels start from the criu template or import
// the preload, and every row says which path its creates took (the create
// response's "start": "zygote", "template" or "import").

// zygoteBurst is how many sessions are created at once, and alive for the
// memory figure.
const zygoteBurst = 100

// zygoteConfig is a fresh install's configuration but for one key: no
// pool (the targets are cold starts). sessions.max is the fresh install's
// "auto", sized from the host (1024 on a 24 GiB, 2-core one), so the
// burst fits. http.max_in_flight_per_owner (64) stays at its default too:
// it makes the burst's requests past the 64th wait for a place, never
// refuses them.
const zygoteConfig = `# a fresh install's defaults, but for:
pool:
  size: 0   # the targets are cold starts
`

// zygoteKeys says which configuration keys differ from a fresh install's.
const zygoteKeys = "pool.size 0"

// starts counts create responses by their "start" (zygote, template,
// import; "?" when the response had none).
type starts map[string]int

func (s starts) add(path string) {
	if path == "" {
		path = "?"
	}
	s[path]++
}

// String is "zygote 0, template 14, import 1" in a fixed order.
func (s starts) String() string {
	var parts []string
	seen := map[string]bool{}
	for _, p := range []string{"zygote", "template", "import"} {
		parts = append(parts, fmt.Sprintf("%s %d", p, s[p]))
		seen[p] = true
	}
	var rest []string
	for p := range s {
		if !seen[p] {
			rest = append(rest, p)
		}
	}
	sort.Strings(rest)
	for _, p := range rest {
		parts = append(parts, fmt.Sprintf("%s %d", p, s[p]))
	}
	return "start: " + strings.Join(parts, ", ")
}

// record keeps a section's start paths beside its raw figures.
func (s starts) record(key string) {
	for p, c := range s {
		res.Raw[key+"_start_"+p] = float64(c)
	}
	zyg.starts[key] = s.String()
}

// zyg holds what the rows need beyond res.Raw.
var zyg = struct {
	starts map[string]string // by figure key: "start: zygote 0, ..."
	failed map[string]string // by figure key: why it could not be measured
}{starts: map[string]string{}, failed: map[string]string{}}

func benchZygote(dir string) {
	d := filepath.Join(dir, "z")
	if err := os.MkdirAll(d, 0o755); err != nil {
		fatal("%v", err)
	}
	cfg := filepath.Join(d, "config.yaml")
	if err := os.WriteFile(cfg, []byte(zygoteConfig), 0o644); err != nil {
		fatal("%v", err)
	}
	log.Printf("zygote targets: a fresh install's configuration (%s), waiting for its start path", zygoteKeys)
	s := startServerConfig(d, "z", cfg, "info")
	waitSettled(s.templateDone, s.cmd.Process.Pid, s.cgroupRoot(), "serve")
	root := rootfsRoot()

	// Cold creates, interleaved with the peer so that both see the same
	// moment of a noisy host. One create first, not counted: it fills the
	// page cache as the peer's own first run does (medianRuns).
	log.Print("zygote: cold creates with the default preload, interleaved with runc run python3 -c pass")
	id, _, _, err := s.tryCreateStart()
	if err != nil {
		fatal("zygote warm-up create: %v", err)
	}
	s.close(id)
	runc := runcPass(dir, root)
	runc.run()
	var creates, peer []time.Duration
	cold := starts{}
	for range n(20, 4) {
		id, d, path, err := s.tryCreateStart()
		if err != nil {
			fatal("zygote create: %v", err)
		}
		creates = append(creates, d)
		cold.add(path)
		s.close(id)
		peer = append(peer, runc.run())
	}
	runc.done()
	res.Raw["zygote_cold_create_p50_ms"] = pct(creates, 0.5)
	res.Raw["zygote_runc_pass_p50_ms"] = pct(peer, 0.5)
	cold.record("zygote_cold_create")

	// Round trips, before the burst so that no other session is alive.
	log.Print("zygote: x += 1 round trips over the socket, Go client and Python client")
	res.Raw["zygote_go_http_rt_p50_ms"] = goRoundTrip(client.NewHTTP(s.sock), "socket")
	res.Raw["zygote_py_client_rt_p50_ms"] = pyClientRoundTrip(s.sock)

	k := n(zygoteBurst, 20)
	log.Printf("zygote: %d creates at once, each until it answered 1+1", k)
	ids, failed, burst, took := zygoteBurstCreate(s, k)
	res.Raw["zygote_burst_ms"] = ms(took)
	res.Raw["zygote_burst_failed"] = float64(failed)
	res.Raw["zygote_burst_n"] = float64(k)
	burst.record("zygote_burst")

	// Idle: the sessions have answered and nothing runs in them.
	time.Sleep(2 * time.Second)
	log.Printf("zygote: memory of %d idle preloaded sessions, all alive", len(ids))
	zygoteMemory(s, ids)
	res.Raw["zygote_memory_alive"] = float64(len(ids))
	for _, id := range ids {
		s.close(id)
	}
	s.stop()

	// The same state directory: the next process reuses the start path
	// the server prepared (a template matching its key) instead of
	// building one while the round trips run.
	log.Print("zygote: x += 1 over jailcell json, Go client and Python client")
	res.Raw["zygote_go_jsonl_rt_p50_ms"] = goJSONLRoundTrip(cfg, s.state)
	res.Raw["zygote_py_jsonl_rt_p50_ms"] = pythonJSONLWith(cfg, s.state)

	log.Print("zygote peer: Jupyter round trips")
	j := jupyter(n(500, 50))
	res.Raw["zygote_jupyter_rt_p50_ms"] = j["rt_p50_ms"]

	log.Printf("zygote peer: %d runc run at once importing the stack on the same rootfs", k)
	res.Raw["zygote_runc_burst_ms"] = runcBurst(dir, root, k,
		[]string{"python3", "-c", "import numpy, pandas, matplotlib.pyplot; print(1+1)"})
}

// waitSettled waits until a daemon has prepared its start path (a
// template, a zygote, or none) so that no sample pays for that build or
// races it for the CPUs: until the daemon and its sandboxes (the cgroup
// root) have used under 5% of a CPU for two seconds in a row, once it has
// logged that a template is ready or will not be (done), or, with no such
// line, once 10 s have passed (a daemon that reuses an earlier template
// logs nothing). A zygote still being built after a template's line keeps
// it busy, so the wait covers that too. At most 5 min, then it goes on and
// says so.
func waitSettled(done <-chan struct{}, pid int, cgRoot, who string) {
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	last, quiet := cpuSeconds(pid, cgRoot), 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		now := cpuSeconds(pid, cgRoot)
		if now-last < 0.05 {
			quiet++
		} else {
			quiet = 0
		}
		last = now
		said := false
		select {
		case <-done:
			said = true
		default:
		}
		if quiet >= 2 && (said || time.Since(start) >= 10*time.Second) {
			log.Printf("%s: settled after %.0f s", who, time.Since(start).Seconds())
			return
		}
	}
	log.Printf("%s: still busy after 5 min preparing its start path; measuring anyway", who)
}

// cpuSeconds is the CPU time of process pid and its reaped children, plus
// that of every sandbox under the cgroup root cgRoot.
func cpuSeconds(pid int, cgRoot string) float64 {
	var sec float64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command's closing parenthesis: utime is the
		// 14th field of the line, so the 12th after it.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+1:])
			for _, j := range []int{11, 12, 13, 14} { // utime stime cutime cstime
				if j < len(f) {
					v, _ := strconv.ParseFloat(f[j], 64)
					sec += v / 100 // USER_HZ
				}
			}
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		sec += statField(filepath.Join("/sys/fs/cgroup", cgRoot, "cpu.stat"), "usage_usec") / 1e6
	} else {
		sec += readNum(filepath.Join("/sys/fs/cgroup/cpuacct", cgRoot, "cpuacct.usage")) / 1e9
	}
	return sec
}

// templateLine says whether a daemon's log line says how kernels will
// start: a template built or reused, or none (session/template.go).
func templateLine(line string) bool {
	for _, m := range []string{`"session template ready"`, `"session template not built`,
		`"sessions start by importing the preload`, `"templates off"`} {
		if strings.Contains(line, m) {
			return true
		}
	}
	return false
}

// tryCreateStart creates a session and returns the start path its
// response names.
func (s *server) tryCreateStart() (id string, d time.Duration, path string, err error) {
	t := time.Now()
	out, err := s.call("POST", "/v1/sessions", map[string]any{})
	d = time.Since(t)
	if err != nil {
		return "", d, "", err
	}
	path, _ = out["start"].(string)
	id, _ = out["session"].(string)
	return id, d, path, nil
}

// createAnswering creates a session and runs 1+1 in it; it returns the
// session's id (also on a failed cell: the caller closes it), its start
// path and what failed.
func (s *server) createAnswering() (id, path string, err error) {
	id, _, path, err = s.tryCreateStart()
	if err == nil {
		out, cerr := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": "1+1"})
		if cerr != nil || status(out) != "ok" {
			err = fmt.Errorf("1+1: %v %v", cerr, out)
		}
	}
	return id, path, err
}

// zygoteBurstCreate creates k sessions at once, each until it answered
// 1+1, and returns the ids that did, how many failed, their start paths
// and the time until the last answered.
func zygoteBurstCreate(s *server, k int) ([]string, int, starts, time.Duration) {
	ids := make([]string, k)
	paths := make([]string, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	t := time.Now()
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], paths[i], errs[i] = s.createAnswering()
		}()
	}
	wg.Wait()
	took := time.Since(t)
	ok, failed, st := s.answered("zygote burst", ids, paths, errs)
	return ok, failed, st, took
}

// answered sorts out the creates of createAnswering: the ids that
// answered, how many failed (each failed session closed, the first three
// errors logged), and the answered ones' start paths.
func (s *server) answered(who string, ids, paths []string, errs []error) (ok []string, failed int, st starts) {
	st = starts{}
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 3 {
				log.Printf("%s: session %d: %v", who, i, err)
			}
			if ids[i] != "" {
				s.close(ids[i])
			}
			continue
		}
		ok = append(ok, ids[i])
		st.add(paths[i])
	}
	return ok, failed, st
}

// zygoteMemory records, as medians over the idle sessions ids, each
// session's own cgroup charge (memory.current on v2, memory.usage_in_bytes
// on v1), its anonymous part, and the unique and proportional set sizes of
// the processes in that cgroup (smaps_rollup: USS = Private_Clean +
// Private_Dirty; PSS splits each shared page among its sharers). MB = 10^6
// bytes.
func zygoteMemory(s *server, ids []string) {
	var tot, anon, uss, pss []float64
	for _, id := range ids {
		if t, a, ok := s.sessionMemory(id); ok {
			tot, anon = append(tot, t), append(anon, a)
		}
		if u, p, ok := s.sessionSetSizes(id); ok {
			uss, pss = append(uss, u), append(pss, p)
		}
	}
	res.Raw["zygote_idle_measured"] = float64(len(tot))
	if len(tot) == 0 || len(uss) == 0 {
		zyg.failed["memory"] = "no session cgroup (or none of its processes) found under " + s.cgroupRoot()
		return // a median of nothing is NaN, which results.json cannot hold
	}
	res.Raw["zygote_idle_cgroup_mb"] = median(tot) / 1e6
	res.Raw["zygote_idle_anon_mb"] = median(anon) / 1e6
	res.Raw["zygote_idle_uss_mb"] = median(uss) / 1e6
	res.Raw["zygote_idle_pss_mb"] = median(pss) / 1e6
}

// sessionSetSizes sums USS and PSS (bytes) over every process in the
// session's cgroup and the cgroups below it.
func (s *server) sessionSetSizes(id string) (uss, pss float64, ok bool) {
	d := s.sessionCgroupDir(id)
	if d == "" {
		return 0, 0, false
	}
	_ = filepath.WalkDir(d, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			u, p, err := smapsRollup(f)
			if err != nil {
				continue // exited meanwhile
			}
			uss, pss, ok = uss+u, pss+p, true
		}
		return nil
	})
	return uss, pss, ok
}

// smapsRollup reads a process's USS (Private_Clean + Private_Dirty) and
// PSS in bytes from /proc/PID/smaps_rollup (its figures are in KiB).
func smapsRollup(pid string) (uss, pss float64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "smaps_rollup"))
	if err != nil {
		return 0, 0, err
	}
	uss, pss = parseSmapsRollup(b)
	return uss, pss, nil
}

// parseSmapsRollup sums Private_Clean and Private_Dirty (USS) and reads
// Pss from smaps_rollup's text, in bytes.
func parseSmapsRollup(b []byte) (uss, pss float64) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Private_Clean:", "Private_Dirty:":
			uss += v * 1024
		case "Pss:":
			pss += v * 1024
		}
	}
	return uss, pss
}

// runcPeer runs `runc run python3 -c pass` one at a time, as benchRunc
// does, for interleaving with another measurement.
type runcPeer struct {
	bundle string
	spec   map[string]any
	i      int
}

const runcPassParent = "/jailcell-bench-runc-z"

func runcPass(dir, root string) *runcPeer {
	r := &runcPeer{bundle: filepath.Join(dir, "runc-z"), spec: runcSpec(dir, root)}
	if err := os.MkdirAll(r.bundle, 0o755); err != nil {
		fatal("%v", err)
	}
	r.spec["process"].(map[string]any)["args"] = []string{"python3", "-c", "pass"}
	return r
}

func (r *runcPeer) run() time.Duration {
	r.i++
	id := fmt.Sprintf("jailcell-bench-z-%d-%d", os.Getpid(), r.i)
	r.spec["linux"].(map[string]any)["cgroupsPath"] = runcPassParent + "/" + id
	b, _ := json.Marshal(r.spec)
	if err := os.WriteFile(filepath.Join(r.bundle, "config.json"), b, 0o644); err != nil {
		fatal("%v", err)
	}
	return timeCmd("runc", "run", "--bundle", r.bundle, id)
}

func (r *runcPeer) done() { removeCgroup(runcPassParent) }

// goRoundTrip times x += 1 through the repo's Go client (package client)
// in a new session, and returns the p50 in ms.
func goRoundTrip(c client.API, via string) float64 {
	ctx := context.Background()
	sess, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		fatal("go client over %s: create: %v", via, err)
	}
	defer c.CloseSession(ctx, sess.ID)
	if _, err := c.Exec(ctx, sess.ID, "x = 0", nil); err != nil {
		fatal("go client over %s: %v", via, err)
	}
	var ds []time.Duration
	for range n(1000, 100) {
		t := time.Now()
		r, err := c.Exec(ctx, sess.ID, "x += 1", nil)
		ds = append(ds, time.Since(t))
		if err != nil || r.Status != "ok" {
			fatal("go client over %s: x += 1: %v %+v", via, err, r)
		}
	}
	return pct(ds, 0.5)
}

// goJSONLRoundTrip is goRoundTrip over a `jailcell json` on state, once it
// has said how its kernels start.
func goJSONLRoundTrip(cfg, state string) float64 {
	cmd := exec.Command(*binFlag, "json", "--config", cfg, "--state-dir", state, "--rootfs", *rootfsFlag,
		"--log-format", "json", "--log-level", "info")
	child(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		fatal("%v", err)
	}
	c, err := client.StartJSONCmd(cmd)
	if err != nil {
		fatal("go client: %v", err)
	}
	done := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if templateLine(line) {
				once.Do(func() { close(done) })
			} else if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				log.Printf("json: %s", line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line over 1 MiB: never block the child on its stderr
	}()
	waitSettled(done, cmd.Process.Pid, cgroupRootFor(state), "json")
	v := goRoundTrip(c, "jailcell json")
	if err := c.Close(); err != nil {
		log.Printf("jailcell json: %v", err)
	}
	return v
}

// pyClientScript times x += 1 through the repo's Python client
// (jailcell.Client: HTTP on the Unix socket, its connection kept alive
// between calls, as it makes them).
const pyClientScript = `
import json, sys, time
from jailcell import Client
c = Client(sys.argv[1])
sid = c.create()["session"]
c.exec("x = 0", session=sid)
rts = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    r = c.exec("x += 1", session=sid)
    rts.append(time.perf_counter() - t)
    assert r["status"] == "ok", r
c.close(sid)
rts.sort()
print(json.dumps({"rt_p50_ms": rts[len(rts) // 2] * 1000}))
`

// pyClientRoundTrip runs pyClientScript against the socket sock; NaN when
// the client package is not where -pyclient says (the row then says so).
func pyClientRoundTrip(sock string) float64 {
	pkg, err := filepath.Abs(*pyClientFlag)
	if err == nil {
		_, err = os.Stat(filepath.Join(pkg, "jailcell", "client.py"))
	}
	if err != nil {
		zyg.failed["py_client"] = fmt.Sprintf("Python client not found at %s (-pyclient)", *pyClientFlag)
		log.Printf("zygote: %s", zyg.failed["py_client"])
		return 0
	}
	cmd := exec.Command("/usr/bin/python3", "-c", pyClientScript, sock, strconv.Itoa(n(1000, 100)))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + pkg}
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

// zygoteRows adds the zygote section's rows: the zygote's targets, each
// beside its peer from this run.
func zygoteRows(add func(string, Row, bool, float64)) {
	const sec = "zygote"
	r := res.Raw
	cfgNote := "a fresh install's configuration but " + zygoteKeys

	runc := r["zygote_runc_pass_p50_ms"]
	const forkClose = "creates are forks of the zygote; what a fork still spends, by phase on this host: the " +
		"sandbox's cgroup on a v1/hybrid host, a dozen hierarchies (10-20 ms, made while the root is mounted and the zygote " +
		"forks), the idmapped root and overlay (3-6 ms), the fork's own mounts, made in Python (5-7 ms), libcontainer's state " +
		"file and the posture check (5-10 ms); closing it: cgroups and roots made ahead of demand, the fork's mounts made in " +
		"C, and a pure cgroup v2 host"
	add(sec, Row{Figure: "create to ready, cold, numpy+pandas+pyplot preloaded (the default), no pool, p50", Unit: "ms",
		Jailcell: r["zygote_cold_create_p50_ms"], Target: "<= 25 ms",
		Peer: "runc run python3 -c pass, no preload, interleaved", PeerVal: runc,
		Compares: "runc's bare interpreter / jailcell's kernel with the stack imported",
		Note:     cfgNote, Start: zyg.starts["zygote_cold_create"], Close: forkClose}, true, 25)
	add(sec, Row{Figure: "  the same, no slower than its peer", Unit: "ms",
		Jailcell: r["zygote_cold_create_p50_ms"], Target: fmt.Sprintf("<= peer = %.3g ms", runc),
		Peer: "runc run python3 -c pass, no preload, interleaved", PeerVal: runc,
		Compares: "runc's bare interpreter / jailcell's kernel with the stack imported", Close: forkClose}, true, runc)

	k, peer := r["zygote_burst_n"], r["zygote_runc_burst_ms"]
	burst := Row{Figure: fmt.Sprintf("%.0f sessions created at once, each until it answered 1+1, no pool", k), Unit: "ms",
		Jailcell: r["zygote_burst_ms"], Target: fmt.Sprintf("10x: <= peer / 10 = %.0f ms", peer/10),
		Peer: fmt.Sprintf("%.0f runc run at once importing numpy+pandas+pyplot, same rootfs", k), PeerVal: peer,
		Compares: "like for like: both start the sandboxes with the stack imported and run a line",
		Note:     cfgNote, Start: zyg.starts["zygote_burst"],
		Close: "each create still builds its cgroup and root and checks its posture (see the cold create's row), two " +
			"at a time on 2 cores"}
	if f := r["zygote_burst_failed"]; f > 0 {
		burst.Note += fmt.Sprintf("; %.0f of %.0f failed, timed all the same", f, k)
		if f == k {
			burst.Failed = "every create failed"
		}
	}
	add(sec, burst, true, peer/10)

	mem := Row{Figure: fmt.Sprintf("memory per idle preloaded session, its own cgroup's charge, %.0f alive, median", r["zygote_memory_alive"]),
		Unit: "MB", Jailcell: r["zygote_idle_cgroup_mb"], Target: "<= 15 MB",
		Note: fmt.Sprintf("MB = 10^6 bytes; %s; anonymous part %.1f MB; %.0f sessions measured",
			chargeFile(), r["zygote_idle_anon_mb"], r["zygote_idle_measured"]),
		Start: zyg.starts["zygote_burst"],
		Close: "what a fork writes at start: PID 1's bare interpreter (about 3.4 MB, an exec so that checkpoints do not " +
			"carry the stack twice) and the kernel's own start-up and first cells"}
	if why := zyg.failed["memory"]; why != "" {
		mem.Failed = why
	}
	add(sec, mem, true, 15)
	uss := Row{Figure: "  the same sessions' unique set size (USS: Private_Clean + Private_Dirty of their processes, smaps_rollup), median",
		Unit: "MB", Jailcell: r["zygote_idle_uss_mb"],
		Note: fmt.Sprintf("MB = 10^6 bytes; proportional set size (PSS) %.1f MB", r["zygote_idle_pss_mb"])}
	if why := zyg.failed["memory"]; why != "" {
		uss.Failed = why
	}
	add(sec, uss, true, 0)

	jup := r["zygote_jupyter_rt_p50_ms"]
	const jupPeer = "Jupyter execute p50 (jupyter_client against ipykernel, no sandbox)"
	const rtClose = "one frame per cell instead of two (drop `started`: about 44 us) and the cell run on the kernel's link " +
		"thread when none is running (about 34 us); the host's HTTP or JSON-lines handling on top"
	py := Row{Figure: "cell round trip x += 1, the repo's Python client (jailcell.Client: HTTP on the Unix socket, connection kept alive), p50",
		Unit: "ms", Jailcell: r["zygote_py_client_rt_p50_ms"], Target: fmt.Sprintf("<= Jupyter / 10 = %.3g ms", jup/10),
		Peer: jupPeer, PeerVal: jup, Compares: "like for like: both from a Python client",
		Close: "the client's HTTP handling (http.client, a request head and a JSON body each way), and " + rtClose}
	if why := zyg.failed["py_client"]; why != "" {
		py.Failed = why
	}
	add(sec, py, true, jup/10)
	add(sec, Row{Figure: "cell round trip x += 1, Python over `jailcell json` pipes (one JSON line each way), p50",
		Unit: "ms", Jailcell: r["zygote_py_jsonl_rt_p50_ms"], Target: fmt.Sprintf("<= Jupyter / 10 = %.3g ms", jup/10),
		Peer: jupPeer, PeerVal: jup, Compares: "like for like: both from a Python client", Close: rtClose}, true, jup/10)
	add(sec, Row{Figure: "cell round trip x += 1, the repo's Go client (client.JSONL over `jailcell json` pipes), p50",
		Unit: "ms", Jailcell: r["zygote_go_jsonl_rt_p50_ms"], Peer: jupPeer, PeerVal: jup,
		Compares: "Jupyter from Python / jailcell from Go: not like for like", Close: rtClose}, true, 0.25)
	add(sec, Row{Figure: "cell round trip x += 1, the repo's Go client (client.HTTP on the Unix socket, kept alive), p50",
		Unit: "ms", Jailcell: r["zygote_go_http_rt_p50_ms"], Peer: jupPeer, PeerVal: jup,
		Compares: "Jupyter from Python / jailcell from Go: not like for like", Close: rtClose + "; HTTP parsing on both ends"}, true, 0.25)
}

// chargeFile names the file a session's cgroup charge is read from here.
func chargeFile() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "cgroup v2 memory.current"
	}
	return "cgroup v1 memory.usage_in_bytes"
}
