package seam

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jailcell/jailcell/runner"
)

// Command actions.
const (
	CommandStart  = runner.CommandStart
	CommandWait   = runner.CommandWait
	CommandKill   = runner.CommandKill
	CommandInput  = runner.CommandInput
	CommandResize = runner.CommandResize
)

// MaxCommandInput bounds the input one request writes to a command's
// stdin; MaxPTYSide a terminal's rows and columns.
const (
	MaxCommandInput = runner.MaxCommandInput
	MaxPTYSide      = runner.MaxPTYSide
)

// PTYSize is a terminal's size in characters: rows and cols, each 1 to
// MaxPTYSide.
type PTYSize = runner.PTYSize

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
	// Action is CommandStart (default), CommandWait, CommandKill,
	// CommandInput or CommandResize.
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
	// Stdin keeps a background start's stdin a pipe for CommandInput
	// (else it reads /dev/null).
	Stdin bool
	// PTY runs a background start in a new terminal of this size (its
	// stdin, stdout and stderr; all its output comes as stdout), or is the
	// new size (CommandResize).
	PTY *PTYSize
	// Input is written to the job's stdin (CommandInput), at most
	// MaxCommandInput bytes; EOF closes its stdin after it (a pipe only).
	Input string
	EOF   bool
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
