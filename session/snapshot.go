package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Snapshot and rollback: a known-good state to return to, in place. A
// snapshot is a checkpoint of the live kernel taken without stopping it
// plus a copy of the workspace, kept in the session directory (one per
// session, replaced by the next). Rollback throws the kernel and the
// workspace away and brings both back as they were at the snapshot, under
// the same session id; it can be repeated. An agent asks for one before a
// risky cell (the exec field "snapshot") and rolls back if the cell broke
// the session.

// snapshotName is the snapshot's directory in the session directory:
// images/ and upper-saved/ (isolate.Disk.SaveUpper).
const snapshotName = "snapshot"

// Snapshot takes a snapshot of session id now, replacing an earlier one.
func (m *durable) Snapshot(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.mgr.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	if err := m.snapshot(ctx, s); err != nil {
		return nil, err
	}
	info := m.mgr.infoOf(s)
	return &info, nil
}

// snapshot does the work; the caller holds s.run.
func (m *durable) snapshot(ctx context.Context, s *Session) error {
	if err := m.host.CriuCheck(); err != nil {
		return fmt.Errorf("%w: snapshots need checkpoint/restore: %v", ErrUnavailable, err)
	}
	if lost, err := m.wake(ctx, s); err != nil {
		return err
	} else if lost != "" {
		return fmt.Errorf("%w: session %s: %s", ErrUnavailable, s.id, lost)
	}
	k, err := m.mgr.ensureKernel(ctx, s)
	if err != nil {
		return err
	}
	start := time.Now()
	tmp := filepath.Join(s.dir, snapshotName+".new")
	_ = os.RemoveAll(tmp)
	m.stateQuota.release(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("snapshot dir: %w", err)
	}
	defer func() {
		_ = os.RemoveAll(tmp)
		m.stateQuota.release(tmp)
	}()
	// Charged to the state quota: the images up to the kernel's memory
	// limit, the files up to its disk limit, holes kept (quota.go).
	images, saved := filepath.Join(tmp, imagesName), filepath.Join(tmp, savedName)
	if err := m.reserveImages(s, images); err != nil {
		return err
	}
	err = m.checkpointCopy(s, k, images, func() error {
		return copyLimit(s, "snapshot", s.disk.SaveUpper(saved, m.stateMeter(s, saved)))
	})
	if err != nil {
		return err
	}
	if err := m.settleImages(s, images); err != nil {
		return err
	}
	dst := filepath.Join(s.dir, snapshotName)
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("replace snapshot: %w", err)
	}
	m.stateQuota.release(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("keep snapshot: %w", err)
	}
	m.stateQuota.rename(tmp, dst)
	now := time.Now().UTC()
	s.mu.Lock()
	s.info.SnapshotAt = &now
	s.mu.Unlock()
	if err := m.saveMeta(s); err != nil {
		m.log().Warn("session metadata not saved", "session", s.id, "err", err)
	}
	m.log().Info("session snapshot", "session", s.id, "snapshot_ms", time.Since(start).Milliseconds(), "image_bytes", dirBytes(filepath.Join(dst, imagesName)))
	return nil
}

// Rollback returns session id to its snapshot: the kernel (variables,
// imports, open files) and the workspace as they were. The snapshot stays
// for another rollback. A restore that fails leaves a fresh kernel on the
// snapshot's files and says so (state "lost").
func (m *durable) Rollback(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.mgr.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	snap := filepath.Join(s.dir, snapshotName)
	if _, err := os.Stat(filepath.Join(snap, imagesName)); err != nil {
		return nil, fmt.Errorf("%w: session %s has no snapshot (take one with the snapshot op, or exec with \"snapshot\": true)", ErrNotFound, id)
	}
	start := time.Now()
	s.mu.Lock()
	hib := s.hibernated
	s.mu.Unlock()
	if hib {
		// Live again afterwards: it counts toward MaxSessions and its
		// owner's share, as a wake does (an owner at max_per_owner rolled
		// hibernated sessions back one over, again and again).
		releaseOwner, err := m.mgr.reserveOwner(s.owner)
		if err != nil {
			return nil, fmt.Errorf("session %s is hibernated and cannot be rolled back now: %w", id, err)
		}
		defer releaseOwner()
		if err := m.mgr.reserve(); err != nil {
			return nil, fmt.Errorf("session %s is hibernated and cannot be rolled back now: %w", id, err)
		}
		defer m.mgr.unreserve()
	}
	// Everything the session has now goes: its kernel, or its hibernation.
	s.mu.Lock()
	k := s.k
	s.hibernated = false
	s.mu.Unlock()
	if k != nil {
		m.mgr.dropKernel(s, k)
	}
	if hib {
		_ = os.Remove(filepath.Join(s.dir, hibernatedMark))
		for _, name := range []string{imagesName, savedName} {
			_ = os.RemoveAll(filepath.Join(s.dir, name))
			m.stateQuota.release(filepath.Join(s.dir, name))
		}
	}
	if err := s.disk.ClearUpper(); err != nil {
		return nil, fmt.Errorf("%w: roll back session %s: %v", ErrUnavailable, id, err)
	}
	if err := s.disk.LoadUpper(filepath.Join(snap, savedName)); err != nil {
		return nil, fmt.Errorf("%w: roll back session %s: %v", ErrUnavailable, id, err)
	}
	// The restore writes its log and config next to the images; the
	// snapshot's images themselves are only read.
	nk, rerr := m.kernels.restoreKernel(context.WithoutCancel(ctx), s, filepath.Join(snap, imagesName))
	if rerr == nil {
		s.mu.Lock()
		closed := s.closed
		if !closed {
			s.k = nk
		}
		s.mu.Unlock()
		if closed {
			// Closed meanwhile: the restored sandbox is not left running
			// uncounted (see wake).
			_ = nk.close()
			return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, id)
		}
	}
	m.files.rescan(s)
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
	if rerr != nil {
		m.log().Warn("rollback restore failed; starting a fresh kernel", "session", id, "err", rerr)
		if _, err := m.mgr.ensureKernel(ctx, s); err != nil {
			return nil, err
		}
		info := m.mgr.infoOf(s)
		info.State = StateLost
		info.StateReason = "restoring the snapshot's kernel failed (" + rerr.Error() + "); a fresh kernel was started on the snapshot's files (variables are gone)"
		return &info, nil
	}
	m.log().Info("session rolled back", "session", id, "rollback_ms", time.Since(start).Milliseconds())
	info := m.mgr.infoOf(s)
	return &info, nil
}
