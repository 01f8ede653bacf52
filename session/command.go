package session

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jailcell/jailcell/runner"
)

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
		if (req.Stdin || req.PTY != nil) && !req.Background {
			// A foreground start holds the session until the command ends,
			// so no input could reach it.
			return nil, fmt.Errorf("%w: stdin and pty need background: true (input is sent while the command runs)", ErrBadRequest)
		}
		if req.PTY != nil {
			if err := req.PTY.Check("pty"); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
		}
		rreq.Cmd, rreq.Envs, rreq.Cwd, rreq.Stdin, rreq.PTY = req.Cmd, req.Envs, req.Cwd, req.Stdin, req.PTY
	case CommandWait, CommandKill, CommandInput, CommandResize:
		if req.Job == "" {
			return nil, fmt.Errorf("%w: %s needs job, the name a background start answered", ErrBadRequest, req.Action)
		}
		if len(req.Job) > 64 {
			return nil, fmt.Errorf("%w: job %.64q is not a job name", ErrBadRequest, req.Job)
		}
		rreq.Job = req.Job
		switch req.Action {
		case CommandInput:
			if len(req.Input) > MaxCommandInput {
				return nil, fmt.Errorf("%w: input of %d bytes, at most %d a request", ErrLimit, len(req.Input), MaxCommandInput)
			}
			rreq.Input, rreq.EOF = req.Input, req.EOF
		case CommandResize:
			if req.PTY == nil {
				return nil, fmt.Errorf("%w: resize needs pty, the terminal's new rows and cols", ErrBadRequest)
			}
			if err := req.PTY.Check("pty"); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
			rreq.PTY = req.PTY
		}
	default:
		return nil, fmt.Errorf("%w: action %q: allowed %s, %s, %s, %s, %s", ErrBadRequest, req.Action, CommandStart, CommandWait, CommandKill, CommandInput, CommandResize)
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
	pol, startDir := s.policy, s.info.Cwd
	s.mu.Unlock()
	if req.Action == CommandStart {
		if rreq.Cwd, err = commandCwd(req.Cwd, startDir); err != nil {
			return nil, err
		}
	}
	rreq.MaxOutput, rreq.GraceS = pol.OutputBytes, pol.InterruptGrace.Seconds()
	var limit time.Duration // the host's clock on the command, 0: none
	switch {
	case req.Action == CommandStart && req.Background:
		rreq.TimeoutS = req.Timeout.Seconds()
	case req.Action == CommandStart:
		if limit, err = m.cfg.cellTimeout(s, req.Timeout); err != nil {
			return nil, err
		}
		rreq.TimeoutS = limit.Seconds()
		rreq.WaitS = (limit + pol.InterruptGrace + 6*time.Second).Seconds()
	case req.Action == CommandWait:
		wait, err := m.cfg.cellTimeout(s, req.Timeout)
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
	if err := m.env.syncEnv(ctx, s, k); err != nil {
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
		if strings.Contains(r.Error, "commands are running") || strings.HasPrefix(r.Error, "stdin is full") {
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

// commandCwd maps a client's cwd to a directory inside the sandbox, in the
// workspace: the same confinement as a file path. The workspace has two
// names, Workdir and HomeDir; a path that starts with one keeps it, and a
// relative one (or none) is under start, the session's start directory
// ("": Workdir).
func commandCwd(cwd, start string) (string, error) {
	if start == "" {
		start = Workdir
	}
	base, rest := start, cwd
	for _, name := range []string{Workdir, HomeDir} {
		if cwd == name {
			return name, nil
		}
		if r, ok := strings.CutPrefix(cwd, name+"/"); ok {
			base, rest = name, r
			break
		}
	}
	if rest == "" || rest == "." {
		return base, nil
	}
	rel, err := cleanRel(strings.TrimSuffix(rest, "/"))
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w", cwd, err)
	}
	return base + "/" + rel, nil
}
