package seam

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
	"github.com/jailcell/jailcell/session/internal/setupcell"
)

// Sentinel errors, declared in one place; the API layer maps them to wire
// codes with errors.Is.
var (
	// ErrNotFound: what a request named is not there: a session (never
	// created, closed, expired, or owned by someone else), a file in its
	// workspace, its snapshot. The message names the thing and the
	// session, and says why where it may.
	ErrNotFound = errors.New("not found")
	// ErrBusy: the session is running another cell.
	ErrBusy = errors.New("session busy")
	// ErrLimit: a configured ceiling (live sessions, sizes) was reached.
	ErrLimit = errors.New("limit reached")
	// ErrBadRequest: the request itself is wrong; the message names the
	// field and what is allowed.
	ErrBadRequest = errors.New("bad request")
	// ErrUnavailable: the sandbox could not be built (host lacks a
	// feature, rootfs missing); nothing ran.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrShutdown: the manager is shutting down.
	ErrShutdown = errors.New("shutting down")
	// ErrStateQuota: the state dir's byte quota (Config.StateQuota) would
	// be passed by a checkpoint or a copy of a workspace; an ErrLimit.
	ErrStateQuota = fmt.Errorf("%w: state dir quota", ErrLimit)
	// ErrStoreQuota: the persist store's byte quota (Config.StoreQuota)
	// would be passed; an ErrLimit.
	ErrStoreQuota = fmt.Errorf("%w: store quota", ErrLimit)
	// ErrLost: the session existed and was lost with its kernel (a daemon
	// killed with -9 whose kernel did not survive, a node that died
	// holding it); an ErrNotFound whose message says why. Its persisted
	// files are not lost: they stay in the store.
	ErrLost = fmt.Errorf("%w: lost", ErrNotFound)
	// ErrExpired: the session reached its max lifetime (create's
	// max_lifetime_s, capped by sessions.max_lifetime) and was ended
	// however busy; the message names the limit and when it was reached.
	// Not an ErrNotFound: the id existed and retrying it cannot help.
	ErrExpired = errors.New("expired")
)

// Status values of a cell result.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusTimeout = "timeout"
	StatusOOM     = "oom"
	StatusKilled  = "killed"
)

// State values: what became of the session's kernel after a cell.
const (
	// StateKept: the kernel and every variable live on.
	StateKept = "kept"
	// StateLost: the kernel died or had to be killed; a fresh one is
	// started, variables are gone, files in the workspace remain.
	StateLost = "lost"
)

// Workdir is the session's working directory inside the sandbox.
const Workdir = "/work"

// HomeDir is the workspace under a second name, the home of the sandbox's
// user: /home/user, where E2B's sandboxes keep their files and where the
// field's programs (and the models that write them) look for them. Every
// sandbox has it; a session created with it as its cwd starts its cells
// and commands there.
const HomeDir = "/home/user"

// File is a file handed into a cell's working directory.
type File struct {
	Path string `json:"path"`
	Data []byte `json:"data"` // base64 on the wire
}

// FileChange is a file a cell created, modified or deleted.
type FileChange struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Change string `json:"change"` // created | modified | deleted
	// Data is the content, only for one-shot cells (their sandbox is gone
	// afterwards), up to the policy's ReturnFileBytes in total.
	Data []byte `json:"data,omitempty"`
	// Omitted is true when the content was left out for the size cap.
	Omitted bool `json:"omitted,omitempty"`
}

// CellError is a Python exception raised by a cell.
type CellError struct {
	Type      string  `json:"type"`
	Message   string  `json:"message"`
	Traceback string  `json:"traceback"`
	Frames    []Frame `json:"frames,omitempty"`
	// ExitCode is set when a shell command of the cell (`!cmd`, %pip)
	// exited non-zero and ended it (Type "subprocess.CalledProcessError"):
	// its exit status, or minus the signal that killed it. The kernel's
	// report, like the rest of the error.
	ExitCode *int `json:"exit_code,omitempty"`
}

// Frame is one traceback frame of cell code.
type Frame struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Name string `json:"name"`
	Code string `json:"code,omitempty"`
}

// DisplayItem is a rich output: a figure, or an object passed to display().
type DisplayItem struct {
	MIME   string         `json:"mime"`
	Data   string         `json:"data"`
	Bundle map[string]any `json:"bundle,omitempty"`
	// Pager marks text a magic sent to IPython's pager (%quickref, obj?,
	// %prun): Jupyter's `page` payload, never part of stdout.
	Pager bool `json:"pager,omitempty"`
	// Chart is what a matplotlib figure plotted, beside its PNG: type,
	// title, axis labels and the series' data, validated by the host.
	Chart *Chart `json:"chart,omitempty"`
	// Table is a pandas DataFrame's columns, {"name": [values]} in column
	// order, beside its bundle, for a frame of at most 10000 cells (E2B's
	// Result.data); validated and encoded anew by the host.
	Table json.RawMessage `json:"table,omitempty"`
}

// Chart and ChartElement are the kernel's chart data as runner validated
// it (runner.Chart documents the fields).
type (
	Chart        = runner.Chart
	ChartElement = runner.ChartElement
)

// The scopes of Usage.PeakMemoryBytes.
const (
	PeakScopeCell    = "cell"
	PeakScopeSession = "session"
)

// Usage is what a cell cost, measured on the host.
type Usage struct {
	WallMS          int64 `json:"wall_ms"`
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// PeakMemoryScope says what PeakMemoryBytes covers: PeakScopeCell
	// (this cell alone) where the host can reset the cgroup's high-water
	// mark (cgroup v1; v2 from Linux 6.12), else PeakScopeSession (the
	// peak since the session's sandbox started).
	PeakMemoryScope string `json:"peak_memory_scope"`
	// Network is present for sandboxes with network "allowlist".
	Network *NetworkUsage `json:"network,omitempty"`
}

// NetworkUsage is what a cell sent and received through its sandbox's
// gateway, counted there (IP packet bytes, headers included), and what it
// was refused.
type NetworkUsage struct {
	SentBytes     int64 `json:"sent_bytes"`
	ReceivedBytes int64 `json:"received_bytes"`
	// RefusedCount is every refused attempt of the cell; Refused lists at
	// most isolate.MaxRefusedSample (64) of them by destination, the most
	// frequent.
	RefusedCount int64            `json:"refused_count"`
	Refused      []RefusedAttempt `json:"refused,omitempty"`
}

// RefusedAttempt is a destination the gateway refused: an address and
// port, a name its DNS server would not answer for, or a listed name that
// resolved to a private address (DNS rebinding).
type RefusedAttempt struct {
	Addr   string `json:"addr,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// Result is the outcome of one cell, and the one declaration of the cell
// result on the wire (HTTP, JSON lines, the workflow's steps). Its copies
// are guarded: client.Result by the client's TestWireTypesMatch,
// runner.Result (the kernel's report) by TestKernelResultMatchesWire, and
// MCP's runPythonOut (a text view) by TestMCPResultMatchesWire; see the
// api package's "adding a result field" recipe.
type Result struct {
	// Status is ok | error | timeout | oom | killed. Timeout, oom and killed
	// are decided on the host (clock, cgroup counters, wait status), never
	// taken from the sandbox.
	Status          string         `json:"status"`
	Stdout          string         `json:"stdout"`
	Stderr          string         `json:"stderr"`
	StdoutTruncated bool           `json:"stdout_truncated"`
	StderrTruncated bool           `json:"stderr_truncated"`
	Error           *CellError     `json:"error,omitempty"`
	Value           map[string]any `json:"value,omitempty"`
	Display         []DisplayItem  `json:"display,omitempty"`
	Files           []FileChange   `json:"files,omitempty"`
	Usage           Usage          `json:"usage"`
	// State says whether the kernel's variables survived the cell.
	State string `json:"state,omitempty"`
	// StateReason says why state was lost.
	StateReason string `json:"state_reason,omitempty"`
	// Limits names the limits the cell ran into (memory, pids, disk,
	// output, time).
	Limits []string `json:"limits,omitempty"`
	// ExecutionCount is the cell's number in its kernel, as Jupyter's
	// (1, 2, 3...): the N of "<cell-N>" in tracebacks and of Out[N]. It
	// survives hibernate/restore, fork and rollback (the kernel's
	// checkpoint carries it) and starts again at 1 in the fresh kernel
	// after a loss (state "lost" says so). A session created with
	// requirements starts at 2: installing them was cell 1. 0 when the
	// cell never reached a kernel.
	ExecutionCount int `json:"execution_count,omitempty"`
	// ValueChart is the chart data of Value when the value is a
	// matplotlib Figure (fig on the cell's last line); see Chart.
	ValueChart *Chart `json:"value_chart,omitempty"`
	// ValueTable is Value's columns when the value is a pandas DataFrame
	// (see DisplayItem.Table).
	ValueTable json.RawMessage `json:"value_table,omitempty"`
}

// ExecRequest is one cell to run.
type ExecRequest struct {
	Code string
	// Timeout is the wall-clock limit; 0 means the policy's default. It is
	// clamped to the configured policy's ceiling; above the limits.timeout_s
	// a session was created with it is refused (ErrBadRequest).
	Timeout time.Duration
	// Files are placed in the working directory before the cell runs.
	Files []File
	// OnOutput, if set, receives stdout/stderr chunks as they happen.
	OnOutput func(stream, text string)
	// OnDisplay, if set, receives each display item (a figure, a
	// display() call) as the cell shows it; the result's Display list
	// still has them all. Called from the cell's goroutine, in order.
	OnDisplay func(DisplayItem)
	// OnClearOutput, if set, receives each IPython clear_output() of the
	// cell (wait: clear at the next output, not now), in its place among
	// the output and display items. Called from the cell's goroutine.
	OnClearOutput func(wait bool)
	// Snapshot takes a snapshot of the session (Manager.Snapshot) before
	// the cell runs, so that Rollback can undo it. The cell does not run
	// if the snapshot fails.
	Snapshot bool
	// RawANSI keeps the cell's text as the sandbox sent it. By default
	// stdout, stderr (streamed and in the result) and the error's message
	// and traceback are cleaned on the host (internal/termtext): ANSI
	// escape sequences removed, "\r\n" as "\n"; a lone "\r" stays.
	RawANSI bool
	// Envs are set in the kernel's environment (os.environ) for this cell
	// only, then put back to the session's (CheckEnvs bounds them).
	Envs map[string]string
	// Context, if set, runs the cell in that namespace of the session's
	// kernel instead of its main one (CheckContext bounds it).
	Context *CellContext

	// Setup marks the daemon's own cell (installing requirements at
	// create): Timeout is then the configured bound for that work, not a
	// request's, and the session's cell limits do not apply to it. Its
	// type is internal to session, so no caller above session can set
	// it: a request from a front door always has the cell limits.
	Setup setupcell.Mark
}

// CreateOptions shape a new session.
type CreateOptions struct {
	// Owner is the uid of the caller; only it (and root) may use the session.
	Owner int
	// TTL is the idle timeout; 0 means the configured default, capped by
	// the configured ceiling.
	TTL time.Duration
	// MaxLifetime ends the session this long after its creation however
	// busy; 0 means the configured MaxLifetime, which also caps it.
	MaxLifetime time.Duration
	// Policy names a configured policy ("" = default).
	Policy string
	// Override tightens the named policy.
	Override *policy.Override
	// Persist names a store entry the workspace is synced to after every
	// cell and restored from at create.
	Persist string
	// Requirements are pip requirement strings installed from the
	// wheelhouse before the session is ready.
	Requirements []string
	// Envs is the session's environment, added to the kernel's for every
	// cell and command (CheckEnvs bounds it).
	Envs map[string]string
	// Cwd is where the session's cells and commands start: "" or Workdir
	// (the default), or HomeDir, the same directory under the name E2B's
	// programs use (CheckStartDir).
	Cwd string
	// HibernateOnIdle hibernates the session at its idle TTL instead of
	// ending it: its kernel and files wait on disk for the next cell (or
	// a restore), until the hibernated TTL. Needs checkpoint/restore.
	HibernateOnIdle bool
}

// CheckStartDir validates a create's cwd: the workspace under one of its
// two names.
func CheckStartDir(cwd string) error {
	if cwd != "" && cwd != Workdir && cwd != HomeDir {
		return fmt.Errorf("%w: cwd %.80q: a session starts in its workspace, %s (the default) or %s (the same directory under its second name)", ErrBadRequest, cwd, Workdir, HomeDir)
	}
	return nil
}

// Info describes a session.
type Info struct {
	ID        string    `json:"session"`
	State     string    `json:"state"` // ready | busy | starting | hibernated
	Policy    string    `json:"policy"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the session ends if unused: its idle TTL from the
	// last cell, or its lifetime from creation, whichever comes first.
	ExpiresAt time.Time `json:"expires_at"`
	Cells     int       `json:"cells"`
	Persist   string    `json:"persist,omitempty"`
	// Cwd is where the session's cells and commands start when it is not
	// Workdir: HomeDir, asked for at create.
	Cwd string `json:"cwd,omitempty"`
	// HibernateOnIdle: the session is hibernated at its idle TTL, not
	// ended (ExpiresAt is then when it hibernates, if its lifetime is
	// later).
	HibernateOnIdle bool `json:"hibernate_on_idle,omitempty"`
	// Restored lists files restored from the persist store at create.
	Restored []string `json:"restored,omitempty"`
	// Survives says what a persisted session keeps across sessions.
	Survives string `json:"survives,omitempty"`
	// Start says how the session's kernel started: "zygote" (forked from
	// its policy's preloaded zygote), "template" (restored from its
	// policy's checkpoint after the preload) or "import" (a new
	// interpreter imported the preload). Pooled: it was waiting ready in
	// the warm pool when the create came.
	Start  string `json:"start,omitempty"`
	Pooled bool   `json:"pooled,omitempty"`
	// Installed lists requirements installed at create.
	Installed []string `json:"installed,omitempty"`
	// ForkedFrom is the session this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// SnapshotAt is when the session's snapshot (rollback target) was
	// taken; nil: none.
	SnapshotAt *time.Time `json:"snapshot_at,omitempty"`
	// StateReason says why a rollback or restore lost the variables.
	StateReason string `json:"state_reason,omitempty"`
	// MemoryBytes is the memory the session's sandbox is charged now
	// (its cgroup; sessions listings only): 0 while hibernated.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// Entry is one file in a session's workspace.
type Entry struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Dir  bool   `json:"dir,omitempty"`
	// Symlink: the entry is a symbolic link (never followed); Link is its
	// target as written in the sandbox ("" if it could not be read).
	Symlink bool   `json:"symlink,omitempty"`
	Link    string `json:"link,omitempty"`
	// Mode is the permission bits (st_mode & 07777); UID and GID the owner
	// and group as the sandbox sees them (0 is its root; 65534 an id it
	// does not map). Absent: 0, or not known (an upload's answer).
	Mode    uint32    `json:"mode,omitempty"`
	UID     int       `json:"uid,omitempty"`
	GID     int       `json:"gid,omitempty"`
	ModTime time.Time `json:"mtime"`
	// Metadata is the file's user metadata (its user.e2b.* extended
	// attributes, prefix cut), absent if it has none.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Download is a file's content.
type Download struct {
	Path   string `json:"path"`
	Data   []byte `json:"data"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}
