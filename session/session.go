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
	// lease is the version of this node's lease on the session in a
	// shared store ("" if it has none): shared.go.
	lease string

	// run serialises cells, uploads to a starting kernel, and close. After
	// a cell that lost its kernel, the goroutine starting the next kernel
	// holds it (restartInBackground).
	run sync.Mutex

	mu       sync.Mutex
	k        *kernel // nil while (re)starting or after close
	kErr     error   // why the last start failed
	ttl      time.Duration
	maxLife  time.Duration // 0: the configured MaxLifetime; set at create
	lastUsed time.Time
	cells    int
	busy     bool
	// running is the kernel of the cell in flight, nil between cells:
	// what Interrupt signals.
	running *kernel
	closed  bool
	stamps  fileStamps // the workspace after the last cell
	// hibernated: the kernel is checkpointed in dir (hibernate.go) and
	// expires after hibTTL idle instead of ttl.
	hibernated bool
	hibTTL     time.Duration
	info       Info
	// released: the session was handed, sandbox running, to the next
	// daemon (a drain that kept it): its sandbox is that daemon's to end.
	released bool
	// lostWhy says why the session's kernel state was lost outside a
	// cell (a restore that failed, a hibernation that ended the kernel),
	// until a cell's result or a restore's answer has said so: a loss is
	// never answered "kept" because the request that caused it went away.
	lostWhy string
	// persisted is the size of each file of the session's persisted
	// workspace in an object store, and persistedBytes their sum (nil
	// until read: persist.go); guarded by run.
	persisted      map[string]int64
	persistedBytes int64
	// envs is the session's environment (create's envs), given to every
	// kernel it runs before its first cell or command (syncEnv).
	envs map[string]string
	// metricsK, metricsCPU and metricsAt are the previous metrics sample:
	// its kernel, CPU time and time (cpu_used_pct is over the interval).
	metricsK   *kernel
	metricsCPU time.Duration
	metricsAt  time.Time
	// watches are the session's directory watches (watch.go);
	// watchStarting counts starts scanning now, each holding a place under
	// MaxWatches; watchTokens (at watchTokensAt) is what is left of the
	// session's budget of starts; watchScans counts the scans of the
	// session's watches (starts and polls), which those bounds bound.
	watches       map[string]*watch
	watchSeq      int
	watchStarting int
	watchTokens   float64
	watchTokensAt time.Time
	watchScans    int
	// restarting is closed when the background start of a kernel that
	// replaces a lost one ends; nil when none runs. stopRestart cancels it.
	restarting chan struct{}
	// pausing is closed when the janitor's hibernation of the idle session
	// (HibernateOnIdle, HibernateAfter) is over: a cell that comes
	// meanwhile waits for it, then wakes the session, instead of meeting
	// busy for work nobody asked for.
	pausing     chan struct{}
	stopRestart context.CancelFunc
}

func (s *Session) ctlDir() string { return s.disk.CtlDir() }

// expiry is when the session ends if unused.
func (s *Session) expiry(maxLife time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	idle := s.lastUsed.Add(s.ttl)
	if s.hibernated {
		idle = s.lastUsed.Add(s.hibTTL)
	}
	// Hibernated too: a checkpoint does not stretch the lifetime.
	if life := s.created.Add(maxLife); life.Before(idle) {
		return life
	}
	return idle
}

// lost records why s's kernel state was lost outside a cell, for the
// next cell's result (takeLost).
func (s *Session) lost(why string) {
	s.mu.Lock()
	s.lostWhy = why
	s.mu.Unlock()
}

// takeLost returns, and forgets, why s's state was lost since its last
// cell ("" if it was not).
func (s *Session) takeLost() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	why := s.lostWhy
	s.lostWhy = ""
	return why
}

// stillIdle says whether s is still past its idle expiry, read again
// just before the janitor ends it: a cell or a wake since the sweep
// looked made it used. Its run lock is not waited for: a session stuck in
// an operation past its TTL is still ended.
func (s *Session) stillIdle(maxLife time.Duration) bool {
	s.mu.Lock()
	busy := s.busy
	s.mu.Unlock()
	return !busy && time.Now().After(s.expiry(maxLife))
}

// tryPause takes s.run for the janitor's hibernation of an idle session,
// marking it pausing first (so that a claim that misses the lock knows to
// wait); done releases both. ok is false if s is in use.
func (s *Session) tryPause() (done func(), ok bool) {
	ch := make(chan struct{})
	s.mu.Lock()
	if s.pausing != nil { // a pause of an earlier sweep still runs
		s.mu.Unlock()
		return nil, false
	}
	s.pausing = ch
	s.mu.Unlock()
	clear := func() {
		s.mu.Lock()
		s.pausing = nil
		s.mu.Unlock()
		close(ch)
	}
	if !s.run.TryLock() {
		clear()
		return nil, false
	}
	return func() {
		s.run.Unlock()
		clear()
	}, true
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

// exec runs one cell as a pipeline of steps, each named for its one job.
// The caller holds s.run.
func (m *Manager) exec(ctx context.Context, s *Session, req ExecRequest) (*Result, error) {
	c, err := m.prepareCell(ctx, s, req)
	if err != nil {
		return nil, err
	}
	if err := m.ws.placeRequestFiles(s, req.Files); err != nil {
		return nil, err
	}
	restoreEnv, err := m.env.cellEnv(ctx, s, c.k, req.Envs)
	if err != nil {
		return nil, err
	}
	c.id, c.before = m.nextCell(s)
	var plain *plainOutput
	if !req.RawANSI && req.OnOutput != nil {
		plain = &plainOutput{next: req.OnOutput}
		c.req.OnOutput = plain.onOutput
	}
	err = m.sendCell(ctx, c)
	restoreEnv()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	handedOn := s.released
	s.mu.Unlock()
	if handedOn {
		// Its connection went with the session, handed on by a drain:
		// the kernel runs on, state and all, for the next daemon, and no
		// verdict can be given here (judged as a lost link, it said
		// "lost" and its sandbox was killed).
		return nil, fmt.Errorf("%w: the service stopped while the cell ran: session %s is kept running, with its state, for the service's next start; this cell's result was not received", ErrUnavailable, s.id)
	}
	if plain != nil {
		plain.flush()
	}
	meas, use := m.measure(c)
	v := judge(meas)
	res := resultOf(c.o.res, v, use)
	if !req.RawANSI {
		plainText(res)
	}
	if c.o.res == nil && !c.o.notStarted(c.k) {
		// No result frame (a kill, a lost link): the host's own count of
		// the cells this kernel started still numbers it.
		res.ExecutionCount = c.k.conn.Cells()
	}
	if v.Lost {
		// Its replacement is not awaited: a verdict never waits for a
		// kernel start (an exit, OOM or fork bomb used to be answered only
		// after a new kernel had imported its preload, tens of seconds
		// under load). Exec starts the next one in the background
		// (restartInBackground); any other caller's next cell starts one.
		m.dropKernel(s, c.k)
	}
	m.ws.recordFiles(s, c.before, res)
	m.dur.persistCell(s, res.Files)
	m.recordCell(ctx, c, res)
	return res, nil
}

// cell carries one cell through exec's steps.
type cell struct {
	s       *Session
	req     ExecRequest
	timeout time.Duration
	// lifetime is the session's max lifetime when the timeout was cut to
	// what was left of it (capToLife), else 0.
	lifetime time.Duration
	k        *kernel
	woke     string // why waking the session lost its state ("" if not)
	died     string // how a kernel found gone before the cell went ("" if none)

	id     string
	before fileStamps // the workspace before the cell

	// Set by sendCell.
	o        cellOutcome
	u0       isolate.Usage    // cgroup counters as the cell began
	n0       isolate.NetUsage // gateway counters as the cell began
	hasNet   bool
	cellPeak bool // the memory peak was reset as the cell began
	wall     time.Duration
}

// prepareCell resolves the cell's timeout, takes the snapshot it asks for,
// and finds it a live kernel: waking a hibernated one, replacing one that
// died since the last cell.
func (m *Manager) prepareCell(ctx context.Context, s *Session, req ExecRequest) (*cell, error) {
	c := &cell{s: s, req: req, timeout: req.Timeout}
	if !req.Setup.Set() {
		var err error
		if c.timeout, err = m.cfg.cellTimeout(s, req.Timeout); err != nil {
			return nil, err
		}
	}
	if req.Snapshot {
		if err := m.dur.snapshot(ctx, s); err != nil {
			return nil, fmt.Errorf("snapshot before the cell (the cell did not run): %w", err)
		}
	}
	var err error
	if _, err = m.dur.wake(ctx, s); err != nil {
		return nil, err
	}
	if c.k, err = m.ensureKernel(ctx, s); err != nil {
		return nil, err
	}
	// A loss since the last cell (this wake's, or one an earlier request
	// could not report), said by this cell's result.
	c.woke = s.takeLost()
	// A kernel that died since its last cell (a timer or thread an earlier
	// cell left behind, an OOM kill between cells) is replaced before this
	// cell is sent: the cell runs, and its result says the state was lost.
	// Never a verdict for code that did not run.
	select {
	case <-c.k.sb.Done():
		c.died = "the kernel " + c.k.sb.Exit().String() + sinceLast(s, 0)
		if c.k, err = m.replaceKernel(ctx, s, c.k); err != nil {
			return nil, fmt.Errorf("%s and a new one could not be started (the cell did not run): %w", c.died, err)
		}
	default:
	}
	// Last, once waking and starting have spent their share of it.
	if err := m.capToLife(c); err != nil {
		return nil, err
	}
	return c, nil
}

// nextCell counts the cell and returns its id and the workspace before it.
func (m *Manager) nextCell(s *Session) (string, fileStamps) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cells++
	// Unique for the kernel's whole life, across daemon restarts: a
	// result orphaned by a restart still arrives under its old id.
	return m.nonce + "-" + strconv.Itoa(s.cells), s.stamps
}

// sendCell runs the code in the kernel under the host's clock. A kernel
// that went before it took the cell is replaced once and the cell sent
// again; an error means the code did not run.
func (m *Manager) sendCell(ctx context.Context, c *cell) error {
	s := c.s
	for try := 1; ; try++ {
		c.u0 = c.k.sb.Counters()
		c.n0, c.hasNet, _ = c.k.sb.NetUsage()
		c.cellPeak = c.k.sb.ResetPeak()
		start := time.Now()
		s.mu.Lock()
		s.running = c.k
		s.mu.Unlock()
		c.o = runCell(ctx, c.k, c.id, c.req.Code, c.req.Context, c.timeout, s.policy.InterruptGrace, s.policy.OutputBytes, c.req.OnOutput, c.req.OnDisplay, c.req.OnClearOutput)
		s.mu.Lock()
		s.running = nil
		s.mu.Unlock()
		c.wall = time.Since(start)
		if !c.o.notStarted(c.k) {
			break
		}
		// The kernel went after prepareCell's check but before it took the
		// cell (its "started" frame never came): the code did not run, so
		// it runs in a new kernel. Once: a kernel that cannot take a cell
		// twice in a row is a fault to report, not to loop on.
		why := "the kernel's connection to the host broke" + sinceLast(s, 1)
		select {
		case <-c.k.sb.Done():
			why = "the kernel " + c.k.sb.Exit().String() + sinceLast(s, 1)
		case <-time.After(100 * time.Millisecond):
		}
		if try > 1 {
			m.dropKernel(s, c.k)
			return fmt.Errorf("%w: %s, twice in a row; the cell did not run", ErrUnavailable, why)
		}
		c.died = why
		var err error
		if c.k, err = m.replaceKernel(ctx, s, c.k); err != nil {
			return fmt.Errorf("%s and a new one could not be started (the cell did not run): %w", c.died, err)
		}
	}
	if c.o.killed && c.o.err != nil && errors.Is(c.o.err, runner.ErrNotStarted) && c.k.conn.Hello().Acks {
		// Alive but it never took the cell (a thread of an earlier cell
		// holding the kernel up), so it was killed at the deadline: no
		// verdict for code that did not run.
		m.dropKernel(s, c.k)
		msg := fmt.Sprintf("the kernel did not take the cell within its %s timeout, so it was killed; the cell did not run", c.timeout)
		if _, err := m.ensureKernel(context.WithoutCancel(ctx), s); err != nil {
			return fmt.Errorf("%w: %s, and a fresh kernel could not be started: %v", ErrUnavailable, msg, err)
		}
		return fmt.Errorf("%w: %s; a fresh kernel was started (variables are gone, files remain)", ErrUnavailable, msg)
	}
	return nil
}

// measure reads, on the host, what the cell did: the cgroup's and the
// gateway's counters against those at its start, the sandbox's wait
// status, the workspace's free space.
func (m *Manager) measure(c *cell) (measured, Usage) {
	s, k, o := c.s, c.k, c.o
	lost := o.err != nil || o.killed
	s.mu.Lock()
	handedOn := s.released
	s.mu.Unlock()
	// A cell that outlived a drain lost its connection when its session
	// was handed on: its sandbox runs on for the next daemon, and killing
	// it here (5 s later) lost the state the drain kept.
	if lost && !handedOn {
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
	if c.hasNet {
		if n1, _, err := k.sb.NetUsage(); err == nil {
			netUse = networkUsage(n1.Since(c.n0))
		} else {
			m.log().Warn("network usage", "session", s.id, "err", err)
		}
	}
	meas := measured{
		timeout:     c.timeout,
		lifetime:    c.lifetime,
		memoryBytes: s.policy.MemoryBytes,
		timedOut:    o.timedOut,
		canceled:    o.canceled,
		killed:      o.killed,
		linkLost:    o.err != nil,
		oom:         u1.OOMKills > c.u0.OOMKills,
		pidsDenied:  u1.PidsDenied > c.u0.PidsDenied,
		diskFull:    diskFull(s.disk.UpperDir()),
		woke:        c.woke,
		died:        c.died,
	}
	if lost {
		meas.exit = k.sb.Exit().String()
	}
	if o.res != nil {
		meas.claim = &Result{Status: o.res.Status, StdoutTruncated: o.res.StdoutTruncated, StderrTruncated: o.res.StderrTruncated, Error: cellError(o.res.Error)}
	}
	use := Usage{
		WallMS:          c.wall.Milliseconds(),
		CPUMS:           (u1.CPU - c.u0.CPU).Milliseconds(),
		PeakMemoryBytes: u1.MemoryPeak,
		PeakMemoryScope: PeakScopeSession,
		Network:         netUse,
	}
	if c.cellPeak {
		use.PeakMemoryScope = PeakScopeCell
	}
	return meas, use
}

// resultOf is the cell's result: the kernel's output copied into session
// types, under the host's verdict.
func resultOf(r *runner.Result, v verdict, use Usage) *Result {
	res := &Result{
		Status: v.Status, Limits: v.Limits, Error: v.Error,
		State: v.State, StateReason: v.StateReason, Usage: use,
	}
	if r != nil {
		res.Stdout, res.Stderr = r.Stdout, r.Stderr
		res.StdoutTruncated, res.StderrTruncated = r.StdoutTruncated, r.StderrTruncated
		res.Value, res.ValueChart, res.ValueTable = r.Value, r.ValueChart, r.ValueTable
		res.ExecutionCount = r.ExecutionCount
		for _, d := range r.Display {
			res.Display = append(res.Display, DisplayItem{MIME: d.MIME, Data: d.Data, Bundle: d.Bundle, Pager: d.Pager, Chart: d.Chart, Table: d.Table})
		}
	}
	return res
}

// cellError copies the kernel's exception into session types.
func cellError(e *runner.CellError) *CellError {
	if e == nil {
		return nil
	}
	ce := &CellError{Type: e.Type, Message: e.Message, Traceback: e.Traceback, ExitCode: e.ExitCode}
	for _, f := range e.Frames {
		ce.Frames = append(ce.Frames, Frame{File: f.File, Line: f.Line, Name: f.Name, Code: f.Code})
	}
	return ce
}

// restartInBackground starts the kernel that replaces a lost one while
// the caller's result goes back, holding s.run for it: the session's next
// request waits in claim for the start to end, never sees a half-started
// kernel, and never gets busy for it. The caller must hold s.run and, if
// this returns true, must not unlock it. A close cancels the start.
func (m *Manager) restartInBackground(s *Session) bool {
	s.mu.Lock()
	if s.closed || s.k != nil || s.restarting != nil {
		s.mu.Unlock()
		return false
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	s.restarting, s.stopRestart = done, cancel
	s.mu.Unlock()
	go func() {
		defer func() {
			cancel()
			s.mu.Lock()
			s.restarting, s.stopRestart = nil, nil
			s.mu.Unlock()
			s.run.Unlock()
			close(done)
		}()
		if _, err := m.ensureKernel(ctx, s); err != nil && ctx.Err() == nil {
			// s.kErr keeps it; the next cell tries again and reports it.
			m.log().Warn("start a kernel after a lost one", "session", s.id, "err", err)
		}
	}()
	return true
}

// recordCell counts the cell in the metrics and logs it (its code only at
// debug level).
func (m *Manager) recordCell(ctx context.Context, c *cell, res *Result) {
	s := c.s
	if n := res.Usage.Network; n != nil {
		m.log().Info("cell network", "session", s.id, "cell", c.id, "sent_bytes", n.SentBytes,
			"received_bytes", n.ReceivedBytes, "refused", n.Refused)
	}
	m.metrics.cell(res.Status)
	m.metrics.CellSeconds.Observe(c.wall.Seconds())
	m.log().Info("cell", "session", s.id, "cell", c.id, "status", res.Status, "state", res.State,
		"wall_ms", res.Usage.WallMS, "cpu_ms", res.Usage.CPUMS, "peak_memory_bytes", res.Usage.PeakMemoryBytes)
	if m.log().Enabled(ctx, slog.LevelDebug) {
		m.log().Debug("cell code", "session", s.id, "cell", c.id, "code", c.req.Code)
	}
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
	path := StartZygote
	k, err := m.warm.startFromZygote(ctx, s)
	if err != nil {
		m.metrics.fellBack(StartZygote)
		m.log().Warn("session not forked from its zygote; taking the next start path", "session", s.id, "err", err)
	}
	if k == nil {
		path = StartTemplate
		k, err = m.warm.startFromTemplate(ctx, s)
		if err != nil {
			m.metrics.fellBack(StartTemplate)
			m.log().Warn("session template not used; importing the preload instead", "session", s.id, "err", err)
		}
	}
	if k == nil {
		path = StartImport
		k, err = m.warm.startKernel(ctx, s.disk, s.ctlDir(), s.policy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.kErr = err
		return nil, err
	}
	m.metrics.started(path)
	s.info.Start = path
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
	mine := s.k == k
	if mine {
		s.k = nil
	}
	handedOn := !mine && s.released
	s.mu.Unlock()
	if handedOn {
		return // the next daemon's now (release)
	}
	if err := k.close(); err != nil {
		m.log().Warn("destroy sandbox", "session", s.id, "err", err)
	}
}
