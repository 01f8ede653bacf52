package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
)

// A session outlives the daemon: its kernel keeps running when the daemon
// exits (a drain with KeepOnShutdown, or kill -9), and it reconnects every
// 50 ms to the socket in the session's control directory. A new daemon
// reads each session's metadata, adopts its disk and sandbox, listens on
// the socket again and waits for the kernel's hello. What cannot be adopted
// is destroyed and reported as lost; persisted files stay in the store.

// metaName is the session's metadata file, in its host-owned directory
// (the sandbox cannot reach it).
const metaName = "session.json"

// metaVersion is the layout of metaName; a different one is not adopted.
const metaVersion = 1

type sessionMeta struct {
	Version int           `json:"version"`
	ID      string        `json:"id"`
	Owner   int           `json:"owner"`
	Policy  policy.Policy `json:"policy"`
	Persist string        `json:"persist,omitempty"`
	TTL     time.Duration `json:"ttl"`
	// MaxLife is the session's own lifetime (0: the configured one).
	MaxLife time.Duration `json:"max_lifetime,omitempty"`
	Created time.Time     `json:"created"`
	Info    Info          `json:"info"`
}

// saveMeta writes what a new daemon needs to adopt s.
func (m *durable) saveMeta(s *Session) error {
	s.mu.Lock()
	meta := sessionMeta{Version: metaVersion, ID: s.id, Owner: s.owner, Policy: s.policy, Persist: s.persist, TTL: s.ttl, MaxLife: s.maxLife, Created: s.created, Info: s.info}
	s.mu.Unlock()
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, metaName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write session metadata: %w", err)
	}
	return os.Rename(tmp, filepath.Join(s.dir, metaName))
}

// adoptAll adopts every session a previous daemon left running and returns
// their ids. Sessions that cannot be adopted are destroyed and remembered
// as lost.
func (m *Manager) adoptAll() map[string]bool {
	adopted := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(m.cfg.StateDir, "sessions"))
	for _, e := range ents {
		id := e.Name()
		s, err := m.dur.adopt(id)
		if err != nil {
			now := time.Now()
			why := fmt.Sprintf("was lost when jailcell restarted at %s: %v", now.UTC().Format(time.RFC3339), err)
			until := now.Add(m.cfg.IdleTTL)
			owner := unknownOwner
			if b, rerr := os.ReadFile(filepath.Join(m.cfg.StateDir, "sessions", id, metaName)); rerr == nil {
				m.log().Warn("session lost on restart; persisted files are kept", "session", id, "err", err)
				var meta sessionMeta
				if json.Unmarshal(b, &meta) == nil {
					until = m.dur.idEnd(meta.Created, now, meta.TTL, meta.MaxLife)
					if meta.Owner >= 0 {
						owner = meta.Owner
					}
				}
			}
			m.dur.markLost(id, owner, why, LostRestart, until)
			continue
		}
		m.mu.Lock()
		m.sessions[id] = s
		m.mu.Unlock()
		adopted[id] = true
		if s.k == nil {
			m.log().Info("hibernated session re-adopted", "session", id)
			continue
		}
		m.log().Info("session re-adopted", "session", id, "kernel_pid", s.k.sb.Pid())
	}
	return adopted
}

// adopt takes over one session.
func (m *durable) adopt(id string) (_ *Session, retErr error) {
	dir := filepath.Join(m.cfg.StateDir, "sessions", id)
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return nil, fmt.Errorf("no metadata: %w", err)
	}
	var meta sessionMeta
	if err := json.Unmarshal(b, &meta); err != nil || meta.Version != metaVersion || meta.ID != id {
		return nil, fmt.Errorf("metadata of another layout or session (version %d)", meta.Version)
	}
	if err := meta.Policy.Validate(); err != nil {
		return nil, err
	}
	if s, err := m.adoptHibernated(meta, dir); !errors.Is(err, errNotHibernated) {
		return s, err
	}
	disk, err := m.host.AdoptDisk(diskID(id))
	if err != nil {
		return nil, err
	}
	var sb *isolate.Sandbox
	defer func() {
		if retErr != nil {
			if sb != nil {
				_ = sb.Destroy()
			}
			_ = disk.Destroy()
		}
	}()
	sb, err = disk.Adopt()
	if err != nil {
		return nil, err
	}
	if err := sb.AttachNetwork(meta.Policy); err != nil {
		// Closed, never open: the sandbox keeps its state and has no
		// network until it is recreated.
		m.log().Warn("re-adopted session has no network: its egress gateway could not be rebuilt", "session", id, "err", err)
	}
	ctl := disk.CtlDir()
	l, err := runner.Listen(ctl)
	if err != nil {
		return nil, fmt.Errorf("listen for the kernel: %w", err)
	}
	// The kernel retries every 50 ms; one that does not come back within
	// the bound is gone or wedged.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-sb.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := runner.Accept(ctx, l, runner.DefaultMaxFrame, kernelUIDs(sb))
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("kernel did not reconnect: %w", err)
	}
	now := time.Now()
	s := &Session{
		id: id, owner: meta.Owner, policy: meta.Policy, persist: meta.Persist, dir: dir, disk: disk,
		created: meta.Created, ttl: meta.TTL, maxLife: meta.MaxLife, lastUsed: now, info: meta.Info,
		k: &kernel{sb: sb, conn: conn, listener: l, started: time.Now()}, cells: conn.Hello().Cells,
	}
	m.files.rescan(s)
	return s, nil
}

// release lets go of s without stopping its kernel, for a daemon that exits
// and leaves the session to the next one.
func (m *Manager) release(s *Session) error {
	m.mu.Lock()
	delete(m.sessions, s.id)
	m.mu.Unlock()
	err := m.dur.saveMeta(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.released = true
	if s.k != nil {
		_ = s.k.conn.Close()
		_ = s.k.listener.Close()
		s.k.sb.Release()
		s.k = nil
	}
	if err != nil {
		return fmt.Errorf("save session %s for re-adoption: %w", s.id, err)
	}
	return nil
}

// reconcile removes every sandbox and session directory a previous run
// left behind, except the adopted sessions'.
func (m *durable) reconcile(adopted map[string]bool) error {
	disks := map[string]bool{}
	for id := range adopted {
		disks[diskID(id)] = true
	}
	removed, err := m.host.Reconcile(func(id string) bool { return disks[id] })
	if len(removed) > 0 {
		m.log().Info("removed leftovers of a previous run", "sandboxes", len(removed))
	}
	ents, _ := os.ReadDir(filepath.Join(m.cfg.StateDir, "sessions"))
	for _, e := range ents {
		if !adopted[e.Name()] {
			_ = os.RemoveAll(filepath.Join(m.cfg.StateDir, "sessions", e.Name()))
		}
	}
	return err
}

// savePooledMeta saves the metadata of a session just taken from the pool.
func (m *durable) savePooledMeta(info *Info) {
	if s, err := m.mgr.get(0, info.ID); err == nil {
		m.recordLive(s)
		if err := m.saveMeta(s); err != nil {
			m.log().Warn("session metadata not saved: it cannot be re-adopted after a restart", "session", s.id, "err", err)
		}
	}
}
