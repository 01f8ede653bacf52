package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	"OPENBLAS_NUM_THREADS=1",
}

// kernel is one running sandbox with its Python kernel connected.
type kernel struct {
	sb       *isolate.Sandbox
	conn     *runner.Conn
	listener *net.UnixListener
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
func (m *Manager) startKernel(ctx context.Context, disk *isolate.Disk, ctl string, p policy.Policy) (_ *kernel, retErr error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	start := time.Now()
	l, err := runner.Listen(ctl)
	if err != nil {
		return nil, fmt.Errorf("listen for kernel: %w", err)
	}
	k := &kernel{listener: l}
	defer func() {
		if retErr != nil {
			_ = k.close()
		}
	}()
	logPath := filepath.Join(filepath.Dir(ctl), "kernel.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	defer log.Close()
	binds := []isolate.Bind{{Source: ctl, Dest: ctlMount}}
	if m.cfg.Wheelhouse != "" {
		binds = append(binds, isolate.Bind{Source: m.cfg.Wheelhouse, Dest: wheelhouseMount})
	}
	sb, err := disk.Create(isolate.Spec{
		Policy: p,
		Args:   runner.Argv(ctlMount, m.cfg.Preload),
		Env:    sandboxEnv,
		Cwd:    Workdir,
		Binds:  binds,
		Log:    log,
	})
	if err != nil {
		if errors.Is(err, isolate.ErrUnsupported) {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("%w: build sandbox: %v", ErrUnavailable, err)
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
	conn, err := runner.Accept(ctx, l, runner.DefaultMaxFrame)
	if err != nil {
		select {
		case <-sb.Done():
			return nil, fmt.Errorf("%w: kernel %s before it was ready: %s", ErrUnavailable, sb.Exit(), tail(logPath, 2048))
		default:
		}
		return nil, fmt.Errorf("%w: kernel did not start: %v", ErrUnavailable, err)
	}
	k.conn = conn
	m.metrics.StartSeconds.Observe(time.Since(start).Seconds())
	return k, nil
}

// tail returns the last n bytes of a file the sandbox wrote: untrusted text
// for an error message, so it is bounded and made printable.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "?")
}

// cellOutcome is what the host decided about one cell.
type cellOutcome struct {
	res      *runner.Result
	err      error // connection error: the kernel is gone
	timedOut bool
	canceled bool // the request was cancelled mid-cell
	killed   bool // the host killed the sandbox
}

// runCell sends code to the kernel and enforces the wall timeout: at the
// deadline the kernel gets SIGINT (KeyboardInterrupt in the cell); if the
// cell has not stopped after the policy's grace period, the sandbox is
// killed. Verdicts come from the host clock, never from the kernel.
//
// A cancelled ctx (the client went away, the daemon is draining past its
// grace) stops the cell the same way.
func runCell(ctx context.Context, k *kernel, id, code string, timeout, grace time.Duration, maxOutput int64, onOutput func(string, string)) cellOutcome {
	ch := make(chan cellOutcome, 1)
	go func() {
		r, err := k.conn.Exec(runner.ExecRequest{ID: id, Code: code, MaxOutput: maxOutput}, onOutput)
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
	n := &NetworkUsage{SentBytes: u.SentBytes, ReceivedBytes: u.ReceivedBytes}
	for _, r := range u.Refused {
		n.Refused = append(n.Refused, RefusedAttempt{Addr: r.Addr, Port: r.Port, Name: r.Name, Reason: r.Reason, Count: r.Count})
	}
	return n
}
