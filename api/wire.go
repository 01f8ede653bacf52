package api

import (
	"encoding/json"
	"fmt"
	"strings"

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
	// OpRename moves "path" to "to" in one rename(2), answering the moved
	// "entry": a file may replace a file, a directory goes only to a new
	// path.
	OpRename = "rename"
	// OpWatch starts (action "start", "path", "recursive"), polls or stops
	// ("watch") a directory watch: the response's "watch", "events" and
	// "overflow".
	OpWatch = "watch"
)

var ops = []string{OpPing, OpExec, OpCreate, OpUpload, OpDownload, OpFiles, OpClose, OpSessions, OpFailures, OpHibernate, OpRestore, OpFork, OpSnapshot, OpRollback, OpInterrupt, OpComplete, OpInspect, OpIsComplete, OpCommand, OpInfo, OpSetTimeout, OpMetrics, OpStat, OpRemove, OpMkdir, OpRename, OpWatch}

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
	// Context runs the cell in a named namespace of the session's kernel
	// (exec): {"id", "cwd", "reset"}; absent: the main namespace.
	Context *seam.CellContext `json:"context,omitempty"`
	// Files are placed in the cell's working directory before it runs.
	Files []seam.File `json:"files,omitempty"`
	// Path and Data are the upload's destination and content; Path alone
	// names a download.
	Path string `json:"path,omitempty"`
	Data []byte `json:"data,omitzero"` // omitted only when nil: empty is an empty file
	// To is where a rename moves Path (relative to the working directory,
	// or absolute in the workspace).
	To string `json:"to,omitempty"`
	// Metadata becomes the uploaded file's whole metadata (upload): keys
	// and values of printable ASCII, at most 4096 bytes in all; absent
	// clears what the file had. Entries show it back.
	Metadata map[string]string `json:"metadata,omitempty"`

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
	// HibernateOnIdle hibernates a new session at its idle TTL instead of
	// ending it (create; needs checkpoint/restore on the host).
	HibernateOnIdle bool `json:"hibernate_on_idle,omitempty"`

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
	// Cwd is a command's working directory, relative to the session's
	// start directory, or absolute in the workspace under either of its
	// names (/work, /home/user). With create, the session's start
	// directory: /work (the default) or /home/user.
	Cwd string `json:"cwd,omitempty"`
	// Background makes a command's start answer at once with its job.
	Background bool `json:"background,omitempty"`
	// Job names a background command to wait for, kill, write to or
	// resize.
	Job string `json:"job,omitempty"`
	// Stdin keeps a background command's stdin a pipe for action "input"
	// (else it reads /dev/null).
	Stdin bool `json:"stdin,omitempty"`
	// PTY runs a background command in a new terminal of this size (all
	// its output comes as stdout), or is the new size (action "resize").
	PTY *seam.PTYSize `json:"pty,omitempty"`
	// Input is written to a command's stdin (action "input"), at most
	// 1 MiB; EOF closes its stdin after it (a pipe only).
	Input string `json:"input,omitempty"`
	EOF   bool   `json:"eof,omitempty"`
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
	// upload: the file's metadata as written (absent: none).
	Metadata map[string]string `json:"metadata,omitempty"`
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
