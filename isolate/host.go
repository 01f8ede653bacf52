package isolate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	// libcontainer's C constructor that sets up namespaces in "init".
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	// Device rule support for the cgroup managers.
	_ "github.com/opencontainers/cgroups/devices"

	"github.com/jailcell/jailcell/isolate/seccomp"
)

// Init must be the first call in main of any binary that builds sandboxes.
// When the process was started as a sandbox init (argument "init", started
// by libcontainer through /proc/self/exe), it becomes the sandbox's init and
// never returns. Started as the posture check's seccomp filter helper (a
// hidden argument, see isolate/seccomp/filter.go), it runs that and exits.
// Otherwise it returns at once.
func Init() {
	helperMain()
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
		// Init only returns on failure, after reporting it to the parent.
		os.Exit(1)
	}
}

// Config is where and how a Host builds sandboxes.
type Config struct {
	// StateDir holds libcontainer state and per-sandbox directories.
	StateDir string
	// Rootfs is the read-only tree every sandbox's root is an overlay of.
	Rootfs string
	// CgroupRoot is the absolute cgroup path under which each sandbox
	// gets its own cgroup. Default "/jailcell".
	CgroupRoot string
	// UIDBase is the first host uid (and gid) of the ranges sandboxes are
	// mapped to; sandbox n of the host gets UIDBase+n*65536 onwards, so no
	// two live sandboxes share a host uid. Default 0x40000000.
	UIDBase int
	// Slots is how many sandboxes may exist at once. Default DefaultSlots.
	Slots int
	// Criu is the criu binary for checkpoint and restore. Default
	// DefaultCriu. libcontainer (runc v1.5) runs "criu" from PATH and has
	// no option naming it (runc #3316, #4722), so the process's PATH must
	// resolve "criu" to this very file: CriuCheck refuses checkpoints
	// otherwise, rather than run another criu. isolate never changes the
	// environment; the process's owner sets PATH (CriuPATH) once, before
	// anything runs.
	Criu string
	// CriuTimeout bounds each checkpoint and restore; past it the criu
	// the operation started is killed and the operation answers
	// ErrTimeout. 0 means criuBound: 60 s plus 1 s per 16 MiB of the
	// sandbox's memory limit.
	CriuTimeout time.Duration
}

const idsPerSlot = 65536

// Host builds sandboxes. It is safe for concurrent use.
type Host struct {
	cfg      Config
	features Features

	mu       sync.Mutex
	slots    []bool
	seccomps map[uint]*configs.Seccomp
	// seccompRefs: a cold start's filter programs per seccomp
	// configuration (sha256 of its JSON), for the posture check.
	seccompRefs map[[32]byte]seccomp.FilterSum
	// seccompProgs: a cold start's filter program per seccomp
	// configuration, for zygote forks (coldProgram).
	seccompProgs map[[32]byte][]byte
	userns       map[int]*os.File // host id of a slot -> its user namespace
	egressCfg    Egress

	gate atomic.Pointer[gate]

	// criu is the checkpoint/restore state: the probe's cached verdict
	// and the one-at-a-time slot that lets a timed-out operation find
	// the criu it started (criu.Op).
	criu struct {
		once sync.Once
		err  error
		slot chan struct{}
	}
}

// gate is a check every sandbox build waits for (Host.Gate).
type gate struct {
	done chan struct{}
	err  error
}

// Gate runs check once, in the background, and makes every sandbox build
// wait for its result; if it fails, every build after it fails with its
// error (ErrUnsupported: fail closed). serve verifies the rootfs's
// content hash this way while it already listens.
func (h *Host) Gate(check func() error) {
	g := &gate{done: make(chan struct{})}
	h.gate.Store(g)
	go func() {
		g.err = check()
		close(g.done)
	}()
}

// ErrNotReady: the host's gate (Gate) has not answered yet.
var ErrNotReady = errors.New("host checks still running")

// Ready reports, without waiting, whether sandboxes can be built: nil
// once the gate (if any) passed, ErrNotReady while it runs, its error if
// it failed.
func (h *Host) Ready() error {
	g := h.gate.Load()
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
		return g.err
	default:
		return ErrNotReady
	}
}

// passGate waits for the gate, if any.
func (h *Host) passGate() error {
	return h.WaitReady(context.Background())
}

// WaitReady waits until sandboxes can be built (the gate, if any, passed)
// or ctx ends. A caller that bounds a sandbox's start waits here first, so
// that the gate's wait (a rootfs hash: minutes on an emulated host) is not
// taken from that bound.
func (h *Host) WaitReady(ctx context.Context) error {
	g := h.gate.Load()
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return fmt.Errorf("wait for the host's checks: %w", ctx.Err())
	}
	if g.err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, g.err)
	}
	return nil
}

// The defaults of the Config fields that are also configuration keys or
// derived by the service (cmd/jailcell quotes these rather than repeat them).
const (
	// DefaultCgroupRoot is CgroupRoot's default.
	DefaultCgroupRoot = "/jailcell"
	// DefaultUIDBase is UIDBase's default (sandbox.uid_base).
	DefaultUIDBase = 0x40000000
)

// defaults fills the zero fields of c that have a default.
func (c *Config) defaults() {
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.UIDBase == 0 {
		c.UIDBase = DefaultUIDBase
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.Criu == "" {
		c.Criu = DefaultCriu
	}
}

// NewHost checks cfg, the host's features (failing closed on anything a
// sandbox needs) and prepares the state directories.
func NewHost(cfg Config) (*Host, error) {
	cfg.defaults()
	if !filepath.IsAbs(cfg.Criu) {
		return nil, fmt.Errorf("criu %q must be an absolute path", cfg.Criu)
	}
	if cfg.CriuTimeout < 0 {
		return nil, fmt.Errorf("criu timeout %v must not be negative", cfg.CriuTimeout)
	}
	if !filepath.IsAbs(cfg.CgroupRoot) {
		// A relative cgroup path lands under the caller's own cgroup.
		return nil, fmt.Errorf("cgroup root %q must be absolute", cfg.CgroupRoot)
	}
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("state dir %q must be absolute", cfg.StateDir)
	}
	if fi, err := os.Stat(filepath.Join(cfg.Rootfs, "usr/bin/python3")); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("%w: rootfs %s has no usr/bin/python3", ErrUnsupported, cfg.Rootfs)
	}
	f := Probe()
	if !f.OK() {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, errors.Join(stringErrs(f.Problems)...))
	}
	// Every mode this package asks for is the one a sandbox needs (search
	// permission for its uid on the directories down to its root, readable
	// bind sources); a umask would narrow them, and every sandbox init
	// then failed with EACCES: systemd's UMask=0077 (jailcell.service's),
	// a root shell with umask 077. Files meant to be private are made
	// 0600 or 0700 explicitly, so the umask guards nothing here.
	unix.Umask(0o022)
	// The sandbox's user namespace must traverse these to reach its root
	// and bind sources: search permission only, nothing readable.
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "sandboxes"), filepath.Join(cfg.StateDir, "containers")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("create state dir %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("chmod state dir %s: %w", d, err)
		}
	}
	logrus.SetLevel(logrus.WarnLevel)
	h := &Host{cfg: cfg, features: f, slots: make([]bool, cfg.Slots), seccomps: map[uint]*configs.Seccomp{}, seccompRefs: map[[32]byte]seccomp.FilterSum{}, seccompProgs: map[[32]byte][]byte{}, userns: map[int]*os.File{}}
	h.criu.slot = make(chan struct{}, 1)
	return h, nil
}

func stringErrs(s []Problem) []error {
	out := make([]error, len(s))
	for i, v := range s {
		out[i] = errors.New(v.Text)
	}
	return out
}

// Features returns what the host was found to give.
func (h *Host) Features() Features { return h.features }

func (h *Host) containersDir() string       { return filepath.Join(h.cfg.StateDir, "containers") }
func (h *Host) sandboxDir(id string) string { return filepath.Join(h.cfg.StateDir, "sandboxes", id) }

func (h *Host) takeSlot() (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, used := range h.slots {
		if !used {
			h.slots[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d in use", ErrExhausted, len(h.slots))
}

func (h *Host) freeSlot(i int) {
	h.mu.Lock()
	h.slots[i] = false
	h.mu.Unlock()
}

// seccomp returns the filter for errno, built once per errno.
func (h *Host) seccomp(errno uint) (*configs.Seccomp, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seccomps[errno]; ok {
		return s, nil
	}
	s, err := seccomp.Config(errno)
	if err != nil {
		return nil, err
	}
	h.seccomps[errno] = s
	return s, nil
}

// slotUserns returns the user namespace that maps a sandbox's ids 0..65535 to
// hostID onwards, made once per slot and kept until Close: spawning the
// process that makes one was the largest cost of a cold start outside
// libcontainer, and a slot's mapping never changes. The handle is only
// ever used for the idmapped mount of the rootfs (mountIDMapped).
func (h *Host) slotUserns(hostID int) (*os.File, error) {
	h.mu.Lock()
	f := h.userns[hostID]
	h.mu.Unlock()
	if f != nil {
		return f, nil
	}
	f, err := userns(hostID, idsPerSlot)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.userns[hostID]; old != nil {
		f.Close()
		return old, nil
	}
	h.userns[hostID] = f
	return f, nil
}

// Reconcile removes what a previous run left behind: every container,
// cgroup, mount and sandbox directory of this host's state whose disk id
// keep does not name. It returns the disk ids it removed.
func (h *Host) Reconcile(keep func(diskID string) bool) ([]string, error) {
	kept := func(id string) bool { return keep != nil && keep(id) }
	var errs []error
	removed := map[string]bool{}
	containers, _ := os.ReadDir(h.containersDir())
	for _, e := range containers {
		disk := diskOf(e.Name())
		if kept(disk) {
			continue
		}
		if err := detachMountsIn(filepath.Join(h.containersDir(), e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("remove leftover sandbox %s: %w", e.Name(), err))
		}
		if c, err := libcontainer.Load(h.containersDir(), e.Name()); err == nil {
			if err := destroyLeftover(c); err != nil {
				errs = append(errs, fmt.Errorf("remove leftover sandbox %s: %w", e.Name(), err))
			}
		}
		_ = os.RemoveAll(filepath.Join(h.containersDir(), e.Name()))
		removed[disk] = true
	}
	for _, id := range h.cgroupIDs() {
		if !kept(diskOf(id)) {
			if err := h.removeCgroup(id); err != nil {
				errs = append(errs, err)
			}
			removed[diskOf(id)] = true
		}
	}
	// A zygote's directory (its kernel files) goes with its container: a
	// live zygote has one, a previous daemon's was destroyed above.
	zygotes, _ := os.ReadDir(filepath.Join(h.cfg.StateDir, "zygotes"))
	for _, e := range zygotes {
		if _, err := os.Stat(filepath.Join(h.containersDir(), e.Name())); err != nil {
			_ = os.RemoveAll(h.zygoteDir(e.Name()))
		}
	}
	disks, _ := os.ReadDir(filepath.Join(h.cfg.StateDir, "sandboxes"))
	for _, e := range disks {
		if kept(e.Name()) {
			continue
		}
		d := &Disk{ID: e.Name(), h: h, dir: h.sandboxDir(e.Name()), slot: -1}
		if err := d.Destroy(); err != nil {
			errs = append(errs, err)
		}
		removed[e.Name()] = true
	}
	var out []string
	for id := range removed {
		out = append(out, id)
	}
	return out, errors.Join(errs...)
}

// destroyLeftover destroys a previous daemon's container, running or not.
// libcontainer refuses to destroy one it sees running, and its init is not
// our child to reap: it is killed (with the whole pid namespace; a frozen
// one is thawed by Signal) and watched until gone, bounded.
func destroyLeftover(c *libcontainer.Container) error {
	if st, err := c.Status(); err == nil && st != libcontainer.Stopped {
		if err := c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
			return fmt.Errorf("kill: %w", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("init not gone 10 s after SIGKILL")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c.Destroy()
}

// diskOf maps a container id ("<disk>-<generation>") to its disk id.
func diskOf(container string) string {
	if i := strings.LastIndexByte(container, '-'); i > 0 {
		return container[:i]
	}
	return container
}

// cgroupIDs lists the sandbox cgroups under CgroupRoot.
func (h *Host) cgroupIDs() []string {
	base := filepath.Join("/sys/fs/cgroup/memory", h.cfg.CgroupRoot)
	if cgroups.IsCgroup2UnifiedMode() {
		base = filepath.Join("/sys/fs/cgroup", h.cfg.CgroupRoot)
	}
	ents, _ := os.ReadDir(base)
	var ids []string
	for _, e := range ents {
		if e.IsDir() && validID(strings.ReplaceAll(e.Name(), "-", "_")) {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// Close removes the host's cgroup root directories once no sandbox is left
// under them (after every sandbox was destroyed); a root still in use stays.
func (h *Host) Close() error {
	h.mu.Lock()
	for id, f := range h.userns {
		f.Close()
		delete(h.userns, id)
	}
	h.mu.Unlock()
	var dirs []string
	if cgroups.IsCgroup2UnifiedMode() {
		dirs = []string{filepath.Join("/sys/fs/cgroup", h.cfg.CgroupRoot)}
	} else {
		ents, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range ents {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), h.cfg.CgroupRoot))
		}
	}
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove cgroup root %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
