package session

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jailcell/jailcell/runner"
)

// Command actions.
const (
	CommandStart = runner.CommandStart
	CommandWait  = runner.CommandWait
	CommandKill  = runner.CommandKill
)

// Bounds of an environment handed in by a client (a session's, a cell's or
// a command's). The variables reach only processes inside the sandbox,
// whose isolation (namespaces, seccomp, cgroups, no capabilities) was set
// before any of them existed: LD_PRELOAD, PYTHONPATH or PATH there change
// what the sandboxed code runs, which the caller can do with a cell
// anyway, and never what the sandbox is. So every well-formed name is
// allowed; only the size and the form are bounded.
const (
	MaxEnvVars       = 128
	MaxEnvNameBytes  = 256
	MaxEnvValueBytes = 32 << 10
	MaxEnvBytes      = 256 << 10
)

// envNameRE is what a POSIX shell accepts as a variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckEnvs validates a client's environment; field names the request
// field for the error.
func CheckEnvs(field string, envs map[string]string) error {
	if len(envs) > MaxEnvVars {
		return fmt.Errorf("%w: %s has %d variables, at most %d", ErrBadRequest, field, len(envs), MaxEnvVars)
	}
	total := 0
	for _, k := range sortedKeys(envs) {
		v := envs[k]
		switch {
		case len(k) > MaxEnvNameBytes || !envNameRE.MatchString(k):
			return fmt.Errorf("%w: %s name %.64q: want a name of letters, digits and _ not starting with a digit, at most %d bytes", ErrBadRequest, field, k, MaxEnvNameBytes)
		case strings.IndexByte(v, 0) >= 0:
			// A NUL would cut the value in execve's strings: refuse, never truncate.
			return fmt.Errorf("%w: %s value of %s contains a NUL byte", ErrBadRequest, field, k)
		case len(v) > MaxEnvValueBytes:
			return fmt.Errorf("%w: %s value of %s is %d bytes, at most %d", ErrBadRequest, field, k, len(v), MaxEnvValueBytes)
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("%w: %s is %d bytes in all, at most %d", ErrBadRequest, field, total, MaxEnvBytes)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CommandRequest runs, waits for or kills a shell command inside a
// session's sandbox.
type CommandRequest struct {
	// Action is CommandStart (default), CommandWait or CommandKill.
	Action string
	// Cmd is the command line, run with bash -c (start).
	Cmd string
	// Envs are added to the session's environment for this command.
	Envs map[string]string
	// Cwd is the working directory: relative to Workdir or below it (""
	// is Workdir itself).
	Cwd string
	// Timeout: for a foreground start, the command's limit (0: the
	// policy's default cell timeout, clamped like a cell's); for a
	// background start, its limit from its start (0: none, it lives with
	// the session); for a wait, how long to wait (0: the policy's default,
	// clamped like a cell's).
	Timeout time.Duration
	// Background makes start answer at once with the job's name; wait and
	// kill take that name.
	Background bool
	Job        string
	// OnOutput, if set, receives output as it comes while the request
	// waits for the command.
	OnOutput func(stream, text string)
}

// CommandResult is what a command did, as far as the request waited.
type CommandResult struct {
	// Job names the command for a later wait or kill.
	Job string `json:"job"`
	// PID is its pid inside the sandbox.
	PID int `json:"pid,omitempty"`
	// Done: the command exited, ExitCode says how (a negative code is the
	// signal that ended it, as Python's subprocess reports it). The code
	// is the kernel's report: the sandbox's own, untrusted like a cell's
	// status.
	Done     bool `json:"done"`
	ExitCode int  `json:"exit_code"`
	// Stdout and Stderr are what it wrote, at most the policy's output
	// bytes each (the rest is dropped: the truncation flags).
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// TimedOut: the host's clock passed the command's timeout; it was
	// interrupted (SIGINT) and killed after the policy's grace.
	TimedOut bool `json:"timed_out,omitempty"`
}

var commandSeq atomic.Uint64

// commandSlack is how long past the kernel's own wait the host waits for
// its answer before it counts the kernel lost.
const commandSlack = 15 * time.Second

// Command runs a shell command in session id's sandbox, as a child of its
// kernel (not a cell: no execution count, no cell state), or waits for or
// kills one started in the background. Like a cell it holds the session
// while it waits (ErrBusy to a second request); a background command runs
// on between requests, bounded by the sandbox's cgroup and at most 16 at
// once, and ends with the session.
func (m *Manager) Command(ctx context.Context, owner int, id string, req CommandRequest) (*CommandResult, error) {
	if req.Action == "" {
		req.Action = CommandStart
	}
	rreq := runner.CommandRequest{Action: req.Action}
	switch req.Action {
	case CommandStart:
		if req.Cmd == "" {
			return nil, fmt.Errorf("%w: cmd is empty: a bash command line to run", ErrBadRequest)
		}
		if strings.IndexByte(req.Cmd, 0) >= 0 {
			return nil, fmt.Errorf("%w: cmd contains a NUL byte", ErrBadRequest)
		}
		if err := CheckEnvs("envs", req.Envs); err != nil {
			return nil, err
		}
		cwd, err := commandCwd(req.Cwd)
		if err != nil {
			return nil, err
		}
		rreq.Cmd, rreq.Envs, rreq.Cwd = req.Cmd, req.Envs, cwd
	case CommandWait, CommandKill:
		if req.Job == "" {
			return nil, fmt.Errorf("%w: %s needs job, the name a background start answered", ErrBadRequest, req.Action)
		}
		if len(req.Job) > 64 {
			return nil, fmt.Errorf("%w: job %.64q is not a job name", ErrBadRequest, req.Job)
		}
		rreq.Job = req.Job
	default:
		return nil, fmt.Errorf("%w: action %q: allowed %s, %s, %s", ErrBadRequest, req.Action, CommandStart, CommandWait, CommandKill)
	}
	if req.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout_s must be >= 0", ErrBadRequest)
	}
	s, err := m.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, id)
	}
	pol := s.policy
	s.mu.Unlock()
	rreq.MaxOutput, rreq.GraceS = pol.OutputBytes, pol.InterruptGrace.Seconds()
	var limit time.Duration // the host's clock on the command, 0: none
	switch {
	case req.Action == CommandStart && req.Background:
		rreq.TimeoutS = req.Timeout.Seconds()
	case req.Action == CommandStart:
		if limit, err = m.cellTimeout(s, req.Timeout); err != nil {
			return nil, err
		}
		rreq.TimeoutS = limit.Seconds()
		rreq.WaitS = (limit + pol.InterruptGrace + 6*time.Second).Seconds()
	case req.Action == CommandWait:
		wait, err := m.cellTimeout(s, req.Timeout)
		if err != nil {
			return nil, err
		}
		rreq.WaitS = wait.Seconds()
	case req.Action == CommandKill:
		rreq.WaitS = 10
	}
	rreq.Stream = req.OnOutput != nil && rreq.WaitS > 0
	if _, err := m.dur.wake(ctx, s); err != nil {
		return nil, err
	}
	k, err := m.ensureKernel(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := m.syncEnv(ctx, s, k); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.busy, s.lastUsed = true, time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy, s.lastUsed = false, time.Now()
		s.mu.Unlock()
	}()
	rreq.ID = m.nonce + "-command-" + strconv.FormatUint(commandSeq.Add(1), 10)
	// Not the caller's cancellation: a request abandoned mid-frame would
	// leave the link out of step and cost the session its kernel. The
	// command ends by its own timeout (the wait is bounded the same way)
	// and its answer is dropped; only the host's deadline breaks the link.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(rreq.WaitS*float64(time.Second))+commandSlack)
	defer cancel()
	start := time.Now()
	if rreq.WaitS > 0 {
		// Interrupt (the op) reaches the command while the request waits.
		s.mu.Lock()
		s.running = k
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.running = nil
			s.mu.Unlock()
		}()
	}
	r, err := k.conn.Command(cctx, rreq, req.OnOutput)
	if err != nil {
		// The link is out of step (or the kernel is gone): the sandbox goes
		// with its jobs, and the next request starts a fresh kernel.
		m.dropKernel(s, k)
		return nil, fmt.Errorf("%w: command in session %s: the kernel did not answer, so it was stopped (variables are lost, files remain): %v", ErrUnavailable, id, err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("command in session %s: %w (the command ran to its end)", id, context.Cause(ctx))
	}
	if r.Error != "" {
		if strings.HasPrefix(r.Error, "no job") {
			return nil, fmt.Errorf("%w: no job %q in session %s (jobs end with their kernel; finished ones are forgotten after 16 newer)", ErrNotFound, req.Job, id)
		}
		if strings.Contains(r.Error, "commands are running") {
			return nil, fmt.Errorf("%w: session %s: %s", ErrLimit, id, r.Error)
		}
		return nil, fmt.Errorf("%w: command in session %s: %s", ErrBadRequest, id, r.Error)
	}
	res := &CommandResult{
		Job: r.Job, PID: r.PID, Done: r.Done, ExitCode: r.ExitCode,
		Stdout: r.Stdout, Stderr: r.Stderr, StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		TimedOut: r.TimedOut,
	}
	if limit > 0 && time.Since(start) >= limit {
		// The host's clock, not the kernel's word, says it ran out of time.
		res.TimedOut = true
	}
	if !res.Done {
		res.ExitCode = 0
	}
	return res, nil
}

// commandCwd maps a client's cwd to a directory inside the sandbox, under
// Workdir: the same confinement as a file path.
func commandCwd(cwd string) (string, error) {
	if cwd == "" || cwd == Workdir || cwd == "." {
		return Workdir, nil
	}
	rel, err := cleanRel(strings.TrimSuffix(cwd, "/"))
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w", cwd, err)
	}
	return Workdir + "/" + rel, nil
}

// syncEnv gives k the session's environment once per kernel (a kernel
// started, restored or replaced since has its own os.environ).
func (m *Manager) syncEnv(ctx context.Context, s *Session, k *kernel) error {
	s.mu.Lock()
	envs := s.envs
	s.mu.Unlock()
	if len(envs) == 0 || k.envSynced {
		return nil
	}
	if err := m.setEnv(ctx, s, k, envs, nil); err != nil {
		return err
	}
	k.envSynced = true
	return nil
}

// setEnv edits k's os.environ; a kernel that does not answer is dropped.
func (m *Manager) setEnv(ctx context.Context, s *Session, k *kernel, set map[string]string, unset []string) error {
	ectx, cancel := context.WithTimeout(ctx, AssistTimeout)
	defer cancel()
	id := m.nonce + "-env-" + strconv.FormatUint(commandSeq.Add(1), 10)
	if err := k.conn.SetEnv(ectx, id, set, unset); err != nil {
		m.dropKernel(s, k)
		return fmt.Errorf("%w: set the environment of session %s: the kernel did not answer, so it was stopped: %v", ErrUnavailable, s.id, err)
	}
	return nil
}

// cellEnv sets a cell's own envs in k before it runs and returns what puts
// the session's environment back after it: each variable to the session's
// value, the kernel's base value, or unset.
func (m *Manager) cellEnv(ctx context.Context, s *Session, k *kernel, envs map[string]string) (restore func(), err error) {
	if err := m.syncEnv(ctx, s, k); err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return func() {}, nil
	}
	if err := m.setEnv(ctx, s, k, envs, nil); err != nil {
		return nil, err
	}
	return func() {
		base := map[string]string{}
		for _, kv := range kernelEnv(s.policy) {
			name, val, _ := strings.Cut(kv, "=")
			base[name] = val
		}
		s.mu.Lock()
		for name, val := range s.envs {
			base[name] = val
		}
		s.mu.Unlock()
		set, unset := map[string]string{}, []string{}
		for name := range envs {
			if v, ok := base[name]; ok {
				set[name] = v
			} else {
				unset = append(unset, name)
			}
		}
		s.mu.Lock()
		live := s.k == k
		s.mu.Unlock()
		if live {
			_ = m.setEnv(context.WithoutCancel(ctx), s, k, set, unset)
		}
	}, nil
}

// setEnvs gives a session just taken from the pool its create's envs.
func (m *Manager) setEnvs(id string, envs map[string]string) {
	if len(envs) == 0 {
		return
	}
	if s, err := m.get(0, id); err == nil {
		s.mu.Lock()
		s.envs = maps.Clone(envs)
		s.mu.Unlock()
	}
}
