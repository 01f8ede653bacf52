package session

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/session/seam"
)

// The vocabulary that crosses the seam between session and the API
// (requests, results, session info, sentinel errors) is declared in
// session/seam, which imports nothing that builds a sandbox, so that api
// and workflow can speak it without linking isolate, libcontainer and
// libseccomp. These aliases keep session's own code and tests reading as
// before; they are the same types and the same error values, so
// errors.Is holds across the seam.

// Sentinel errors (seam's types.go documents each).
var (
	ErrNotFound    = seam.ErrNotFound
	ErrBusy        = seam.ErrBusy
	ErrLimit       = seam.ErrLimit
	ErrBadRequest  = seam.ErrBadRequest
	ErrUnavailable = seam.ErrUnavailable
	ErrShutdown    = seam.ErrShutdown
	ErrStateQuota  = seam.ErrStateQuota
	ErrStoreQuota  = seam.ErrStoreQuota
	ErrLost        = seam.ErrLost
	ErrExpired     = seam.ErrExpired
)

// Status values of a cell result.
const (
	StatusOK      = seam.StatusOK
	StatusError   = seam.StatusError
	StatusTimeout = seam.StatusTimeout
	StatusOOM     = seam.StatusOOM
	StatusKilled  = seam.StatusKilled
)

// State values: what became of the session's kernel after a cell.
const (
	StateKept = seam.StateKept
	StateLost = seam.StateLost
)

// Workdir is the session's working directory inside the sandbox.
const Workdir = seam.Workdir

// HomeDir is the workspace under a second name (seam.HomeDir).
const HomeDir = seam.HomeDir

// The scopes of Usage.PeakMemoryBytes.
const (
	PeakScopeCell    = seam.PeakScopeCell
	PeakScopeSession = seam.PeakScopeSession
)

// MaxFileBytes bounds one upload or download.
const MaxFileBytes = seam.MaxFileBytes

// Cells: what goes in, what comes out.
type (
	File           = seam.File
	FileChange     = seam.FileChange
	CellError      = seam.CellError
	Frame          = seam.Frame
	DisplayItem    = seam.DisplayItem
	Chart          = seam.Chart
	ChartElement   = seam.ChartElement
	Usage          = seam.Usage
	NetworkUsage   = seam.NetworkUsage
	RefusedAttempt = seam.RefusedAttempt
	Result         = seam.Result
	ExecRequest    = seam.ExecRequest
	CellContext    = seam.CellContext
)

// Sessions and their files.
type (
	CreateOptions  = seam.CreateOptions
	Info           = seam.Info
	Entry          = seam.Entry
	Download       = seam.Download
	OpenFile       = seam.OpenFile
	SessionMetrics = seam.SessionMetrics
	SessionUsage   = seam.SessionUsage
)

// Assist kinds, as Jupyter names the requests.
const (
	AssistComplete   = seam.AssistComplete
	AssistInspect    = seam.AssistInspect
	AssistIsComplete = seam.AssistIsComplete
)

// AssistTimeout bounds one assist.
const AssistTimeout = seam.AssistTimeout

// Assists.
type (
	AssistRequest = seam.AssistRequest
	Completion    = seam.Completion
	Inspection    = seam.Inspection
	Completeness  = seam.Completeness
	Assistance    = seam.Assistance
)

// Command actions.
const (
	CommandStart  = seam.CommandStart
	CommandWait   = seam.CommandWait
	CommandKill   = seam.CommandKill
	CommandInput  = seam.CommandInput
	CommandResize = seam.CommandResize
)

// PTYSize is a terminal's size (seam.PTYSize).
type PTYSize = seam.PTYSize

// Bounds of an environment handed in by a client (seam's command.go says
// why only size and form are bounded).
const (
	MaxEnvVars       = seam.MaxEnvVars
	MaxEnvNameBytes  = seam.MaxEnvNameBytes
	MaxEnvValueBytes = seam.MaxEnvValueBytes
	MaxEnvBytes      = seam.MaxEnvBytes
	MaxCommandInput  = seam.MaxCommandInput
)

// CheckEnvs validates a client's environment; field names the request
// field for the error.
func CheckEnvs(field string, envs map[string]string) error { return seam.CheckEnvs(field, envs) }

// CheckStartDir validates a create's cwd (seam.CheckStartDir).
func CheckStartDir(cwd string) error { return seam.CheckStartDir(cwd) }

// Shell commands.
type (
	CommandRequest = seam.CommandRequest
	CommandResult  = seam.CommandResult
)

// Watch actions.
const (
	WatchStart = seam.WatchStart
	WatchPoll  = seam.WatchPoll
	WatchStop  = seam.WatchStop
)

// Event types, E2B's names.
const (
	EventCreate = seam.EventCreate
	EventWrite  = seam.EventWrite
	EventRemove = seam.EventRemove
	EventRename = seam.EventRename
)

// Directory watches.
type (
	WatchRequest = seam.WatchRequest
	WatchEvent   = seam.WatchEvent
	WatchResult  = seam.WatchResult
)

// init gives seam what it must not import: isolate's sentinels, classed
// as session's, and the host's probe, so the API classes an error from
// below and answers ping without a Manager, without linking isolate.
func init() {
	hs := make([]seam.HostSentinel, len(hostSentinels))
	for i, m := range hostSentinels {
		hs[i] = seam.HostSentinel{Host: m.host, Is: m.session}
	}
	seam.Register(hs, isolate.Probe)
}

// Collectors are the Manager's Prometheus metrics, for the API's /metrics,
// which reaches the Manager through an interface and so cannot name
// Metrics.
func (m *Manager) Collectors() []prometheus.Collector { return m.Metrics().Collectors() }
