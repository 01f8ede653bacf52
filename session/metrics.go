package session

import (
	"sync"
	"sync/atomic"
)

// Metrics are the manager's counters, read by the service's /metrics.
type Metrics struct {
	Created atomic.Int64
	Expired atomic.Int64

	mu    sync.Mutex
	cells map[string]int64
}

func newMetrics() *Metrics { return &Metrics{cells: map[string]int64{}} }

func (m *Metrics) created() { m.Created.Add(1) }
func (m *Metrics) expired() { m.Expired.Add(1) }
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
