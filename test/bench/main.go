package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

var (
	binFlag      = flag.String("bin", "bin/jailcell", "jailcell binary")
	outFlag      = flag.String("out", "test/bench/out", "output directory")
	rootfsFlag   = flag.String("rootfs", "/var/lib/jailcell/rootfs", "jailcell rootfs base directory")
	quick        = flag.Bool("quick", false, "fewer samples (a smoke run)")
	pyClientFlag = flag.String("pyclient", "client/python", "the repo's Python client (the directory holding the jailcell package)")
	only         = flag.String("sections", "", "comma-separated sections to run, of "+strings.Join(sectionNames, ", ")+
		" (default all; a partial run prints and writes only their rows, and draws no chart)")
)

// sections in the order they run.
var sections = []struct {
	name string
	run  func(dir string)
}{
	{"jsonl", benchJSONL},
	{"pool", benchPool},
	{"socket", benchSocket},
	{"cold", benchCold},
	{"hibernation", benchHibernate},
	{"defaults", benchDefaults},
	{"restart", benchRestart},
	{"zygote", benchZygote},
	{"peers", benchPeers},
}

var sectionNames = func() []string {
	var ns []string
	for _, s := range sections {
		ns = append(ns, s.name)
	}
	return ns
}()

// ran says whether section name runs in this invocation.
var ran = map[string]bool{}

// stack is the default preload: what an agent's data cells import.
var stack = []string{"numpy", "pandas", "matplotlib.pyplot"}

// Row is one line of the table.
type Row struct {
	Figure   string  `json:"figure"`
	Unit     string  `json:"unit"`
	Jailcell float64 `json:"jailcell"`
	Target   string  `json:"target,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	Peer     string  `json:"peer,omitempty"`
	PeerVal  float64 `json:"peer_value,omitempty"`
	// Ratio is peer / jailcell for times (>1: jailcell is faster);
	// Compares says what it sets against what.
	Ratio    float64 `json:"ratio,omitempty"`
	Compares string  `json:"compares,omitempty"`
	Note     string  `json:"note,omitempty"`
	// Start says which start path the row's creates took, as their create
	// responses named it ("start: zygote 0, template 20, import 0").
	Start string `json:"start,omitempty"`
	// Close says, for a missed target, what would close it.
	Close string `json:"close,omitempty"`
	// Failed says why a figure could not be measured; its jailcell value
	// is then null, never a number.
	Failed string `json:"failed,omitempty"`
}

func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	v := struct {
		plain
		Jailcell *float64 `json:"jailcell"`
	}{plain: plain(r)}
	if r.Failed == "" {
		v.Jailcell = &r.Jailcell
	}
	return json.Marshal(v)
}

type results struct {
	Host    string             `json:"host"`
	Started time.Time          `json:"started"`
	Seconds float64            `json:"seconds"`
	Rows    []Row              `json:"rows"`
	Raw     map[string]float64 `json:"raw"`
}

var res = results{Raw: map[string]float64{}}

// live are the jailcell servers running now; fatal stops them so that no
// sandbox outlives the bench.
var (
	liveMu sync.Mutex
	live   = map[*server]bool{}
	tmpDir string // removed by fatal too
)

func fatal(format string, args ...any) {
	log.Printf(format, args...)
	liveMu.Lock()
	var ss []*server
	for s := range live {
		ss = append(ss, s)
	}
	liveMu.Unlock()
	for _, s := range ss {
		s.stop()
	}
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	finite := map[string]float64{}
	for k, v := range res.Raw {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			finite[k] = v // json.Marshal refuses NaN, and would print nothing
		}
	}
	b, _ := json.Marshal(finite)
	log.Printf("measured so far: %s", b)
	os.Exit(1)
}

// child makes a jailcell child process end with the bench: SIGTERM makes
// it tear its sandboxes down.
func child(cmd *exec.Cmd) {
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	for _, s := range sections {
		ran[s.name] = *only == ""
	}
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			if _, ok := ran[name]; !ok {
				log.Fatalf("-sections: unknown section %q; the sections are %s", name, strings.Join(sectionNames, ", "))
			}
			ran[name] = true
		}
	}
	if os.Geteuid() != 0 {
		fatal("bench needs root (it builds sandboxes)")
	}
	bin, err := filepath.Abs(*binFlag)
	if err != nil {
		fatal("%v", err)
	}
	*binFlag = bin
	if err := os.MkdirAll(*outFlag, 0o755); err != nil {
		fatal("%v", err)
	}
	// Short: a kernel's socket lives deep below each state dir, and a
	// Unix socket path has at most 107 bytes.
	tmp, err := os.MkdirTemp("", "jcb")
	if err != nil {
		fatal("%v", err)
	}
	tmpDir = tmp
	defer os.RemoveAll(tmp)
	// The sandboxes' mapped root must be able to pass through to the
	// state directories below.
	if err := os.Chmod(tmp, 0o711); err != nil {
		fatal("%v", err)
	}
	res.Started = time.Now().UTC()
	res.Host, _ = os.Hostname()
	t0 := time.Now()

	for _, s := range sections {
		if ran[s.name] {
			s.run(tmp)
		}
	}

	res.Seconds = time.Since(t0).Seconds()
	buildRows()
	printTable(os.Stdout)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		fatal("encode results: %v", err)
	}
	if err := os.WriteFile(filepath.Join(*outFlag, "results.json"), b, 0o644); err != nil {
		fatal("%v", err)
	}
	if *only != "" {
		log.Printf("wrote %s/results.json (sections %s) in %.0f s", *outFlag, *only, res.Seconds)
		return
	}
	if err := chart(tmp); err != nil {
		log.Printf("chart: %v", err)
	}
	log.Printf("wrote %s/results.json and %s/bench.png in %.0f s", *outFlag, *outFlag, res.Seconds)
}

// --- jailcell processes ---------------------------------------------------

// writeConfig writes a bench configuration: room for 100+ sessions.
func writeConfig(path string, preload []string, pool int) {
	if pool == poolDefault {
		// A fresh install's configuration: every key at its default.
		if err := os.WriteFile(path, []byte("# every key at its default\n"), 0o644); err != nil {
			fatal("%v", err)
		}
		return
	}
	items := make([]string, len(preload))
	for i, p := range preload {
		items[i] = strconv.Quote(p)
	}
	cfg := fmt.Sprintf(`sessions:
  max: 160
preload: [%s]
pool:
  size: %d
`, strings.Join(items, ", "), pool)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		fatal("%v", err)
	}
}

// server is one `jailcell serve` on a private socket.
type server struct {
	cmd      *exec.Cmd
	state    string
	sock     string
	hc       *http.Client
	poolFull chan struct{} // one value per "warm pool full" log line
	// templateDone is closed at the first log line saying how kernels
	// will start (templateLine); only seen at log level info or below.
	templateDone chan struct{}
	done         chan struct{}
}

func startServer(dir, name string, preload []string, pool int) *server {
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		fatal("%v", err)
	}
	cfg := filepath.Join(d, "config.yaml")
	writeConfig(cfg, preload, pool)
	level := "warn"
	if pool > 0 || pool == poolDefault {
		level = "debug" // the "warm pool full" line
	}
	return startServerConfig(d, name, cfg, level)
}

// startServerConfig starts `jailcell serve` with the configuration file cfg
// on the state directory and socket below d, logging at level.
func startServerConfig(d, name, cfg, level string) *server {
	s := &server{state: filepath.Join(d, "state"), sock: filepath.Join(d, "sock", "jc.sock"), poolFull: make(chan struct{}, 1024),
		templateDone: make(chan struct{}), done: make(chan struct{})}
	var templateOnce sync.Once
	s.cmd = exec.Command(*binFlag, "serve", "--config", cfg, "--state-dir", s.state, "--rootfs", *rootfsFlag,
		"--socket", s.sock, "--socket-group", "root", "--log-format", "json", "--log-level", level)
	child(s.cmd)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		fatal("%v", err)
	}
	if err := s.cmd.Start(); err != nil {
		fatal("%v", err)
	}
	liveMu.Lock()
	live[s] = true
	liveMu.Unlock()
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if templateLine(line) {
				templateOnce.Do(func() { close(s.templateDone) })
			}
			if strings.Contains(line, `"warm pool full"`) {
				s.poolFull <- struct{}{}
			} else if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				log.Printf("%s: %s", name, line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line over 1 MiB: never block the daemon on its stderr
		_ = s.cmd.Wait()
		close(s.done)
	}()
	s.hc = &http.Client{
		Timeout: 5 * time.Minute,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", s.sock)
			},
			MaxIdleConns: 512, MaxIdleConnsPerHost: 512,
		},
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if r, err := s.hc.Get("http://jailcell/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		select {
		case <-s.done:
			fatal("%s: jailcell serve exited at start", name)
		default:
		}
		if time.Now().After(deadline) {
			fatal("%s: jailcell serve not healthy after 60 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func (s *server) stop() {
	liveMu.Lock()
	delete(live, s)
	liveMu.Unlock()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *server) call(method, path string, body any) (map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://jailcell"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	r, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("%s %s: %d %q", method, path, r.StatusCode, b)
		}
	}
	if r.StatusCode/100 != 2 {
		return out, fmt.Errorf("%s %s: %d %s", method, path, r.StatusCode, b)
	}
	return out, nil
}

func (s *server) create() (string, time.Duration) {
	id, d, err := s.tryCreate()
	if err != nil {
		fatal("create: %v", err)
	}
	return id, d
}

func (s *server) tryCreate() (string, time.Duration, error) {
	t := time.Now()
	out, err := s.call("POST", "/v1/sessions", map[string]any{})
	d := time.Since(t)
	if err != nil {
		return "", d, err
	}
	return out["session"].(string), d, nil
}

func (s *server) exec(id, code string) time.Duration {
	t := time.Now()
	out, err := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": code})
	d := time.Since(t)
	if err != nil {
		fatal("exec: %v", err)
	}
	if status(out) != "ok" {
		fatal("exec %q: %v", code, out)
	}
	return d
}

// status is a cell's status in a response.
func status(out map[string]any) any {
	if r, ok := out["result"].(map[string]any); ok {
		return r["status"]
	}
	return out["status"]
}

func (s *server) close(id string) {
	if _, err := s.call("DELETE", "/v1/sessions/"+id, nil); err != nil {
		log.Printf("close: %v", err)
	}
}

func (s *server) rss() float64 {
	p, err := procfs.NewProc(s.cmd.Process.Pid)
	if err != nil {
		fatal("%v", err)
	}
	st, err := p.Stat()
	if err != nil {
		fatal("%v", err)
	}
	return float64(st.ResidentMemory())
}

// cgroupRoot mirrors cmd/jailcell's cgroupRootFor for a private state dir.
func (s *server) cgroupRoot() string { return cgroupRootFor(s.state) }

// cgroupRootFor is the cgroup root of a daemon on the state directory state.
func cgroupRootFor(state string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(state)))
	return "/jailcell-" + hex.EncodeToString(sum[:6])
}

// sessionMemory reads a session's memory charge from its cgroup: the whole
// charge, and its anonymous part (what the session itself holds; the rest
// is shared page cache of the read-only rootfs).
func (s *server) sessionMemory(id string) (total, anon float64, ok bool) {
	d := s.sessionCgroupDir(id)
	if d == "" {
		return 0, 0, false
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		total = readNum(filepath.Join(d, "memory.current"))
		anon = statField(filepath.Join(d, "memory.stat"), "anon")
	} else {
		total = readNum(filepath.Join(d, "memory.usage_in_bytes"))
		anon = statField(filepath.Join(d, "memory.stat"), "rss")
	}
	return total, anon, total > 0
}

// sessionCgroupDir is the session's sandbox cgroup on the memory
// hierarchy (cgroup v2, or v1's memory controller), "" if there is none.
// isolate names it after the session's disk (session.diskID: the id with
// "-" made "_") and the sandbox's generation on that disk ("-1" for the
// first), so the highest generation present is the live one.
func (s *server) sessionCgroupDir(id string) string {
	base := filepath.Join("/sys/fs/cgroup/memory", s.cgroupRoot())
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		base = filepath.Join("/sys/fs/cgroup", s.cgroupRoot())
	}
	prefix := strings.ReplaceAll(id, "-", "_") + "-"
	ents, _ := os.ReadDir(base)
	best, gen := "", 0
	for _, e := range ents {
		if g, err := strconv.Atoi(strings.TrimPrefix(e.Name(), prefix)); e.IsDir() && strings.HasPrefix(e.Name(), prefix) && err == nil && g > gen {
			best, gen = filepath.Join(base, e.Name()), g
		}
	}
	return best
}

func readNum(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return n
}

func statField(path, key string) float64 {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseFloat(f[1], 64)
			return n
		}
	}
	return 0
}

// --- measurements -------------------------------------------------------

func n(full, small int) int {
	if *quick {
		return small
	}
	return full
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(ds []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return math.NaN()
	}
	return ms(s[int(math.Round(q*float64(len(s)-1)))])
}

// jsonl is one `jailcell json` process on a private state directory.
type jsonl struct {
	cmd   *exec.Cmd
	state string
	in    io.WriteCloser
	r     *bufio.Reader
	seq   int
}

func startJSONL(dir, name string, preload []string) *jsonl {
	d := filepath.Join(dir, name)
	_ = os.MkdirAll(d, 0o755)
	cfg := filepath.Join(d, "config.yaml")
	writeConfig(cfg, preload, 0)
	j := &jsonl{state: filepath.Join(d, "state")}
	j.cmd = exec.Command(*binFlag, "json", "--config", cfg, "--state-dir", j.state, "--rootfs", *rootfsFlag)
	child(j.cmd)
	j.cmd.Stderr = os.Stderr
	j.in, _ = j.cmd.StdinPipe()
	outp, _ := j.cmd.StdoutPipe()
	if err := j.cmd.Start(); err != nil {
		fatal("%v", err)
	}
	j.r = bufio.NewReaderSize(outp, 1<<20)
	return j
}

// try sends one request and times it to its reply; an error reply is an
// error.
func (j *jsonl) try(req map[string]any) (map[string]any, time.Duration, error) {
	j.seq++
	req["id"] = strconv.Itoa(j.seq)
	b, _ := json.Marshal(req)
	b = append(b, '\n')
	t := time.Now()
	if _, err := j.in.Write(b); err != nil {
		return nil, 0, err
	}
	line, err := j.r.ReadBytes('\n')
	dur := time.Since(t)
	if err != nil {
		return nil, dur, err
	}
	var out map[string]any
	if err := json.Unmarshal(line, &out); err != nil || out["ok"] != true {
		return out, dur, fmt.Errorf("jsonl %v: %s", req["op"], bytes.TrimSpace(line))
	}
	return out, dur, nil
}

func (j *jsonl) call(req map[string]any) (map[string]any, time.Duration) {
	out, dur, err := j.try(req)
	if err != nil {
		fatal("%v", err)
	}
	return out, dur
}

func (j *jsonl) stop() {
	j.in.Close()
	_ = j.cmd.Wait()
}

// benchJSONL spawns `jailcell json` and times `x += 1` over its pipes.
func benchJSONL(dir string) {
	log.Print("JSON-lines round trip")
	j := startJSONL(dir, "j", stack)
	defer j.stop()
	out, _ := j.call(map[string]any{"op": "create"})
	id := out["session"].(string)
	j.call(map[string]any{"op": "exec", "session": id, "code": "x = 0"})
	var ds []time.Duration
	for i := 0; i < n(3000, 300); i++ {
		_, dur := j.call(map[string]any{"op": "exec", "session": id, "code": "x += 1"})
		ds = append(ds, dur)
	}
	res.Raw["jsonl_rt_p50_ms"] = pct(ds, 0.5)
	res.Raw["jsonl_rt_p99_ms"] = pct(ds, 0.99)
}

// benchPool: creates from a warm pool, the first pandas cell, 20 at once.
func benchPool(dir string) {
	log.Print("warm pool: waiting for 20 members")
	s := startServer(dir, "p", stack, 20)
	defer s.stop()
	waitFull := func() {
		select {
		case <-s.poolFull:
		case <-time.After(5 * time.Minute):
			fatal("pool did not fill in 5 min")
		}
	}
	waitFull()
	var creates, pandas []time.Duration
	var ids []string
	for i := 0; i < n(15, 4); i++ {
		id, d := s.create()
		creates = append(creates, d)
		ids = append(ids, id)
		pandas = append(pandas, s.exec(id, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nint(df.a.sum())"))
		waitFull()
	}
	for _, id := range ids {
		s.close(id)
	}
	res.Raw["pool_create_p50_ms"] = pct(creates, 0.5)
	res.Raw["pool_create_p99_ms"] = pct(creates, 0.99)
	res.Raw["first_pandas_cell_p50_ms"] = pct(pandas, 0.5)

	log.Print("20 concurrent creates from a full pool of 20")
	time.Sleep(time.Second)
	for len(s.poolFull) > 0 {
		<-s.poolFull
	}
	ids = concurrentCreates(s, 20, "pool20_all_ready_ms")
	// Idle preloaded sessions: their cgroup charge.
	time.Sleep(2 * time.Second)
	idleMemory(s, ids, "")
}

func concurrentCreates(s *server, k int, key string) []string {
	ids := make([]string, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	t := time.Now()
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], _, errs[i] = s.tryCreate()
		}()
	}
	wg.Wait()
	res.Raw[key] = ms(time.Since(t))
	var ok []string
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed == 1 {
				log.Printf("%s: %v", key, err)
			}
			continue
		}
		ok = append(ok, ids[i])
	}
	res.Raw[key+"_failed"] = float64(failed)
	if failed > 0 {
		log.Printf("%s: %d of %d creates failed", key, failed, k)
	}
	return ok
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// benchSocket: round trips and throughput over the Unix socket, daemon RSS,
// 100 concurrent cold creates.
func benchSocket(dir string) {
	log.Print("Unix socket round trip")
	s := startServer(dir, "s", stack, 0)
	defer s.stop()
	time.Sleep(time.Second)
	res.Raw["daemon_rss_0_mb"] = s.rss() / 1e6
	id, _ := s.create()
	s.exec(id, "x = 0")
	var ds []time.Duration
	for i := 0; i < n(3000, 300); i++ {
		ds = append(ds, s.exec(id, "x += 1"))
	}
	res.Raw["socket_rt_p50_ms"] = pct(ds, 0.5)
	res.Raw["socket_rt_p99_ms"] = pct(ds, 0.99)
	s.close(id)

	log.Print("throughput: 16 sessions")
	ids := concurrentCreates(s, 16, "create16_cold_ms")
	for _, id := range ids {
		s.exec(id, "x = 0")
	}
	var cells atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Duration(n(5, 2)) * time.Second)
	t := time.Now()
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				s.exec(id, "x += 1")
				cells.Add(1)
			}
		}()
	}
	wg.Wait()
	res.Raw["cells_per_s_16"] = float64(cells.Load()) / time.Since(t).Seconds()
	for _, id := range ids {
		s.close(id)
	}

	k := n(100, 20)
	log.Printf("%d concurrent cold creates (preload %v)", k, stack)
	ids = concurrentCreates(s, k, "create100_cold_ms")
	time.Sleep(2 * time.Second)
	res.Raw["daemon_rss_100_mb"] = s.rss() / 1e6
	idleMemory(s, ids, "_100")
}

// idleMemory records the median cgroup charge (and its anonymous part) of
// the idle sessions ids under keys ending in suffix, then closes them.
func idleMemory(s *server, ids []string, suffix string) {
	var tot, anon []float64
	for _, id := range ids {
		if t, a, ok := s.sessionMemory(id); ok {
			tot, anon = append(tot, t), append(anon, a)
		}
	}
	// MB = 10^6 bytes, as every memory figure of the bench.
	res.Raw["idle_session_cgroup_mb"+suffix] = median(tot) / 1e6
	res.Raw["idle_session_anon_mb"+suffix] = median(anon) / 1e6
	for _, id := range ids {
		s.close(id)
	}
}

// benchCold: cold creates with and without the preload, one-shot cells.
func benchCold(dir string) {
	log.Print("cold creates")
	for _, c := range []struct {
		name    string
		preload []string
	}{{"cold_bare", nil}, {"cold_stack", stack}} {
		s := startServer(dir, c.name[5:], c.preload, 0)
		var ds, once []time.Duration
		for i := 0; i < n(15, 3); i++ {
			id, d := s.create()
			ds = append(ds, d)
			s.close(id)
		}
		res.Raw[c.name+"_create_p50_ms"] = pct(ds, 0.5)
		if c.preload == nil {
			for i := 0; i < n(15, 3); i++ {
				t := time.Now()
				out, err := s.call("POST", "/v1/exec", map[string]any{"code": "pass"})
				if err != nil || status(out) != "ok" {
					fatal("one-shot: %v %v", err, out)
				}
				once = append(once, time.Since(t))
			}
			res.Raw["oneshot_pass_p50_ms"] = pct(once, 0.5)
		}
		s.stop()
	}
}

// --- hibernation ----------------------------------------------------------

// criuBinary is where `make criu` installs criu (isolate.CriuBinary).
const criuBinary = "/var/lib/jailcell/criu/bin/criu"

// hibernateState is session/hibernate_test.go's: the stack imported, a 1M
// float64 array, a 1000-row DataFrame, an object and an open file.
const hibernateState = `import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.arange(1_000_000, dtype=np.float64)
df = pd.DataFrame({"x": range(1000), "y": [i * i for i in range(1000)]})
class Thing:
    def __init__(self): self.tag = "kept"
thing = Thing()
f = open("notes.txt", "w")
f.write("before ")
f.flush()
`

const (
	hibernateCheck     = "f.write(\"after\")\nf.close()\nprint(a.sum(), int(df.y.sum()), thing.tag, open(\"notes.txt\").read())\n"
	hibernateCheckWant = "499999500000.0 332833500 kept before after"
)

// hib holds why the hibernation figures are missing or failed; the raw
// figures go to res.Raw like every other section's.
var hib struct {
	skipped string // the section did not run: no criu, or the first hibernate failed
	failed  string // restores ran but lost the kernel's state
}

// benchHibernate: one loaded session through `jailcell json`, hibernated
// and restored (the explicit restore op) round after round: each op's
// round trip, and the image directory's size on disk after each hibernate.
func benchHibernate(dir string) {
	log.Print("hibernation")
	if _, err := os.Stat(criuBinary); err != nil {
		hib.skipped = "criu not installed at " + criuBinary + " (make criu)"
		log.Printf("hibernation skipped: %s", hib.skipped)
		return
	}
	j := startJSONL(dir, "h", stack)
	defer j.stop()
	out, _ := j.call(map[string]any{"op": "create"})
	id := out["session"].(string)
	defer j.try(map[string]any{"op": "close", "session": id})
	if out, _ := j.call(map[string]any{"op": "exec", "session": id, "code": hibernateState}); status(out) != "ok" {
		fatal("hibernation state cell: %v", out)
	}
	// cmd/jailcell gives session.Config the state dir itself: a session's
	// directory is <state>/sessions/<id>.
	images := filepath.Join(j.state, "sessions", id, "images")
	// Beside the images, a hibernate saves a copy of the workspace disk
	// (it outlives a reboot): reported on its own, not as image.
	saved := filepath.Join(j.state, "sessions", id, "upper-saved")
	var dumps, restores []time.Duration
	var sizes, savedSizes []float64
	lost := 0
	for i := 0; i < n(10, 3); i++ {
		out, d, err := j.try(map[string]any{"op": "hibernate", "session": id})
		if err == nil && out["state"] != "hibernated" {
			err = fmt.Errorf("state %v after hibernate, want hibernated", out["state"])
		}
		if err != nil {
			// criu present but unusable here (`criu check`), or a
			// checkpoint that failed: say so, never fail the bench.
			if i == 0 {
				hib.skipped = fmt.Sprintf("hibernate: %v", err)
				log.Printf("hibernation skipped: %s", hib.skipped)
				return
			}
			hib.failed = fmt.Sprintf("hibernate round %d: %v", i+1, err)
			break
		}
		dumps = append(dumps, d)
		size, err := dirSize(images)
		if err != nil {
			fatal("image size: %v", err)
		}
		sizes = append(sizes, float64(size))
		if size, err := dirSize(saved); err == nil {
			savedSizes = append(savedSizes, float64(size))
		}
		out, d, err = j.try(map[string]any{"op": "restore", "session": id})
		if err != nil {
			hib.failed = fmt.Sprintf("restore round %d: %v", i+1, err)
			break
		}
		restores = append(restores, d)
		if out["state"] != "ready" {
			lost++
		}
	}
	res.Raw["hibernate_rounds"] = float64(len(dumps))
	res.Raw["hibernate_lost_rounds"] = float64(lost)
	res.Raw["hibernate_checkpoint_p50_ms"] = pct(dumps, 0.5)
	res.Raw["hibernate_checkpoint_p90_ms"] = pct(dumps, 0.9)
	res.Raw["hibernate_image_mib"] = median(sizes) / (1 << 20)
	res.Raw["hibernate_image_max_mib"] = maxOf(sizes) / (1 << 20)
	if len(savedSizes) > 0 {
		res.Raw["hibernate_saved_workspace_mib"] = median(savedSizes) / (1 << 20)
	}
	if len(restores) > 0 {
		res.Raw["hibernate_restore_p50_ms"] = pct(restores, 0.5)
		res.Raw["hibernate_restore_p90_ms"] = pct(restores, 0.9)
	}
	if hib.failed != "" {
		log.Printf("hibernation: %s", hib.failed)
		return
	}
	// A restore that answered "lost" started a fresh kernel: its time is
	// not a restore's, and the check below cannot pass.
	out, _, err := j.try(map[string]any{"op": "exec", "session": id, "code": hibernateCheck})
	var got any
	if r, ok := out["result"].(map[string]any); ok {
		got = r["stdout"]
	}
	switch {
	case err != nil:
		hib.failed = fmt.Sprintf("cell after the last restore: %v", err)
	case lost > 0:
		hib.failed = fmt.Sprintf("%d of %d restores lost the kernel (state \"lost\")", lost, len(restores))
	case got == nil || strings.TrimSpace(got.(string)) != hibernateCheckWant:
		hib.failed = fmt.Sprintf("cell after the last restore printed %q, want %q", got, hibernateCheckWant)
	}
	if hib.failed != "" {
		log.Printf("hibernation: %s", hib.failed)
	}
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
		}
		return nil
	})
	return size, err
}

func maxOf(v []float64) float64 {
	m := math.NaN()
	for _, x := range v {
		if math.IsNaN(m) || x > m {
			m = x
		}
	}
	return m
}

// --- peers --------------------------------------------------------------

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

// --- report -------------------------------------------------------------

func buildRows() {
	r := res.Raw
	// add appends row; target is a number in row.Unit (0: none), le says
	// whether the figure must be at most (else at least) the target.
	add := func(section string, row Row, le bool, target float64) {
		if !ran[section] {
			return
		}
		if target > 0 && row.Failed == "" && !math.IsNaN(row.Jailcell) {
			met := row.Jailcell <= target
			if !le {
				met = row.Jailcell >= target
			}
			row.Met = &met
			if row.Target == "" {
				row.Target = fmt.Sprintf("%s %.3g", map[bool]string{true: "<=", false: ">="}[le], target)
			}
		}
		if row.PeerVal > 0 && row.Jailcell > 0 {
			row.Ratio = row.PeerVal / row.Jailcell
			if row.Unit == "cells/s" {
				row.Ratio = row.Jailcell / row.PeerVal
			}
		}
		res.Rows = append(res.Rows, row)
	}
	// both: a row whose peer ran in another section.
	both := func(a, b string) string {
		if ran[a] && ran[b] {
			return a
		}
		return "-"
	}
	const like = "like for like"
	const warm = "warm pool vs a cold start: not like for like"

	// Issue 19's targets, each with the configuration a fresh install has.
	d := both("defaults", "peers")
	add(d, Row{Figure: "create + first cell `1`, sequential, 0.3 s apart, defaults, p50", Unit: "ms", Jailcell: r["defaults_create_first_cell_p50_ms"],
		Target: fmt.Sprintf("<= Jupyter start / 50 = %.3g", r["jupyter_start_ms"]/50), Peer: "Jupyter kernel start", PeerVal: r["jupyter_start_ms"],
		Compares: "Jupyter kernel start / jailcell create + cell, each as a fresh install runs it"}, true, r["jupyter_start_ms"]/50)
	note := fmt.Sprintf("%.0f kernels restored from the template, %.0f imported", r["defaults_template_starts"], r["defaults_import_starts"])
	if f := r["defaults_burst20_ms_failed"]; f > 0 {
		note += fmt.Sprintf("; %.0f failed", f)
	}
	add(d, Row{Figure: "20 creates at once, each until it answered 1+1, defaults", Unit: "ms", Jailcell: r["defaults_burst20_ms"],
		Target: fmt.Sprintf("<= peer / 3 = %.0f", r["runc_burst20_stack_ms"]/3), Peer: "20 runc run at once importing numpy+pandas+pyplot, same rootfs", PeerVal: r["runc_burst20_stack_ms"],
		Compares: like + ": both start 20 sandboxes with the stack imported and run a line", Note: note}, true, r["runc_burst20_stack_ms"]/3)
	add(both("cold", "peers"), Row{Figure: "create to ready, cold, no preload, p50", Unit: "ms", Jailcell: r["cold_bare_create_p50_ms"], Target: fmt.Sprintf("<= runc = %.3g", r["runc_pass_ms"]),
		Peer: "runc run python3 -c pass", PeerVal: r["runc_pass_ms"], Compares: like + ": a sandbox with a bare interpreter"}, true, r["runc_pass_ms"])
	add("jsonl", Row{Figure: "cell round trip x += 1, JSON-lines, Go client, p50", Unit: "ms", Jailcell: r["jsonl_rt_p50_ms"], Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0.25)
	add(both("defaults", "peers"), Row{Figure: "cell round trip x += 1, JSON-lines, Python client, defaults, p50", Unit: "ms", Jailcell: r["defaults_py_jsonl_rt_p50_ms"],
		Target: fmt.Sprintf("<= Jupyter / 10 = %.3g", r["jupyter_rt_p50_ms"]/10), Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: like + ": both from a Python client"}, true, r["jupyter_rt_p50_ms"]/10)
	add("defaults", Row{Figure: "memory per idle preloaded session (cgroup charge), defaults", Unit: "MB", Jailcell: r["idle_session_cgroup_mb_defaults"],
		Note: fmt.Sprintf("MB = 10^6 bytes; anonymous part %.1f MB, the rest is rootfs page cache shared on the host", r["idle_session_anon_mb_defaults"])}, true, 50)

	// The rest of the picture.
	add("jsonl", Row{Figure: "cell round trip x += 1, JSON-lines, Go client, p99", Unit: "ms", Jailcell: r["jsonl_rt_p99_ms"], Peer: "Jupyter execute p99 (Python client)", PeerVal: r["jupyter_rt_p99_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 2)
	add("socket", Row{Figure: "cell round trip x += 1, Unix socket, Go client, p50", Unit: "ms", Jailcell: r["socket_rt_p50_ms"], Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0.5)
	add("socket", Row{Figure: "cell round trip x += 1, Unix socket, Go client, p99", Unit: "ms", Jailcell: r["socket_rt_p99_ms"], Peer: "Jupyter execute p99 (Python client)", PeerVal: r["jupyter_rt_p99_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0)
	add("pool", Row{Figure: "create to ready, from a full pool of 20, p50", Unit: "ms", Jailcell: r["pool_create_p50_ms"], Peer: "Jupyter kernel start", PeerVal: r["jupyter_start_ms"], Compares: warm}, true, 5)
	add("cold", Row{Figure: "create to ready, cold, numpy+pandas+pyplot preloaded, template on, p50", Unit: "ms", Jailcell: r["cold_stack_create_p50_ms"], Peer: "Jupyter start + stack import", PeerVal: r["jupyter_start_ms"] + r["jupyter_import_ms"],
		Compares: like + ": a kernel with the stack imported"}, true, 0)
	add("pool", Row{Figure: "first pandas cell after a pooled create", Unit: "ms", Jailcell: r["first_pandas_cell_p50_ms"], Peer: "Jupyter import of the stack", PeerVal: r["jupyter_import_ms"],
		Compares: "the stack preloaded vs imported in the cell: not like for like"}, true, 20)
	note = ""
	if f := r["create100_cold_ms_failed"]; f > 0 {
		note = fmt.Sprintf("%.0f failed: kernel start timeout", f)
	}
	add("socket", Row{Figure: "100 concurrent creates, all ready (no pool, stack preloaded, template on)", Unit: "ms", Jailcell: r["create100_cold_ms"], Note: note}, true, 0)
	note = ""
	if f := r["pool20_all_ready_ms_failed"]; f > 0 {
		note = fmt.Sprintf("%.0f failed", f)
	}
	add("pool", Row{Figure: "20 concurrent creates, all ready (a full pool of 20)", Unit: "ms", Jailcell: r["pool20_all_ready_ms"], Note: note}, true, 300)
	add("socket", Row{Figure: "trivial cells per second, 16 sessions", Unit: "cells/s", Jailcell: r["cells_per_s_16"]}, false, 5000)
	add("socket", Row{Figure: "memory per idle preloaded session (cgroup charge), 100 sessions", Unit: "MB", Jailcell: r["idle_session_cgroup_mb_100"],
		Note: fmt.Sprintf("MB = 10^6 bytes; anonymous part %.1f MB", r["idle_session_anon_mb_100"])}, true, 0)
	add("socket", Row{Figure: "daemon RSS, 0 sessions", Unit: "MB", Jailcell: r["daemon_rss_0_mb"]}, true, 0)
	add("socket", Row{Figure: "daemon RSS, 100 sessions", Unit: "MB", Jailcell: r["daemon_rss_100_mb"]}, true, 150)
	c := both("cold", "peers")
	add(c, Row{Figure: "one-shot cell `pass`, fresh sandbox, no preload, p50", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "runc run python3 -c pass", PeerVal: r["runc_pass_ms"], Compares: like}, true, 0)
	add(c, Row{Figure: "  the same against bwrap", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "bwrap python3 -c pass", PeerVal: r["bwrap_pass_ms"], Compares: "bwrap has no cgroups or seccomp filter here"}, true, 0)
	add(c, Row{Figure: "  the same against a bare chroot (no isolation)", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "chroot python3 -c pass", PeerVal: r["chroot_pass_ms"], Compares: "no isolation at all"}, true, 0)
	if ran["hibernation"] {
		hibernationRows(add)
	}
	if ran["zygote"] {
		zygoteRows(add)
	}
	restartRows(add)
}

// hibernationRows adds the hibernation section's rows. 80 MB, the image
// target, is 76.3 MiB.
func hibernationRows(add func(string, Row, bool, float64)) {
	const fig = "a loaded session (numpy+pandas+pyplot, 1M-float array, 1000-row DataFrame, open file)"
	if hib.skipped != "" {
		add("hibernation", Row{Figure: "hibernate and restore " + fig, Unit: "ms", Failed: "skipped: " + hib.skipped}, true, 0)
		return
	}
	r := res.Raw
	rounds := fmt.Sprintf("%.0f rounds", r["hibernate_rounds"])
	add("hibernation", Row{Figure: "hibernate (checkpoint) " + fig + ", p50", Unit: "ms", Jailcell: r["hibernate_checkpoint_p50_ms"], Note: rounds}, true, 0)
	add("hibernation", Row{Figure: "  hibernate, p90", Unit: "ms", Jailcell: r["hibernate_checkpoint_p90_ms"]}, true, 0)
	add("hibernation", Row{Figure: "restore op of the same session, kernel reconnected, p50", Unit: "ms", Jailcell: r["hibernate_restore_p50_ms"], Target: "<= 200", Failed: hib.failed}, true, 200)
	add("hibernation", Row{Figure: "  restore, p90", Unit: "ms", Jailcell: r["hibernate_restore_p90_ms"], Failed: hib.failed}, true, 0)
	add("hibernation", Row{Figure: "checkpoint image of that session, median", Unit: "MiB", Jailcell: r["hibernate_image_mib"], Target: "<= 76.3",
		Note: fmt.Sprintf("80 MB; largest %.1f MiB", r["hibernate_image_max_mib"])}, true, 80e6/(1<<20))
}

func printTable(w io.Writer) {
	fmt.Fprintf(w, "\n| figure | jailcell | target | met | peer | peer value | peer/jailcell |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range res.Rows {
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.Met]
		}
		peer, pv, ratio := r.Peer, "", ""
		if r.PeerVal > 0 {
			pv = fmtVal(r.PeerVal, r.Unit)
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.1fx", r.Ratio)
			if r.Compares != "" {
				ratio += " (" + r.Compares + ")"
			}
		}
		target := r.Target
		if target != "" && !strings.HasSuffix(target, r.Unit) {
			target += " " + r.Unit
		}
		fig := r.Figure
		if r.Note != "" {
			fig += " (" + r.Note + ")"
		}
		if r.Start != "" {
			fig += " (" + r.Start + ")"
		}
		val := fmtVal(r.Jailcell, r.Unit)
		if r.Failed != "" {
			fig += " (" + r.Failed + ")"
			val = "**failed**"
			if strings.HasPrefix(r.Failed, "skipped") {
				val = "skipped"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", fig, val, target, met, peer, pv, ratio)
	}
	head := "\nMissed, and what would close it:\n"
	for _, r := range res.Rows {
		if r.Met != nil && !*r.Met && r.Close != "" {
			fmt.Fprintf(w, "%s- %s: %s\n", head, strings.TrimSpace(r.Figure), r.Close)
			head = ""
		}
	}
	fmt.Fprintf(w, "\n%.0f s in all.\n", res.Seconds)
}

func fmtVal(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case unit == "cells/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	case v < 10:
		return fmt.Sprintf("%.3g %s", v, unit)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

const chartScript = `
import json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = [r for r in json.load(open("results.json"))["rows"] if r.get("unit") == "ms" and r.get("peer_value")]
labels = [r["figure"].strip() for r in rows]
fig, ax = plt.subplots(figsize=(11, 0.55 * len(rows) + 1.5))
y = range(len(rows))
ax.barh([i + 0.2 for i in y], [r["jailcell"] for r in rows], 0.4, label="jailcell", color="#2a7ab0")
ax.barh([i - 0.2 for i in y], [r["peer_value"] for r in rows], 0.4, label="peer", color="#c8553d")
for i, r in enumerate(rows):
    ax.text(r["peer_value"] * 1.1, i - 0.2, r["peer"], va="center", fontsize=7)
ax.set_yticks(list(y))
ax.set_yticklabels(labels, fontsize=8)
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel("milliseconds (log scale; shorter is better)")
ax.set_title("jailcell vs peers on this machine")
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig("bench.png", dpi=110)
`

// chart draws bench.png with the rootfs's matplotlib, in a one-shot
// jailcell sandbox.
func chart(dir string) error {
	d := filepath.Join(dir, "c")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	script := filepath.Join(d, "chart.py")
	if err := os.WriteFile(script, []byte(chartScript), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(d, "config.yaml")
	writeConfig(cfg, nil, 0)
	out := filepath.Join(d, "out")
	cmd := exec.Command(*binFlag, "run", "--config", cfg, "--state-dir", filepath.Join(d, "state"), "--rootfs", *rootfsFlag,
		"--file", filepath.Join(*outFlag, "results.json"), "--out", out, script)
	child(cmd)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("jailcell run: %v: %s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "bench.png"))
	if err != nil {
		return errors.New("the chart cell wrote no bench.png")
	}
	return os.WriteFile(filepath.Join(*outFlag, "bench.png"), b, 0o644)
}
