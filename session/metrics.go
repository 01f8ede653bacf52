package session

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Metrics are the manager's counters, read by the service's /metrics.
type Metrics struct {
	Created atomic.Int64
	Expired atomic.Int64
	// CellSeconds is the wall-clock time of every cell, on the host clock,
	// whichever front door it came through.
	CellSeconds *Histogram
	// StartSeconds is the time from building a sandbox to its kernel's
	// hello (every start: creates, one-shot cells, restarts after a loss).
	StartSeconds *Histogram

	mu     sync.Mutex
	cells  map[string]int64
	starts map[string]int64 // by start path: template | import
}

// LatencyBuckets suit both a sandbox start (about a second) and cells
// (milliseconds to minutes).
var LatencyBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

func newMetrics() *Metrics {
	return &Metrics{
		cells:        map[string]int64{},
		starts:       map[string]int64{},
		CellSeconds:  NewHistogram(LatencyBuckets...),
		StartSeconds: NewHistogram(LatencyBuckets...),
	}
}

// Histogram counts observations into fixed buckets.
type Histogram struct {
	mu     sync.Mutex
	bounds []float64 // upper bounds, ascending; +Inf is implied
	counts []uint64  // per bucket, not cumulative; one extra for +Inf
	sum    float64
	n      uint64
}

// NewHistogram makes a histogram with the given ascending upper bounds.
func NewHistogram(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v: "le" semantics
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.n++
	h.mu.Unlock()
}

// Snapshot returns the bounds, the cumulative count at each bound, the sum
// and the total count.
func (h *Histogram) Snapshot() (bounds []float64, cumulative []uint64, sum float64, n uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c uint64
	cumulative = make([]uint64, len(h.bounds))
	for i := range h.bounds {
		c += h.counts[i]
		cumulative[i] = c
	}
	return h.bounds, cumulative, h.sum, h.n
}

func (m *Metrics) created() { m.Created.Add(1) }
func (m *Metrics) expired() { m.Expired.Add(1) }
func (m *Metrics) started(path string) {
	m.mu.Lock()
	m.starts[path]++
	m.mu.Unlock()
}

// Starts returns how many kernels started by each path (StartTemplate,
// StartImport) since the manager began.
func (m *Metrics) Starts() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, 2)
	for _, p := range []string{StartTemplate, StartImport} {
		out[p] = m.starts[p]
	}
	return out
}

func (m *Metrics) cell(status string) {
	m.mu.Lock()
	m.cells[status]++
	m.mu.Unlock()
}

// Cells returns the number of cells by status.
func (m *Metrics) Cells() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.cells))
	for k, v := range m.cells {
		out[k] = v
	}
	return out
}
