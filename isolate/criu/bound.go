package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/errdefs"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
)

// DefaultBin is the criu `make criu` builds. criu 3.x, as in Debian
// bookworm, fails on newer kernels.
const DefaultBin = "/var/lib/jailcell/criu/bin/criu"

// PATH returns path (a PATH value) with criu's directory first: the
// PATH under which libcontainer's exec of "criu" finds that binary.
// libcontainer has no other way to be told (runc #3316, #4722). isolate
// never sets it: the process's owner (main, TestMain) does, once, before
// any goroutine runs criu.
func PATH(criu, path string) string {
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
	BaseBound  = 60 * time.Second
	BytesPerS  = 16 << 20
	ProbeBound = 30 * time.Second
	// KillWait is how long a timed-out operation waits for
	// libcontainer to return once its criu was killed.
	KillWait = 10 * time.Second
)

func Probe(bin string, bound time.Duration) error {
	if err := probe(bin, bound); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrUnsupported, err)
	}
	return nil
}

// OnPath says whether "criu" on PATH, which libcontainer runs, is bin.
func OnPath(bin string) error {
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

func probe(bin string, bound time.Duration) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("criu not installed at %s (make criu)", bin)
	}
	release, err := takeSlot(time.Now().Add(bound))
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
	// The test process's Pdeathsig fires when the OS thread that started it
	// ends, not the process: a thread the runtime lets go of (one a
	// goroutine locked and left, as a network namespace entry does) killed
	// it mid-dump, and the host was judged unable to hibernate ("Task is
	// still running ... No such process", seen in CI). This goroutine keeps
	// its thread until the probe is over.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
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
		return fmt.Errorf("dump: %w: %s%s", err, lastLine(out), LogTail(dir, "dump.log"))
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
		return fmt.Errorf("restore: %w: %s%s", err, lastLine(out), LogTail(dir, "restore.log"))
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
	cmd.WaitDelay = KillWait
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%w: %s %s passed its bound of %v and was killed", errdefs.ErrTimeout, filepath.Base(name), args[0], bound)
	}
	return out, err
}

// slot lets one criu of this process run at a time. libcontainer
// starts criu with no handle its caller can reach (no context, no pid),
// so a timed-out operation finds its criu as "a child of this process
// named criu that was not there before": unambiguous only while no other
// criu of this process runs. It is process-wide because children are; it
// holds no configuration. Waiting for it counts against the operation's
// bound, so one hung criu delays another by at most that bound.
var slot = make(chan struct{}, 1)

// SlotIdle takes a cheap look at the slot: false while another checkpoint
// or restore of this process holds it. Op and OpWait take it for real.
func SlotIdle() bool {
	select {
	case slot <- struct{}{}:
		<-slot
		return true
	default:
		return false
	}
}

func takeSlot(deadline time.Time) (release func(), err error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: waited until the bound for another checkpoint or restore of this process", errdefs.ErrTimeout)
	}
}

// Op runs op, a libcontainer checkpoint or restore, within bound (the
// wait for the criu slot included). Past it, the criu that op started is
// killed with its descendants, and Op answers ErrTimeout naming the
// bound once op has returned, or KillWait later if it never does.
func Op(what string, bound time.Duration, op func() error) error {
	return OpWait(what, bound, true, op)
}

// OpWait is Op; unless wait, it answers ErrBusy at once when another
// criu of this process holds the slot, instead of queueing for it.
func OpWait(what string, bound time.Duration, wait bool, op func() error) error {
	deadline := time.Now().Add(bound)
	var release func()
	if wait {
		r, err := takeSlot(deadline)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		release = r
	} else {
		select {
		case slot <- struct{}{}:
			release = func() { <-slot }
		default:
			return fmt.Errorf("%s: %w", what, errdefs.ErrBusy)
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
		return fmt.Errorf("%w: %s passed its bound of %v; criu (pids %v) was killed: %v", errdefs.ErrTimeout, what, bound, killed, err)
	case <-time.After(KillWait):
		return fmt.Errorf("%w: %s passed its bound of %v; criu (pids %v) was killed but libcontainer has not returned: %w", errdefs.ErrTimeout, what, bound, killed, ErrStuck)
	}
}

// ErrStuck: libcontainer still holds the container after its criu was
// killed; nothing may touch the container (its lock is held).
var ErrStuck = errors.New("operation still running")

// criuChildren lists this process's live children named criu
// (libcontainer's "criu swrk", and a restore's root task until it is
// restored), leaving out the pids in skip. A sandbox's init is a child too
// and its cell can name it "criu" (prctl PR_SET_NAME) during an operation:
// taken for criu, it is killed with its own sandbox, the renaming cell's,
// and no other.
func criuChildren(skip map[int]bool) map[int]bool {
	self := os.Getpid()
	out := map[int]bool{}
	for pid, st := range procfs.Table() {
		if st.PPid == self && st.Comm == "criu" && st.State != "Z" && !skip[pid] {
			out[pid] = true
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
		table := procfs.Table()
		for pid := range roots {
			if !tree[pid] {
				tree[pid], grew = true, true
				_ = unix.Kill(pid, unix.SIGSTOP)
			}
		}
		for changed := true; changed; {
			changed = false
			for pid, st := range table {
				if tree[st.PPid] && !tree[pid] {
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
