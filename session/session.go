package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
)

// Session is one live kernel with its workspace.
type Session struct {
	id      string
	owner   int
	policy  policy.Policy
	persist string
	dir     string // <state>/sessions/<id>
	disk    *isolate.Disk
	created time.Time

	// run serialises cells, uploads to a starting kernel, and close.
	run sync.Mutex

	mu       sync.Mutex
	k        *kernel // nil while (re)starting or after close
	kErr     error   // why the last start failed
	ttl      time.Duration
	maxLife  time.Duration // 0: the configured MaxLifetime; set at create
	lastUsed time.Time
	cells    int
	busy     bool
	closed   bool
	stamps   fileStamps // the workspace after the last cell
	// hibernated: the kernel is checkpointed in dir (hibernate.go) and
	// expires after hibTTL idle instead of ttl.
	hibernated bool
	hibTTL     time.Duration
	info       Info
}

func (s *Session) ctlDir() string { return s.disk.CtlDir() }

// expiry is when the session ends if unused.
func (s *Session) expiry(maxLife time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hibernated {
		return s.lastUsed.Add(s.hibTTL)
	}
	idle := s.lastUsed.Add(s.ttl)
	if life := s.created.Add(maxLife); life.Before(idle) {
		return life
	}
	return idle
}

// workspace opens the workspace for reading: the upper layer holds every
// file the session wrote (the rootfs's own /work is empty).
func (s *Session) workspace() (*os.Root, error) {
	r, err := openWorkspace(s.disk.UpperDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return r, err
}

// writableWorkspace opens the workspace for writing: through the mounted
// overlay while a kernel runs (never under a mounted overlay's feet),
// through the upper layer otherwise.
func (s *Session) writableWorkspace() (*os.Root, error) {
	s.mu.Lock()
	running := s.k != nil
	s.mu.Unlock()
	if running {
		return openWorkspace(s.disk.RootDir())
	}
	upper := s.disk.UpperDir()
	if err := mkWorkdir(upper, s.disk.HostID()); err != nil {
		return nil, err
	}
	return openWorkspace(upper)
}

// cellTimeout resolves a request's timeout (0: the default) for a cell of
// s. Above the configured policy's ceiling it is clamped, as documented;
// above a ceiling the session's own create lowered (limits.timeout_s) it
// is refused: that limit was asked for, so a later request may not widen
// it, and silently cutting its time would hide that.
func (m *Manager) cellTimeout(s *Session, d time.Duration) (time.Duration, error) {
	if base, ok := m.cfg.Policies[s.policy.Name]; ok && s.policy.MaxTimeout < base.MaxTimeout {
		// policyFor sets max_timeout to timeout_s (at least 1 s).
		if max := s.policy.Timeout; d > max {
			return 0, fmt.Errorf("%w: timeout_s = %g, allowed up to %g (the limits.timeout_s this session was created with)", ErrBadRequest, d.Seconds(), max.Seconds())
		}
	}
	t, err := s.policy.CellTimeout(d.Seconds())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return t, nil
}

// exec runs one cell. The caller holds s.run.
func (m *Manager) exec(ctx context.Context, s *Session, req ExecRequest) (*Result, error) {
	timeout := req.Timeout
	if !req.setup {
		var err error
		if timeout, err = m.cellTimeout(s, req.Timeout); err != nil {
			return nil, err
		}
	}
	if req.Snapshot {
		if err := m.snapshot(ctx, s); err != nil {
			return nil, fmt.Errorf("snapshot before the cell (the cell did not run): %w", err)
		}
	}
	woke, err := m.wake(ctx, s)
	if err != nil {
		return nil, err
	}
	k, err := m.ensureKernel(ctx, s)
	if err != nil {
		return nil, err
	}
	// A kernel that died since its last cell (a timer or thread an earlier
	// cell left behind, an OOM kill between cells) is replaced before this
	// cell is sent: the cell runs, and its result says the state was lost.
	// Never a verdict for code that did not run.
	died := ""
	select {
	case <-k.sb.Done():
		died = "the kernel " + k.sb.Exit().String() + sinceLast(s, 0)
		if k, err = m.replaceKernel(ctx, s, k); err != nil {
			return nil, fmt.Errorf("%s and a new one could not be started (the cell did not run): %w", died, err)
		}
	default:
	}
	if len(req.Files) > 0 {
		if err := m.placeFiles(s, req.Files); err != nil {
			return nil, err
		}
		// Files handed in are not the cell's doing.
		m.rescan(s)
	}
	s.mu.Lock()
	s.cells++
	// Unique for the kernel's whole life, across daemon restarts: a
	// result orphaned by a restart still arrives under its old id.
	cellID := m.nonce + "-" + strconv.Itoa(s.cells)
	before := s.stamps
	s.mu.Unlock()

	var u0 isolate.Usage
	var n0 isolate.NetUsage
	var hasNet bool
	var o cellOutcome
	var start time.Time
	for try := 1; ; try++ {
		u0 = k.sb.Counters()
		n0, hasNet, _ = k.sb.NetUsage()
		k.sb.ResetPeak()
		start = time.Now()
		o = runCell(ctx, k, cellID, req.Code, timeout, s.policy.InterruptGrace, s.policy.OutputBytes, req.OnOutput)
		if !o.notStarted(k) {
			break
		}
		// The kernel went after the check above but before it took the
		// cell (its "started" frame never came): the code did not run, so
		// it runs in a new kernel. Once: a kernel that cannot take a cell
		// twice in a row is a fault to report, not to loop on.
		why := "the kernel's connection to the host broke" + sinceLast(s, 1)
		select {
		case <-k.sb.Done():
			why = "the kernel " + k.sb.Exit().String() + sinceLast(s, 1)
		case <-time.After(100 * time.Millisecond):
		}
		if try > 1 {
			m.dropKernel(s, k)
			return nil, fmt.Errorf("%w: %s, twice in a row; the cell did not run", ErrUnavailable, why)
		}
		died = why
		var err error
		if k, err = m.replaceKernel(ctx, s, k); err != nil {
			return nil, fmt.Errorf("%s and a new one could not be started (the cell did not run): %w", died, err)
		}
	}
	wall := time.Since(start)
	if o.killed && o.err != nil && errors.Is(o.err, runner.ErrNotStarted) && k.conn.Hello().Acks {
		// Alive but it never took the cell (a thread of an earlier cell
		// holding the kernel up), so it was killed at the deadline: no
		// verdict for code that did not run.
		m.dropKernel(s, k)
		msg := fmt.Sprintf("the kernel did not take the cell within its %s timeout, so it was killed; the cell did not run", timeout)
		if _, err := m.ensureKernel(context.WithoutCancel(ctx), s); err != nil {
			return nil, fmt.Errorf("%w: %s, and a fresh kernel could not be started: %v", ErrUnavailable, msg, err)
		}
		return nil, fmt.Errorf("%w: %s; a fresh kernel was started (variables are gone, files remain)", ErrUnavailable, msg)
	}

	lost := o.err != nil || o.killed
	if lost {
		// Wait for the init's exit so the cgroup counters are final.
		select {
		case <-k.sb.Done():
		case <-time.After(5 * time.Second):
			_ = k.sb.Kill()
			<-k.sb.Done()
		}
	}
	u1 := k.sb.Usage()
	var netUse *NetworkUsage
	if hasNet {
		if n1, _, err := k.sb.NetUsage(); err == nil {
			netUse = networkUsage(n1.Since(n0))
		} else {
			m.log().Warn("network usage", "session", s.id, "err", err)
		}
	}
	res := &Result{State: StateKept}
	if o.res != nil {
		r := o.res
		res.Status = r.Status
		res.Stdout, res.Stderr = r.Stdout, r.Stderr
		res.StdoutTruncated, res.StderrTruncated = r.StdoutTruncated, r.StderrTruncated
		res.Value = r.Value
		for _, d := range r.Display {
			res.Display = append(res.Display, DisplayItem{MIME: d.MIME, Data: d.Data, Bundle: d.Bundle})
		}
		if r.Error != nil {
			ce := &CellError{Type: r.Error.Type, Message: r.Error.Message, Traceback: r.Error.Traceback}
			for _, f := range r.Error.Frames {
				ce.Frames = append(ce.Frames, Frame{File: f.File, Line: f.Line, Name: f.Name, Code: f.Code})
			}
			res.Error = ce
		}
	}
	oom := u1.OOMKills > u0.OOMKills
	switch {
	case o.timedOut:
		res.Status = StatusTimeout
		res.Limits = append(res.Limits, "time")
		msg := fmt.Sprintf("cell exceeded its %s timeout", timeout)
		if res.Error == nil || res.Error.Type != "KeyboardInterrupt" {
			res.Error = &CellError{Type: "Timeout", Message: msg}
		} else {
			res.Error.Message = msg + " and was interrupted"
		}
	case o.canceled:
		res.Status = StatusKilled
		res.Error = &CellError{Type: "Cancelled", Message: "the request was cancelled while the cell ran; the cell was interrupted"}
	case oom:
		res.Status = StatusOOM
		res.Error = &CellError{Type: "OutOfMemory", Message: fmt.Sprintf("a process of the cell was killed for exceeding the %d-byte memory limit", s.policy.MemoryBytes)}
	case lost:
		res.Status = StatusKilled
		res.Error = &CellError{Type: "KernelDied", Message: "the Python kernel " + k.sb.Exit().String()}
	}
	if oom {
		res.Limits = append(res.Limits, "memory")
	}
	if u1.PidsDenied > u0.PidsDenied {
		res.Limits = append(res.Limits, "pids")
	}
	if res.StdoutTruncated || res.StderrTruncated {
		res.Limits = append(res.Limits, "output")
	}
	if diskFull(s.disk.UpperDir()) {
		res.Limits = append(res.Limits, "disk")
	}
	if res.Status == "" {
		res.Status = StatusKilled
	}
	res.Usage = Usage{
		WallMS:          wall.Milliseconds(),
		CPUMS:           (u1.CPU - u0.CPU).Milliseconds(),
		PeakMemoryBytes: u1.MemoryPeak,
		Network:         netUse,
	}
	if netUse != nil {
		m.log().Info("cell network", "session", s.id, "cell", cellID, "sent_bytes", netUse.SentBytes,
			"received_bytes", netUse.ReceivedBytes, "refused", netUse.Refused)
	}

	if woke != "" && !lost {
		res.State, res.StateReason = StateLost, woke
	}
	if died != "" && !lost {
		res.State, res.StateReason = StateLost, died+"; a fresh kernel was started and ran this cell (variables are gone, files remain)"
	}
	if lost {
		res.State = StateLost
		switch {
		case o.killed && o.canceled:
			res.StateReason = "the request was cancelled and the cell did not stop after its interrupt, so the sandbox was killed; a fresh kernel was started (variables are gone, files remain)"
		case o.killed:
			res.StateReason = "the cell did not stop after its interrupt, so the sandbox was killed; a fresh kernel was started (variables are gone, files remain)"
		case oom:
			res.StateReason = "the kernel was killed for exceeding the memory limit; a fresh kernel was started (variables are gone, files remain)"
		default:
			res.StateReason = "the kernel " + k.sb.Exit().String() + "; a fresh kernel was started (variables are gone, files remain)"
		}
		m.dropKernel(s, k)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		// Restart at once so the next cell finds a kernel; a failure is
		// reported by the next cell too.
		if !closed {
			if _, err := m.ensureKernel(context.WithoutCancel(ctx), s); err != nil {
				res.StateReason += "; restarting it failed: " + err.Error()
			}
		}
	}

	// What the cell did to the workspace.
	if ws, err := s.workspace(); err == nil {
		after := fileStamps{}
		if ws != nil {
			after, _ = scan(ws)
			ws.Close()
		}
		res.Files = diff(before, after)
		s.mu.Lock()
		s.stamps = after
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
	if s.persist != "" && m.cfg.StoreDir != "" && len(res.Files) > 0 {
		if err := m.syncPersist(s, res.Files); err != nil {
			m.log().Warn("persist workspace", "session", s.id, "persist", s.persist, "err", err)
		}
	}
	m.metrics.cell(res.Status)
	m.metrics.CellSeconds.Observe(wall.Seconds())
	m.log().Info("cell", "session", s.id, "cell", cellID, "status", res.Status, "state", res.State,
		"wall_ms", res.Usage.WallMS, "cpu_ms", res.Usage.CPUMS, "peak_memory_bytes", res.Usage.PeakMemoryBytes)
	if m.log().Enabled(ctx, slog.LevelDebug) {
		m.log().Debug("cell code", "session", s.id, "cell", cellID, "code", req.Code)
	}
	return res, nil
}

// diskFull reports whether the filesystem holding dir has no space or
// inodes left.
func diskFull(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail == 0 || st.Ffree == 0
}

// ensureKernel returns the session's kernel, starting one if there is none.
func (m *Manager) ensureKernel(ctx context.Context, s *Session) (*kernel, error) {
	s.mu.Lock()
	k := s.k
	s.mu.Unlock()
	if k != nil {
		return k, nil
	}
	k, err := m.startKernel(ctx, s.disk, s.ctlDir(), s.policy)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.kErr = err
		return nil, err
	}
	if s.closed {
		_ = k.close()
		return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, s.id)
	}
	s.k, s.kErr = k, nil
	return k, nil
}

// sinceLast says when a kernel found gone before a cell went: after the
// session's previous cell, or before its first (a pooled or fresh kernel).
// counted is 1 once the cell itself is in s.cells.
func sinceLast(s *Session, counted int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cells-counted <= 0 {
		return " before the session's first cell"
	}
	return " after the previous cell"
}

// replaceKernel destroys k, a kernel that is gone or cannot take a cell,
// and starts the session's next one.
func (m *Manager) replaceKernel(ctx context.Context, s *Session, k *kernel) (*kernel, error) {
	m.log().Warn("kernel gone between cells; starting a new one", "session", s.id)
	m.dropKernel(s, k)
	return m.ensureKernel(ctx, s)
}

// dropKernel destroys k if it is still the session's kernel.
func (m *Manager) dropKernel(s *Session, k *kernel) {
	s.mu.Lock()
	if s.k == k {
		s.k = nil
	}
	s.mu.Unlock()
	if err := k.close(); err != nil {
		m.log().Warn("destroy sandbox", "session", s.id, "err", err)
	}
}

// rescan records the workspace as it is now.
func (m *Manager) rescan(s *Session) {
	ws, err := s.workspace()
	if err != nil {
		return
	}
	snap := fileStamps{}
	if ws != nil {
		snap, _ = scan(ws)
		ws.Close()
	}
	s.mu.Lock()
	// A partial scan keeps what the last one saw, so that its absences
	// are not later reported as deletions.
	fillPartial(snap, s.stamps)
	s.stamps = snap
	s.mu.Unlock()
}

// placeFiles writes request files into the workspace.
func (m *Manager) placeFiles(s *Session, files []File) error {
	ws, err := s.writableWorkspace()
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer ws.Close()
	for _, f := range files {
		rel, err := cleanRel(f.Path)
		if err != nil {
			return err
		}
		if err := writeFile(ws, rel, f.Data, s.disk.HostID()); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return fmt.Errorf("%w: workspace full writing %s", ErrLimit, rel)
			}
			return err
		}
	}
	return nil
}
