package session

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
)

// ctlMount is where a session's control directory appears in its sandbox.
const ctlMount = "/run/jailcell"

// wheelhouseMount is where the configured wheelhouse appears.
const wheelhouseMount = "/opt/jailcell/wheelhouse"

// sandboxEnv is the whole environment of a kernel: nothing of the host's.
var sandboxEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"MPLBACKEND=Agg",
	"MPLCONFIGDIR=/root/.config/matplotlib",
	"PYTHONUNBUFFERED=1",
	"PYTHONDONTWRITEBYTECODE=1",
	"PIP_NO_INDEX=1",
	"PIP_FIND_LINKS=" + wheelhouseMount,
}

// threadEnvVars size the thread pools of the native libraries a cell may
// load: OpenBLAS (numpy, scipy), OpenMP (scikit-learn, scipy) and numexpr
// (pandas.eval). Left alone each starts one thread per host core, which
// under a CFS quota of fewer cores only adds throttling and counts every
// thread against the pids limit.
var threadEnvVars = []string{"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS"}

// kernelEnv is sandboxEnv with the thread pools sized to the policy's CPU
// bandwidth, rounded up (1 for the default policy's one core).
func kernelEnv(p policy.Policy) []string {
	n := max(1, int(math.Ceil(p.CPUs)))
	env := append([]string(nil), sandboxEnv...)
	for _, v := range threadEnvVars {
		env = append(env, v+"="+strconv.Itoa(n))
	}
	return env
}

// kernel is one running sandbox with its Python kernel connected.
type kernel struct {
	log      *logTail // the kernel's own stdio (nil for an adopted one)
	sb       *isolate.Sandbox
	conn     *runner.Conn
	listener *net.UnixListener
	// envSynced: the session's envs were given to this kernel (syncEnv).
	envSynced bool
	// started is when the host started (or restored) this kernel.
	started time.Time
}

// close destroys the sandbox and the connection.
func (k *kernel) close() error {
	var errs []error
	if k.conn != nil {
		_ = k.conn.Close()
	}
	if k.listener != nil {
		_ = k.listener.Close()
	}
	if k.sb != nil {
		errs = append(errs, k.sb.Destroy())
	}
	return errors.Join(errs...)
}

// startKernel builds a sandbox on disk and waits for its kernel's hello.
// ctl is the session's control directory on the host.
// startGate, set only by tests, runs before every kernel start and may
// hold it, so that a test can see what waits for a start and what does not.
var startGate func(ctx context.Context) error

func (m *warmStarts) startKernel(ctx context.Context, disk *isolate.Disk, ctl string, p policy.Policy) (*kernel, error) {
	if startGate != nil {
		if err := startGate(ctx); err != nil {
			return nil, fmt.Errorf("%w: start kernel: %v", ErrUnavailable, err)
		}
	}
	start := time.Now()
	k, err := m.launchKernel(ctx, ctl, p, m.cfg.StartTimeout, func(spec isolate.Spec) (*isolate.Sandbox, error) {
		sb, err := disk.Create(spec)
		if err != nil && !errors.Is(err, isolate.ErrUnsupported) {
			err = fmt.Errorf("build sandbox: %w", err)
		}
		return sb, err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m.metrics.StartSeconds.Observe(time.Since(start).Seconds())
	return k, nil
}

// kernelUIDs is the host uids sb's kernel connects as: its disk's slot.
func kernelUIDs(sb *isolate.Sandbox) runner.UIDs {
	first, end := sb.Disk().HostIDs()
	return runner.UIDs{First: first, End: end}
}

// launchKernel brings a kernel's sandbox up with build (a fresh start, a
// restore from a checkpoint) and waits, at most timeout, for the kernel to
// connect to ctl, the session's control directory on the host.
func (m *warmStarts) launchKernel(ctx context.Context, ctl string, p policy.Policy, timeout time.Duration, build func(isolate.Spec) (*isolate.Sandbox, error)) (_ *kernel, retErr error) {
	// The start bound begins when a sandbox can be built: a pool member
	// queued behind serve's rootfs check used to time out the moment the
	// check passed (minutes under emulation).
	if err := m.host.WaitReady(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := runner.Listen(ctl)
	if err != nil {
		return nil, fmt.Errorf("listen for kernel: %w", err)
	}
	k := &kernel{listener: l, started: time.Now()}
	defer func() {
		if retErr != nil {
			_ = k.close()
		}
	}()
	// The kernel's own stdout/stderr (startup failures, kernel faults; a
	// cell's output goes over the socket) come back through a pipe into a
	// bounded tail. A pipe, not a host file: a checkpoint can carry it, and
	// the sandbox never holds a descriptor of a host path.
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("kernel log pipe: %w", err)
	}
	k.log = newLogTail(logR, 4096)
	defer logW.Close()
	spec := m.kernelSpec(ctl, p)
	spec.Log = logW
	sb, err := build(spec)
	if err != nil {
		// A kernel that started and died says why on its log.
		_ = logW.Close()
		if tail := k.log.String(); tail != "" {
			return nil, fmt.Errorf("%w; kernel log: %s", err, tail)
		}
		return nil, err
	}
	k.sb = sb
	// A kernel that dies before it connects would leave Accept waiting.
	go func() {
		select {
		case <-sb.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := runner.Accept(ctx, l, runner.DefaultMaxFrame, kernelUIDs(sb))
	if err != nil {
		select {
		case <-sb.Done():
			return nil, fmt.Errorf("kernel %s before it was ready: %s", sb.Exit(), k.log.String())
		default:
		}
		return nil, fmt.Errorf("kernel did not connect: %v", err)
	}
	k.conn = conn
	return k, nil
}

// logTail keeps the last bytes a sandbox wrote to its stdio: untrusted
// text for error messages, so it is bounded and made printable.
type logTail struct {
	mu   sync.Mutex
	buf  []byte
	max  int
	done chan struct{}
}

func newLogTail(r *os.File, max int) *logTail {
	t := &logTail{max: max, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer r.Close()
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			if n > 0 {
				t.mu.Lock()
				t.buf = append(t.buf, b[:n]...)
				if len(t.buf) > t.max {
					t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
				}
				t.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return t
}

// String returns the tail once the writer is gone (or after a short
// wait), trimmed and valid UTF-8.
func (t *logTail) String() string {
	if t == nil {
		return ""
	}
	select {
	case <-t.done:
	case <-time.After(time.Second):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(strings.TrimSpace(string(t.buf)), "?")
}

// cellOutcome is what runCell saw of one cell: the kernel's (forgeable)
// result and what the host did to it. judge (verdict.go) turns it, with the
// cgroup's counters, into the cell's verdict.
type cellOutcome struct {
	res      *runner.Result
	err      error // connection error: the kernel is gone
	timedOut bool
	canceled bool // the request was cancelled mid-cell
	killed   bool // the host killed the sandbox
}

// notStarted reports whether the cell's code certainly did not run: the
// link to k failed before the kernel's "started" frame (runner.ErrNotStarted),
// and k is a kernel that sends that frame. A timeout or cancellation keeps
// its own verdict.
func (o cellOutcome) notStarted(k *kernel) bool {
	return o.err != nil && errors.Is(o.err, runner.ErrNotStarted) && k.conn.Hello().Acks &&
		!o.timedOut && !o.canceled && !o.killed
}

// runCell sends code to the kernel and enforces the wall timeout: at the
// deadline the kernel gets SIGINT (KeyboardInterrupt in the cell); if the
// cell has not stopped after the policy's grace period, the sandbox is
// killed. Verdicts come from the host clock, never from the kernel.
//
// A cancelled ctx (the client went away, the daemon is draining past its
// grace) stops the cell the same way.
func runCell(ctx context.Context, k *kernel, id, code string, cc *CellContext, timeout, grace time.Duration, maxOutput int64, onOutput func(string, string), onDisplay func(DisplayItem), onClear func(wait bool)) cellOutcome {
	rreq := runner.ExecRequest{ID: id, Code: code, MaxOutput: maxOutput, OnClearOutput: onClear}
	if cc != nil {
		rreq.Context, rreq.Cwd, rreq.Reset = cc.ID, cc.Cwd, cc.Reset
	}
	if onDisplay != nil {
		rreq.OnDisplay = func(d runner.DisplayItem) {
			onDisplay(DisplayItem{MIME: d.MIME, Data: d.Data, Bundle: d.Bundle, Pager: d.Pager, Chart: d.Chart, Table: d.Table})
		}
	}
	ch := make(chan cellOutcome, 1)
	go func() {
		r, err := k.conn.Exec(rreq, onOutput)
		ch <- cellOutcome{res: r, err: err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	canceled := false
	select {
	case o := <-ch:
		return o
	case <-timer.C:
	case <-ctx.Done():
		canceled = true
	}
	// A cell that ended as its caller left (a client that gave up reading
	// its output) is not signalled: a SIGINT the kernel handles after the
	// cell ended could stop the session's next cell instead.
	select {
	case o := <-ch:
		return o
	default:
	}
	_ = k.sb.Signal(os.Interrupt)
	graceT := time.NewTimer(grace)
	defer graceT.Stop()
	select {
	case o := <-ch:
		o.timedOut, o.canceled = !canceled, canceled
		return o
	case <-graceT.C:
	}
	_ = k.sb.Kill()
	o := <-ch
	o.timedOut, o.canceled, o.killed = !canceled, canceled, true
	return o
}

// networkUsage is the wire form of a cell's gateway counters.
func networkUsage(u isolate.NetUsage) *NetworkUsage {
	n := &NetworkUsage{SentBytes: u.SentBytes, ReceivedBytes: u.ReceivedBytes, RefusedCount: u.RefusedCount}
	for _, r := range u.Refused {
		n.Refused = append(n.Refused, RefusedAttempt{Addr: r.Addr, Port: r.Port, Name: r.Name, Reason: r.Reason, Count: r.Count})
	}
	return n
}

// restoreKernel restores the sandbox from images on s's disk and waits for
// its kernel to reconnect.
func (m *warmStarts) restoreKernel(ctx context.Context, s *Session, images string) (*kernel, error) {
	return m.launchKernel(ctx, s.ctlDir(), s.policy, m.cfg.StartTimeout, func(spec isolate.Spec) (*isolate.Sandbox, error) {
		return s.disk.Restore(images, spec)
	})
}

// restoreKernelIfIdle is restoreKernel, or isolate.ErrBusy at once if
// another checkpoint or restore is running (template.go imports instead).
func (m *warmStarts) restoreKernelIfIdle(ctx context.Context, s *Session, images string) (*kernel, error) {
	return m.launchKernel(ctx, s.ctlDir(), s.policy, m.cfg.StartTimeout, func(spec isolate.Spec) (*isolate.Sandbox, error) {
		return s.disk.RestoreIfIdle(images, spec)
	})
}

// kernelSpec is the sandbox spec startKernel builds, for a restore.
func (m *warmStarts) kernelSpec(ctl string, p policy.Policy) isolate.Spec {
	binds := []isolate.Bind{{Source: ctl, Dest: ctlMount}, {Source: Workdir, Dest: HomeDir, Writable: true, Inner: true}}
	if m.cfg.Wheelhouse != "" {
		binds = append(binds, isolate.Bind{Source: m.cfg.Wheelhouse, Dest: wheelhouseMount})
	}
	return isolate.Spec{Policy: p, Args: runner.Argv(ctlMount, m.cfg.Preload), Env: kernelEnv(p), Cwd: Workdir, Binds: binds}
}
