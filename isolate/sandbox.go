package isolate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/cleanup"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/isolate/network"
	"github.com/jailcell/jailcell/policy"
)

// Spec describes one sandbox to build.
type Spec struct {
	// Policy is the isolation and limits; it must be valid.
	Policy policy.Policy
	// Args, Env and Cwd are the sandbox's first process (its PID 1). Env
	// is the whole environment: nothing of the host's leaks in.
	Args []string
	Env  []string
	Cwd  string
	// Binds are host directories made visible inside.
	Binds []Bind
	// Log receives the init process's stdout and stderr (nil: /dev/null).
	Log io.Writer
}

// Bind is a host directory visible in the sandbox, read-only unless
// Writable. With Inner, Source is a directory of the sandbox's own root
// (its overlay), shown at Dest too: a second name for it.
type Bind struct {
	Source, Dest string
	Writable     bool
	Inner        bool
}

// innerMounts are spec's Inner binds as mounts of root (mounted). An
// inner source or destination is the sandbox's own and may have been
// changed by an earlier sandbox on the disk (a restore, a rollback, a
// template): a symlink there would make the host bind whatever it points
// to, outside the root (the runc mount-symlink escapes, CVE-2021-30465 and
// kin). So every component must be a real directory (a destination's last
// may be absent), checked with lstat; nothing of the disk's runs while a
// sandbox is built on it, so nothing can change them between the check
// and the mount. A bind that fails the check is left out: the sandbox
// broke that name itself, and the rest of it is as always.
func innerMounts(spec Spec, root string) []*configs.Mount {
	var mounts []*configs.Mount
	for _, b := range spec.Binds {
		if !b.Inner || !realDirs(root, b.Source, false) || !realDirs(root, b.Dest, true) {
			continue
		}
		flags := unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV
		if !b.Writable {
			flags |= unix.MS_RDONLY
		}
		mounts = append(mounts, &configs.Mount{Source: filepath.Join(root, b.Source), Destination: b.Dest, Device: "bind", Flags: flags})
	}
	return mounts
}

// realDirs reports whether each component of the absolute, clean path p
// under root is a directory and not a symlink; with lastMayLack, the last
// may also be absent (the mount makes it).
func realDirs(root, p string, lastMayLack bool) bool {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return false
	}
	parts := strings.Split(p[1:], "/")
	at := root
	for i, part := range parts {
		at = filepath.Join(at, part)
		fi, err := os.Lstat(at)
		if err != nil {
			return lastMayLack && i == len(parts)-1 && errors.Is(err, fs.ErrNotExist)
		}
		if !fi.IsDir() {
			return false
		}
	}
	return true
}

// validID reports whether id is 1-48 of [A-Za-z0-9_]. Not a regexp: every
// sandbox's init is this binary and runs its package initialisers first,
// and `{1,48}` compiled to a program of 48 copies before every start.
func validID(id string) bool {
	if len(id) < 1 || len(id) > 48 {
		return false
	}
	for _, c := range []byte(id) {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Exit is how a sandbox's init ended.
type Exit struct {
	Code   int            // exit code, or -1 if killed by a signal
	Signal syscall.Signal // the signal, if any
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by " + e.Signal.String()
	}
	return "exited with " + strconv.Itoa(e.Code)
}

// Sandbox is one running sandbox.
type Sandbox struct {
	ID string

	disk      *Disk
	container *libcontainer.Container
	process   initProc
	pid       int
	cg        cgroupFiles
	policy    policy.Policy    // what it was built with (adopted: from AttachNetwork)
	net       *network.Gateway // nil unless the policy's network is "allowlist"
	dial      dialed           // the host's connections to its servers (DialPort)

	done     chan struct{}
	exit     Exit
	destroy  sync.Once
	destroyE error
}

// Disk is a sandbox's writable layer: a size- and inode-bounded tmpfs
// holding the overlay's upper and work directories, and the host uid range
// its files belong to. It outlives the sandboxes built on it, so a kernel
// that dies can be replaced without losing the files it wrote.
type Disk struct {
	ID   string
	h    *Host
	dir  string
	slot int

	mu   sync.Mutex
	used bool // a sandbox runs on it
	gen  int
}

// NewDisk mounts a disk for id of the policy's size.
func (h *Host) NewDisk(id string, p policy.Policy) (_ *Disk, retErr error) {
	if !validID(id) {
		return nil, fmt.Errorf("disk id %q: want 1-48 of [A-Za-z0-9_]", id)
	}
	var cl cleanup.Stack
	defer func() {
		if retErr != nil {
			_ = cl.Run()
		}
	}()
	slot, err := h.takeSlot()
	if err != nil {
		return nil, err
	}
	cl.Add(func() error { h.freeSlot(slot); return nil })
	d := &Disk{ID: id, h: h, dir: h.sandboxDir(id), slot: slot}
	if err := os.Mkdir(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	cl.Add(func() error { return os.RemoveAll(d.dir) })
	// Searchable by root and the sandbox's own group only: the sandbox
	// reaches its root and binds through here, and nobody else may. With
	// the daemon's mounts in the host's namespace (no systemd), any local
	// user read the workspace's files (0644 in 0755 directories) and
	// reached the kernel's socket through a 0711 directory. Nothing is
	// in it yet, so the chown cannot be raced.
	if err := os.Chown(d.dir, 0, d.HostID()); err != nil {
		return nil, fmt.Errorf("chown sandbox dir: %w", err)
	}
	if err := os.Chmod(d.dir, 0o710); err != nil {
		return nil, fmt.Errorf("chmod sandbox dir: %w", err)
	}
	disk := filepath.Join(d.dir, "disk")
	if err := os.Mkdir(disk, 0o711); err != nil {
		return nil, fmt.Errorf("create disk dir: %w", err)
	}
	// The disk bound: the overlay's upper layer lives on a tmpfs of the
	// policy's size, so a cell that fills it gets ENOSPC, not the host.
	if err := mountTmpfs(disk, p.DiskBytes, p.DiskInodes); err != nil {
		return nil, err
	}
	cl.Add(func() error { return unmount(disk) })
	for _, sub := range []string{"upper", "work", "ctl"} {
		if err := os.Mkdir(filepath.Join(disk, sub), 0o755); err != nil {
			return nil, fmt.Errorf("create overlay dir: %w", err)
		}
	}
	// The upper root belongs to the sandbox's root user, as the lower
	// root appears to it through the idmapped mount. Nothing has been
	// exposed to a sandbox yet, so this chown cannot be raced.
	if err := os.Chown(d.UpperDir(), d.HostID(), d.HostID()); err != nil {
		return nil, fmt.Errorf("chown upper dir: %w", err)
	}
	cl.Release()
	return d, nil
}

// HostID is the host uid (and gid) that root in a sandbox on this disk is
// mapped to; files it writes are owned by it.
func (d *Disk) HostID() int { return d.h.cfg.UIDBase + d.slot*idsPerSlot }

// HostIDs is the range of host uids (and gids) a sandbox on d runs as:
// [first, end).
func (d *Disk) HostIDs() (first, end int) { return d.HostID(), d.HostID() + idsPerSlot }

// UpperDir is the host path of the overlay's upper layer: everything the
// sandbox wrote. Only ever open paths below it through a root-confined open
// (os.Root): the sandbox can plant symlinks there.
func (d *Disk) UpperDir() string { return filepath.Join(d.dir, "disk", "upper") }

// CtlDir is a host-owned directory on the disk (not inside the overlay),
// for the caller's control files: bound into a sandbox, it shows no host
// path there.
func (d *Disk) CtlDir() string { return filepath.Join(d.dir, "disk", "ctl") }

// RootDir is the host path where a running sandbox's root (the overlay) is
// mounted. The same caution as UpperDir applies.
func (d *Disk) RootDir() string { return filepath.Join(d.dir, "root") }

// Destroy unmounts the disk and removes its directory. Sandboxes on it must
// be destroyed first.
func (d *Disk) Destroy() error {
	var errs []error
	mps, _ := mountsUnder(d.dir)
	mps = append(mps, d.RootDir(), filepath.Join(d.dir, "lower"), filepath.Join(d.dir, "disk"))
	for _, mp := range mps {
		if err := unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(d.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
	}
	if d.slot >= 0 {
		d.h.freeSlot(d.slot)
		d.slot = -1
	}
	return errors.Join(errs...)
}

// initProc is a sandbox's init as the daemon, its parent, holds it: a
// libcontainer process, or a zygote's fork (an *os.Process).
type initProc interface {
	Signal(os.Signal) error
	Wait() (*os.ProcessState, error)
}

// startFunc brings up the init of container c, created for id: it returns
// the container to keep (a restore's is reloaded) and, for an init that p
// does not hold (a zygote's fork), the process.
type startFunc func(c *libcontainer.Container, p *libcontainer.Process, id string) (*libcontainer.Container, *os.Process, error)

// Create builds and starts a sandbox on disk d. On any failure everything
// done so far is undone (the disk stays).
func (d *Disk) Create(spec Spec) (*Sandbox, error) {
	return d.build(spec, nil, false, func(c *libcontainer.Container, p *libcontainer.Process, _ string) (*libcontainer.Container, *os.Process, error) {
		if err := c.Run(p); err != nil {
			return nil, nil, fmt.Errorf("start sandbox: %w", err)
		}
		return c, nil, nil
	})
}

// build is every way a sandbox comes up on d (a fresh start, a restore,
// a zygote's fork): claim the disk, mount its root, create the container,
// let start bring up the init, and watch it; start returns the container
// to keep (a restore's is reloaded). labels go to the container's
// configuration. With verify (every criu restore: hibernate, template,
// fork, snapshot, rollback; every zygote fork), the sandbox passes the
// posture check before it is returned. On failure everything done is
// undone; the disk stays.
func (d *Disk) build(spec Spec, labels []string, verify bool, start startFunc) (*Sandbox, error) {
	return d.buildEarly(spec, labels, verify, nil, start)
}

// buildEarly is build with early, if set, called with the sandbox's
// configuration before its root is mounted, to start what does not need it
// (a fork's cgroup); the wait it returns is called before the cleanup of a
// failed build removes the cgroup.
func (d *Disk) buildEarly(spec Spec, labels []string, verify bool, early func(cfg *configs.Config) (wait func()), start startFunc) (_ *Sandbox, retErr error) {
	if err := spec.Policy.Validate(); err != nil {
		return nil, err
	}
	if err := d.h.passGate(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.used {
		d.mu.Unlock()
		return nil, fmt.Errorf("disk %s already has a sandbox", d.ID)
	}
	d.used = true
	d.gen++
	id := fmt.Sprintf("%s-%d", d.ID, d.gen)
	d.mu.Unlock()
	h := d.h
	var cl cleanup.Stack
	cl.Add(func() error { d.mu.Lock(); d.used = false; d.mu.Unlock(); return nil })
	defer func() {
		if retErr != nil {
			if err := cl.Run(); err != nil {
				retErr = fmt.Errorf("%w (and cleanup: %v)", retErr, err)
			}
		}
	}()

	lower, root := filepath.Join(d.dir, "lower"), d.RootDir()
	sec, err := h.seccomp(policy.Errnos[spec.Policy.SeccompErrno])
	if err != nil {
		return nil, err
	}
	cfg := h.containerConfig(spec, id, root, d.HostID(), sec)
	cfg.Labels = append(cfg.Labels, labels...)
	cl.Add(func() error { return h.removeCgroup(id) })
	if err := limitSocketMemory(cfg.Cgroups.Path, spec.Policy.MemoryBytes); err != nil {
		return nil, err
	}
	if early != nil {
		wait := early(cfg)
		cl.Add(func() error { wait(); return h.removeCgroup(id) })
	}
	for _, p := range []string{lower, root} {
		if err := os.Mkdir(p, 0o711); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	ns, err := h.slotUserns(d.HostID())
	if err != nil {
		return nil, err
	}
	if err := mountIDMapped(h.cfg.Rootfs, lower, ns); err != nil {
		return nil, err
	}
	cl.Add(func() error { return unmount(lower) })
	if err := mountOverlay(d.dir, "lower", "disk/upper", "disk/work", root); err != nil {
		return nil, err
	}
	cl.Add(func() error { return unmount(root) })
	// overlayfs holds its own private clone of the lower layer.
	if err := unmount(lower); err != nil {
		return nil, err
	}
	cfg.Mounts = append(cfg.Mounts, innerMounts(spec, root)...)

	if err := h.prepareNetwork(spec.Policy, root); err != nil {
		return nil, err
	}
	c, err := libcontainer.Create(h.containersDir(), id, cfg)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	// Undone last to first: remove libcontainer's state directory even
	// when its Destroy gives up on a cgroup it could not remove.
	cl.Add(func() error { return os.RemoveAll(filepath.Join(h.containersDir(), id)) })
	cl.Add(c.Destroy)
	cl.Add(func() error { return h.removeCgroup(id) })

	p := &libcontainer.Process{
		Args:   spec.Args,
		Env:    spec.Env,
		Cwd:    spec.Cwd,
		Stdout: spec.Log,
		Stderr: spec.Log,
		Init:   true,
	}
	var init initProc = p
	var forked *os.Process
	if c, forked, err = start(c, p, id); err != nil {
		return nil, err
	}
	if forked != nil {
		init = forked
	}
	// From here a failure must end the init and reap it: it is our child
	// (a restored one too, criu restores it as our sibling's child), and
	// libcontainer's Destroy neither kills a running init nor waits for a
	// dead one, which would stay a zombie for the daemon's lifetime.
	var reaped *os.ProcessState
	reap := func() error {
		if reaped != nil {
			return nil
		}
		var err error
		reaped, err = reapInit(init)
		return err
	}
	cl.Add(reap)
	pid := 0
	if forked != nil {
		pid = forked.Pid
	} else if pid, err = p.Pid(); err != nil {
		return nil, fmt.Errorf("sandbox pid: %w", err)
	}
	st, err := c.State()
	if err != nil {
		return nil, fmt.Errorf("sandbox state: %w", err)
	}
	// The kernel cannot run a cell before it has said hello, which is
	// after Create returns: no cell sees the sandbox before its network.
	var gw *network.Gateway
	if spec.Policy.Network == policy.NetworkAllowlist {
		if gw, err = h.attachNetwork(spec.Policy, pid, d.slot); err != nil {
			if procfs.Exited(pid) {
				// Its namespaces went with it: say so, not ENOENT.
				if err := reap(); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("sandbox init ended (%s) before its network was attached", reaped)
			}
			return nil, fmt.Errorf("attach sandbox network: %w", err)
		}
		cl.Add(gw.Close)
	}
	s := &Sandbox{
		ID: id, disk: d, container: c, process: init, pid: pid, net: gw, policy: spec.Policy,
		cg:   cgroupFiles{v2: cgroups.IsCgroup2UnifiedMode(), paths: st.CgroupPaths, open: newOpenFiles()},
		done: make(chan struct{}),
	}
	if verify {
		// Whatever criu's images or a fork's setup did, the sandbox is
		// handed out only with a cold start's confinement (before the fix: an
		// image edited to turn seccomp off and raise capabilities). The
		// cleanup above destroys it otherwise.
		// A checkpoint taken before the kernel-count shares existed
		// carries looser limits; lowering them is always allowed, so an
		// upgrade tightens the session instead of losing it.
		if err := tightenRlimits(s, cfg); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
		if err := h.verifyPosture(s, cfg); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	go s.wait()
	cl.Release()
	return s, nil
}

// reapInit kills a sandbox's init (and with it its pid namespace) and
// waits for it, at most 10 s; it returns how the init ended.
func reapInit(p initProc) (*os.ProcessState, error) {
	_ = p.Signal(unix.SIGKILL)
	type waited struct {
		st  *os.ProcessState
		err error
	}
	ch := make(chan waited, 1)
	go func() { st, err := p.Wait(); ch <- waited{st, err} }()
	select {
	case w := <-ch:
		if w.st == nil {
			return nil, fmt.Errorf("reap sandbox init: %w", w.err)
		}
		return w.st, nil
	case <-time.After(10 * time.Second):
		return nil, errors.New("reap sandbox init: not gone 10 s after SIGKILL")
	}
}

func (s *Sandbox) wait() {
	// The init is our child until reaped: wait for its end on the poller,
	// so that Wait below returns at once instead of holding a thread.
	awaitPid(s.pid)
	st, _ := s.process.Wait()
	if st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.exit = Exit{Code: -1, Signal: ws.Signal()}
		} else {
			s.exit = Exit{Code: st.ExitCode()}
		}
	} else {
		s.exit = Exit{Code: -1, Signal: syscall.SIGKILL}
	}
	close(s.done)
}

// Pause freezes every process of the sandbox (its cgroup's freezer);
// Resume thaws them.
func (s *Sandbox) Pause() error {
	if err := s.container.Pause(); err != nil {
		// libcontainer may have frozen the cgroup before it refused the
		// state change: never leave a sandbox frozen by a failed pause.
		_ = s.container.Resume()
		return fmt.Errorf("pause sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Resume thaws a paused sandbox.
func (s *Sandbox) Resume() error {
	if err := s.container.Resume(); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Pid is the host pid of the sandbox's init.
func (s *Sandbox) Pid() int { return s.pid }

// Done is closed when the sandbox's init has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Exit is how the init ended; valid after Done is closed.
func (s *Sandbox) Exit() Exit { <-s.done; return s.exit }

// Signal sends sig to the sandbox's init (which forwards it as it likes).
func (s *Sandbox) Signal(sig os.Signal) error {
	if err := s.container.Signal(sig); err != nil {
		return fmt.Errorf("signal sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Kill ends every process in the sandbox; the sandbox stays until Destroy.
func (s *Sandbox) Kill() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	// Killing the init of a pid namespace kills every task in it.
	if err := unix.Kill(s.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Usage reads the sandbox's cgroup counters.
func (s *Sandbox) Usage() Usage { return s.cg.usage() }

// Counters is Usage without the memory figures (zero): what a cell's
// figures are measured from, read before it runs.
func (s *Sandbox) Counters() Usage { return s.cg.read(false) }

// ResetPeak restarts the memory high-water mark that Usage reports and
// says whether it could: cgroup v1 can, and v2 from Linux 6.12 on; where
// it cannot, MemoryPeak stays the sandbox's lifetime peak.
func (s *Sandbox) ResetPeak() bool { return s.cg.resetPeak() }

// Disk is the disk the sandbox runs on.
func (s *Sandbox) Disk() *Disk { return s.disk }

// Release lets go of a sandbox that keeps running for the next daemon to
// adopt: what only this process holds goes, as it would when the process
// exits: the egress gateway (the sandbox is left with loopback only until
// AttachNetwork) and the open cgroup files. The sandbox must not be used
// afterwards.
func (s *Sandbox) Release() {
	s.dial.closeAll(true)
	if s.net != nil {
		_ = s.net.Close()
		s.net = nil
	}
	s.cg.open.close()
}

// Destroy kills the sandbox and removes its container, cgroup and root
// mount; its disk stays. It is idempotent.
func (s *Sandbox) Destroy() error {
	s.destroy.Do(func() {
		var errs []error
		s.dial.closeAll(true)
		// Kill first and see the init gone: libcontainer refuses to destroy
		// a container it still sees running (an adopted one, whose init is
		// not our child, is only watched, not reaped by us).
		if err := s.Kill(); err != nil {
			errs = append(errs, err)
		}
		if s.done != nil {
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("sandbox %s: init did not exit", s.ID))
			}
		}
		if err := detachMountsIn(filepath.Join(s.disk.h.containersDir(), s.ID)); err != nil {
			errs = append(errs, err)
		}
		if s.container != nil {
			if err := s.container.Destroy(); err != nil {
				errs = append(errs, fmt.Errorf("destroy container %s: %w", s.ID, err))
			}
		}
		if s.net != nil {
			_ = s.net.Close()
		}
		s.cg.open.close()
		h := s.disk.h
		if err := h.removeCgroup(s.ID); err != nil {
			errs = append(errs, err)
		}
		for _, mp := range []string{s.disk.RootDir(), filepath.Join(s.disk.dir, "lower")} {
			if err := unmount(mp); err != nil {
				errs = append(errs, err)
			}
		}
		_ = os.RemoveAll(filepath.Join(h.containersDir(), s.ID))
		s.disk.mu.Lock()
		s.disk.used = false
		s.disk.mu.Unlock()
		s.destroyE = errors.Join(errs...)
	})
	return s.destroyE
}

// containerConfig is the libcontainer configuration for spec.
func (h *Host) containerConfig(spec Spec, id, root string, hostID int, sec *configs.Seccomp) *configs.Config {
	p := spec.Policy
	const (
		noexec = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV
	)
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: noexec},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=65536k"},
		{Source: "devpts", Destination: "/dev/pts", Device: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: noexec, Data: "mode=1777,size=" + strconv.FormatInt(p.TmpBytes, 10)},
		{Source: "mqueue", Destination: "/dev/mqueue", Device: "mqueue", Flags: noexec},
		{Source: "sysfs", Destination: "/sys", Device: "sysfs", Flags: noexec | unix.MS_RDONLY},
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777,size=" + strconv.FormatInt(p.TmpBytes, 10)},
	}
	for _, b := range spec.Binds {
		if b.Inner {
			continue // innerMounts, once the root is mounted
		}
		flags := unix.MS_BIND | unix.MS_REC | unix.MS_NOSUID | unix.MS_NODEV
		if !b.Writable {
			flags |= unix.MS_RDONLY
		}
		mounts = append(mounts, &configs.Mount{Source: b.Source, Destination: b.Dest, Device: "bind", Flags: flags})
	}
	if p.Network == policy.NetworkAllowlist {
		// The gateway's DNS server only: a cell that resolves names
		// itself still gets answers only for the allowlist.
		mounts = append(mounts, &configs.Mount{Source: network.ResolvConfPath(root), Destination: "/etc/resolv.conf", Device: "bind",
			Flags: unix.MS_BIND | unix.MS_RDONLY | noexec})
	}
	var rules []*devconfig.Rule
	for _, d := range specconv.AllowedDevices {
		rules = append(rules, &d.Rule)
	}
	pids := p.Pids
	cpuPeriod := uint64(100000)
	oomAdj := 500 // sandboxes go before the daemon and the host's services
	swap := p.MemoryBytes
	if !h.features.SwapLimit {
		swap = 0
	}
	ids := []configs.IDMap{{ContainerID: 0, HostID: int64(hostID), Size: idsPerSlot}}
	return &configs.Config{
		Rootfs:          root,
		RootPropagation: unix.MS_PRIVATE | unix.MS_REC,
		Mounts:          mounts,
		Devices:         specconv.AllowedDevices,
		Hostname:        "sandbox",
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
			{Type: configs.NEWPID}, {Type: configs.NEWUSER}, {Type: configs.NEWNET},
			// Not added by libcontainer's helpers on v1 hosts: without it
			// the sandbox would see the host's cgroup paths.
			{Type: configs.NEWCGROUP},
		},
		Networks:     []*configs.Network{{Type: "loopback"}},
		Capabilities: &configs.Capabilities{},
		Cgroups: &cgroups.Cgroup{
			Path: h.cfg.CgroupRoot + "/" + id,
			Resources: &cgroups.Resources{
				Memory:     p.MemoryBytes,
				MemorySwap: swap,
				PidsLimit:  &pids,
				CpuPeriod:  cpuPeriod,
				CpuQuota:   int64(p.CPUs * float64(cpuPeriod)),
				Devices:    rules,
			},
		},
		UIDMappings: ids,
		GIDMappings: ids,
		MaskPaths: []string{
			"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
			"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
			"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap", "/sys/kernel/debug",
			bootIDPath,
		},
		ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_NOFILE, Hard: p.OpenFiles, Soft: p.OpenFiles},
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
			{Type: unix.RLIMIT_FSIZE, Hard: uint64(p.DiskBytes), Soft: uint64(p.DiskBytes)},
			// A backstop only: the pids cgroup bites first and counts it.
			{Type: unix.RLIMIT_NPROC, Hard: uint64(2 * p.Pids), Soft: uint64(2 * p.Pids)},
			// Counts the kernel also charges to the user that created the
			// sandbox's user namespace (host root): a cell that held all
			// of one would starve the host and every other session of
			// real-time signals, POSIX message queues or locked shared
			// memory. Each sandbox gets a small share of its own; see
			// SECURITY.md, "Kernel counts".
			{Type: unix.RLIMIT_SIGPENDING, Hard: SigpendingShare, Soft: SigpendingShare},
			{Type: unix.RLIMIT_MSGQUEUE, Hard: MsgqueueShare, Soft: MsgqueueShare},
			{Type: unix.RLIMIT_MEMLOCK, Hard: MemlockShare, Soft: MemlockShare},
		},
		OomScoreAdj:     &oomAdj,
		Seccomp:         sec,
		NoNewPrivileges: true,
		NoNewKeyring:    true,
		Version:         "1.3.0",
	}
}

// limitSocketMemory caps the TCP socket buffers of the cgroup at path
// (below each hierarchy's root) on a host whose memory controller is cgroup v1. There the kernel
// charges socket buffers to a cgroup only once its
// memory.kmem.tcp.limit_in_bytes is written; unwritten, a cell's unread
// loopback connections held gigabytes outside its memory limit, up to the
// host's tcp_mem, and past that every TCP socket on the host (the
// daemon's API, other sessions' egress, the host's services) was short of
// memory. A quarter of the memory limit, at least 16 MiB; cgroup v2
// charges socket buffers to the memory limit itself.
func limitSocketMemory(path string, memoryBytes int64) error {
	if cgroups.IsCgroup2UnifiedMode() {
		return nil
	}
	hier := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(hier, "memory.limit_in_bytes")); errors.Is(err, fs.ErrNotExist) {
		return nil // memory is on the unified hierarchy of a hybrid host
	}
	// Made here, before libcontainer (which takes it as it finds it) or
	// a fork's child joins it: the limit must be in place before the
	// sandbox's first socket, which is charged only if it is.
	dir := filepath.Join(hier, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create memory cgroup %s: %w", path, err)
	}
	limit := max(memoryBytes/4, 16<<20)
	err := os.WriteFile(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
	if err != nil {
		return fmt.Errorf("limit the socket buffers of cgroup %s: %w", path, err)
	}
	return nil
}

// bootIDPath is the kernel's boot id, the host's and the same in every
// sandbox: a stable identifier of the host that a cell could read to
// track it across sessions or to find which sandboxes share a host
// (co-residence). Masked, it reads empty.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// removeCgroup kills whatever is left in the sandbox's cgroup and removes
// it, in either layout. Only cgroups under the host's own CgroupRoot are
// touched.
func (h *Host) removeCgroup(id string) error {
	var dirs []string
	if cgroups.IsCgroup2UnifiedMode() {
		dirs = []string{filepath.Join("/sys/fs/cgroup", h.cfg.CgroupRoot, id)}
	} else {
		// Every hierarchy, named ones too: libcontainer also joins
		// name=systemd (/sys/fs/cgroup/systemd), and a sandbox whose
		// container Destroy gave up (a restore that never connected) left
		// its directory there, keeping the root's from being removed.
		ents, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range ents {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), h.cfg.CgroupRoot, id))
		}
	}
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		// Tasks may be left, or still dying: killed tasks throttled by the
		// CPU quota need their turn on a CPU to exit. Kill and retry for a
		// bounded time.
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if err = cgroups.RemovePath(d); err == nil || time.Now().After(deadline) {
				break
			}
			killCgroupProcs(d)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func killCgroupProcs(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	for i := 0; i < 10; i++ {
		pids, err := cgroups.GetPids(dir)
		if err != nil || len(pids) == 0 {
			return
		}
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
