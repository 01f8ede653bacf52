package isolate

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/cleanup"
	"github.com/jailcell/jailcell/isolate/internal/helper"
	"github.com/jailcell/jailcell/isolate/seccomp"
	"github.com/jailcell/jailcell/isolate/zygote"
	"github.com/jailcell/jailcell/policy"
)

// Zygotes (the design of SOCK, Oakes et al., USENIX ATC 2018,
// and Android's zygote): one confined Python process per policy that has
// imported the preload once, and that a new sandbox is forked from
// instead of started and made to import it. The fork is cloned straight
// into fresh user, mount, pid, net, ipc and uts namespaces with
// CLONE_PARENT, so the daemon is its parent as it is a cold start's init's.
// The daemon gives it its own uid slot (its id maps), puts it in the
// sandbox's own cgroup, and hands it the trees it mounts: the sandbox's
// overlay root, its binds and the host's device nodes, each a detached
// mount (open_tree) that names no host path inside. The child mounts its
// own proc, sysfs, devpts, mqueue and tmpfs, pivots, drops every
// capability and loads the seccomp program a cold start loads (read back
// from a reference load, so the bytes are the same). Before the sandbox
// is handed out, the host checks its posture against a cold start's of the
// same configuration (checkPosture: namespaces, id maps, mounts, cgroup,
// capabilities, no_new_privs, seccomp programs of every thread), as it
// checks a restored one. It is then a libcontainer container like any
// other (a state file written for it), so pause, signal, checkpoint,
// adoption and destroy take the paths they take for a cold start.
//
// The zygote itself: a libcontainer sandbox in its own mount, net, ipc,
// uts and cgroup namespaces, run as an unprivileged host uid of a slot of
// its own with no capabilities and no_new_privs, over the read-only rootfs.
// It shares the host's pid namespace on purpose: a fork's pid namespace is
// then a child of the host's, as a cold start's is, and a zygote that dies
// takes none of its sandboxes with it. It has no seccomp filter: a filter
// of its own would be inherited by every fork and stacked under the
// cold start's, and the zygote runs only this package's zygote.py and the
// preload from the read-only rootfs, never a cell.

// ZygoteSpec describes one zygote.
type ZygoteSpec struct {
	// Policy is the policy of every sandbox forked from it: its limits,
	// seccomp program and rlimits are the zygote's children's.
	Policy policy.Policy
	// Command is what every fork runs, as `Command... ARGS...` (a fork's
	// Spec.Args must start with it): an interpreter in the rootfs, its
	// options, and a script path under Dir or -c and a program with its
	// arguments. The zygote runs the interpreter with the same options.
	Command []string
	// Dir is where the zygote sees, read-only, a directory that Prepare
	// fills (the sandbox's control directory's place: its kernel).
	Dir     string
	Prepare func(dir string) error
	// Warm, if set, is "module:function" the zygote calls once, after the
	// preload, with WarmArgs: the program's own start-up that needs no
	// thread and no descriptor.
	Warm     string
	WarmArgs []any
	// Preload is imported once by the zygote (with Dir first on its path).
	Preload []string
	// Env is the zygote's environment (a fork gets its Spec's).
	Env []string
	// StartTimeout bounds the zygote's start and preload.
	StartTimeout time.Duration
}

// Zygote is one running zygote.
type Zygote struct {
	h         *Host
	spec      ZygoteSpec
	id        string
	slot      int
	dir       string
	container *libcontainer.Container
	process   *libcontainer.Process
	ctl       *os.File // our end of the zygote's SOCK_SEQPACKET socket
	mapper    *helper.LineHelper
	log       *lockedBuffer // its stdout and stderr, the first 8 KiB

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // one fork request at a time on ctl
	broken error      // set once a request failed in a way that leaves ctl unusable
	done   chan struct{}
}

// zygoteForkTimeout bounds one fork request's answer (a fork takes
// milliseconds) and a forked child's setup.
const zygoteForkTimeout = 10 * time.Second

// StartZygote builds and starts a zygote for spec and waits until it has
// imported its preload.
func (h *Host) StartZygote(spec ZygoteSpec) (_ *Zygote, retErr error) {
	p := spec.Policy
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Network != policy.NetworkNone {
		return nil, fmt.Errorf("%w: zygote for network %q (forks have loopback only)", ErrUnsupported, p.Network)
	}
	if err := h.passGate(); err != nil {
		return nil, err
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
	sum := sha256.Sum256(fmt.Appendf(nil, "%d-%d", slot, time.Now().UnixNano()))
	id := "zygote_" + hex.EncodeToString(sum[:6]) + "-1"
	z := &Zygote{h: h, spec: spec, id: id, slot: slot, log: &lockedBuffer{b: helper.BoundedBuffer{Max: 8192}}, done: make(chan struct{})}
	z.dir = filepath.Join(h.cfg.StateDir, "zygotes", id)
	if err := os.MkdirAll(z.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create zygote dir: %w", err)
	}
	cl.Add(func() error { return os.RemoveAll(z.dir) })
	if err := os.WriteFile(filepath.Join(z.dir, zygote.ScriptName), zygote.Script, 0o644); err != nil {
		return nil, fmt.Errorf("write zygote: %w", err)
	}
	if spec.Prepare != nil {
		if err := spec.Prepare(z.dir); err != nil {
			return nil, err
		}
	}
	interp := zygote.Interpreter(spec.Command)
	if len(interp) == 0 || len(interp) == len(spec.Command) {
		return nil, fmt.Errorf("%w: zygote command %q: want an interpreter, its options and a program", ErrUnsupported, spec.Command)
	}
	sec, err := h.seccomp(policy.Errnos[p.SeccompErrno])
	if err != nil {
		return nil, err
	}
	prog, err := h.coldProgram(sec)
	if err != nil {
		return nil, err
	}
	conf, err := json.Marshal(map[string]any{
		"seccomp": base64.StdEncoding.EncodeToString(prog),
		"command": spec.Command[len(interp):],
		"preload": spec.Preload,
		"warm":    map[string]any{"call": spec.Warm, "args": spec.WarmArgs},
	})
	if err != nil {
		return nil, err
	}

	cfg := h.zygoteConfig(spec, id)
	c, err := libcontainer.Create(h.containersDir(), id, cfg)
	if err != nil {
		return nil, fmt.Errorf("create zygote container: %w", err)
	}
	cl.Add(func() error { return os.RemoveAll(filepath.Join(h.containersDir(), id)) })
	cl.Add(c.Destroy)
	cl.Add(func() error { return h.removeCgroup(id) })
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("zygote socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote-child")
	defer theirs.Close()
	cl.Add(ours.Close)
	proc := &libcontainer.Process{
		Args: append(append([]string(nil), interp...), filepath.Join(spec.Dir, zygote.ScriptName)),
		Env:  append(append([]string(nil), spec.Env...), "JAILCELL_ZYGOTE="+string(conf)),
		Cwd:  "/",
		// Its slot's uid 1 (host UIDBase+slot*65536+1): not the root of
		// any namespace (slot 0's first id is its namespace's root).
		UID:        slot*idsPerSlot + 1,
		GID:        slot*idsPerSlot + 1,
		Stdout:     z.log,
		Stderr:     z.log,
		ExtraFiles: []*os.File{theirs},
		Init:       true,
	}
	if err := c.Run(proc); err != nil {
		return nil, fmt.Errorf("start zygote: %w", err)
	}
	cl.Add(func() error { _, err := reapInit(proc); return err })
	theirs.Close()
	z.container, z.process, z.ctl = c, proc, ours
	timeout := spec.StartTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	msg, err := zygote.Recv(z.ctl, timeout)
	if err != nil {
		return nil, fmt.Errorf("zygote did not start: %w; its log: %s", err, z.logTail())
	}
	var ready struct{ Ready bool }
	if json.Unmarshal(msg, &ready) != nil || !ready.Ready {
		return nil, fmt.Errorf("zygote said %q at start, want ready", zygote.Truncate(msg, 200))
	}
	zpid, err := proc.Pid()
	if err != nil {
		return nil, err
	}
	if z.mapper, err = zygote.StartMapper(zpid); err != nil {
		return nil, err
	}
	go func() {
		_, _ = proc.Wait()
		close(z.done)
	}()
	cl.Release()
	return z, nil
}

// zygoteConfig is the zygote's own libcontainer configuration: the cold
// start's, but for what a zygote must have otherwise.
//
//   - Its user namespace maps every slot's ids (the forks' namespaces
//     nest in it, each mapped to its own slot), is owned by host root as a
//     cold start's is (criu cannot read the rlimits of a process whose
//     user namespace an unprivileged uid created), and the zygote runs in
//     it as uid 1 of a slot of its own, no namespace's root: no capability
//     anywhere.
//   - No pid namespace: a fork's is then a child of the host's, as a cold
//     start's is, and a zygote that dies takes none of its forks with it.
//     Its /proc is the host's, bound: a fork can mount its own proc only
//     where a fully visible one is mounted, and a uid without capabilities
//     reads little there.
//   - No masked or read-only paths (the same reason) and no seccomp filter
//     (a fork would inherit it under its own, and the zygote runs only
//     zygote.py and the preload, never a cell).
func (h *Host) zygoteConfig(spec ZygoteSpec, id string) *configs.Config {
	cfg := h.containerConfig(Spec{Policy: spec.Policy}, id, h.cfg.Rootfs, h.cfg.UIDBase, nil)
	cfg.Readonlyfs = true
	ids := []configs.IDMap{{ContainerID: 0, HostID: int64(h.cfg.UIDBase), Size: int64(h.cfg.Slots) * idsPerSlot}}
	cfg.UIDMappings, cfg.GIDMappings = ids, ids
	cfg.MaskPaths, cfg.ReadonlyPaths = nil, nil
	cfg.Seccomp = nil
	cfg.Hostname = "zygote"
	var ns configs.Namespaces
	for _, n := range cfg.Namespaces {
		if n.Type != configs.NEWPID {
			ns = append(ns, n)
		}
	}
	cfg.Namespaces = ns
	for _, m := range cfg.Mounts {
		if m.Destination == "/proc" {
			*m = configs.Mount{Source: "/proc", Destination: "/proc", Device: "bind",
				Flags: unix.MS_BIND | unix.MS_REC | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC}
		}
	}
	// Process limits sized for all its forks: each fork's user namespace
	// nests in the zygote's uid, and the kernel counts every task of every
	// fork against the RLIMIT_NPROC the zygote had when it forked (here the
	// daemon's own: in its user namespace the zygote's init cannot raise a
	// hard limit past it), and every fork in flight (forked, not yet moved
	// to its own cgroup) against the zygote's pids cgroup (one per slot
	// the host has, and the policy's own). A fork sets the policy's
	// rlimits on itself. The same holds for the counts the kernel charges
	// per user namespace (pending signals, message queue bytes, locked
	// memory): every fork's charge is also the zygote's uid's, limited by
	// what the zygote had when it forked, so a zygote with one session's
	// share would let one fork starve all its siblings.
	for i, r := range cfg.Rlimits {
		switch r.Type {
		case unix.RLIMIT_NPROC, unix.RLIMIT_SIGPENDING, unix.RLIMIT_MSGQUEUE, unix.RLIMIT_MEMLOCK:
			var own unix.Rlimit
			if err := unix.Getrlimit(r.Type, &own); err != nil {
				own = unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
			}
			cfg.Rlimits[i].Hard, cfg.Rlimits[i].Soft = own.Max, own.Max
		}
	}
	pids := int64(h.cfg.Slots) + spec.Policy.Pids
	cfg.Cgroups.Resources.PidsLimit = &pids
	// Memory sized for its forks too: the kernel charges what a fork
	// copies of its parent (page tables, memory maps, the task itself) to
	// the memory cgroup of the task that forked, the zygote's, and it stays
	// there for the fork's life, after the fork moved to its own cgroup.
	// At the policy's memory alone the zygote was OOM-killed after about
	// 780 live forks (1.3 MiB each with the default preload), and the
	// creates in flight took the slow path.
	mem := spec.Policy.MemoryBytes + int64(h.cfg.Slots)*ZygoteForkCharge
	cfg.Cgroups.Resources.Memory = mem
	if cfg.Cgroups.Resources.MemorySwap != 0 {
		cfg.Cgroups.Resources.MemorySwap = mem
	}
	cfg.Mounts = append(cfg.Mounts, &configs.Mount{Source: h.zygoteDir(id), Destination: spec.Dir, Device: "bind",
		Flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
	return cfg
}

// ZygoteForkCharge is the memory a zygote's cgroup holds for each of its
// live forks beyond the policy's own, rounded up from 1.3 MiB measured
// with the default preload.
const ZygoteForkCharge = 2 << 20

func (h *Host) zygoteDir(id string) string { return filepath.Join(h.cfg.StateDir, "zygotes", id) }

// coldProgram is the seccomp program of cfg, computed once per
// configuration.
func (h *Host) coldProgram(cfg *configs.Seccomp) ([]byte, error) {
	return seccompCached(h, h.seccompProgs, cfg, seccomp.ColdProgram, "read a cold start's seccomp program")
}

// Kill ends the zygote's process (not its forks) and nothing else; Close
// still has to be called. For tests of a zygote that dies.
func (z *Zygote) Kill() error { return z.process.Signal(unix.SIGKILL) }

// Done is closed when the zygote has exited.
func (z *Zygote) Done() <-chan struct{} { return z.done }

// Policy is the policy the zygote forks sandboxes of.
func (z *Zygote) Policy() policy.Policy { return z.spec.Policy }

// Close ends the zygote. Sandboxes forked from it live on. It is
// idempotent.
func (z *Zygote) Close() error {
	z.closeOnce.Do(func() { z.closeErr = z.close() })
	return z.closeErr
}

func (z *Zygote) close() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.broken == nil {
		z.broken = errors.New("zygote closed")
	}
	_ = z.ctl.Close()
	z.mapper.Close()
	var errs []error
	_ = z.process.Signal(unix.SIGKILL)
	select {
	case <-z.done:
	case <-time.After(10 * time.Second):
		errs = append(errs, errors.New("zygote not gone 10 s after SIGKILL"))
	}
	if err := z.container.Destroy(); err != nil {
		errs = append(errs, fmt.Errorf("destroy zygote container: %w", err))
	}
	if err := z.h.removeCgroup(z.id); err != nil {
		errs = append(errs, err)
	}
	_ = os.RemoveAll(filepath.Join(z.h.containersDir(), z.id))
	_ = os.RemoveAll(z.dir)
	z.h.freeSlot(z.slot)
	return errors.Join(errs...)
}

func (z *Zygote) logTail() string {
	z.log.mu.Lock()
	defer z.log.mu.Unlock()
	return strings.TrimSpace(z.log.b.String())
}

// lockedBuffer is a helper.BoundedBuffer that two writers share (libcontainer
// copies stdout and stderr on goroutines of their own).
type lockedBuffer struct {
	mu sync.Mutex
	b  helper.BoundedBuffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
