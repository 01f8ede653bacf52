package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/workflow"
)

// Handler carries out wire requests: the Dispatcher in this process, or a
// Remote that hands them to a running service. The JSON-lines and MCP
// transports take either, so they behave the same in both places.
type Handler interface {
	Handle(ctx context.Context, owner int, req *Request, emit func(Event)) *Response
}

var _ Handler = (*Dispatcher)(nil)

// Opener is a Handler that can also hand a door a workspace file to
// stream (Dispatcher.Open); a door over a Handler without it downloads.
type Opener interface {
	Open(ctx context.Context, owner int, session, path string) (*seam.OpenFile, *Error)
}

var _ Opener = (*Dispatcher)(nil)

// Putter is a Handler that can also write a workspace file from a stream
// as its bytes come (Dispatcher.Put); a door over a Handler without it
// reads an upload whole first.
type Putter interface {
	Put(ctx context.Context, owner int, session, path string, r io.Reader, metadata map[string]string) (*Response, *Error)
}

var _ Putter = (*Dispatcher)(nil)

// PortDialer is a Handler that can also connect a door to a server a
// session's cells started (Dispatcher.DialPort): E2B's proxy for a
// sandbox's ports. A Remote has none: such a door answers that ports
// cannot be reached.
type PortDialer interface {
	DialPort(ctx context.Context, owner int, session string, port int) (net.Conn, *Error)
}

var _ PortDialer = (*Dispatcher)(nil)

// Dispatcher carries out requests. It is the only place requests turn into
// manager calls, so every transport behaves the same. Safe for concurrent
// use.
type Dispatcher struct {
	// Manager runs the cells. Nil answers every op but ping with
	// "unavailable" (tests, and a front end started before its host).
	Manager Sessions
	// Version is reported by ping.
	Version string
	// Features, if set, answers ping's "isolation"; default the manager's,
	// or a fresh seam.Probe without a manager.
	Features func() seam.Features
	// Logger receives handler panics (default slog.Default()).
	Logger *slog.Logger
	// Workflow, if set, runs every exec: fix-and-retry, fallback, degraded
	// mode, failure memory. Nil: execs go straight to the Manager, and
	// "fix" and the failures op are refused.
	Workflow *workflow.Runner
}

// Handle carries out req on behalf of the uid owner and returns its one
// final response. With req.Stream, emit receives output events before
// Handle returns and never after. A panic in a handler becomes an
// "internal" response rather than a dead process.
func (d *Dispatcher) Handle(ctx context.Context, owner int, req *Request, emit func(Event)) (resp *Response) {
	if req == nil {
		return fail(nil, badRequest("no request"))
	}
	// The manager may call OnOutput from its own goroutines; once the
	// response exists a late chunk must not follow it on the wire.
	var mu sync.Mutex
	done := false
	send := func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if !done && emit != nil {
			emit(ev)
		}
	}
	defer func() {
		if v := recover(); v != nil {
			resp = fail(req.ID, d.panicked(req.Op, v))
		}
		mu.Lock()
		done = true
		mu.Unlock()
	}()

	if err := req.Validate(); err != nil {
		return fail(req.ID, err)
	}
	if req.Op == OpPing {
		f := d.features()
		return &Response{ID: req.ID, OK: true, Version: d.Version, Isolation: &f}
	}
	if d.Manager == nil {
		return fail(req.ID, &Error{Code: CodeUnavailable, Message: "no sandbox manager is configured"})
	}
	r, err := d.do(ctx, owner, req, send)
	if err != nil {
		resp := fail(req.ID, errorFor(err))
		var fe *fallbackError
		if errors.As(err, &fe) {
			resp.Fallback = fe.fb
		}
		return resp
	}
	r.ID, r.OK = req.ID, true
	return r
}

// panicked logs the panic v of op with its stack and returns the internal
// error it answers: a handler's panic is an answer, never a dead process.
// recover itself must stay in each deferred function.
func (d *Dispatcher) panicked(op string, v any) *Error {
	d.logger().Error("handler panic", "op", op, "panic", v, "stack", string(debug.Stack()))
	return &Error{Code: CodeInternal, Message: fmt.Sprintf("internal error: panic in %s: %v", op, v)}
}

// Put writes a workspace file from r as its bytes come, for a door that
// streams an upload (HTTP's file route, E2B's /files): the daemon holds
// one copy buffer, never the file (read whole, a few large uploads at
// once passed the node's byte bound). The request is checked as an
// upload's; a read error of r comes back as the error (the caller, who
// owns r, knows it for its own). The answer is an upload's.
func (d *Dispatcher) Put(ctx context.Context, owner int, session, path string, r io.Reader, metadata map[string]string) (resp *Response, e *Error) {
	defer func() {
		if v := recover(); v != nil {
			resp, e = nil, d.panicked("put", v)
		}
	}()
	req := &Request{Op: OpUpload, Session: session, Path: path, Data: []byte{}, Metadata: metadata}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if d.Manager == nil {
		return nil, &Error{Code: CodeUnavailable, Message: "no sandbox manager is configured"}
	}
	ent, err := d.Manager.Workspace().UploadFrom(ctx, owner, session, path, r, metadata)
	if err != nil {
		return nil, errorFor(err)
	}
	return &Response{OK: true, Path: ent.Path, Size: &ent.Size, Metadata: ent.Metadata}, nil
}

// DialPort connects to TCP port on the loopback of session's sandbox,
// where a server its cells started listens (seam.Workspace.DialPort). The
// caller closes the connection.
func (d *Dispatcher) DialPort(ctx context.Context, owner int, session string, port int) (c net.Conn, e *Error) {
	defer func() {
		if v := recover(); v != nil {
			c, e = nil, d.panicked("dial_port", v)
		}
	}()
	if session == "" {
		return nil, badRequest("dial_port needs a session: the sandbox whose server to reach")
	}
	if d.Manager == nil {
		return nil, &Error{Code: CodeUnavailable, Message: "no sandbox manager is configured"}
	}
	c, err := d.Manager.Workspace().DialPort(ctx, owner, session, port)
	if err != nil {
		return nil, errorFor(err)
	}
	return c, nil
}

// Open opens a workspace file for a door that streams it (HTTP's file
// route, E2B's /files): the daemon then holds a descriptor while the
// client reads, never the file's bytes (downloads read whole let one
// owner's many reads of a 256 MiB file pass the node's byte bound). The
// caller closes the file. The request is checked as a download's.
func (d *Dispatcher) Open(ctx context.Context, owner int, session, path string) (f *seam.OpenFile, e *Error) {
	defer func() {
		if v := recover(); v != nil {
			f, e = nil, d.panicked("open", v)
		}
	}()
	req := &Request{Op: OpDownload, Session: session, Path: path}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if d.Manager == nil {
		return nil, &Error{Code: CodeUnavailable, Message: "no sandbox manager is configured"}
	}
	f, err := d.Manager.Workspace().Open(ctx, owner, session, path)
	if err != nil {
		return nil, errorFor(err)
	}
	return f, nil
}

// sessionOps are the ops on one session that answer with its info (fork:
// the new session's).
var sessionOps = map[string]func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error){
	OpHibernate: func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error) {
		return m.Durability().Hibernate(ctx, owner, id)
	},
	OpRestore: func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error) {
		return m.Durability().Restore(ctx, owner, id)
	},
	OpFork: func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error) {
		return m.Durability().Fork(ctx, owner, id)
	},
	OpSnapshot: func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error) {
		return m.Durability().Snapshot(ctx, owner, id)
	},
	OpRollback: func(m Sessions, ctx context.Context, owner int, id string) (*seam.Info, error) {
		return m.Durability().Rollback(ctx, owner, id)
	},
}

func (d *Dispatcher) do(ctx context.Context, owner int, req *Request, send func(Event)) (*Response, error) {
	m := d.Manager
	switch req.Op {
	case OpExec:
		if err := seam.CheckEnvs("envs", req.Envs); err != nil {
			return nil, err
		}
		if err := seam.CheckContext("context", req.Context); err != nil {
			return nil, err
		}
		er := seam.ExecRequest{Code: req.Code, Timeout: duration(req.TimeoutS), Files: req.Files, Snapshot: req.Snapshot, RawANSI: req.RawANSI, Envs: req.Envs, Context: req.Context}
		if req.Stream {
			er.OnOutput = func(stream, text string) { send(Event{ID: req.ID, Event: stream, Text: text}) }
			er.OnDisplay = func(item seam.DisplayItem) { send(Event{ID: req.ID, Event: EventDisplay, Display: &item}) }
			er.OnClearOutput = func(wait bool) { send(Event{ID: req.ID, Event: EventClearOutput, Wait: wait}) }
		}
		if d.Workflow != nil {
			return d.execWorkflow(ctx, owner, req, er)
		}
		if req.Fix != nil {
			return nil, badRequest("%s", workflow.ErrorForMissingFixer())
		}
		var res *seam.Result
		var err error
		if req.Session != "" {
			res, err = m.Exec(ctx, owner, req.Session, er)
		} else {
			res, err = m.RunOnce(ctx, owner, req.Policy, er)
		}
		if err != nil {
			return nil, err
		}
		return &Response{Result: res}, nil
	case OpCreate:
		info, err := m.Create(ctx, seam.CreateOptions{
			Owner:           owner,
			TTL:             duration(req.TTLS),
			MaxLifetime:     duration(req.MaxLifetimeS),
			Policy:          req.Policy,
			Override:        req.Limits,
			Persist:         req.Persist,
			Requirements:    req.Requirements,
			Envs:            req.Envs,
			Cwd:             req.Cwd,
			HibernateOnIdle: req.HibernateOnIdle,
		})
		if err != nil {
			return nil, err
		}
		return &Response{Info: info}, nil
	case OpUpload:
		e, err := m.Workspace().Upload(ctx, owner, req.Session, req.Path, req.Data, req.Metadata)
		if err != nil {
			return nil, err
		}
		return &Response{Path: e.Path, Size: &e.Size, Metadata: e.Metadata}, nil
	case OpDownload:
		dl, err := m.Workspace().Download(ctx, owner, req.Session, req.Path)
		if err != nil {
			return nil, err
		}
		data := dl.Data
		if data == nil {
			data = []byte{}
		}
		return &Response{Path: dl.Path, Data: data, Size: &dl.Size, SHA256: dl.SHA256}, nil
	case OpFiles:
		entries, err := m.Workspace().Files(ctx, owner, req.Session)
		if err != nil {
			return nil, err
		}
		if entries == nil {
			entries = []seam.Entry{}
		}
		return &Response{Files: entries}, nil
	case OpClose:
		return &Response{}, m.Close(ctx, owner, req.Session)
	case OpHibernate, OpRestore, OpFork, OpSnapshot, OpRollback:
		info, err := sessionOps[req.Op](m, ctx, owner, req.Session)
		if err != nil {
			return nil, err
		}
		return &Response{Info: info}, nil
	case OpInterrupt:
		ran, err := m.Interrupt(ctx, owner, req.Session)
		if err != nil {
			return nil, err
		}
		return &Response{Interrupted: &ran}, nil
	case OpComplete, OpInspect, OpIsComplete:
		a, err := m.Assist(ctx, owner, req.Session, seam.AssistRequest{Kind: req.Op, Code: req.Code, CursorPos: req.CursorPos, DetailLevel: req.DetailLevel})
		if err != nil {
			return nil, err
		}
		return &Response{Completion: a.Completion, Inspection: a.Inspection, Completeness: a.Completeness}, nil
	case OpCommand:
		cr := seam.CommandRequest{Action: req.Action, Cmd: req.Cmd, Envs: req.Envs, Cwd: req.Cwd, Timeout: duration(req.TimeoutS), Background: req.Background, Job: req.Job,
			Stdin: req.Stdin, PTY: req.PTY, Input: req.Input, EOF: req.EOF}
		if req.Stream {
			cr.OnOutput = func(stream, text string) { send(Event{ID: req.ID, Event: stream, Text: text}) }
		}
		res, err := m.Command(ctx, owner, req.Session, cr)
		if err != nil {
			return nil, err
		}
		return &Response{Command: res}, nil
	case OpInfo:
		info, err := m.Info(ctx, owner, req.Session)
		if err != nil {
			return nil, err
		}
		return &Response{Info: info, plainOK: true}, nil
	case OpSetTimeout:
		info, err := m.SetTimeout(ctx, owner, req.Session, duration(req.TimeoutS))
		if err != nil {
			return nil, err
		}
		return &Response{Info: info, plainOK: true}, nil
	case OpMetrics:
		mt, err := m.SessionMetrics(ctx, owner, req.Session)
		if err != nil {
			return nil, err
		}
		return &Response{Metrics: mt}, nil
	case OpStat:
		e, err := m.Workspace().Stat(ctx, owner, req.Session, req.Path)
		if err != nil {
			return nil, err
		}
		return &Response{Entry: e}, nil
	case OpRemove:
		if err := m.Workspace().Remove(ctx, owner, req.Session, req.Path); err != nil {
			return nil, err
		}
		return &Response{Path: req.Path}, nil
	case OpRename:
		e, err := m.Workspace().Rename(ctx, owner, req.Session, req.Path, req.To)
		if err != nil {
			return nil, err
		}
		return &Response{Entry: e}, nil
	case OpMkdir:
		created, err := m.Workspace().MakeDir(ctx, owner, req.Session, req.Path)
		if err != nil {
			return nil, err
		}
		return &Response{Path: req.Path, Created: &created}, nil
	case OpWatch:
		w, err := m.Workspace().Watch(ctx, owner, req.Session, seam.WatchRequest{Action: req.Action, Path: req.Path, Recursive: req.Recursive, Watch: req.Watch})
		if err != nil {
			return nil, err
		}
		return &Response{Watch: w.Watch, Events: w.Events, Overflow: w.Overflow}, nil
	case OpFailures:
		return d.failures(owner, req)
	case OpSessions:
		list := m.List(ctx, owner)
		if list == nil {
			list = []seam.Info{}
		}
		return &Response{Sessions: list}, nil
	}
	// Validate knows every op; reaching here is a bug in this file.
	return nil, fmt.Errorf("op %q has no handler", req.Op)
}

// execWorkflow runs an exec through the workflow. A sandbox that could not
// be had is still an error response, with the fallback block beside it.
func (d *Dispatcher) execWorkflow(ctx context.Context, owner int, req *Request, er seam.ExecRequest) (*Response, error) {
	wr := workflow.Request{Owner: owner, Session: req.Session, Policy: req.Policy, Exec: er, Memory: req.Memory, Force: req.Force}
	if req.Fix != nil {
		if !d.Workflow.HasFixer() {
			return nil, badRequest("%s", workflow.ErrorForMissingFixer())
		}
		wr.MaxAttempts = req.Fix.MaxAttempts
	}
	out, err := d.Workflow.Exec(ctx, wr)
	if err != nil {
		if out != nil && out.Fallback != nil {
			return nil, &fallbackError{err: err, fb: out.Fallback}
		}
		return nil, err
	}
	return &Response{Result: out.Result, Attempts: out.Attempts, Fallback: out.Fallback, Mode: out.Mode, Known: out.Known}, nil
}

// fallbackError carries a fallback block onto an error response.
type fallbackError struct {
	err error
	fb  *workflow.Fallback
}

func (e *fallbackError) Error() string { return e.err.Error() }
func (e *fallbackError) Unwrap() error { return e.err }

func (d *Dispatcher) failures(owner int, req *Request) (*Response, error) {
	if d.Workflow == nil {
		return nil, &Error{Code: CodeUnavailable, Message: "failure memory is off: no workflow is configured"}
	}
	if req.Action == "clear" {
		if owner != 0 {
			return nil, &Error{Code: CodeBadRequest, Message: `action "clear" is for root: failure memory is shared by every user`}
		}
		n, err := d.Workflow.ClearFailures()
		if err != nil {
			return nil, err
		}
		return &Response{Cleared: &n}, nil
	}
	list := d.Workflow.Failures(owner)
	if list == nil {
		list = []*workflow.Failure{}
	}
	return &Response{Failures: list}, nil
}

func (d *Dispatcher) features() seam.Features {
	switch {
	case d.Features != nil:
		return d.Features()
	case d.Manager != nil:
		return d.Manager.Features()
	}
	return seam.Probe()
}

func (d *Dispatcher) logger() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.Default()
}

func fail(id []byte, e *Error) *Response {
	if id == nil {
		id = nullID
	}
	return &Response{ID: id, Error: e}
}

// errorCodes maps sentinels to wire codes, first match wins. The message is
// kept whole: jailcell runs on the operator's own machine, so the detail
// helps more than it leaks.
var errorCodes = []struct {
	err  error
	code string
}{
	{seam.ErrBadRequest, CodeBadRequest},
	{workflow.ErrNoFixer, CodeBadRequest},
	{policy.ErrInvalid, CodeBadRequest},
	{seam.ErrNotFound, CodeNotFound},
	{seam.ErrExpired, CodeExpired},
	{seam.ErrLimit, CodeLimit}, // ErrStateQuota, ErrStoreQuota: the message names the quota's key
	{seam.ErrBusy, CodeBusy},
	{seam.ErrUnavailable, CodeUnavailable},
	{seam.ErrShutdown, CodeUnavailable},
}

func errorFor(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// An error from below that session passed on unwrapped is classed by
	// session (Sentinel): api knows no isolate sentinel.
	is := seam.Sentinel(err)
	for _, m := range errorCodes {
		if errors.Is(err, m.err) || is == m.err {
			e := &Error{Code: m.code, Message: err.Error()}
			if errors.Is(err, seam.ErrLost) {
				e.State = seam.StateLost
			}
			return e
		}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
