package isolate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCriu is the criu `make criu` builds. criu 3.x, as in Debian
// bookworm, fails on newer kernels.
const DefaultCriu = "/var/lib/jailcell/criu/bin/criu"

// CriuPATH returns path (a PATH value) with criu's directory first: the
// PATH under which libcontainer's exec of "criu" finds that binary.
// libcontainer has no other way to be told (runc #3316, #4722). isolate
// never sets it: the process's owner (main, TestMain) does, once, before
// any goroutine runs criu.
func CriuPATH(criu, path string) string {
	dir := filepath.Dir(criu)
	if path == "" {
		return dir
	}
	if path == dir || strings.HasPrefix(path, dir+":") {
		return path
	}
	return dir + ":" + path
}

// Bounds of criu. Dumping writes the sandbox's memory: 58 MiB took 0.3 s
// here, so 16 MiB/s is a floor two orders of magnitude down, and 60 s
// covers criu's fixed costs on a loaded host.
const (
	criuBaseBound  = 60 * time.Second
	criuBytesPerS  = 16 << 20
	criuProbeBound = 30 * time.Second
	// criuKillWait is how long a timed-out operation waits for
	// libcontainer to return once its criu was killed.
	criuKillWait = 10 * time.Second
)

// criuBound is how long one checkpoint or restore of a sandbox with
// memory bytes of memory limit may take: Config.CriuTimeout if set, else
// 60 s plus 1 s per 16 MiB.
func (h *Host) criuBound(memory int64) time.Duration {
	if h.cfg.CriuTimeout > 0 {
		return h.cfg.CriuTimeout
	}
	if memory < 0 {
		memory = 0
	}
	return criuBaseBound + time.Duration(memory/criuBytesPerS)*time.Second
}

// probeBound bounds each step of the criu probe.
func (h *Host) probeBound() time.Duration {
	if t := h.cfg.CriuTimeout; t > 0 && t < criuProbeBound {
		return t
	}
	return criuProbeBound
}

// CriuCheck says whether checkpoint and restore work on this host, or why
// not (ErrUnsupported). It probes once per Host and keeps the verdict:
// "criu" on PATH is the configured binary, `criu check` passes, and a tiny
// process is really dumped and restored, each step bounded. A host where
// dumps hang (the nested-virt hardware breakpoint bug that
// scripts/criu-patches/0002-no-hw-breakpoints.patch fixes) so answers
// "unavailable" instead of hanging every checkpoint.
func (h *Host) CriuCheck() error {
	h.criu.once.Do(func() {
		if err := criuOnPath(h.cfg.Criu); err != nil {
			h.criu.err = fmt.Errorf("%w: %w", ErrUnsupported, err)
			return
		}
		h.criu.err = probeCriu(h.cfg.Criu, h.probeBound())
	})
	return h.criu.err
}

// ProbeCriu says whether bin can checkpoint and restore on this host: the
// probe of CriuCheck without its PATH check, run afresh each call (each
// step bounded by 30 s), for callers without a Host: doctor and tests.
func ProbeCriu(bin string) error { return probeCriu(bin, criuProbeBound) }

func probeCriu(bin string, bound time.Duration) error {
	if err := criuProbe(bin, bound); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return nil
}

// Criu is the criu binary the host was configured with.
func (h *Host) Criu() string { return h.cfg.Criu }

// criuOnPath says whether "criu" on PATH, which libcontainer runs, is bin.
func criuOnPath(bin string) error {
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("criu not installed at %s (make criu)", bin)
	}
	found, err := exec.LookPath("criu")
	if err != nil {
		return fmt.Errorf("no criu on PATH: libcontainer runs criu from PATH; put %s first in PATH", filepath.Dir(bin))
	}
	if pf, err := os.Stat(found); err != nil || !os.SameFile(fi, pf) {
		return fmt.Errorf("criu on PATH is %s, not the configured %s: libcontainer runs criu from PATH; put %s first in PATH", found, bin, filepath.Dir(bin))
	}
	return nil
}

func criuProbe(bin string, bound time.Duration) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("criu not installed at %s (make criu)", bin)
	}
	release, err := takeCriuSlot(time.Now().Add(bound))
	if err != nil {
		return err
	}
	defer release()
	if out, err := runBounded(bound, bin, "check"); err != nil {
		return fmt.Errorf("%s check: %w: %s", bin, err, lastLine(out))
	}
	if err := probeDumpRestore(bin, bound); err != nil {
		return fmt.Errorf("%s could not dump and restore a test process: %w", bin, err)
	}
	return nil
}

// probeDumpRestore dumps a sleeping process of its own and restores it:
// `criu check` passes on hosts where every dump hangs.
func probeDumpRestore(bin string, bound time.Duration) error {
	dir, err := os.MkdirTemp("", "jailcell-criu-probe")
	if err != nil {
		return fmt.Errorf("create probe dir: %w", err)
	}
	defer os.RemoveAll(dir)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return fmt.Errorf("find sleep for the test process: %w", err)
	}
	// Its own session: criu dumps a whole session, never ours. It dies
	// with this process, and by itself well after the probe's bounds.
	tracee := exec.Command(sleep, "300")
	tracee.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := tracee.Start(); err != nil {
		return fmt.Errorf("start test process: %w", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			_ = tracee.Process.Kill()
			_ = tracee.Wait()
		}
	}()
	pid := strconv.Itoa(tracee.Process.Pid)
	if out, err := runBounded(bound, bin, "dump", "-t", pid, "-D", dir, "-o", "dump.log"); err != nil {
		return fmt.Errorf("dump: %w: %s%s", err, lastLine(out), criuLogTail(dir, "dump.log"))
	}
	// criu killed it after the dump: reap it, or its pid stays taken and
	// the restore, which needs the same pid, fails.
	_ = tracee.Wait()
	reaped = true
	pidFile := filepath.Join(dir, "restored.pid")
	out, err := runBounded(bound, bin, "restore", "-D", dir, "-d", "--pidfile", pidFile, "-o", "restore.log")
	// The restored process is not this process's child (criu -d
	// detaches it to init): kill it by pid, checked to be the one.
	if b, rerr := os.ReadFile(pidFile); rerr == nil {
		if rp, _ := strconv.Atoi(strings.TrimSpace(string(b))); rp > 1 {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", rp)); strings.TrimSpace(string(comm)) == "sleep" {
				_ = unix.Kill(rp, unix.SIGKILL)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("restore: %w: %s%s", err, lastLine(out), criuLogTail(dir, "restore.log"))
	}
	return nil
}

// runBounded runs a command in its own process group and kills the whole
// group when bound passes.
func runBounded(bound time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = criuKillWait
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%w: %s %s passed its bound of %v and was killed", ErrTimeout, filepath.Base(name), args[0], bound)
	}
	return out, err
}

// criuSlot lets one criu of this process run at a time. libcontainer
// starts criu with no handle its caller can reach (no context, no pid),
// so a timed-out operation finds its criu as "a child of this process
// named criu that was not there before": unambiguous only while no other
// criu of this process runs. It is process-wide because children are; it
// holds no configuration. Waiting for it counts against the operation's
// bound, so one hung criu delays another by at most that bound.
var criuSlot = make(chan struct{}, 1)

func takeCriuSlot(deadline time.Time) (release func(), err error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case criuSlot <- struct{}{}:
		return func() { <-criuSlot }, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: waited until the bound for another checkpoint or restore of this process", ErrTimeout)
	}
}

// criuOp runs op, a libcontainer checkpoint or restore, within bound (the
// wait for the criu slot included). Past it, the criu that op started is
// killed with its descendants, and criuOp answers ErrTimeout naming the
// bound once op has returned, or criuKillWait later if it never does.
func criuOp(what string, bound time.Duration, op func() error) error {
	return criuOpWait(what, bound, true, op)
}

// criuOpWait is criuOp; unless wait, it answers ErrBusy at once when another
// criu of this process holds the slot, instead of queueing for it.
func criuOpWait(what string, bound time.Duration, wait bool, op func() error) error {
	deadline := time.Now().Add(bound)
	var release func()
	if wait {
		r, err := takeCriuSlot(deadline)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		release = r
	} else {
		select {
		case criuSlot <- struct{}{}:
			release = func() { <-criuSlot }
		default:
			return fmt.Errorf("%s: %w", what, ErrBusy)
		}
	}
	before := criuChildren(nil)
	done := make(chan error, 1)
	go func() {
		err := op()
		release() // only now: the slot says which criu is whose
		done <- err
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	killed := killCriu(before)
	select {
	case err := <-done:
		return fmt.Errorf("%w: %s passed its bound of %v; criu (pids %v) was killed: %v", ErrTimeout, what, bound, killed, err)
	case <-time.After(criuKillWait):
		return fmt.Errorf("%w: %s passed its bound of %v; criu (pids %v) was killed but libcontainer has not returned: %w", ErrTimeout, what, bound, killed, errCriuStuck)
	}
}

// errCriuStuck: libcontainer still holds the container after its criu was
// killed; nothing may touch the container (its lock is held).
var errCriuStuck = errors.New("operation still running")

// criuChildren lists this process's live children named criu
// (libcontainer's "criu swrk", and a restore's root task until it is
// restored), leaving out the pids in skip. A sandbox's init is a child too
// and its cell can name it "criu" (prctl PR_SET_NAME) during an operation:
// taken for criu, it is killed with its own sandbox, the renaming cell's,
// and no other.
func criuChildren(skip map[int]bool) map[int]bool {
	self := os.Getpid()
	out := map[int]bool{}
	for pid, st := range procTable() {
		if st.ppid == self && st.comm == "criu" && st.state != "Z" && !skip[pid] {
			out[pid] = true
		}
	}
	return out
}

type procStat struct {
	comm, state string
	ppid        int
	threads     int
}

// readProcStat reads /proc/PID/stat: the command (between the first "("
// and the last ")", as it may hold either), then the fields after it.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp || rp+2 > len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[rp+2:])
	if len(f) < 18 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	threads, _ := strconv.Atoi(f[17]) // field 20, num_threads
	return procStat{comm: s[lp+1 : rp], state: f[0], ppid: ppid, threads: threads}, true
}

// procTable reads every process's name, state and parent.
func procTable() map[int]procStat {
	out := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			out[pid] = st
		}
	}
	return out
}

// killCriu kills the criu children that were not in before, and all their
// descendants: stopped first, top down, so none forks away while the tree
// is read, then killed.
func killCriu(before map[int]bool) []int {
	roots := criuChildren(before)
	tree := map[int]bool{}
	for pass := 0; pass < 3; pass++ {
		grew := false
		table := procTable()
		for pid := range roots {
			if !tree[pid] {
				tree[pid], grew = true, true
				_ = unix.Kill(pid, unix.SIGSTOP)
			}
		}
		for changed := true; changed; {
			changed = false
			for pid, st := range table {
				if tree[st.ppid] && !tree[pid] {
					tree[pid], changed, grew = true, true, true
					_ = unix.Kill(pid, unix.SIGSTOP)
				}
			}
		}
		if !grew {
			break
		}
	}
	var pids []int
	for pid := range tree {
		_ = unix.Kill(pid, unix.SIGKILL)
		pids = append(pids, pid)
	}
	return pids
}

// afterDumpTimeout decides what a timed-out dump leaves: criu froze the
// sandbox's cgroup and seized its tasks; its death released the tasks
// (ptrace detaches a dead tracer's tracees), the cgroup is thawed here,
// and the sandbox goes on running. If its init died on the way, that is
// said, loudly: the sandbox's state is lost.
func (s *Sandbox) afterDumpTimeout(err error) error {
	if errors.Is(err, errCriuStuck) {
		return err
	}
	_ = s.container.Resume() // ErrNotPaused unless criu left it frozen
	if !alive(s.pid) {
		return fmt.Errorf("%w; sandbox %s did not survive it: its processes and their state are lost", err, s.ID)
	}
	return fmt.Errorf("%w; sandbox %s goes on running", err, s.ID)
}

// alive says whether pid runs (not a zombie).
func alive(pid int) bool {
	st, ok := readProcStat(pid)
	return ok && st.state != "Z"
}

// CheckpointIdentity names what a checkpoint taken on this host depends on
// besides the policy and the sandbox's own program: the rootfs (its
// resolved path, the root directory's inode and change time, and the
// manifest.json beside it if any) and the criu binary (path, size, change
// time). A checkpoint whose identity differs from the host's must not be
// restored here: a kernel restored onto another rootfs maps files that
// changed under it.
func (h *Host) CheckpointIdentity() string {
	var b strings.Builder
	root, err := filepath.EvalSymlinks(h.cfg.Rootfs)
	if err != nil {
		root = h.cfg.Rootfs
	}
	fmt.Fprintf(&b, "rootfs=%s\n", root)
	if st, err := os.Stat(root); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(&b, "rootfs-ino=%d ctime=%d.%d\n", sys.Ino, sys.Ctim.Sec, sys.Ctim.Nsec)
		}
	}
	if f, err := os.Open(filepath.Join(filepath.Dir(root), "manifest.json")); err == nil {
		h := sha256.New()
		_, _ = io.Copy(h, io.LimitReader(f, 16<<20))
		f.Close()
		fmt.Fprintf(&b, "manifest=%x\n", h.Sum(nil))
	}
	if bin, err := exec.LookPath(h.cfg.Criu); err == nil {
		if st, err := os.Stat(bin); err == nil {
			fmt.Fprintf(&b, "criu=%s size=%d mtime=%d\n", bin, st.Size(), st.ModTime().UnixNano())
		}
	}
	return b.String()
}
