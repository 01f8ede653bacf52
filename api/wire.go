package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/workflow"
)

// Wire error codes.
const (
	CodeBadRequest = "bad_request"
	CodeNotFound   = "not_found"
	// CodeExpired: the session reached its max lifetime and was ended
	// however busy; the message names the limit and when.
	CodeExpired     = "expired"
	CodeLimit       = "limit"
	CodeBusy        = "busy"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
)

// Ops, in the order they are listed in errors.
const (
	OpPing     = "ping"
	OpExec     = "exec"
	OpCreate   = "create"
	OpUpload   = "upload"
	OpDownload = "download"
	OpFiles    = "files"
	OpClose    = "close"
	OpSessions = "sessions"
	// OpFailures lists or clears the failure memory (needs a workflow).
	OpFailures = "failures"
	// OpHibernate checkpoints a session to disk and releases its memory;
	// OpRestore brings it back (an exec does so by itself).
	OpHibernate = "hibernate"
	OpRestore   = "restore"
	// OpFork makes a new session that starts as an exact copy of a live
	// one (kernel and workspace); the response's info is the new session.
	OpFork = "fork"
	// OpSnapshot saves a session's kernel and files as its rollback
	// target (exec's "snapshot": true does it before the cell); OpRollback
	// returns the session to it, in place.
	OpSnapshot = "snapshot"
	OpRollback = "rollback"
	// OpInterrupt sends the cell running in a session a KeyboardInterrupt;
	// the response's "interrupted" says whether a cell was running. The
	// cell's own response is then an ordinary Python error, state kept.
	OpInterrupt = "interrupt"
	// OpComplete, OpInspect and OpIsComplete are Jupyter's complete,
	// inspect and is_complete on a session's kernel, between cells: the
	// response's "completion", "inspection" or "completeness".
	OpComplete   = "complete"
	OpInspect    = "inspect"
	OpIsComplete = "is_complete"
	// OpCommand runs a shell command inside a session's sandbox (action
	// "start", the default), or waits for or kills one started with
	// "background": the response's "command".
	OpCommand = "command"
	// OpInfo answers a session's info as it is now (E2B's get_info).
	OpInfo = "info"
	// OpSetTimeout makes a session end "timeout_s" from now unless used
	// again (E2B's set_timeout): refused past max_idle_ttl or its lifetime.
	OpSetTimeout = "set_timeout"
	// OpMetrics samples a session's CPU, memory and disk from the host's
	// side of its cgroup and disk: the response's "metrics".
	OpMetrics = "metrics"
	// OpStat, OpRemove and OpMkdir: one path of the workspace described
	// ("entry"), removed (with all below it), or made a directory
	// ("created": false if it was one already).
	OpStat   = "stat"
	OpRemove = "remove"
	OpMkdir  = "mkdir"
	// OpWatch starts (action "start", "path", "recursive"), polls or stops
	// ("watch") a directory watch: the response's "watch", "events" and
	// "overflow".
	OpWatch = "watch"
)

var ops = []string{OpPing, OpExec, OpCreate, OpUpload, OpDownload, OpFiles, OpClose, OpSessions, OpFailures, OpHibernate, OpRestore, OpFork, OpSnapshot, OpRollback, OpInterrupt, OpComplete, OpInspect, OpIsComplete, OpCommand, OpInfo, OpSetTimeout, OpMetrics, OpStat, OpRemove, OpMkdir, OpWatch}

// allowedOps is the list bad requests quote.
var allowedOps = strings.Join(ops, ", ")

// Request is one request. Marshalled with encoding/json it is a valid wire
// line; decode wire lines with DecodeRequest, not json.Unmarshal, which
// would skip the type checks and their messages.
type Request struct {
	// ID is echoed verbatim in every response and event: a JSON string or
	// number.
	ID json.RawMessage `json:"id"`
	Op string          `json:"op"`

	// Code is the cell's Python source (exec).
	Code string `json:"code,omitempty"`
	// Session names the session for exec, upload, download, files and
	// close; exec without it is a one-shot cell.
	Session string `json:"session,omitempty"`
	// TimeoutS is the cell's wall-clock limit in seconds; 0 means the
	// policy's default. The manager clamps it to the policy's ceiling.
	TimeoutS float64 `json:"timeout_s,omitempty"`
	// Stream asks for stdout, stderr and display events before the final
	// response.
	Stream bool `json:"stream,omitempty"`
	// Snapshot takes a snapshot of the session before the cell runs
	// (exec in a session), the target of a later rollback.
	Snapshot bool `json:"snapshot,omitempty"`
	// RawANSI keeps the cell's text as the sandbox wrote it (exec). By
	// default stdout, stderr, their stream events and the error's message
	// and traceback come without ANSI escape sequences (colours, cursor
	// moves) and with "\r\n" as "\n"; a lone "\r" (a progress bar
	// redrawing its line) stays.
	RawANSI bool `json:"raw_ansi,omitempty"`
	// Files are placed in the cell's working directory before it runs.
	Files []seam.File `json:"files,omitempty"`
	// Path and Data are the upload's destination and content; Path alone
	// names a download.
	Path string `json:"path,omitempty"`
	Data []byte `json:"data,omitzero"` // omitted only when nil: empty is an empty file

	// TTLS is a new session's idle timeout in seconds (0 = default).
	TTLS float64 `json:"ttl_s,omitempty"`
	// MaxLifetimeS ends a new session this many seconds after its
	// creation however busy (0 = the configured max_lifetime, its ceiling).
	MaxLifetimeS float64 `json:"max_lifetime_s,omitempty"`
	// Policy names a configured policy (create, one-shot exec).
	Policy string `json:"policy,omitempty"`
	// Limits tighten the policy of a new session.
	Limits *policy.Override `json:"limits,omitempty"`
	// Persist names a store entry the workspace is synced to.
	Persist string `json:"persist,omitempty"`
	// Requirements are pip requirement strings installed at create.
	Requirements []string `json:"requirements,omitempty"`

	// Fix turns on fix-and-retry for an exec (needs a configured fixer).
	Fix *Fix `json:"fix,omitempty"`
	// Memory opts an exec without fix into failure memory (fix implies
	// it): a remembered failure answers it "skipped".
	Memory bool `json:"memory,omitempty"`
	// Force runs an exec even when failure memory would skip it.
	Force bool `json:"force,omitempty"`
	// Action is the failures op's action: "list" (default) or "clear".
	Action string `json:"action,omitempty"`

	// CursorPos is the cursor's offset in Code, in Unicode code points
	// (complete, inspect); absent: the end of Code.
	CursorPos *int `json:"cursor_pos,omitempty"`
	// DetailLevel is inspect's 0 (signature and docstring, default) or 1
	// (with the source).
	DetailLevel int `json:"detail_level,omitempty"`

	// Cmd is a command's bash command line (command).
	Cmd string `json:"cmd,omitempty"`
	// Envs are environment variables: the session's (create), one cell's
	// (exec), one command's (command).
	Envs map[string]string `json:"envs,omitempty"`
	// Cwd is a command's working directory, relative to /work.
	Cwd string `json:"cwd,omitempty"`
	// Background makes a command's start answer at once with its job.
	Background bool `json:"background,omitempty"`
	// Job names a background command to wait for or kill.
	Job string `json:"job,omitempty"`
	// Watch names a directory watch to poll or stop; Recursive makes a
	// new one watch subdirectories too.
	Watch     string `json:"watch,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Fix is an exec's fix-and-retry request.
type Fix struct {
	// MaxAttempts counts every run, the first included: 1 to the
	// configured ceiling (fixer.max_attempts_ceiling).
	MaxAttempts int `json:"max_attempts"`
}

// Error is a wire error. It is also a Go error so transports can pass it on.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// State is "lost" on a not_found for a session that existed and was
	// lost with its kernel (its node was killed, its kernel died while no
	// daemon held it); Message says why. Its persisted files remain.
	State string `json:"state,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func badRequest(format string, a ...any) *Error {
	return &Error{Code: CodeBadRequest, Message: fmt.Sprintf(format, a...)}
}

// Response is the one final answer to a request. Op-specific fields are
// omitted when they do not apply.
type Response struct {
	ID    json.RawMessage `json:"id"`
	OK    bool            `json:"ok"`
	Error *Error          `json:"error,omitempty"`

	// ping
	Version   string         `json:"version,omitempty"`
	Isolation *seam.Features `json:"isolation,omitempty"`
	// exec
	Result *seam.Result `json:"result,omitempty"`
	// exec through the workflow, beside "result" so its shape is
	// unchanged: every attempt of a fix loop, the fallback block when the
	// loop failed (also on an error response when no sandbox could be
	// had), "degraded" when result came from the degraded stateless run,
	// and the remembered failure behind a "skipped" result.
	Attempts []workflow.Attempt `json:"attempts,omitempty"`
	Fallback *workflow.Fallback `json:"fallback,omitempty"`
	Mode     string             `json:"mode,omitempty"`
	Known    *workflow.Known    `json:"known,omitempty"`
	// failures: the remembered failures (list), or how many were cleared.
	Failures []*workflow.Failure `json:"failures,omitzero"`
	Cleared  *int                `json:"cleared,omitempty"`
	// create: every Info field (session, expires_at, ...) at the top level.
	*seam.Info
	// upload, download
	Path   string `json:"path,omitempty"`
	Size   *int64 `json:"size,omitempty"`
	Data   []byte `json:"data,omitzero"` // non-nil for a download, even empty
	SHA256 string `json:"sha256,omitempty"`
	// files, sessions: non-nil for those ops so an empty list is [].
	Files    []seam.Entry `json:"files,omitzero"`
	Sessions []seam.Info  `json:"sessions,omitzero"`
	// interrupt: whether a cell was running (and was sent the interrupt).
	Interrupted *bool `json:"interrupted,omitempty"`
	// complete, inspect, is_complete.
	Completion   *seam.Completion   `json:"completion,omitempty"`
	Inspection   *seam.Inspection   `json:"inspection,omitempty"`
	Completeness *seam.Completeness `json:"completeness,omitempty"`
	// command
	Command *seam.CommandResult `json:"command,omitempty"`
	// metrics
	Metrics *seam.SessionMetrics `json:"metrics,omitempty"`
	// stat
	Entry *seam.Entry `json:"entry,omitempty"`
	// mkdir: false if the directory was there already.
	Created *bool `json:"created,omitempty"`
	// watch: the watch's id, the changes since the last poll (non-nil for
	// that op), and whether more happened than were listed.
	Watch    string            `json:"watch,omitempty"`
	Events   []seam.WatchEvent `json:"events,omitzero"`
	Overflow bool              `json:"overflow,omitempty"`

	// plainOK: an info answer that made nothing (info, set_timeout) is
	// 200 over HTTP, not create's 201.
	plainOK bool
}

// Event kinds.
const (
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventDisplay = "display"
	// EventClearOutput is IPython's clear_output(): what the cell showed
	// so far is to be cleared, now or (Wait) when the next output comes.
	// It is no output: the result has no record of it.
	EventClearOutput = "clear_output"
)

// Event is a streamed piece of a cell's output, sent before its response:
// a chunk of text (stdout, stderr), one display item as the cell shows it
// (display), the same object as that item in the result's list, or a
// clear_output.
type Event struct {
	ID      json.RawMessage   `json:"id"`
	Event   string            `json:"event"` // stdout | stderr | display | clear_output
	Text    string            `json:"text,omitempty"`
	Display *seam.DisplayItem `json:"display,omitempty"`
	// Wait is clear_output's flag: clear when the next output comes.
	Wait bool `json:"wait,omitempty"`
}

// nullID is what a response carries when no id could be read.
var nullID = json.RawMessage("null")

// DecodeRequest parses and validates one wire request. On failure the
// returned Request is still non-nil and carries the id if one could be read
// (else a JSON null), so the caller can answer it. Unknown fields are
// ignored; a known field of the wrong type is refused by name.
func DecodeRequest(line []byte) (*Request, *Error) {
	req := &Request{ID: nullID}
	if !utf8.Valid(line) {
		return req, badRequest("request is not valid UTF-8 (first bad byte at offset %d)", invalidUTF8At(line))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		if k := jsonKind(line); k != "" && k != "object" && json.Valid(line) {
			return req, badRequest("request must be a JSON object, got %s", k)
		}
		if se, ok := err.(*json.SyntaxError); ok {
			return req, badRequest("request is not valid JSON: %v (at byte %d)", se, se.Offset)
		}
		return req, badRequest("request is not valid JSON: %v", err)
	}
	if fields == nil { // the line was "null"
		return req, badRequest("request must be a JSON object, got null")
	}

	d := decoder{fields: fields}
	if raw, ok := d.present("id"); !ok {
		return req, badRequest(`field "id" is required: a string or number, echoed in the response`)
	} else if k := jsonKind(raw); k != "string" && k != "number" {
		return req, badRequest(`field "id" must be a string or number, got %s`, k)
	} else {
		req.ID = raw
	}

	d.str("op", &req.Op)
	d.str("code", &req.Code)
	d.str("session", &req.Session)
	d.seconds("timeout_s", &req.TimeoutS)
	d.boolean("stream", &req.Stream)
	d.boolean("snapshot", &req.Snapshot)
	d.boolean("raw_ansi", &req.RawANSI)
	d.files(&req.Files)
	d.str("path", &req.Path)
	d.base64("data", &req.Data)
	d.seconds("ttl_s", &req.TTLS)
	d.seconds("max_lifetime_s", &req.MaxLifetimeS)
	d.str("policy", &req.Policy)
	d.limits(&req.Limits)
	d.str("persist", &req.Persist)
	d.strings("requirements", &req.Requirements)
	d.fix(&req.Fix)
	d.boolean("memory", &req.Memory)
	d.boolean("force", &req.Force)
	d.str("action", &req.Action)
	d.count("cursor_pos", &req.CursorPos)
	var detail *int
	d.count("detail_level", &detail)
	if detail != nil {
		req.DetailLevel = *detail
	}
	d.str("cmd", &req.Cmd)
	d.envs(&req.Envs)
	d.str("cwd", &req.Cwd)
	d.boolean("background", &req.Background)
	d.str("job", &req.Job)
	d.str("watch", &req.Watch)
	d.boolean("recursive", &req.Recursive)
	if d.err != nil {
		return req, d.err
	}
	if _, ok := d.present("data"); ok && req.Data == nil {
		req.Data = []byte{} // present but empty: an empty file, not a missing field
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	return req, nil
}

// Validate checks what an op needs, whichever transport built the request.
func (r *Request) Validate() *Error {
	need := func(field, what string, have bool) *Error {
		if have {
			return nil
		}
		return badRequest("op %q needs field %q (%s)", r.Op, field, what)
	}
	if r.Op == "" {
		return badRequest(`field "op" is required; allowed: %s`, allowedOps)
	}
	if r.TimeoutS < 0 || math.IsNaN(r.TimeoutS) {
		return badRequest(`field "timeout_s" = %g: must be a number of seconds >= 0 (0 or absent: the policy's default)`, r.TimeoutS)
	}
	if r.TTLS < 0 || math.IsNaN(r.TTLS) {
		return badRequest(`field "ttl_s" = %g: must be a number of seconds >= 0 (0 or absent: the default)`, r.TTLS)
	}
	if r.MaxLifetimeS < 0 || math.IsNaN(r.MaxLifetimeS) {
		return badRequest(`field "max_lifetime_s" = %g: must be a number of seconds >= 0 (0 or absent: the configured max_lifetime)`, r.MaxLifetimeS)
	}
	if r.MaxLifetimeS != 0 && r.Op != OpCreate {
		return badRequest(`field "max_lifetime_s" is only allowed with op "create"`)
	}
	if r.RawANSI && r.Op != OpExec {
		return badRequest(`field "raw_ansi" is only allowed with op "exec": it keeps a cell's output as written`)
	}
	switch r.Op {
	case OpPing, OpSessions:
		return nil
	case OpExec:
		if err := need("code", "the cell's Python source, a non-empty string", r.Code != ""); err != nil {
			return err
		}
		for i, f := range r.Files {
			if f.Path == "" {
				return badRequest(`field "files[%d].path" is required: a path relative to the working directory`, i)
			}
		}
		if r.Session != "" && r.Policy != "" {
			// Ignoring it would let a client believe a stricter policy applied.
			return badRequest(`field "policy" is not allowed with "session": a session runs under the policy it was created with`)
		}
		if r.Limits != nil {
			return badRequest(`field "limits" is only allowed with op "create"; a one-shot exec runs under a named "policy"`)
		}
		if r.Snapshot && r.Session == "" {
			return badRequest(`field "snapshot" needs "session": a one-shot cell has nothing to roll back to`)
		}
		if r.Fix != nil && r.Fix.MaxAttempts < 1 {
			return badRequest(`field "fix.max_attempts" = %d: must be at least 1 (the first run counts)`, r.Fix.MaxAttempts)
		}
		return nil
	case OpCreate:
		return nil
	case OpUpload:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		if err := need("path", "a path relative to the working directory", r.Path != ""); err != nil {
			return err
		}
		return need("data", "the content, base64", r.Data != nil)
	case OpDownload:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("path", "a path relative to the working directory", r.Path != "")
	case OpFiles, OpClose, OpHibernate, OpRestore, OpFork, OpSnapshot, OpRollback, OpInterrupt:
		return need("session", "a session id", r.Session != "")
	case OpComplete, OpInspect, OpIsComplete:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		if r.CursorPos != nil && *r.CursorPos < 0 {
			return badRequest(`field "cursor_pos" = %d: must be an offset in "code" in characters, >= 0 (absent: the end of the code)`, *r.CursorPos)
		}
		if r.DetailLevel != 0 && r.DetailLevel != 1 {
			return badRequest(`field "detail_level" = %d: allowed 0 (default) or 1`, r.DetailLevel)
		}
		return nil
	case OpCommand:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		switch r.Action {
		case "", seam.CommandStart:
			return need("cmd", "a bash command line, a non-empty string", r.Cmd != "")
		case seam.CommandWait, seam.CommandKill:
			return need("job", "the job a background start answered", r.Job != "")
		}
		return badRequest(`field "action" = %q: allowed for op "command": "start" (default), "wait" or "kill"`, r.Action)
	case OpInfo, OpMetrics:
		return need("session", "a session id", r.Session != "")
	case OpSetTimeout:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("timeout_s", "seconds from now, > 0", r.TimeoutS > 0)
	case OpStat, OpRemove, OpMkdir:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("path", "a path relative to the working directory", r.Path != "")
	case OpWatch:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		switch r.Action {
		case "", seam.WatchStart:
			return nil
		case seam.WatchPoll, seam.WatchStop:
			return need("watch", "the id a watch start answered", r.Watch != "")
		}
		return badRequest(`field "action" = %q: allowed for op "watch": "start" (default), "poll" or "stop"`, r.Action)
	case OpFailures:
		if r.Action != "" && r.Action != "list" && r.Action != "clear" {
			return badRequest(`field "action" = %q: allowed "list" (default) or "clear"`, r.Action)
		}
		return nil
	}
	return badRequest(`unknown op %q; allowed: %s`, r.Op, allowedOps)
}

// decoder reads known fields out of a request object, keeping the first
// error. JSON null counts as absent, the way most clients spell "unset".
type decoder struct {
	fields map[string]json.RawMessage
	err    *Error
}

func (d *decoder) present(name string) (json.RawMessage, bool) {
	raw, ok := d.fields[name]
	if !ok || jsonKind(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// get returns the raw value if it is present and no error came before.
func (d *decoder) get(name string) (json.RawMessage, bool) {
	if d.err != nil {
		return nil, false
	}
	return d.present(name)
}

func (d *decoder) wrongType(name, want string, raw json.RawMessage) {
	d.err = badRequest("field %q must be %s, got %s", name, want, jsonKind(raw))
}

func (d *decoder) str(name string, dst *string) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "string" || json.Unmarshal(raw, dst) != nil {
		d.wrongType(name, "a string", raw)
	}
}

func (d *decoder) boolean(name string, dst *bool) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "boolean" || json.Unmarshal(raw, dst) != nil {
		d.wrongType(name, "a boolean", raw)
	}
}

func (d *decoder) seconds(name string, dst *float64) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "number" {
		d.wrongType(name, "a number of seconds", raw)
		return
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		d.err = badRequest("field %q = %s is out of range: must be a number of seconds >= 0", name, raw)
		return
	}
	if *dst < 0 {
		d.err = badRequest("field %q = %s: must be a number of seconds >= 0 (0 or absent: the default)", name, raw)
	}
}

func (d *decoder) base64(name string, dst *[]byte) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var s string
	if jsonKind(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		d.wrongType(name, "a base64 string", raw)
		return
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		d.err = badRequest("field %q is not valid base64 (standard alphabet, padded): %v", name, err)
		return
	}
	*dst = b
}

func (d *decoder) strings(name string, dst *[]string) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var items []json.RawMessage
	if jsonKind(raw) != "array" || json.Unmarshal(raw, &items) != nil {
		d.wrongType(name, "an array of strings", raw)
		return
	}
	if len(items) == 0 {
		return // [] means what absent means; nil keeps a round trip exact
	}
	out := make([]string, len(items))
	for i, it := range items {
		if jsonKind(it) != "string" || json.Unmarshal(it, &out[i]) != nil {
			d.err = badRequest("field %q must be an array of strings, element %d is %s", name, i, jsonKind(it))
			return
		}
	}
	*dst = out
}

// envs decodes an object of string values; seam.CheckEnvs bounds it.
func (d *decoder) envs(dst *map[string]string) {
	raw, ok := d.get("envs")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("envs", "an object of environment variables, name to string value", raw)
		return
	}
	if len(obj) == 0 {
		return
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		var s string
		if jsonKind(v) != "string" || json.Unmarshal(v, &s) != nil {
			d.err = badRequest("field %q must map names to strings, %.64q is %s", "envs", k, jsonKind(v))
			return
		}
		out[k] = s
	}
	*dst = out
}

// count decodes a non-negative integer (a JSON number without fraction).
func (d *decoder) count(name string, dst **int) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var n int
	if jsonKind(raw) != "number" || json.Unmarshal(raw, &n) != nil {
		d.wrongType(name, "an integer", raw)
		return
	}
	if n < 0 {
		d.err = badRequest("field %q = %d: must be >= 0", name, n)
		return
	}
	*dst = &n
}

// fix decodes {"max_attempts": integer}; an unknown key is refused, like
// limits, so a misspelt option is not silently ignored.
func (d *decoder) fix(dst **Fix) {
	raw, ok := d.get("fix")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("fix", `an object {"max_attempts": integer}`, raw)
		return
	}
	f := &Fix{}
	for key, val := range obj {
		if key != "max_attempts" {
			d.err = badRequest(`field "fix.%s" is not a fix option; allowed: max_attempts`, key)
			return
		}
		if jsonKind(val) != "number" || json.Unmarshal(val, &f.MaxAttempts) != nil {
			d.err = badRequest(`field "fix.max_attempts" must be an integer, got %s`, jsonValueDesc(val))
			return
		}
	}
	if _, ok := obj["max_attempts"]; !ok {
		d.err = badRequest(`field "fix.max_attempts" is required: the number of runs, 1 to the configured ceiling`)
		return
	}
	*dst = f
}

func (d *decoder) files(dst *[]seam.File) {
	raw, ok := d.get("files")
	if !ok {
		return
	}
	var items []json.RawMessage
	if jsonKind(raw) != "array" || json.Unmarshal(raw, &items) != nil {
		d.wrongType("files", `an array of {"path": string, "data": base64 string}`, raw)
		return
	}
	if len(items) == 0 {
		return // [] means what absent means; nil keeps a round trip exact
	}
	out := make([]seam.File, len(items))
	for i, it := range items {
		var obj map[string]json.RawMessage
		if jsonKind(it) != "object" || json.Unmarshal(it, &obj) != nil {
			d.err = badRequest(`field "files[%d]" must be an object {"path": string, "data": base64 string}, got %s`, i, jsonKind(it))
			return
		}
		sub := decoder{fields: obj}
		sub.str("path", &out[i].Path)
		sub.base64("data", &out[i].Data)
		if sub.err != nil {
			sub.err.Message = strings.Replace(sub.err.Message, `field "`, fmt.Sprintf(`field "files[%d].`, i), 1)
			d.err = sub.err
			return
		}
		if out[i].Data == nil {
			if _, ok := sub.present("data"); !ok {
				d.err = badRequest(`field "files[%d].data" is required: the content, base64 (empty string for an empty file)`, i)
				return
			}
			out[i].Data = []byte{}
		}
	}
	*dst = out
}

// overrideFields maps each policy.Override JSON name to its field, so a
// field added there is accepted here without an edit.
var overrideFields = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeFor[policy.Override]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && t.Field(i).Type.Kind() == reflect.Pointer {
			m[name] = i
		}
	}
	return m
}()

func overrideNames() string {
	var names []string
	t := reflect.TypeFor[policy.Override]()
	for i := range t.NumField() {
		for n, j := range overrideFields {
			if j == i {
				names = append(names, n)
			}
		}
	}
	return strings.Join(names, ", ")
}

// limits decodes a policy.Override. Unlike the request itself, an unknown
// key is refused: a misspelt limit silently not applied would leave the
// session looser than its caller believes.
func (d *decoder) limits(dst **policy.Override) {
	raw, ok := d.get("limits")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("limits", "an object of limits ("+overrideNames()+")", raw)
		return
	}
	o := &policy.Override{}
	v := reflect.ValueOf(o).Elem()
	for key, val := range obj {
		i, ok := overrideFields[key]
		if !ok {
			d.err = badRequest(`field "limits.%s" is not a limit; allowed: %s`, key, overrideNames())
			return
		}
		if jsonKind(val) == "null" {
			continue
		}
		ft := v.Field(i).Type()
		p := reflect.New(ft.Elem())
		if err := json.Unmarshal(val, p.Interface()); err != nil {
			want := "a number"
			switch ft.Elem().Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				want = "an integer"
			case reflect.String:
				want = "a string"
			case reflect.Bool:
				want = "a boolean"
			}
			d.err = badRequest(`field "limits.%s" must be %s, got %s`, key, want, jsonValueDesc(val))
			return
		}
		v.Field(i).Set(p)
	}
	*dst = o
}

// jsonKind names the JSON type of a value by its first byte; "" if empty.
func jsonKind(raw []byte) string {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			return "string"
		case '{':
			return "object"
		case '[':
			return "array"
		case 't', 'f':
			return "boolean"
		case 'n':
			return "null"
		default:
			return "number"
		}
	}
	return ""
}

// jsonValueDesc is a short description of a value for an error message.
func jsonValueDesc(raw json.RawMessage) string {
	if k := jsonKind(raw); k != "number" {
		return k
	}
	if len(raw) > 32 {
		return "a number"
	}
	return string(raw)
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// duration turns seconds into a Duration, saturating instead of
// overflowing, and keeping any positive value positive (0 means "default"
// downstream, which a tiny timeout must not become).
func duration(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	if seconds >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	if d := time.Duration(seconds * float64(time.Second)); d > 0 {
		return d
	}
	return 1
}
