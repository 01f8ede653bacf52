package session

import (
	"context"
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// Info returns session id's info as it is now: state, expiry, cells.
func (m *Manager) Info(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	info := m.infoOf(s)
	return &info, nil
}

// SetTimeout makes session id end d from now unless used again (its idle
// TTL becomes d, counted from now): E2B's set_timeout, a keep-alive. d is
// refused, not clamped, past the configured max_idle_ttl or past the end
// of the session's lifetime: a caller that asked for an hour must not
// believe it has one.
func (m *Manager) SetTimeout(ctx context.Context, owner int, id string, d time.Duration) (*Info, error) {
	if d <= 0 {
		return nil, fmt.Errorf("%w: timeout_s must be a number of seconds > 0", ErrBadRequest)
	}
	if d > m.cfg.MaxIdleTTL {
		return nil, fmt.Errorf("%w: timeout_s = %g is beyond this server's max_idle_ttl of %g s", ErrBadRequest, d.Seconds(), m.cfg.MaxIdleTTL.Seconds())
	}
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	end := s.created.Add(m.cfg.maxLifeOf(s))
	if now.Add(d).After(end) {
		left := math.Floor(end.Sub(now).Seconds())
		return nil, fmt.Errorf("%w: timeout_s = %g would pass the session's max lifetime: it ends at %s whatever its use, %g s from now",
			ErrBadRequest, d.Seconds(), end.UTC().Format(time.RFC3339), max(left, 0))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, id)
	}
	s.ttl, s.lastUsed = d, now
	if s.hibernated && s.hibTTL < d {
		s.hibTTL = d
	}
	s.mu.Unlock()
	if err := m.dur.saveMeta(s); err != nil {
		m.log().Warn("session metadata not saved: a re-adopted session keeps its old timeout", "session", s.id, "err", err)
	}
	info := m.infoOf(s)
	return &info, nil
}

// Metrics samples session id's usage. Nothing is read from inside the
// sandbox: the figures are the host's view of its cgroup and disk.
func (m *Manager) SessionMetrics(ctx context.Context, owner int, id string) (*SessionMetrics, error) {
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	k, p := s.k, s.policy
	s.mu.Unlock()
	out := &SessionMetrics{Timestamp: now.UTC(), CPUCount: p.CPUs, MemTotal: p.MemoryBytes}
	if k != nil && k.sb != nil {
		u := k.sb.Usage() // outside the lock: a cgroup read must not hold up a cell
		out.Running = true
		out.CPUSeconds = u.CPU.Seconds()
		out.MemUsed, out.MemPeak = u.MemoryCurrent, u.MemoryPeak
		s.mu.Lock()
		prevCPU, prevAt := s.metricsCPU, s.metricsAt
		if s.metricsK != k {
			prevCPU, prevAt = 0, k.started
		}
		s.metricsK, s.metricsCPU, s.metricsAt = k, u.CPU, now
		s.mu.Unlock()
		if wall := now.Sub(prevAt); wall > 0 && p.CPUs > 0 {
			pct := 100 * (u.CPU - prevCPU).Seconds() / wall.Seconds() / p.CPUs
			out.CPUUsedPct = math.Round(min(max(pct, 0), 100)*100) / 100
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(s.disk.UpperDir(), &st); err == nil {
		out.DiskTotal = int64(st.Blocks) * st.Bsize
		out.DiskUsed = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return out, nil
}
