package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jailcell/jailcell/policy"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// A sandbox outlives the daemon that built it: its init is not killed when
// the daemon exits (no parent-death signal), its disk and root stay
// mounted, and libcontainer's state stays in StateDir. A new daemon adopts
// it with AdoptDisk and Disk.Adopt instead of building it again.

// AdoptDisk takes over the disk of id left by a previous daemon: its tmpfs
// must still be mounted. The disk keeps its uid slot, read back from the
// owner of its upper layer.
func (h *Host) AdoptDisk(id string) (*Disk, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: disk id %q", ErrNotFound, id)
	}
	d := &Disk{ID: id, h: h, dir: h.sandboxDir(id), slot: -1}
	mps, err := mountsUnder(d.dir)
	if err != nil {
		return nil, err
	}
	if !contains(mps, filepath.Join(d.dir, "disk")) {
		return nil, fmt.Errorf("%w: disk of %s (the host rebooted?)", ErrNotMounted, id)
	}
	fi, err := os.Lstat(d.UpperDir())
	if err != nil {
		return nil, fmt.Errorf("%w: upper layer of %s: %v", ErrNotFound, id, err)
	}
	uid := int(fi.Sys().(*syscall.Stat_t).Uid)
	slot := (uid - h.cfg.UIDBase) / idsPerSlot
	if uid < h.cfg.UIDBase || (uid-h.cfg.UIDBase)%idsPerSlot != 0 || slot >= len(h.slots) {
		return nil, fmt.Errorf("%w: upper layer of %s owned by uid %d, not a sandbox slot", ErrNotFound, id, uid)
	}
	h.mu.Lock()
	if h.slots[slot] {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: slot %d of %s already in use", ErrNotFound, slot, id)
	}
	h.slots[slot] = true
	h.mu.Unlock()
	d.slot = slot
	return d, nil
}

// ReplaceDisk makes a new disk for id where a previous daemon's disk of
// that id did not survive (its tmpfs is gone after a reboot): what is left
// of it (directories, a stale mount) is removed first. The new disk gets
// whatever uid slot is free.
func (h *Host) ReplaceDisk(id string, p policy.Policy) (*Disk, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: disk id %q", ErrNotFound, id)
	}
	old := &Disk{ID: id, h: h, dir: h.sandboxDir(id), slot: -1}
	if err := old.Destroy(); err != nil {
		return nil, fmt.Errorf("remove what is left of disk %s: %w", id, err)
	}
	return h.NewDisk(id, p)
}

// Adopt takes over the running sandbox on d left by a previous daemon.
// The sandbox's exit status is not ours to read any more (its init is not
// our child): Exit reports only that it ended.
func (d *Disk) Adopt() (*Sandbox, error) {
	ents, err := os.ReadDir(d.h.containersDir())
	if err != nil {
		return nil, err
	}
	var id string
	gen := -1
	for _, e := range ents {
		if diskOf(e.Name()) != d.ID {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), d.ID+"-"))
		if err == nil && n > gen {
			id, gen = e.Name(), n
		}
	}
	if id == "" {
		return nil, fmt.Errorf("%w: no sandbox state for disk %s", ErrNotFound, d.ID)
	}
	c, err := libcontainer.Load(d.h.containersDir(), id)
	if err != nil {
		return nil, fmt.Errorf("%w: load sandbox %s: %v", ErrNotFound, id, err)
	}
	st, err := c.State()
	if err != nil {
		return nil, fmt.Errorf("%w: state of sandbox %s: %v", ErrNotFound, id, err)
	}
	if status, err := c.Status(); err != nil || status != libcontainer.Running {
		_ = c.Destroy()
		return nil, fmt.Errorf("%w: sandbox %s is %v, not running", ErrNotFound, id, status)
	}
	mps, _ := mountsUnder(d.dir)
	if !contains(mps, d.RootDir()) {
		return nil, fmt.Errorf("%w: root of sandbox %s is not mounted", ErrNotFound, id)
	}
	// A pidfd pins the init: no pid reuse can make us watch or signal a
	// stranger.
	pidfd, err := unix.PidfdOpen(st.InitProcessPid, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open init %d of sandbox %s: %v", ErrNotFound, st.InitProcessPid, id, err)
	}
	d.mu.Lock()
	d.used, d.gen = true, gen
	d.mu.Unlock()
	s := &Sandbox{
		ID: id, disk: d, container: c, pid: st.InitProcessPid,
		cg:   cgroupFiles{v2: cgroups.IsCgroup2UnifiedMode(), paths: st.CgroupPaths, open: newOpenFiles()},
		done: make(chan struct{}),
	}
	go s.waitPidfd(pidfd)
	return s, nil
}

// AttachNetwork gives an adopted sandbox whose policy asks for an
// allowlist network a new egress gateway: its old one was held by the
// daemon that built it and died with it, taking the sandbox's veth with
// it, so until then the sandbox has loopback only (closed, never open).
func (s *Sandbox) AttachNetwork(p policy.Policy) error {
	s.policy = p
	if p.Network != policy.NetworkAllowlist || s.net != nil {
		return nil
	}
	gw, err := s.disk.h.attachNetwork(p, s.pid, s.disk.slot)
	if err != nil {
		return fmt.Errorf("rebuild the egress gateway of sandbox %s: %w", s.ID, err)
	}
	s.net = gw
	return nil
}

// waitPidfd closes done when the adopted init exits.
func (s *Sandbox) waitPidfd(pidfd int) {
	// A copy for the fallback: the init is not our child, so only a
	// pidfd opened while it lived is sure to be it.
	spare, err := unix.Dup(pidfd)
	if err != nil {
		spare = -1
	}
	if !awaitExit(pidfd) && spare >= 0 {
		// The poller would not take it: block a thread on the copy.
		fds := []unix.PollFd{{Fd: int32(spare), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	if spare >= 0 {
		unix.Close(spare)
	}
	s.exit = Exit{Code: -1}
	close(s.done)
}
