package httpapi

import (
	"context"
	"io"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/jailcell/jailcell/api"
)

// The text exposition format (0.0.4): what every Prometheus scrapes.
var metricsFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

var metricsContentType = string(metricsFormat)

// serviceMetrics is the registry behind /metrics: the standard process_*
// and go_* collectors, the manager's counters and histograms, figures read
// from the manager at scrape time, and what the HTTP transport observes.
//
// Every label value is bounded, so many sessions cannot grow the series
// (a scraper's memory) without bound: policy names come from the config,
// statuses and routes from fixed lists, HTTP codes from what this server
// writes. No session id and no owner is ever a label; the per-session view
// is the sessions op.
type serviceMetrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
}

func newServiceMetrics(d *api.Dispatcher) *serviceMetrics {
	m := &serviceMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jailcell_http_requests_total",
			Help: "HTTP requests answered, by route and status code."}, []string{"route", "code"}),
	}
	m.reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		m.requests,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "jailcell_build_info",
			Help: "Always 1; the version label is the running jailcell's.", ConstLabels: prometheus.Labels{"version": d.Version}},
			func() float64 { return 1 }),
	)
	if d.Manager != nil {
		m.reg.MustRegister(d.Manager.Collectors()...)
		m.reg.MustRegister(managerCollector{d})
	}
	return m
}

// gauge registers a figure read at scrape time.
func (m *serviceMetrics) gauge(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

func (m *serviceMetrics) request(route string, status int) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

// writeMetrics writes the exposition. Every caller allowed to connect sees
// the same figures: they are totals by policy, naming no session.
func (s *HTTPServer) writeMetrics(w io.Writer) error {
	fams, err := s.metrics.reg.Gather()
	if err != nil && len(fams) == 0 {
		return err
	}
	enc := expfmt.NewEncoder(w, metricsFormat)
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return err
}

var (
	liveDesc = prometheus.NewDesc("jailcell_sessions_live", "Sessions alive now.", nil, nil)
	poolDesc = prometheus.NewDesc("jailcell_pool_ready", "Warm-pool sandboxes ready to serve a create, by policy.", []string{"policy"}, nil)
	cpuDesc  = prometheus.NewDesc("jailcell_sessions_cpu_seconds",
		"CPU time of the live sessions' current sandboxes, summed by policy, from their cgroups (falls when a session ends).", []string{"policy"}, nil)
	memDesc = prometheus.NewDesc("jailcell_sessions_memory_bytes",
		"Memory charged to the live sessions' sandboxes now, summed by policy, from their cgroups.", []string{"policy"}, nil)
	peakDesc = prometheus.NewDesc("jailcell_session_memory_peak_bytes_max",
		"Largest high-water mark of a live session's sandbox memory during its last cell, by policy, from its cgroup.", []string{"policy"}, nil)
)

// managerCollector reads the manager's live figures at scrape time.
type managerCollector struct{ d *api.Dispatcher }

func (managerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{liveDesc, poolDesc, cpuDesc, memDesc, peakDesc} {
		ch <- d
	}
}

func (c managerCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.d.Manager
	ctx := context.Background()
	ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(len(m.List(ctx, 0))))
	for name, n := range m.PoolReady() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(n), name)
	}
	type sums struct{ cpu, mem, peak float64 }
	by := map[string]*sums{}
	for _, u := range m.Usage(ctx, 0) {
		s := by[u.Policy]
		if s == nil {
			s = &sums{}
			by[u.Policy] = s
		}
		s.cpu += u.CPU.Seconds()
		s.mem += float64(u.MemoryBytes)
		s.peak = max(s.peak, float64(u.MemoryPeakBytes))
	}
	for name, s := range by {
		ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.GaugeValue, s.cpu, name)
		ch <- prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, s.mem, name)
		ch <- prometheus.MustNewConstMetric(peakDesc, prometheus.GaugeValue, s.peak, name)
	}
}
