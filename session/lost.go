package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// A session the service could not keep (ended at a shutdown that keeps
// none, or not re-adoptable at the next start) answers ErrLost, saying when
// and why, instead of a bare not_found: for as long as its id would have
// lived, and across restarts, since a client learns of the loss only at its
// next call. The list lives in the state dir, bounded like the tombstones.

const (
	// lostName is the list of lost sessions in the state dir.
	lostName = "lost.json"
	// maxLostFile bounds reading it: at most maxTombstones entries, each
	// an id, a time and a one-line why.
	maxLostFile = maxTombstones * 1024
)

// Reasons a session was lost (the reason label of jailcell_sessions_lost_total).
const (
	LostShutdown = "shutdown" // ended when the service stopped, not kept
	LostRestart  = "restart"  // kept, but not re-adoptable at the next start
)

// lostEntry is one lost session: its id answers ErrLost with Why until
// Until.
type lostEntry struct {
	ID    string    `json:"id"`
	Why   string    `json:"why"`
	Until time.Time `json:"until"`
	// Owner is the session's owner, told why; nil in a list written
	// before owners were recorded (then anyone asking is).
	Owner *int `json:"owner,omitempty"`
}

// markLost remembers that session id, owner's, was lost, why and until
// when its id answers so, and counts it by reason.
func (m *durable) markLost(id string, owner int, why, reason string, until time.Time) {
	m.ended.addLost(id, owner, why, until)
	m.metrics.lost(reason)
}

// idEnd is when a session idle since lastUsed would have ended: its idle
// TTL after that, or its lifetime after its creation, whichever is first.
func (m *durable) idEnd(created, lastUsed time.Time, ttl, maxLife time.Duration) time.Time {
	if ttl <= 0 {
		ttl = m.cfg.IdleTTL
	}
	if maxLife <= 0 {
		maxLife = m.cfg.MaxLifetime
	}
	end := lastUsed.Add(ttl)
	if !created.IsZero() && created.Add(maxLife).Before(end) {
		end = created.Add(maxLife)
	}
	return end
}

// loadLost reads the lost sessions an earlier daemon listed whose ids
// still answer.
func (m *durable) loadLost() {
	b, err := readStateFile(filepath.Join(m.cfg.StateDir, lostName), maxLostFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log().Warn("lost sessions list unreadable: their ids answer not_found", "err", err)
		}
		return
	}
	var entries []lostEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		m.log().Warn("lost sessions list unreadable: their ids answer not_found", "err", err)
		return
	}
	now := time.Now()
	for _, e := range entries {
		if e.ID == "" || !e.Until.After(now) {
			continue
		}
		owner := unknownOwner
		if e.Owner != nil && *e.Owner >= 0 {
			owner = *e.Owner
		}
		m.ended.addLost(e.ID, owner, e.Why, e.Until)
	}
}

// saveLost writes the lost sessions whose ids still answer, replacing the
// list whole.
func (m *durable) saveLost() error {
	entries := m.ended.stillLost(time.Now())
	sort.Slice(entries, func(i, j int) bool { return entries[i].Until.Before(entries[j].Until) })
	path := filepath.Join(m.cfg.StateDir, lostName)
	if len(entries) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove lost sessions list: %w", err)
		}
		return nil
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	if err := writeStateFile(path, b); err != nil {
		return fmt.Errorf("write lost sessions list: %w", err)
	}
	return nil
}

// checkHibernateOnShutdown refuses a HibernateOnShutdown that a configured
// state quota cannot hold even once (every hibernation at shutdown would
// fail, ending or stranding the sessions it promised to keep), naming the
// key. The service's default (HibernateIfAble), or a quota sized
// automatically from a small filesystem (autoQuota), falls back to
// keeping sessions running instead: an installed config that sets every
// key to its default must not stop the service from starting on a small
// disk.
func (m *durable) checkHibernateOnShutdown(autoQuota bool) error {
	if !m.cfg.HibernateOnShutdown {
		return nil
	}
	var need int64
	name := ""
	for n, p := range m.cfg.Policies {
		if r := imagesReserve(p); r > need {
			need, name = r, n
		}
	}
	if m.stateQuota.limit >= need {
		return nil
	}
	if m.cfg.HibernateIfAble || autoQuota {
		m.cfg.HibernateOnShutdown = false
		m.log().Warn("sessions are not hibernated at shutdown: state_quota_bytes is below one hibernation's reservation; they are kept running for the next start instead",
			"state_quota_mib", m.stateQuota.limit>>20, "needs_mib", mib(need), "policy", name)
		return nil
	}
	return fmt.Errorf("%w: sessions.hibernate_on_shutdown: state_quota_bytes = %d MiB is below one hibernation's reservation (%d MiB: memory_bytes + 32 MiB of policy %q): raise state_quota_bytes or turn hibernate_on_shutdown off",
		ErrBadRequest, m.stateQuota.limit>>20, mib(need), name)
}
