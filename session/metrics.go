package session

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the manager's counters, registered by the service on its
// /metrics registry. Label values are bounded: a cell's status is one of a
// few host-side verdicts; nothing is labelled by session or owner.
type Metrics struct {
	Created prometheus.Counter
	Expired prometheus.Counter
	// Cells counts cells by status (ok, error, timeout, oom, killed, ...).
	Cells *prometheus.CounterVec
	// CellSeconds is the wall-clock time of every cell, on the host clock,
	// whichever front door it came through.
	CellSeconds prometheus.Histogram
	// StartSeconds is the time from building a sandbox to its kernel's
	// hello (every start: creates, one-shot cells, restarts after a loss).
	StartSeconds prometheus.Histogram
	// Starts counts kernel starts by path: StartZygote, StartTemplate or
	// StartImport.
	Starts *prometheus.CounterVec
	// Fallbacks counts starts that fell back from a configured path
	// (StartZygote, StartTemplate) to the next.
	Fallbacks *prometheus.CounterVec
	// Lost counts sessions the service could not keep, by reason
	// (LostShutdown, LostRestart).
	Lost *prometheus.CounterVec
}

// LatencyBuckets suit both a sandbox start (about a second) and cells
// (milliseconds to minutes).
var LatencyBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

// CellStatuses are the statuses counted from the first scrape, so that
// rate() works before the first cell of each kind.
var CellStatuses = []string{StatusOK, StatusError, StatusTimeout, StatusOOM, StatusKilled}

func newMetrics() *Metrics {
	m := &Metrics{
		Created: prometheus.NewCounter(prometheus.CounterOpts{Name: "jailcell_sessions_created_total", Help: "Sessions created since start."}),
		Expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "jailcell_sessions_expired_total", Help: "Sessions ended by their idle TTL or maximum lifetime."}),
		Cells: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jailcell_cells_total",
			Help: "Cells run, by status (ok, error, timeout, oom, killed)."}, []string{"status"}),
		CellSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jailcell_cell_duration_seconds",
			Help: "Wall-clock time of cells on the host clock, from every front door.", Buckets: LatencyBuckets}),
		StartSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jailcell_sandbox_start_seconds",
			Help: "Time from building a sandbox to its kernel being ready (creates, one-shot cells, restarts).", Buckets: LatencyBuckets}),
	}
	m.Starts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jailcell_kernel_starts_total",
		Help: "Kernels started, by path: forked from the policy's zygote, restored from its template, or importing the preload."}, []string{"path"})
	for _, st := range CellStatuses {
		m.Cells.WithLabelValues(st)
	}
	for _, p := range []string{StartZygote, StartTemplate, StartImport} {
		m.Starts.WithLabelValues(p)
	}
	m.Fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jailcell_kernel_start_fallbacks_total",
		Help: "Kernel starts that could not take a path they were configured for and took the next, by the path that failed (zygote, template); each is also a warning naming its cause."}, []string{"from"})
	for _, p := range []string{StartZygote, StartTemplate} {
		m.Fallbacks.WithLabelValues(p)
	}
	m.Lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jailcell_sessions_lost_total",
		Help: "Sessions the service could not keep, by reason: ended at a shutdown that kept none, or not re-adoptable at a restart."}, []string{"reason"})
	for _, r := range []string{LostShutdown, LostRestart} {
		m.Lost.WithLabelValues(r)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Created, m.Expired, m.Cells, m.CellSeconds, m.StartSeconds, m.Starts, m.Fallbacks, m.Lost}
}

func (m *Metrics) created() { m.Created.Inc() }

// fellBack counts a start that could not take path and took the next.
func (m *Metrics) fellBack(path string) { m.Fallbacks.WithLabelValues(path).Inc() }
func (m *Metrics) expired()             { m.Expired.Inc() }

// lost counts a session lost for reason (LostShutdown, LostRestart).
func (m *Metrics) lost(reason string) { m.Lost.WithLabelValues(reason).Inc() }

// started counts a kernel start by path (StartZygote, StartTemplate,
// StartImport).
func (m *Metrics) started(path string) { m.Starts.WithLabelValues(path).Inc() }

// cell counts one cell. A status outside CellStatuses counts as "other":
// the label stays bounded even if a verdict ever passed on a string the
// sandbox chose.
func (m *Metrics) cell(status string) {
	if !slices.Contains(CellStatuses, status) {
		status = "other"
	}
	m.Cells.WithLabelValues(status).Inc()
}
