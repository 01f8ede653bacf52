package session

import (
	"context"
	"time"
)

// SessionUsage is what a live session's sandbox costs, read from its cgroup
// on the host (never from anything the sandbox reports).
type SessionUsage struct {
	ID     string
	Policy string
	// CPU is the CPU time of the session's current sandbox; it starts
	// again from zero when a lost kernel is replaced.
	CPU time.Duration
	// MemoryBytes is the memory charged to the sandbox now.
	MemoryBytes int64
	// MemoryPeakBytes is the high-water mark since the last cell began.
	MemoryPeakBytes int64
}

// Usage returns the usage of the live sessions owner may see (root sees
// all), for the service's /metrics. A session whose kernel is starting
// reports zeros.
func (m *Manager) Usage(ctx context.Context, owner int) []SessionUsage {
	ss := m.visible(owner)
	out := make([]SessionUsage, 0, len(ss))
	for _, s := range ss {
		s.mu.Lock()
		k := s.k
		u := SessionUsage{ID: s.id, Policy: s.policy.Name}
		s.mu.Unlock()
		if k != nil && k.sb != nil {
			// Read outside the lock: a cgroup read must not hold up a cell.
			cu := k.sb.Usage()
			u.CPU, u.MemoryBytes, u.MemoryPeakBytes = cu.CPU, cu.MemoryCurrent, cu.MemoryPeak
		}
		out = append(out, u)
	}
	return out
}
