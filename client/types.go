package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// API is what both transports offer.
type API interface {
	// Create starts a session and returns once its kernel is ready.
	Create(ctx context.Context, opts CreateOptions) (*Session, error)
	// Sessions lists the caller's live sessions.
	Sessions(ctx context.Context) ([]Session, error)
	// CloseSession ends a session now.
	CloseSession(ctx context.Context, id string) error
	// Exec runs code in session id, or in a fresh one-shot sandbox when id
	// is "". opts may be nil.
	Exec(ctx context.Context, id, code string, opts *ExecOptions) (*Result, error)
	// Upload writes data to path in the session's working directory; the
	// file is left with no metadata.
	Upload(ctx context.Context, id, path string, data []byte) error
	// UploadWith is Upload shaped by opts (its metadata); it returns the
	// file's entry as the upload answers it: Path, Size and Metadata.
	UploadWith(ctx context.Context, id, path string, data []byte, opts UploadOptions) (*Entry, error)
	// Download reads path from the session's working directory.
	Download(ctx context.Context, id, path string) ([]byte, error)
	// Files lists the session's working directory.
	Files(ctx context.Context, id string) ([]Entry, error)
	// Hibernate checkpoints a session to disk and releases its memory
	// (state "hibernated"); the next Exec or Restore brings it back.
	Hibernate(ctx context.Context, id string) (*Session, error)
	// Restore brings a hibernated session back now.
	Restore(ctx context.Context, id string) (*Session, error)
	// Fork makes a new session that starts as an exact copy of session id
	// (variables, imports, open files, workspace) and returns it.
	Fork(ctx context.Context, id string) (*Session, error)
	// Snapshot saves session id's kernel and files as its rollback target.
	Snapshot(ctx context.Context, id string) (*Session, error)
	// Rollback returns session id to its snapshot, in place.
	Rollback(ctx context.Context, id string) (*Session, error)
	// Interrupt sends the cell running in session id a KeyboardInterrupt,
	// as Jupyter's interrupt, and reports whether a cell was running. The
	// cell's own Exec then returns a Python error (KeyboardInterrupt) with
	// its state kept.
	Interrupt(ctx context.Context, id string) (bool, error)
}

// Error is an error answered by jailcell.
type Error struct {
	// Status is the HTTP status (0 over JSON lines).
	Status int
	// Code is the wire code: bad_request, not_found, expired, limit, busy,
	// unavailable, internal, or forbidden (HTTP only).
	Code    string
	Message string
	// State is "lost" on a not_found for a session that existed and was
	// lost with its kernel (its node was killed, its kernel died while no
	// daemon held it): retrying or recreating it will not bring back its
	// variables, though its persisted files remain. "" otherwise.
	State string
}

func (e *Error) Error() string { return fmt.Sprintf("jailcell: %s: %s", e.Code, e.Message) }

// Is makes errors.Is(err, ErrNotFound) (and the other sentinels below)
// true for a jailcell error with that wire code, wrapped or not.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == 0 && t.Message == "" && t.Code == e.Code
}

// Sentinels for errors.Is, one per wire code. Use errors.As with *Error for
// the message and the HTTP status.
var (
	ErrBadRequest = &Error{Code: "bad_request"}
	ErrNotFound   = &Error{Code: "not_found"}
	// ErrExpired: the session reached its max_lifetime and was ended
	// (HTTP 410); its variables and files are gone.
	ErrExpired     = &Error{Code: "expired"}
	ErrLimit       = &Error{Code: "limit"}
	ErrBusy        = &Error{Code: "busy"}
	ErrUnavailable = &Error{Code: "unavailable"}
	ErrInternal    = &Error{Code: "internal"}
	ErrForbidden   = &Error{Code: "forbidden"}
)

// IsCode reports whether err is, or wraps, a jailcell error with the given
// code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// CreateOptions shape a new session; the zero value takes every default.
type CreateOptions struct {
	// TTL is the idle timeout (0: the service's default).
	TTL time.Duration
	// MaxLifetime ends the session this long after its creation however
	// busy (0: the service's max_lifetime, which also caps it).
	MaxLifetime time.Duration
	// Policy names a configured policy ("" = default).
	Policy string
	// Limits tighten the policy.
	Limits *Limits
	// Persist names a store entry the workspace is saved to.
	Persist string
	// Requirements are pip requirements installed from the wheelhouse.
	Requirements []string
	// Envs is the session's environment, for every cell and command.
	Envs map[string]string
	// Cwd is where cells and commands start: "" or "/work" (the
	// default), or "/home/user", the same workspace under E2B's name.
	Cwd string
	// HibernateOnIdle hibernates the session at its TTL instead of ending
	// it (E2B's pause at its timeout): its kernel, processes and files
	// wait on disk and its next cell (or Restore) brings them back. A host
	// without checkpoint/restore refuses the create (ErrUnavailable)
	// rather than end the session at its TTL all the same; so does the
	// client when a service older than the field ignores it.
	HibernateOnIdle bool
}

// Limits tighten a session's policy; nil fields keep the policy's value.
type Limits struct {
	MemoryBytes *int64   `json:"memory_bytes,omitempty"`
	Pids        *int64   `json:"pids,omitempty"`
	CPUs        *float64 `json:"cpus,omitempty"`
	DiskBytes   *int64   `json:"disk_bytes,omitempty"`
	OutputBytes *int64   `json:"output_bytes,omitempty"`
	TimeoutS    *float64 `json:"timeout_s,omitempty"`
	// Allow narrows the policy's egress allowlist (never widens it).
	Allow *[]Allow `json:"allow,omitempty"`
}

// Allow is one egress allowlist entry: a host name (or "*.suffix"), an IP
// or a CIDR, with its ports.
type Allow struct {
	Host  string   `json:"host,omitempty"`
	IP    string   `json:"ip,omitempty"`
	CIDR  string   `json:"cidr,omitempty"`
	Ports []uint16 `json:"ports"`
}

// ExecOptions shape one cell; the zero value takes every default.
type ExecOptions struct {
	// Timeout is the cell's wall-clock limit (0: the policy's default).
	Timeout time.Duration
	// Files are placed in the working directory before the cell runs.
	Files []File
	// Policy names the policy of a one-shot cell (id ""); a session runs
	// under its own.
	Policy string
	// OnOutput, if set, receives stdout and stderr as the cell writes them
	// (the request is then streamed). It is called on the goroutine that
	// called Exec, in order, and every call is made before Exec returns.
	// It may call the client, e.g. Interrupt this cell or run another
	// session's: over JSON lines too, answers are read while it runs.
	OnOutput func(stream, text string)
	// OnDisplay, if set, receives each display item (a figure, a
	// display() call) as the cell shows it; the result's Display list
	// still has them all. The request is then streamed; it is called as
	// OnOutput is, in the order the cell produced them.
	OnDisplay func(DisplayItem)
	// Snapshot takes a snapshot of the session before the cell runs: the
	// target of a later Rollback.
	Snapshot bool
	// RawANSI keeps the cell's text as written: by default ANSI escape
	// sequences are removed and "\r\n" comes as "\n".
	RawANSI bool
	// Envs are set for this cell only, then put back.
	Envs map[string]string
}

// UploadOptions shape one upload; the zero value writes the file with no
// metadata.
type UploadOptions struct {
	// Metadata becomes the file's whole metadata, kept in its user.e2b.*
	// extended attributes (E2B's; a program in the sandbox may read and set
	// them too): keys of 1 to 246 bytes, keys and values printable ASCII
	// (0x20-0x7e), at most 4096 bytes in all counting 9 per key. nil or
	// empty clears what the file had. The service refuses anything else
	// (ErrBadRequest, naming the key) and writes no file.
	Metadata map[string]string
}

// File is a file handed to a cell.
type File struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// Session describes a session.
type Session struct {
	ID        string    `json:"session"`
	State     string    `json:"state"`
	Policy    string    `json:"policy"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Cells     int       `json:"cells"`
	Persist   string    `json:"persist,omitempty"`
	// Cwd is where the session's cells and commands start when it is not
	// /work: /home/user, the same workspace under its second name.
	Cwd string `json:"cwd,omitempty"`
	// HibernateOnIdle: the session is hibernated at its TTL, not ended
	// (ExpiresAt is then when it hibernates).
	HibernateOnIdle bool     `json:"hibernate_on_idle,omitempty"`
	Restored        []string `json:"restored,omitempty"`
	Survives        string   `json:"survives,omitempty"`
	Installed       []string `json:"installed,omitempty"`
	// ForkedFrom is the session this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// Start says how its kernel started: "template" or "import"; Pooled,
	// that it waited ready in the warm pool.
	Start  string `json:"start,omitempty"`
	Pooled bool   `json:"pooled,omitempty"`
	// SnapshotAt is when the rollback target was taken (nil: none).
	SnapshotAt *time.Time `json:"snapshot_at,omitempty"`
	// StateReason says why a rollback lost the variables.
	StateReason string `json:"state_reason,omitempty"`
	// MemoryBytes is the memory the session is charged now (listings
	// only; 0 while hibernated).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// Entry is one file in a session's working directory.
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
	// Metadata is the file's metadata (see UploadOptions), nil if none.
	// A program in the sandbox may set it too: untrusted, though the
	// service shows only what is within the bounds an upload has.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Result is the outcome of one cell.
type Result struct {
	// Status is ok, error, timeout, oom or killed.
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
	// State is "kept" (variables survive) or "lost".
	State       string   `json:"state,omitempty"`
	StateReason string   `json:"state_reason,omitempty"`
	Limits      []string `json:"limits,omitempty"`
	// ExecutionCount is the cell's number in its kernel, as Jupyter's
	// (1, 2, 3...); it starts again at 1 after the state was lost.
	ExecutionCount int `json:"execution_count,omitempty"`
	// ValueChart is the chart data of Value when it is a matplotlib Figure.
	ValueChart *Chart `json:"value_chart,omitempty"`
	// ValueTable is Value's columns when it is a pandas DataFrame of at
	// most 10000 cells: {"name": [values]} in column order.
	ValueTable json.RawMessage `json:"value_table,omitempty"`

	// The rest travel beside the wire's result, in the exec response (the
	// workflow's fields), and are copied here so a caller cannot miss them.

	// Mode is "degraded" when this result came from the degraded stateless
	// run (a policy with degraded: stateless, after the cell could not be
	// made to work): the cell ran once in a fresh one-shot sandbox, so
	// nothing it defined or imported is in the session. "" for a normal run.
	Mode string `json:"-"`
	// Fallback is what a person needs when the fix-and-retry loop could not
	// make the cell work (also set beside a degraded result).
	Fallback *Fallback `json:"-"`
	// Attempts is every run of a fix-and-retry loop, the first included.
	Attempts []Attempt `json:"-"`
	// Known is the remembered failure behind a "skipped" result.
	Known *Known `json:"-"`
}

// Attempt is one run of the fix-and-retry loop.
type Attempt struct {
	Attempt int        `json:"attempt"`
	Code    string     `json:"code"`
	Status  string     `json:"status"`
	Error   *CellError `json:"error,omitempty"`
	Stdout  string     `json:"stdout,omitempty"`
	Stderr  string     `json:"stderr,omitempty"`
}

// Fallback is what the fix-and-retry loop leaves when it could not make
// the cell work.
type Fallback struct {
	// Code is the last code tried, to run by hand.
	Code string `json:"code"`
	// Error is the exact error: the traceback, or the sandbox error.
	Error string `json:"error"`
	// Reason says why the loop ended.
	Reason string `json:"reason"`
	// Tried lists what was attempted, in order.
	Tried []string `json:"tried"`
}

// Known is the remembered failure a skipped cell matched, and how to run
// it anyway.
type Known struct {
	Fingerprint string    `json:"fingerprint"`
	Policy      string    `json:"policy"`
	Type        string    `json:"type"`
	Message     string    `json:"message"`
	Modules     []string  `json:"modules,omitempty"`
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	// Force says how to run the cell anyway.
	Force string `json:"force"`
}

// CellError is a Python exception raised by a cell.
type CellError struct {
	Type      string  `json:"type"`
	Message   string  `json:"message"`
	Traceback string  `json:"traceback"`
	Frames    []Frame `json:"frames,omitempty"`
	// ExitCode is a failed shell command's exit status (`!cmd`, %pip),
	// negative for a signal; nil for a Python exception.
	ExitCode *int `json:"exit_code,omitempty"`
}

// Frame is one traceback frame.
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
	// Chart is what a matplotlib figure plotted, beside its PNG; nil for
	// anything else.
	Chart *Chart `json:"chart,omitempty"`
	// Table is a displayed pandas DataFrame's columns (see ValueTable).
	Table json.RawMessage `json:"table,omitempty"`
}

// Chart is the data of a matplotlib figure: its type, title, axis labels
// and the plotted series, with E2B's field names. Type says which fields
// the elements use:
//   - "line", "scatter": Label and Points ([x, y]; on a "datetime" axis x
//     is a matplotlib date number, days since 1970-01-01).
//   - "bar": Label (the category), Group (the series) and Value (height,
//     or width when Orientation is "horizontal").
//   - "pie": Label, Angle (degrees: the share is Angle/360) and Radius.
//   - "histogram": Label, Edges (one more than Counts) and Counts.
//   - "box_and_whisker": Label, Min, FirstQuartile, Median, ThirdQuartile,
//     Max and Outliers.
//   - "superchart": several subplots, each element the Chart of one.
//   - "unknown": PNG only; Reason says why.
type Chart struct {
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	XLabel      string         `json:"x_label,omitempty"`
	YLabel      string         `json:"y_label,omitempty"`
	XUnit       string         `json:"x_unit,omitempty"`
	YUnit       string         `json:"y_unit,omitempty"`
	XScale      string         `json:"x_scale,omitempty"`
	YScale      string         `json:"y_scale,omitempty"`
	XTicks      []float64      `json:"x_ticks,omitempty"`
	XTickLabels []string       `json:"x_tick_labels,omitempty"`
	YTicks      []float64      `json:"y_ticks,omitempty"`
	YTickLabels []string       `json:"y_tick_labels,omitempty"`
	Orientation string         `json:"orientation,omitempty"`
	Stacked     bool           `json:"stacked,omitempty"`
	Elements    []ChartElement `json:"elements"`
	// Truncated says points, elements or subplots were left out.
	Truncated bool   `json:"truncated,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ChartElement is one series, bar, wedge or histogram of a Chart, or in a
// superchart the Chart of one subplot, carried inline.
type ChartElement struct {
	Label  string       `json:"label,omitempty"`
	Group  string       `json:"group,omitempty"`
	Value  *float64     `json:"value,omitempty"`
	Points [][2]float64 `json:"points,omitempty"`
	Angle  *float64     `json:"angle,omitempty"`
	Radius *float64     `json:"radius,omitempty"`
	Edges  []float64    `json:"edges,omitempty"`
	Counts []float64    `json:"counts,omitempty"`
	// A box_and_whisker element's statistics.
	Min           *float64  `json:"min,omitempty"`
	FirstQuartile *float64  `json:"first_quartile,omitempty"`
	Median        *float64  `json:"median,omitempty"`
	ThirdQuartile *float64  `json:"third_quartile,omitempty"`
	Max           *float64  `json:"max,omitempty"`
	Outliers      []float64 `json:"outliers,omitempty"`
	*Chart
}

// FileChange is a file a cell created, modified or deleted; one-shot cells
// return the content.
type FileChange struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Change  string `json:"change"`
	Data    []byte `json:"data,omitempty"`
	Omitted bool   `json:"omitted,omitempty"`
}

// Usage is what a cell cost, measured on the host.
type Usage struct {
	WallMS          int64 `json:"wall_ms"`
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// PeakMemoryScope is "cell" when PeakMemoryBytes is this cell's own
	// peak, "session" when the host cannot reset the high-water mark
	// (cgroup v2 before Linux 6.12) and it is the session sandbox's
	// lifetime peak.
	PeakMemoryScope string `json:"peak_memory_scope"`
	// Network is present for sandboxes with an egress allowlist.
	Network *NetworkUsage `json:"network,omitempty"`
}

// NetworkUsage is what a cell sent and received through its allowlist
// gateway, and what the gateway refused.
type NetworkUsage struct {
	SentBytes     int64 `json:"sent_bytes"`
	ReceivedBytes int64 `json:"received_bytes"`
	// RefusedCount is every refused attempt of the cell; Refused lists at
	// most 64 of them, the most frequent.
	RefusedCount int64            `json:"refused_count"`
	Refused      []RefusedAttempt `json:"refused,omitempty"`
}

// RefusedAttempt is one refused destination (address and port, or name).
type RefusedAttempt struct {
	Addr   string `json:"addr,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// Health is the answer to a ping.
type Health struct {
	Version   string         `json:"version"`
	Isolation map[string]any `json:"isolation"`
}

// wireError is the "error" object of a response.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	State   string `json:"state,omitempty"`
}

// response is every field of a response the client reads.
type response struct {
	OK        bool           `json:"ok"`
	Error     *wireError     `json:"error"`
	Result    *Result        `json:"result"`
	Version   string         `json:"version"`
	Isolation map[string]any `json:"isolation"`
	Data      []byte         `json:"data"`
	Files     []Entry        `json:"files"`
	Sessions  []Session      `json:"sessions"`
	// Path, Size and Metadata answer an upload: the file as written.
	Path     string            `json:"path"`
	Size     int64             `json:"size"`
	Metadata map[string]string `json:"metadata"`
	// Interrupted answers an interrupt.
	Interrupted bool `json:"interrupted"`
	// Attempts, Fallback, Mode and Known answer an exec run through the
	// workflow, beside its result.
	Attempts []Attempt `json:"attempts"`
	Fallback *Fallback `json:"fallback"`
	Mode     string    `json:"mode"`
	Known    *Known    `json:"known"`
	Session
}

// result is an exec's result with the response's workflow fields on it
// (nil if the response has none).
func (r *response) result() *Result {
	if r.Result == nil {
		return nil
	}
	res := r.Result
	res.Mode, res.Fallback, res.Attempts, res.Known = r.Mode, r.Fallback, r.Attempts, r.Known
	return res
}

// uploaded is the entry an upload's response describes.
func (r *response) uploaded() *Entry {
	return &Entry{Path: r.Path, Size: r.Size, Metadata: r.Metadata}
}

// event is one streamed line before a response: output text, or a
// display item.
type event struct {
	Event   string       `json:"event"`
	Text    string       `json:"text"`
	Display *DisplayItem `json:"display"`
}

// streamed reports whether o asks for events.
func (o *ExecOptions) streamed() bool { return o != nil && (o.OnOutput != nil || o.OnDisplay != nil) }

// deliver passes an event to o's callbacks; kinds it does not know (a
// newer server's) are skipped.
func (o *ExecOptions) deliver(ev event) {
	switch {
	case ev.Event == "display":
		if o.OnDisplay != nil && ev.Display != nil {
			o.OnDisplay(*ev.Display)
		}
	case ev.Event == "stdout" || ev.Event == "stderr":
		if o.OnOutput != nil {
			o.OnOutput(ev.Event, ev.Text)
		}
	}
}

// execBody is the exec fields of a request.
type execBody struct {
	Code     string            `json:"code"`
	TimeoutS float64           `json:"timeout_s,omitempty"`
	Files    []File            `json:"files,omitempty"`
	Policy   string            `json:"policy,omitempty"`
	Snapshot bool              `json:"snapshot,omitempty"`
	RawANSI  bool              `json:"raw_ansi,omitempty"`
	Envs     map[string]string `json:"envs,omitempty"`
}

func newExecBody(code string, o *ExecOptions) execBody {
	b := execBody{Code: code}
	if o != nil {
		b.TimeoutS, b.Files, b.Policy, b.Snapshot, b.RawANSI, b.Envs = o.Timeout.Seconds(), o.Files, o.Policy, o.Snapshot, o.RawANSI, o.Envs
	}
	return b
}

// createBody is the create fields of a request.
type createBody struct {
	TTLS         float64           `json:"ttl_s,omitempty"`
	MaxLifetimeS float64           `json:"max_lifetime_s,omitempty"`
	Policy       string            `json:"policy,omitempty"`
	Limits       *Limits           `json:"limits,omitempty"`
	Persist      string            `json:"persist,omitempty"`
	Requirements []string          `json:"requirements,omitempty"`
	Envs         map[string]string `json:"envs,omitempty"`
	Cwd          string            `json:"cwd,omitempty"`
	// HibernateOnIdle: a server older than the field ignores it, which
	// created catches.
	HibernateOnIdle bool `json:"hibernate_on_idle,omitempty"`
}

// created is a create's answer checked against what was asked: a server
// older than hibernate_on_idle ignores the field, and its session would
// end at its TTL, losing what the caller meant to keep. That session is
// closed and the create refused.
func created(ctx context.Context, c API, opts CreateOptions, s Session) (*Session, error) {
	if opts.HibernateOnIdle && !s.HibernateOnIdle {
		// The close outlives a cancelled ctx (the session must not be left
		// to end at its TTL), but not a service that never answers.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeWait)
		defer cancel()
		_ = c.CloseSession(cctx, s.ID)
		return nil, &Error{Code: "unavailable", Message: fmt.Sprintf(
			"the service ignored hibernate_on_idle (it is older than the field): session %s would end at its TTL, so it was closed", s.ID)}
	}
	return &s, nil
}

func newCreateBody(o CreateOptions) createBody {
	return createBody{TTLS: o.TTL.Seconds(), MaxLifetimeS: o.MaxLifetime.Seconds(), Policy: o.Policy, Limits: o.Limits, Persist: o.Persist,
		Requirements: o.Requirements, Envs: o.Envs, Cwd: o.Cwd, HibernateOnIdle: o.HibernateOnIdle}
}
