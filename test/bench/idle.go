package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/client"
)

// The "idle" section: a thousand idle sessions on one host, with a fresh
// install's configuration (sessions.max "auto" sized from the host), and
// what they cost: memory each, the daemon's RSS, and a cell's latency in
// one of them while the others wait.

// idleSessions is how many sessions are held alive at once.
const idleSessions = 1000

// idleParallel is how many creates run at once: a steady fill, not a
// burst (the zygote section measures bursts).
const idleParallel = 8

func benchIdle(dir string) {
	d := filepath.Join(dir, "idle")
	if err := os.MkdirAll(d, 0o755); err != nil {
		fatal("%v", err)
	}
	cfg := filepath.Join(d, "config.yaml")
	k := n(idleSessions, 50)
	// A fresh install's configuration; sessions.max "auto" may be below
	// the thousand on this host (its bound is then the row's note), and
	// the section raises it to measure what a thousand cost all the same.
	auto := autoMaxSessions(cfg)
	res.Raw["idle_auto_max"] = float64(auto.n)
	idleNote.auto = auto.line
	body := "# a fresh install's defaults\n"
	if auto.n < k {
		body += fmt.Sprintf("sessions:\n  max: %d  # auto gives %d here\n", k, auto.n)
		idleNote.raised = fmt.Sprintf("sessions.max raised to %d: auto gives %s", k, auto.line)
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		fatal("%v", err)
	}
	log.Printf("idle: %d sessions alive at once, a fresh install's configuration; sessions.max auto: %s", k, auto.line)
	s := startServerConfig(d, "idle", cfg, "info")
	waitSettled(s.templateDone, s.cmd.Process.Pid, s.cgroupRoot(), "idle serve")
	rss0 := s.rss()

	ids := make([]string, k)
	errs := make([]error, k)
	paths := make([]string, k)
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range idleParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ids[i], paths[i], errs[i] = s.createAnswering()
			}
		}()
	}
	for i := range k {
		next <- i
		if (i+1)%100 == 0 {
			log.Printf("idle: %d created (%.0f s)", i+1, time.Since(t0).Seconds())
		}
	}
	close(next)
	wg.Wait()
	res.Raw["idle_fill_s"] = time.Since(t0).Seconds()
	alive, failed, st := s.answered("idle", ids, paths, errs)
	st.record("idle")
	res.Raw["idle_n"] = float64(k)
	res.Raw["idle_alive"] = float64(len(alive))
	res.Raw["idle_failed"] = float64(failed)

	// Idle: every session answered and nothing runs in them.
	time.Sleep(3 * time.Second)
	var charge []float64
	for _, id := range alive {
		if t, _, ok := s.sessionMemory(id); ok {
			charge = append(charge, t)
		}
	}
	if len(charge) > 0 {
		res.Raw["idle_cgroup_mb"] = median(charge) / 1e6
	}
	res.Raw["idle_measured"] = float64(len(charge))
	res.Raw["idle_daemon_rss_mb"] = s.rss() / 1e6
	res.Raw["idle_daemon_rss_before_mb"] = rss0 / 1e6
	res.Raw["idle_daemon_fds"] = float64(countFDs(s.cmd.Process.Pid))
	res.Raw["idle_host_available_mb"] = memAvailable() / 1e6

	// A cell in one of them, the rest idle: x += 1 through the Go client.
	if len(alive) > 0 {
		c := client.NewHTTP(s.sock)
		ctx := context.Background()
		id := alive[len(alive)/2]
		if _, err := c.Exec(ctx, id, "x = 0", nil); err != nil {
			fatal("idle: %v", err)
		}
		var ds []time.Duration
		for range n(1000, 100) {
			t := time.Now()
			r, err := c.Exec(ctx, id, "x += 1", nil)
			ds = append(ds, time.Since(t))
			if err != nil || r.Status != "ok" {
				fatal("idle: x += 1: %v %+v", err, r)
			}
		}
		res.Raw["idle_cell_p50_ms"] = pct(ds, 0.5)
		res.Raw["idle_cell_p99_ms"] = pct(ds, 0.99)
	}

	log.Printf("idle: closing %d sessions", len(alive))
	work := make(chan string)
	for range idleParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				s.close(id)
			}
		}()
	}
	for _, id := range alive {
		work <- id
	}
	close(work)
	wg.Wait()
	s.stop()
}

// idleNote carries what the rows say about sessions.max.
var idleNote struct{ auto, raised string }

type autoMax struct {
	n    int
	line string // "192 (auto: ...)"
}

// autoMaxSessions asks `jailcell config` what sessions.max "auto" gives
// on this host, on an empty configuration file at cfg.
func autoMaxSessions(cfg string) autoMax {
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		fatal("%v", err)
	}
	cmd := exec.Command(*binFlag, "config", "--config", cfg)
	child(cmd)
	out, err := cmd.Output()
	if err != nil {
		fatal("jailcell config: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "sessions.max" {
			v, _ := strconv.Atoi(f[1])
			val := strings.TrimSpace(strings.TrimPrefix(line, "sessions.max"))
			if i := strings.Index(val, "  "); i > 0 {
				val = val[:i] // the source column
			}
			return autoMax{n: v, line: val}
		}
	}
	fatal("jailcell config printed no sessions.max:\n%s", out)
	return autoMax{}
}

// countFDs counts the open descriptors of process pid.
func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			var kb float64
			fmt.Sscan(f[1], &kb)
			return kb * 1024
		}
	}
	return 0
}

// idleRows adds the idle section's rows.
func idleRows(add func(string, Row, bool, float64)) {
	const sec = "idle"
	r := res.Raw
	alive := r["idle_alive"]
	note := fmt.Sprintf("a fresh install's configuration; %.0f of %.0f created, %.0f at a time, in %.0f s; MB = 10^6 bytes",
		alive, r["idle_n"], float64(idleParallel), r["idle_fill_s"])
	if idleNote.raised != "" {
		note += "; " + idleNote.raised
	}
	fail := ""
	if alive == 0 {
		fail = "no session was created"
	}
	add(sec, Row{Figure: "sessions.max of a fresh install on this host (auto)", Unit: "sessions",
		Jailcell: r["idle_auto_max"], Target: ">= 1000", Note: idleNote.auto,
		Close: "where the bound is the host's tasks: kernel.pid_max 4194304 (systemd's default since v243) or a smaller " +
			"policy pids; each session may take its pids at once and the host keeps a quarter of its tasks"}, false, 1000)
	mem := Row{Figure: fmt.Sprintf("memory per idle session, its own cgroup's charge, %.0f alive, median", alive), Unit: "MB",
		Jailcell: r["idle_cgroup_mb"], Target: "<= 15 MB", Start: zyg.starts["idle"], Failed: fail,
		Note: fmt.Sprintf("%s; %s; %.0f measured; host MemAvailable with them alive %.0f MB", note, chargeFile(), r["idle_measured"], r["idle_host_available_mb"])}
	if r["idle_measured"] == 0 && fail == "" {
		mem.Failed = "no session cgroup found under the daemon's cgroup root"
	}
	add(sec, mem, true, 15)
	add(sec, Row{Figure: fmt.Sprintf("daemon RSS, %.0f sessions alive", alive), Unit: "MB", Jailcell: r["idle_daemon_rss_mb"],
		Target: "<= 300 MB", Failed: fail,
		Note: fmt.Sprintf("%.0f MB before the first create; %.0f open descriptors with them alive", r["idle_daemon_rss_before_mb"], r["idle_daemon_fds"])}, true, 300)
	add(sec, Row{Figure: fmt.Sprintf("cell x += 1 in one of %.0f live sessions, the rest idle, Go client over the socket, p99", alive), Unit: "ms",
		Jailcell: r["idle_cell_p99_ms"], Target: "<= 5 ms", Failed: fail,
		Note: fmt.Sprintf("p50 %.3g ms", r["idle_cell_p50_ms"])}, true, 5)
}
