package api

import (
	"bufio"
	"context"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/procfs"

	"github.com/jailcell/jailcell/session"
)

// The Prometheus text format (version 0.0.4) is simple enough to write by
// hand, which keeps the client library and its registry out of the daemon.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// serviceMetrics are what the HTTP transport itself observes; the rest of
// /metrics is read from the manager and procfs at scrape time.
type serviceMetrics struct {
	mu       sync.Mutex
	requests map[[2]string]uint64 // route, status code
}

func newServiceMetrics() *serviceMetrics {
	return &serviceMetrics{
		requests: map[[2]string]uint64{},
	}
}

func (m *serviceMetrics) request(route string, status int) {
	m.mu.Lock()
	m.requests[[2]string{route, strconv.Itoa(status)}]++
	m.mu.Unlock()
}

// promWriter writes the text exposition format.
type promWriter struct {
	w *bufio.Writer
}

func (p *promWriter) family(name, typ, help string) {
	p.w.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n")
	p.w.WriteString("# TYPE " + name + " " + typ + "\n")
}

// sample writes one line; labels are name, value pairs.
func (p *promWriter) sample(name string, v float64, labels ...string) {
	p.w.WriteString(name)
	if len(labels) > 0 {
		p.w.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.w.WriteByte(',')
			}
			p.w.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		p.w.WriteByte('}')
	}
	p.w.WriteByte(' ')
	p.w.WriteString(formatFloat(v))
	p.w.WriteByte('\n')
}

func (p *promWriter) histogram(name, help string, h *session.Histogram) {
	p.family(name, "histogram", help)
	bounds, cum, sum, n := h.Snapshot()
	for i, b := range bounds {
		p.sample(name+"_bucket", float64(cum[i]), "le", formatFloat(b))
	}
	p.sample(name+"_bucket", float64(n), "le", "+Inf")
	p.sample(name+"_sum", sum)
	p.sample(name+"_count", float64(n))
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// writeMetrics renders /metrics for owner: figures about all of jailcell
// for everyone allowed to call, per-session series only for the sessions
// owner may see (root sees all), so /metrics is no way to learn another
// user's session ids.
func (s *HTTPServer) writeMetrics(ctx context.Context, w io.Writer, owner int) error {
	p := &promWriter{w: bufio.NewWriter(w)}
	p.family("jailcell_build_info", "gauge", "Always 1; the version label is the running jailcell's.")
	p.sample("jailcell_build_info", 1, "version", s.d.Version)

	if m := s.d.Manager; m != nil {
		met := m.Metrics()
		p.family("jailcell_sessions_live", "gauge", "Sessions alive now.")
		p.sample("jailcell_sessions_live", float64(len(m.List(ctx, 0))))
		p.family("jailcell_pool_ready", "gauge", "Warm-pool sandboxes ready to serve a create, by policy.")
		ready := m.PoolReady()
		for _, name := range sortedKeys(ready) {
			p.sample("jailcell_pool_ready", float64(ready[name]), "policy", name)
		}
		p.family("jailcell_sessions_created_total", "counter", "Sessions created since start.")
		p.sample("jailcell_sessions_created_total", float64(met.Created.Load()))
		p.family("jailcell_sessions_expired_total", "counter", "Sessions ended by their idle TTL or maximum lifetime.")
		p.sample("jailcell_sessions_expired_total", float64(met.Expired.Load()))

		p.family("jailcell_cells_total", "counter", "Cells run, by status (ok, error, timeout, oom, killed).")
		cells := met.Cells()
		for _, st := range []string{"ok", "error", "timeout", "oom", "killed"} {
			if _, ok := cells[st]; !ok {
				cells[st] = 0 // every status from the first scrape, so rate() works
			}
		}
		for _, st := range sortedKeys(cells) {
			p.sample("jailcell_cells_total", float64(cells[st]), "status", st)
		}

		p.family("jailcell_kernel_starts_total", "counter", "Kernels started, by path: restored from the policy's template, or importing the preload.")
		starts := met.Starts()
		for _, path := range []string{session.StartImport, session.StartTemplate} {
			p.sample("jailcell_kernel_starts_total", float64(starts[path]), "path", path)
		}

		usage := m.Usage(ctx, owner)
		p.family("jailcell_session_cpu_seconds_total", "counter", "CPU time of the session's current sandbox, from its cgroup.")
		for _, u := range usage {
			p.sample("jailcell_session_cpu_seconds_total", u.CPU.Seconds(), "session", u.ID, "policy", u.Policy)
		}
		p.family("jailcell_session_memory_bytes", "gauge", "Memory charged to the session's sandbox now, from its cgroup.")
		for _, u := range usage {
			p.sample("jailcell_session_memory_bytes", float64(u.MemoryBytes), "session", u.ID, "policy", u.Policy)
		}
		p.family("jailcell_session_memory_peak_bytes", "gauge", "High-water mark of the session's sandbox memory during its last cell, from its cgroup.")
		for _, u := range usage {
			p.sample("jailcell_session_memory_peak_bytes", float64(u.MemoryPeakBytes), "session", u.ID, "policy", u.Policy)
		}
	}

	cellH, startH := session.NewHistogram(session.LatencyBuckets...), session.NewHistogram(session.LatencyBuckets...)
	if m := s.d.Manager; m != nil {
		cellH, startH = m.Metrics().CellSeconds, m.Metrics().StartSeconds
	}
	p.histogram("jailcell_cell_duration_seconds", "Wall-clock time of cells on the host clock, from every front door.", cellH)
	p.histogram("jailcell_sandbox_start_seconds", "Time from building a sandbox to its kernel being ready (creates, one-shot cells, restarts).", startH)

	s.metrics.mu.Lock()
	reqs := make(map[[2]string]uint64, len(s.metrics.requests))
	for k, v := range s.metrics.requests {
		reqs[k] = v
	}
	s.metrics.mu.Unlock()
	keys := make([][2]string, 0, len(reqs))
	for k := range reqs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	p.family("jailcell_http_requests_total", "counter", "HTTP requests answered, by route and status code.")
	for _, k := range keys {
		p.sample("jailcell_http_requests_total", float64(reqs[k]), "route", k[0], "code", k[1])
	}

	writeProcess(p)
	return p.w.Flush()
}

// writeProcess writes the daemon's own figures from procfs. A figure that
// cannot be read is left out rather than reported as zero.
func writeProcess(p *promWriter) {
	p.family("jailcell_go_goroutines", "gauge", "Goroutines of the jailcell process.")
	p.sample("jailcell_go_goroutines", float64(runtime.NumGoroutine()))
	proc, err := procfs.Self()
	if err != nil {
		return
	}
	if st, err := proc.Stat(); err == nil {
		p.family("jailcell_process_cpu_seconds_total", "counter", "User and system CPU time of the jailcell process.")
		p.sample("jailcell_process_cpu_seconds_total", st.CPUTime())
		p.family("jailcell_process_resident_memory_bytes", "gauge", "Resident memory of the jailcell process.")
		p.sample("jailcell_process_resident_memory_bytes", float64(st.ResidentMemory()))
		p.family("jailcell_process_virtual_memory_bytes", "gauge", "Virtual memory of the jailcell process.")
		p.sample("jailcell_process_virtual_memory_bytes", float64(st.VirtualMemory()))
		p.family("jailcell_process_threads", "gauge", "OS threads of the jailcell process.")
		p.sample("jailcell_process_threads", float64(st.NumThreads))
		if t, err := st.StartTime(); err == nil {
			p.family("jailcell_process_start_time_seconds", "gauge", "Start time of the jailcell process, in seconds since the Unix epoch.")
			p.sample("jailcell_process_start_time_seconds", t)
		}
	}
	if n, err := proc.FileDescriptorsLen(); err == nil {
		p.family("jailcell_process_open_fds", "gauge", "Open file descriptors of the jailcell process.")
		p.sample("jailcell_process_open_fds", float64(n))
	}
	if l, err := proc.Limits(); err == nil {
		p.family("jailcell_process_max_fds", "gauge", "The jailcell process's limit on open file descriptors.")
		p.sample("jailcell_process_max_fds", float64(l.OpenFiles))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
