package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jailcell/jailcell/isolate"
)

// Fork: a new session that starts as an exact copy of a live one, kernel
// and workspace. The parent's kernel is checkpointed without being stopped
// (isolate.Sandbox.Checkpoint with leaveRunning), frozen while its files are
// copied onto the fork's own disk (its own uid slot: the copy's owners move
// with it), thawed, and reconnected; the checkpoint is restored on the new
// disk. From then on the two share nothing: a cell in one is never seen by
// the other. An agent tries a risky cell on a fork, or keeps one as a
// known-good state to return to.

// forkImagesName is the checkpoint's directory in the fork's session
// directory, removed once the fork runs.
const forkImagesName = "fork-images"

// Fork copies session id into a new session of the same owner, policy and
// idle TTL, and returns it. A hibernated parent is restored first. A
// persisted parent's fork is not persisted (both would write one store).
func (m *durable) Fork(ctx context.Context, owner int, id string) (*Info, error) {
	if err := m.host.CriuCheck(); err != nil {
		return nil, fmt.Errorf("%w: fork needs checkpoint/restore: %v", ErrUnavailable, err)
	}
	parent, err := m.mgr.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer parent.run.Unlock()
	if lost, err := m.wake(ctx, parent); err != nil {
		return nil, err
	} else if lost != "" {
		return nil, fmt.Errorf("%w: session %s: %s", ErrUnavailable, id, lost)
	}
	pk, err := m.mgr.ensureKernel(ctx, parent)
	if err != nil {
		return nil, err
	}
	releaseOwner, err := m.mgr.reserveOwner(parent.owner)
	if err != nil {
		return nil, err
	}
	defer releaseOwner()
	if err := m.mgr.reserve(); err != nil {
		return nil, err
	}
	defer m.mgr.unreserve()
	start := time.Now()
	child, err := m.mgr.newSession(parent.owner, parent.policy)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = m.mgr.destroy(child)
		}
	}()
	parent.mu.Lock()
	child.ttl = parent.ttl
	parent.mu.Unlock()
	// A fork is a copy of the parent's state, so it ends when the parent
	// would: a fork must not renew a lifetime. The span is taken on the
	// wall clock from the child's own creation, the clock its expiry is
	// shown on: a span on the monotonic clock from now showed the fork
	// ending a few ms after its parent in a test run under load.
	_, end := m.mgr.lifeEnd(parent)
	parent.mu.Lock()
	child.maxLife = max(end.Round(0).Sub(child.created.Round(0)), time.Nanosecond)
	child.info = Info{Policy: parent.info.Policy, Installed: parent.info.Installed, ForkedFrom: parent.id, Cwd: parent.info.Cwd, HibernateOnIdle: parent.info.HibernateOnIdle}
	child.envs = parent.envs // never written in place: setEnvs and create replace the map
	parent.mu.Unlock()

	images := filepath.Join(child.dir, forkImagesName)
	if err := m.reserveImages(parent, images); err != nil {
		return nil, err
	}
	defer func() {
		_ = os.RemoveAll(images)
		m.stateQuota.release(images)
	}()
	// The copy lands on the child's tmpfs, which bounds it too; holes are
	// kept, so what fit on the parent's disk fits on the child's.
	copyFiles := func() error {
		return copyLimit(parent, "fork", parent.disk.CopyUpper(child.disk, &isolate.ByteCap{Max: child.policy.DiskBytes}))
	}
	if err := m.checkpointCopy(parent, pk, images, copyFiles); err != nil {
		return nil, err
	}
	if err := m.settleImages(parent, images); err != nil {
		return nil, err
	}
	k, err := m.kernels.restoreKernel(ctx, child, images)
	if err != nil {
		return nil, hostErr(ErrUnavailable, fmt.Errorf("restore fork of %s: %w", id, err))
	}
	child.mu.Lock()
	child.k = k
	child.mu.Unlock()
	if err := m.mgr.register(child); err != nil {
		return nil, err
	}
	ok = true
	m.log().Info("session forked", "session", child.id, "parent", parent.id, "fork_ms", time.Since(start).Milliseconds())
	info := m.mgr.infoOf(child)
	return &info, nil
}

// checkpointCopy dumps s's kernel k into images without stopping it and
// runs copyFiles, both while the kernel is frozen: the files match the
// image (criu checks the size of every open file), whatever a background
// thread of the kernel writes. Then it gives s its connection back. The
// caller holds s.run.
func (m *durable) checkpointCopy(s *Session, k *kernel, images string, copyFiles func() error) error {
	// criu refuses a socket whose peer is outside the sandbox (hibernate):
	// the kernel drops its end while it still runs.
	_ = k.conn.Close()
	_ = k.listener.Close()
	var err error
	// Only the dump is retried (the kernel may not have dropped its end
	// yet); a copy that failed is not made again.
	copied := false
	for try := 0; try < 3 && !copied; try++ {
		time.Sleep(time.Duration(20+50*try) * time.Millisecond)
		if err = k.sb.Pause(); err != nil {
			break
		}
		// criu leaves a cgroup it found frozen frozen after the dump.
		if err = k.sb.Checkpoint(images, true); err == nil {
			err, copied = copyFiles(), true
		}
		if rerr := k.sb.Resume(); rerr != nil && err == nil {
			err = rerr
		}
		// A hung criu is not tried again: each try costs its bound.
		if err == nil || errors.Is(err, isolate.ErrTimeout) {
			break
		}
	}
	if rerr := m.reconnect(s, k); rerr != nil {
		m.mgr.dropKernel(s, k)
		return fmt.Errorf("%w: checkpoint of session %s: its kernel was lost: %v (checkpoint: %v)", ErrUnavailable, s.id, rerr, err)
	}
	if errors.Is(err, ErrLimit) {
		return fmt.Errorf("checkpoint of session %s: %w", s.id, err)
	}
	if err != nil {
		return hostErr(ErrUnavailable, fmt.Errorf("checkpoint of session %s: %w", s.id, err))
	}
	// criu's log of a dump that worked is ~0.6 MB of the image.
	_ = os.Remove(filepath.Join(images, "dump.log"))
	return nil
}
