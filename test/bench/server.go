package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

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
