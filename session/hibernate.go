package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/runner"
)

// Hibernation: an idle session's whole kernel is checkpointed with CRIU
// (isolate.Sandbox.Checkpoint) into its host-owned session directory and
// its sandbox destroyed, which releases its processes, memory and cgroup;
// its disk (workspace files) stays. The next cell, or Restore, brings the
// kernel back from the images with every variable, import and open file.
// Without a working criu, hibernation is off and says why.

// imagesName is the checkpoint's directory in the session directory; its
// marker says the checkpoint is complete (a new daemon adopts the session as
// hibernated only then).
// savedName holds a copy of the disk's upper layer (isolate.Disk.SaveUpper):
// the disk is a tmpfs, gone after a reboot, and the copy brings the
// workspace back onto a new disk with the restored kernel's open files.
const (
	imagesName     = "images"
	hibernatedMark = "hibernated"
	savedName      = "upper-saved"
)

// HibernationAvailable says whether this host can hibernate sessions (and
// snapshot and fork them), or why not. The host probes once.
func (m *durable) HibernationAvailable() error { return m.host.CriuCheck() }

// Hibernate checkpoints session id now and releases its memory. A session
// already hibernated is left as it is.
func (m *durable) Hibernate(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.mgr.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	if err := m.hibernate(s); err != nil {
		return nil, err
	}
	info := m.mgr.infoOf(s)
	return &info, nil
}

// hibernate does the work; the caller holds s.run.
func (m *durable) hibernate(s *Session) error {
	if err := m.host.CriuCheck(); err != nil {
		return fmt.Errorf("%w: hibernation is off: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	k, hib, closed := s.k, s.hibernated, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: session %s was closed", ErrNotFound, s.id)
	case hib:
		// Hibernated here only (the store was down then): try the store
		// again.
		return m.storeHibernated(s)
	case k == nil:
		return fmt.Errorf("%w: session %s has no kernel to hibernate", ErrUnavailable, s.id)
	}
	release, err := m.mgr.reserveHibernation(s)
	if err != nil {
		return err
	}
	defer release()
	images := filepath.Join(s.dir, imagesName)
	_ = os.RemoveAll(images)
	m.stateQuota.release(images)
	_ = os.Remove(filepath.Join(s.dir, hibernatedMark))
	if err := m.reserveImages(s, images); err != nil {
		return err
	}
	start := time.Now()
	// criu refuses a socket whose peer is outside the sandbox: close the
	// host's end and its listener (which unlinks the socket, so the kernel's
	// 50 ms reconnects fail) and let the kernel drop its end.
	_ = k.conn.Close()
	_ = k.listener.Close()
	for try := 0; try < 3; try++ {
		time.Sleep(time.Duration(20+50*try) * time.Millisecond)
		// A hung criu is not tried again: each try costs its bound.
		if err = k.sb.Checkpoint(images, false); err == nil || errors.Is(err, isolate.ErrTimeout) {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(images)
		m.stateQuota.release(images)
		// The kernel still runs: take its connection back.
		if rerr := m.reconnect(s, k); rerr != nil {
			m.mgr.dropKernel(s, k)
			s.lost(fmt.Sprintf("hibernating it failed (%v) and its kernel was lost: %v", err, rerr))
			return fmt.Errorf("%w: hibernate session %s: %v; its kernel was lost: %v", ErrUnavailable, s.id, err, rerr)
		}
		return hostErr(ErrUnavailable, fmt.Errorf("hibernate session %s: %w", s.id, err))
	}
	dump := time.Since(start)
	// criu's log of a dump that worked is ~0.6 MB of the image.
	_ = os.Remove(filepath.Join(images, "dump.log"))
	<-k.sb.Done()
	_ = k.sb.Destroy()
	if err := m.settleImages(s, images); err != nil {
		// The dump ended the kernel; the next cell starts a fresh one.
		_ = os.RemoveAll(images)
		m.stateQuota.release(images)
		m.mgr.dropKernel(s, k)
		s.lost(fmt.Sprintf("hibernating it failed after its kernel was dumped (%v): a fresh kernel was started (variables are gone, files remain)", err))
		return fmt.Errorf("hibernate session %s (its kernel is gone, files remain): %w", s.id, err)
	}
	if err := m.saveUpper(s); err != nil {
		m.log().Warn("hibernated session's files not saved to disk: it survives a daemon restart, not a reboot", "session", s.id, "err", err)
	}
	// On the disk before the marker says so: the images, the saved files
	// and the metadata were in the page cache only, and after a power loss
	// a marker over images never written made a restore fail (the
	// session's state lost, and reported as a failed restore). syncfs
	// flushes the state dir's filesystem in one call; the marker is then
	// written whole and synced with its directory.
	if err := syncFS(s.dir); err != nil {
		m.log().Warn("hibernated session not synced to disk: it survives a daemon restart, perhaps not a power loss", "session", s.id, "err", err)
	}
	if err := writeStateFile(filepath.Join(s.dir, hibernatedMark), []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		m.log().Warn("hibernation marker", "session", s.id, "err", err)
	}
	s.mu.Lock()
	s.k = nil
	s.hibernated = true
	s.hibTTL = m.cfg.HibernatedTTL
	s.lastUsed = time.Now()
	s.mu.Unlock()
	m.log().Info("session hibernated", "session", s.id, "checkpoint_ms", dump.Milliseconds(), "image_bytes", dirBytes(images))
	return m.storeHibernated(s)
}

// syncFS flushes the filesystem that holds dir.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// storeHibernated moves s, hibernated here, to a shared store (if there is
// one): the store is the session's home from then on and this node forgets
// it. A store that is down leaves it hibernated here (ErrUnavailable).
func (m *durable) storeHibernated(s *Session) error {
	if !m.shared() {
		return nil
	}
	if err := m.exportHibernated(context.Background(), s); err != nil {
		return err
	}
	m.mgr.forgetStored(s)
	return nil
}

// reconnect listens again on s's control socket and waits for k's kernel.
func (m *durable) reconnect(s *Session, k *kernel) error {
	l, err := runner.Listen(s.ctlDir())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-k.sb.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := runner.Accept(ctx, l, runner.DefaultMaxFrame, kernelUIDs(k.sb))
	if err != nil {
		l.Close()
		return fmt.Errorf("kernel did not reconnect: %w", err)
	}
	s.mu.Lock()
	k.conn, k.listener = conn, l
	s.mu.Unlock()
	return nil
}

// Restore brings a hibernated session back now (the next cell would do it
// anyway). A failed restore starts a fresh kernel on the same files and
// says so.
func (m *durable) Restore(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.mgr.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	if _, err := m.wake(ctx, s); err != nil {
		return nil, err
	}
	if _, err := m.mgr.ensureKernel(ctx, s); err != nil {
		return nil, err
	}
	info := m.mgr.infoOf(s)
	if s.takeLost() != "" {
		info.State = StateLost
	}
	return &info, nil
}

// wake restores s if it is hibernated. It returns "" on success (or if s
// was not hibernated), else why its variables are gone: the images are
// removed, and ensureKernel then starts a fresh kernel on the same disk.
// The caller holds s.run.
func (m *durable) wake(ctx context.Context, s *Session) (string, error) {
	s.mu.Lock()
	hib, owner := s.hibernated, s.owner
	s.mu.Unlock()
	if !hib {
		return "", nil
	}
	// Never woken past its lifetime (its checkpoint does not stretch it):
	// the janitor removes its images and ends it.
	if err := m.mgr.pastLife(s, time.Now()); err != nil {
		return "", err
	}
	// A hibernated session does not count toward MaxSessions; a woken one
	// does.
	releaseOwner, err := m.mgr.reserveOwner(owner)
	if err != nil {
		return "", fmt.Errorf("session %s is hibernated and cannot be woken now: %w", s.id, err)
	}
	defer releaseOwner()
	if err := m.mgr.reserve(); err != nil {
		return "", fmt.Errorf("session %s is hibernated and cannot be woken now: %w", s.id, err)
	}
	defer m.mgr.unreserve()
	images := filepath.Join(s.dir, imagesName)
	start := time.Now()
	// Not ended by the caller leaving: a failed restore removes the
	// images, and one cancelled by a client's disconnect or deadline lost
	// the session's state for good (then answered "kept" by the next cell,
	// a fresh kernel's). The kernel start bounds it (sessions.start_timeout).
	k, err := m.kernels.restoreKernel(context.WithoutCancel(ctx), s, images)
	s.mu.Lock()
	s.hibernated = false
	// Woken is used: its idle TTL counts from now, not from its last cell
	// (a restore of a session hibernated longer than its TTL was ended by
	// the janitor's next sweep, its state just restored lost).
	s.lastUsed = time.Now()
	closed := s.closed
	if err == nil && !closed {
		s.k = k
	}
	s.mu.Unlock()
	if err == nil && closed {
		// Closed while it was restored: the restored sandbox was never
		// the session's (a close found no kernel to end), so it is ended
		// here, not left running uncounted.
		_ = k.close()
		return "", fmt.Errorf("%w: session %s was closed", ErrNotFound, s.id)
	}
	_ = os.Remove(filepath.Join(s.dir, hibernatedMark))
	for _, p := range []string{images, filepath.Join(s.dir, savedName)} {
		_ = os.RemoveAll(p)
		m.stateQuota.release(p)
	}
	if err != nil {
		m.log().Warn("restore of hibernated session failed; starting a fresh kernel", "session", s.id, "err", err)
		why := "restoring the hibernated kernel failed (" + err.Error() + "); a fresh kernel was started (variables are gone, files remain)"
		s.lost(why)
		return why, nil
	}
	m.log().Info("session restored", "session", s.id, "restore_ms", time.Since(start).Milliseconds())
	return "", nil
}

// hibernateIdle hibernates the sessions idle for HibernateAfter (janitor).
func (m *durable) hibernateIdle(now time.Time) {
	if m.cfg.HibernateAfter <= 0 || m.host.CriuCheck() != nil {
		return
	}
	idle := m.mgr.sessionsWhere(func(s *Session) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.busy && !s.hibernated && s.k != nil && now.Sub(s.lastUsed) >= m.cfg.HibernateAfter
	})
	for _, s := range idle {
		if m.mgr.pastLife(s, now) != nil {
			continue // the janitor ends it: no checkpoint to write and remove
		}
		done, ok := s.tryPause()
		if !ok {
			continue
		}
		if err := m.hibernate(s); err != nil {
			m.log().Warn("hibernate idle session", "session", s.id, "err", err)
		}
		done()
	}
}

// adoptHibernated takes over a session a previous daemon left hibernated:
// its disk and complete images; the kernel is restored on its next cell.
func (m *durable) adoptHibernated(meta sessionMeta, dir string) (*Session, error) {
	if _, err := os.Stat(filepath.Join(dir, hibernatedMark)); err != nil {
		return nil, errNotHibernated
	}
	disk, err := m.host.AdoptDisk(diskID(meta.ID))
	if errors.Is(err, isolate.ErrNotMounted) {
		// The host rebooted: a new disk with the saved files.
		disk, err = m.rebuildDisk(meta, dir)
	}
	if err != nil {
		return nil, err
	}
	return m.hibernatedSession(meta, dir, disk), nil
}

var errNotHibernated = errors.New("not hibernated")

// saveUpper copies s's workspace disk next to its images (replacing an
// older copy), holes kept, charged to s's disk limit and the state quota.
// The caller holds s.run.
func (m *durable) saveUpper(s *Session) error {
	dir := filepath.Join(s.dir, savedName)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	m.stateQuota.release(dir)
	if err := s.disk.SaveUpper(dir, m.stateMeter(s, dir)); err != nil {
		_ = os.RemoveAll(dir)
		m.stateQuota.release(dir)
		return copyLimit(s, "hibernation", err)
	}
	return nil
}

// rebuildDisk makes a new disk for the hibernated session meta whose disk
// did not survive (a reboot) and loads its saved files onto it.
func (m *durable) rebuildDisk(meta sessionMeta, dir string) (*isolate.Disk, error) {
	saved := filepath.Join(dir, savedName)
	if _, err := os.Stat(saved); err != nil {
		return nil, fmt.Errorf("its disk is gone and no copy of its files was saved: %w", err)
	}
	disk, err := m.host.ReplaceDisk(diskID(meta.ID), meta.Policy)
	if err != nil {
		return nil, hostErr(ErrUnavailable, err)
	}
	if err := writeKernel(disk); err != nil {
		_ = disk.Destroy()
		return nil, err
	}
	if err := disk.LoadUpper(saved); err != nil {
		_ = disk.Destroy()
		return nil, err
	}
	m.log().Info("hibernated session's disk rebuilt from its saved files", "session", meta.ID)
	return disk, nil
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// hibernatedSession is the Session of a hibernated session's metadata on
// its disk (adopted after a restart or a reboot, or taken from a shared
// store), its files scanned: it runs again at its next cell.
func (m *durable) hibernatedSession(meta sessionMeta, dir string, disk *isolate.Disk) *Session {
	meta = m.clampMeta(meta, time.Now())
	s := &Session{
		id: meta.ID, owner: meta.Owner, policy: meta.Policy, persist: meta.Persist, dir: dir, disk: disk,
		created: meta.Created, ttl: meta.TTL, maxLife: meta.MaxLife, lastUsed: time.Now(), info: meta.Info,
		hibernated: true, hibTTL: m.cfg.HibernatedTTL,
	}
	m.files.rescan(s)
	return s
}

// clampMeta bounds the lifetimes in stored metadata by this node's
// configuration, as a create's are: metadata comes from a state directory
// or a shared store, and an attack had a stored ten-year TTL kept whole
// although sessions.max_idle_ttl was an hour. A creation time in the
// future (which would stretch max_lifetime) is taken as now.
func (m *durable) clampMeta(meta sessionMeta, now time.Time) sessionMeta {
	switch {
	case meta.TTL <= 0:
		meta.TTL = m.cfg.IdleTTL
	case meta.TTL > m.cfg.MaxIdleTTL:
		meta.TTL = m.cfg.MaxIdleTTL
	}
	switch {
	case meta.MaxLife < 0:
		meta.MaxLife = 0
	case meta.MaxLife > m.cfg.MaxLifetime:
		meta.MaxLife = m.cfg.MaxLifetime
	}
	if meta.Created.IsZero() || meta.Created.After(now) {
		meta.Created = now
	}
	return meta
}
