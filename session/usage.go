package session

import (
	"context"
)

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
