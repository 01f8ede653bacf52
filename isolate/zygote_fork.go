package isolate

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/isolate/zygote"
)

// Fork builds a sandbox on disk d forked from z. spec must ask for what
// z was made for (its policy, `Python Script ...`); ErrUnsupported
// otherwise, and the caller starts it cold. Like Create, on failure
// everything done is undone (the disk stays).
func (d *Disk) Fork(z *Zygote, spec Spec) (*Sandbox, error) {
	if spec.Policy != z.spec.Policy {
		return nil, fmt.Errorf("%w: fork of a zygote for another policy", ErrUnsupported)
	}
	n := len(z.spec.Command)
	if len(spec.Args) < n || !slices.Equal(spec.Args[:n], z.spec.Command) {
		return nil, fmt.Errorf("%w: fork of a zygote to run %q", ErrUnsupported, spec.Args)
	}
	var log *os.File
	switch w := spec.Log.(type) {
	case nil:
	case *os.File:
		log = w
	default:
		return nil, fmt.Errorf("%w: fork with a log that is not a file", ErrUnsupported)
	}
	// The sandbox's cgroup is made and given its limits while its root is
	// mounted and the zygote forks (on a v1 host, a dozen hierarchies: the
	// largest part of a fork); the child joins it once it exists.
	var cg chan madeCgroup
	var waitCgroup func() madeCgroup
	early := func(cfg *configs.Config) func() {
		cg = make(chan madeCgroup, 1)
		go func() {
			m, err := manager.New(cfg.Cgroups)
			if err == nil {
				if err = m.Apply(-1); err == nil {
					err = m.Set(cfg.Cgroups.Resources)
				}
			}
			cg <- madeCgroup{m, err}
		}()
		return func() { waitCgroup() }
	}
	waitCgroup = func() madeCgroup {
		r := <-cg
		cg <- r
		return r
	}
	return d.buildEarly(spec, nil, true, early, func(c *libcontainer.Container, _ *libcontainer.Process, id string) (*libcontainer.Container, *os.Process, error) {
		return z.fork(d, c, id, spec, log, waitCgroup)
	})
}

// madeCgroup is a fork's cgroup, made (or not) before the fork joins it.
type madeCgroup struct {
	m   cgroups.Manager
	err error
}

// fork asks z for a child that becomes container c's init, and sees it
// through its setup. The posture check follows in build.
func (z *Zygote) fork(d *Disk, c *libcontainer.Container, id string, spec Spec, log *os.File, waitCgroup func() madeCgroup) (_ *libcontainer.Container, _ *os.Process, retErr error) {
	cfg := c.Config()
	plan, trees, err := zygote.PlanOf(&cfg, spec.Cwd, spec.Env, spec.Args[len(z.spec.Command):])
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("fork socket: %w", err)
	}
	sess := os.NewFile(uintptr(sp[0]), "fork")
	defer sess.Close()
	theirs := sp[1]
	defer func() {
		if theirs >= 0 {
			unix.Close(theirs)
		}
	}()
	logfd := -1
	if log != nil {
		logfd = int(log.Fd())
	} else {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, nil, err
		}
		defer null.Close()
		logfd = int(null.Fd())
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, err
	}
	req, err := json.Marshal(map[string]any{"op": "fork", "nonce": hex.EncodeToString(nonce), "plan": plan})
	if err != nil {
		return nil, nil, err
	}
	pid, err := z.request(req, hex.EncodeToString(nonce), append([]int{theirs, logfd}, trees...))
	if err != nil {
		return nil, nil, err
	}
	unix.Close(theirs)
	theirs = -1
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, nil, fmt.Errorf("find forked init %d: %w", pid, err)
	}
	// The pid is only killed on failure once it is known to be this
	// fork: a zygote (or code that reached its socket) answering with a
	// host service's pid, or another session's init, had the daemon kill
	// and reap it.
	zpid, err := z.process.Pid()
	if err != nil {
		return nil, nil, fmt.Errorf("the zygote's pid: %w", err)
	}
	if err := isForkOf(zpid, pid, proc); err != nil {
		z.mu.Lock()
		z.broken = err
		z.mu.Unlock()
		return nil, nil, err
	}
	defer func() {
		if retErr != nil {
			_, _ = reapInit(proc)
		}
	}()
	if err := zygote.MapIDs(z.mapper, pid, d.HostID()-z.h.cfg.UIDBase, zygoteForkTimeout); err != nil {
		return nil, nil, fmt.Errorf("map the ids of forked init: %w", err)
	}
	mc := waitCgroup()
	if mc.err != nil {
		return nil, nil, fmt.Errorf("cgroup of forked sandbox: %w", mc.err)
	}
	m := mc.m
	if err := m.Apply(pid); err != nil {
		return nil, nil, fmt.Errorf("join cgroup of forked sandbox: %w", err)
	}
	if _, err := sess.Write([]byte("G")); err != nil {
		return nil, nil, fmt.Errorf("start forked init: %w", err)
	}
	msg, err := zygote.Recv(sess, zygoteForkTimeout)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("forked init's setup: %w", err)
	case len(msg) > 0 && msg[0] == 'E':
		return nil, nil, fmt.Errorf("forked init's setup failed: %s", zygote.Truncate(msg[1:], 500))
	case string(msg) != "R":
		return nil, nil, fmt.Errorf("forked init said %q, want ready", zygote.Truncate(msg, 100))
	}
	if err := writeForkState(z.h.containersDir(), id, pid, &cfg, m.GetPaths()); err != nil {
		return nil, nil, err
	}
	lc, err := libcontainer.Load(z.h.containersDir(), id)
	if err != nil {
		return nil, nil, fmt.Errorf("load forked sandbox %s: %w", id, err)
	}
	return lc, proc, nil
}

// isForkOf checks that pid, pinned by proc's pidfd, is a child just
// forked by the zygote zpid: the daemon's child (CLONE_PARENT), in a user
// namespace whose parent is the zygote's, with no id maps yet (another
// session's init has its maps). A stranger's pid gets no maps, no cgroup
// and no kill.
func isForkOf(zpid, pid int, proc *os.Process) error {
	bad := func(why string) error {
		return fmt.Errorf("zygote answered pid %d, which is not its fork: %s", pid, why)
	}
	if st, ok := procfs.ReadStat(pid); !ok || st.PPid != os.Getpid() {
		return bad("not this daemon's child")
	}
	var zns unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(zpid)+"/ns/user", &zns); err != nil {
		return bad("the zygote's user namespace: " + err.Error())
	}
	nsf, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
	if err != nil {
		return bad("its user namespace: " + err.Error())
	}
	defer nsf.Close()
	parent, err := unix.IoctlRetInt(int(nsf.Fd()), unix.NS_GET_PARENT)
	if err != nil {
		return bad("the parent of its user namespace: " + err.Error())
	}
	var pns unix.Stat_t
	err = unix.Fstat(parent, &pns)
	unix.Close(parent)
	if err != nil || pns.Dev != zns.Dev || pns.Ino != zns.Ino {
		return bad("its user namespace is not a child of the zygote's")
	}
	m, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/uid_map")
	if err != nil || len(bytes.TrimSpace(m)) != 0 {
		return bad("its ids are mapped already")
	}
	// All of the above was read by pid: it still names the process the
	// pidfd holds only if that one is alive.
	if err := proc.Signal(syscall.Signal(0)); err != nil {
		return bad("it ended: " + err.Error())
	}
	return nil
}

// request sends one fork request with fds and returns the pid answered
// to it: an answer carrying another nonce (one queued by something else
// that reached the socket, or a late answer to an earlier request) breaks
// the zygote.
func (z *Zygote) request(req []byte, nonce string, fds []int) (int, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.broken != nil {
		return 0, fmt.Errorf("%w: zygote: %v", ErrUnsupported, z.broken)
	}
	if err := unix.Sendmsg(int(z.ctl.Fd()), req, unix.UnixRights(fds...), nil, 0); err != nil {
		z.broken = err
		return 0, fmt.Errorf("send fork request: %w", err)
	}
	msg, err := zygote.Recv(z.ctl, zygoteForkTimeout)
	if err != nil {
		// The answer may still come: the next request would read it.
		z.broken = err
		return 0, fmt.Errorf("fork request: %w; zygote log: %s", err, z.logTail())
	}
	var rep struct {
		Pid   int    `json:"pid"`
		Error string `json:"error"`
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal(msg, &rep); err != nil || (rep.Pid <= 0 && rep.Error == "") || rep.Nonce != nonce {
		z.broken = fmt.Errorf("answer %q", zygote.Truncate(msg, 100))
		return 0, fmt.Errorf("zygote answered %q", zygote.Truncate(msg, 100))
	}
	if rep.Error != "" {
		return 0, fmt.Errorf("zygote: %s", rep.Error)
	}
	return rep.Pid, nil
}

// writeForkState makes the forked init a libcontainer container: the
// state file a start writes, so Load, and with it pause, signal,
// checkpoint, adoption and destroy, see it as they see a cold start's.
func writeForkState(root, id string, pid int, cfg *configs.Config, paths map[string]string) error {
	start, err := procStartTime(pid)
	if err != nil {
		return err
	}
	st := libcontainer.State{
		BaseState: libcontainer.BaseState{
			ID: id, InitProcessPid: pid, InitProcessStartTime: start, Created: time.Now().UTC(), Config: *cfg,
		},
		CgroupPaths:    paths,
		NamespacePaths: map[configs.NamespaceType]string{},
	}
	for _, ns := range cfg.Namespaces {
		st.NamespacePaths[ns.Type] = ns.GetPath(pid)
	}
	for fd := 0; fd < 3; fd++ {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		if err != nil {
			return fmt.Errorf("stdio of forked init: %w", err)
		}
		st.ExternalDescriptors = append(st.ExternalDescriptors, l)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state of forked sandbox: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// procStartTime is pid's start time in clock ticks since boot (field 22
// of /proc/PID/stat), as libcontainer records it.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}
