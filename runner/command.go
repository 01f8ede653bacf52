package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Command actions.
const (
	CommandStart  = "start"
	CommandWait   = "wait"
	CommandKill   = "kill"
	CommandInput  = "input"
	CommandResize = "resize"
)

// MaxCommandInput bounds the input one request writes to a job's stdin;
// the kernel also refuses input while a job has 1 MiB it has not read.
const MaxCommandInput = 1 << 20

// MaxPTYSide bounds a terminal's rows and columns.
const MaxPTYSide = 1000

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// Check says what is wrong with the size, naming field.
func (p *PTYSize) Check(field string) error {
	if p.Rows < 1 || p.Rows > MaxPTYSide || p.Cols < 1 || p.Cols > MaxPTYSide {
		return fmt.Errorf("%s rows %d, cols %d: each must be 1 to %d", field, p.Rows, p.Cols, MaxPTYSide)
	}
	return nil
}

// maxJobName bounds a job name the kernel may send back ("job-N").
const maxJobName = 64

// maxCommandError bounds the kernel's reason for refusing a command.
const maxCommandError = 4 << 10

// CommandRequest asks the kernel to start, wait for or kill a shell command
// run inside its sandbox (bash -c, in its own process group). Like Assist it
// is answered between cells.
type CommandRequest struct {
	// ID names the request on the wire, unique like a cell's.
	ID string
	// Action is CommandStart, CommandWait or CommandKill.
	Action string
	// Cmd is the bash command line (start).
	Cmd string
	// Envs are added to the kernel's environment for the command (start);
	// the caller validates them.
	Envs map[string]string
	// Cwd is the command's working directory, absolute inside the sandbox
	// (start).
	Cwd string
	// Job names the job to wait for, kill, write to or resize.
	Job string
	// Stdin keeps the started job's stdin a pipe for CommandInput (else it
	// reads /dev/null).
	Stdin bool
	// PTY starts the job in a new terminal of this size (its stdin, stdout
	// and stderr; its output comes as stdout), or is the new size
	// (CommandResize).
	PTY *PTYSize
	// Input is written to the job's stdin (CommandInput), at most
	// MaxCommandInput bytes; EOF closes the stdin after it (a pipe only).
	Input string
	EOF   bool
	// MaxOutput caps the bytes kept per stream, in the kernel and here.
	MaxOutput int64
	// WaitS is how long the kernel waits for the job before answering (0:
	// answer at once, the job runs on).
	WaitS float64
	// TimeoutS is the job's own limit from its start (0: none): then the
	// kernel interrupts its group and kills it GraceS later.
	TimeoutS float64
	GraceS   float64
	// Stream asks for the job's output as stream frames while the kernel
	// waits.
	Stream bool
}

// CommandReply is the kernel's report on a job: untrusted (the job's own
// exit code as the kernel saw it, the output it kept), bounded here.
type CommandReply struct {
	Job             string
	PID             int
	Done            bool
	ExitCode        int
	Stdout, Stderr  string
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	// Error is the kernel's reason for refusing the request ("" if none).
	Error string
}

// Command sends one command request and waits for its reply until ctx is
// done (the caller's deadline must cover WaitS, TimeoutS and GraceS).
// onStream gets the output streamed while the kernel waits, capped at
// MaxOutput per stream by the host's own count. A failure breaks the Conn,
// as Assist's does.
func (c *Conn) Command(ctx context.Context, req CommandRequest, onStream func(name, text string)) (*CommandReply, error) {
	switch req.Action {
	case CommandStart, CommandWait, CommandKill, CommandInput:
	case CommandResize:
		if req.PTY == nil {
			return nil, fmt.Errorf("command %s: resize without a size", req.ID)
		}
	default:
		return nil, fmt.Errorf("command: action %q: allowed %s, %s, %s, %s, %s", req.Action, CommandStart, CommandWait, CommandKill, CommandInput, CommandResize)
	}
	if req.PTY != nil {
		if err := req.PTY.Check("command " + req.ID + " pty"); err != nil {
			return nil, err
		}
	}
	if len(req.Input) > MaxCommandInput {
		return nil, fmt.Errorf("command %s: input of %d bytes, at most %d", req.ID, len(req.Input), MaxCommandInput)
	}
	if req.ID == "" {
		return nil, errors.New("command: empty id")
	}
	if req.MaxOutput < 0 {
		return nil, fmt.Errorf("command %s: max output %d: must not be negative", req.ID, req.MaxOutput)
	}
	frame := map[string]any{
		"t": frameCommand, "id": req.ID, "action": req.Action, "max_output": req.MaxOutput,
		"wait_s": req.WaitS, "timeout_s": req.TimeoutS, "grace_s": req.GraceS, "stream": req.Stream,
	}
	switch req.Action {
	case CommandStart:
		envs := req.Envs
		if envs == nil {
			envs = map[string]string{}
		}
		frame["cmd"], frame["envs"], frame["cwd"] = req.Cmd, envs, req.Cwd
		if req.Stdin {
			frame["stdin"] = true
		}
		if req.PTY != nil {
			frame["pty"] = req.PTY
		}
	case CommandInput:
		frame["job"], frame["input"], frame["eof"] = req.Job, req.Input, req.EOF
	case CommandResize:
		frame["job"], frame["pty"] = req.Job, req.PTY
	default:
		frame["job"] = req.Job
	}
	what := "command " + req.ID
	// One state for the whole request: its count caps what is streamed
	// at MaxOutput per stream, however many frames a forged kernel sends.
	st := newExecState(ExecRequest{ID: req.ID, MaxOutput: req.MaxOutput}, onStream)
	b, err := c.request(ctx, what, frame, frameCommand, func(b []byte) error {
		_, err := st.handle(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	r, err := decodeCommand(b, req.MaxOutput)
	if err != nil {
		return nil, c.fail(fmt.Errorf("%s: %w", what, err))
	}
	return r, nil
}

// SetEnv sets and unsets variables of the kernel's environment (os.environ:
// what later cells and commands inherit). The caller validates them.
func (c *Conn) SetEnv(ctx context.Context, id string, set map[string]string, unset []string) error {
	if set == nil {
		set = map[string]string{}
	}
	if unset == nil {
		unset = []string{}
	}
	_, err := c.request(ctx, "env "+id, map[string]any{"t": frameEnv, "id": id, "set": set, "unset": unset}, frameEnv, nil)
	return err
}

// SetStartDir makes dir the working directory of the kernel's main
// namespace (and its PWD): where later cells of that namespace, and what
// they start, run. The kernel takes it once in its life and ignores it
// after, so a kernel restored from an image keeps the directory its cells
// chose. The kernel's refusal (dir is not a directory there) is an error,
// and a refused one does not count.
func (c *Conn) SetStartDir(ctx context.Context, id, dir string) error {
	b, err := c.request(ctx, "env "+id, map[string]any{"t": frameEnv, "id": id, "set": map[string]string{}, "unset": []string{}, "cwd": dir}, frameEnv, nil)
	if err != nil {
		return err
	}
	// Out of the sandbox: the error is read to the bound of a command's,
	// never unmarshalled whole (a frame may hold 64 MiB of it).
	var msg string
	err = eachMember(b, func(k, v []byte) error {
		if string(k) == `"error"` && kind(v) == '"' {
			msg, _, _ = unquote(v, maxCommandError)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("env %s: %w", id, err)
	}
	if msg != "" {
		return fmt.Errorf("env %s: the kernel refused: %s", id, msg)
	}
	return nil
}

// request writes frame and reads frames until the one of type t with the
// frame's id, handing the others with that id to other (nil: skip them).
// It holds the Conn, waiting for a running Exec as a Ping does, and breaks
// it on any failure: an unanswered request leaves the stream out of step.
func (c *Conn) request(ctx context.Context, what string, frame map[string]any, t frameType, other func([]byte) error) ([]byte, error) {
	id, _ := frame["id"].(string)
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	defer func() { <-c.sem }()
	if err := c.broken(); err != nil {
		return nil, err
	}
	// The deadline covers the write too: a kernel that stops reading (a
	// cell holding the GIL) left a write of a command's input or of
	// assist's code blocked for good, the session busy until it ended.
	stop := watchDeadline(ctx, c.nc.SetDeadline)
	defer stop()
	if err := WriteFrame(c.nc, frame); err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			return nil, fmt.Errorf("%s: %w", what, err) // nothing was written
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return nil, c.fail(fmt.Errorf("%s: %w", what, err))
	}
	failed := func(err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return c.fail(fmt.Errorf("%s: %w", what, err))
	}
	for {
		b, err := ReadFrame(c.r, c.maxFrame)
		if err != nil {
			return nil, failed(err)
		}
		_, ft, fid, err := frameHead(b)
		if err != nil {
			return nil, failed(err)
		}
		if !stringIs(fid, id) {
			continue // a stray frame of an orphaned cell, or a forged one
		}
		if ft == t {
			return b, nil
		}
		if other != nil {
			if err := other(b); err != nil {
				return nil, failed(err)
			}
		}
	}
}

// decodeCommand reads a command reply within bounds: each stream at most
// maxOutput bytes, short fields capped.
func decodeCommand(b []byte, maxOutput int64) (*CommandReply, error) {
	obj, _, _, err := frameHead(b)
	if err != nil {
		return nil, err
	}
	r := &CommandReply{}
	limit := int(min(maxOutput, int64(maxInt)))
	text := func(dst *string, cut *bool, k, v []byte) error {
		switch kind(v) {
		case 'n':
			return nil
		case '"':
		default:
			return fmt.Errorf("command %s is not a string: %w", k, ErrProtocol)
		}
		out, _, _, c := scanString(nil, v, limit, maxInt, decode)
		*dst = string(out)
		if c {
			*cut = true
		}
		return nil
	}
	intField := func(dst *int, k, v []byte) error {
		if kind(v) == 'n' {
			return nil
		}
		n, err := strconv.Atoi(string(v))
		if kind(v) != '0' || len(v) > 20 || err != nil {
			return fmt.Errorf("command %s %.40s is not an integer: %w", k, v, ErrProtocol)
		}
		*dst = n
		return nil
	}
	var gotCode bool
	err = eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"job"`:
			if kind(v) == '"' {
				s, _, cut := unquote(v, maxJobName)
				if !cut {
					r.Job = s
				}
			}
		case `"pid"`:
			return intField(&r.PID, k, v)
		case `"done"`:
			return boolField(&r.Done, k, v)
		case `"exit_code"`:
			gotCode = kind(v) == '0'
			return intField(&r.ExitCode, k, v)
		case `"stdout"`:
			return text(&r.Stdout, &r.StdoutTruncated, k, v)
		case `"stderr"`:
			return text(&r.Stderr, &r.StderrTruncated, k, v)
		case `"stdout_truncated"`:
			var t bool
			err := boolField(&t, k, v)
			r.StdoutTruncated = r.StdoutTruncated || t
			return err
		case `"stderr_truncated"`:
			var t bool
			err := boolField(&t, k, v)
			r.StderrTruncated = r.StderrTruncated || t
			return err
		case `"timed_out"`:
			return boolField(&r.TimedOut, k, v)
		case `"error"`:
			if kind(v) == '"' {
				r.Error, _, _ = unquote(v, maxCommandError)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode command reply: %w", err)
	}
	if r.Error == "" && r.Job == "" {
		return nil, fmt.Errorf("command reply without a job: %w", ErrProtocol)
	}
	if r.Done && !gotCode {
		return nil, fmt.Errorf("command reply done without an exit code: %w", ErrProtocol)
	}
	return r, nil
}
