package session

import (
	"fmt"
	"time"
)

// measured is what the host saw of one cell: its own clock, the cgroup's
// counters, the sandbox's wait status, the workspace's filesystem. The
// kernel's report (claim) rides along, but it runs inside the sandbox and
// a cell can forge it, so it supplies output and the exception only: never
// a status, limit or state the host's own measurements contradict.
type measured struct {
	// claim is the kernel's result, nil if none came. The runner accepts
	// only "ok" or "error" as its status.
	claim *Result

	timeout time.Duration // the cell's timeout, for the message
	// lifetime is the session's max lifetime when the timeout was cut to
	// it: a timeout then ends the session too, whatever the kernel kept.
	lifetime    time.Duration
	memoryBytes int64 // the policy's memory limit, for the message

	timedOut   bool   // the host clock passed the timeout; the kernel got SIGINT
	canceled   bool   // the request was cancelled mid-cell; the kernel got SIGINT
	killed     bool   // the cell outlived its interrupt's grace: the host killed the sandbox
	linkLost   bool   // the link to the kernel failed mid-cell: the kernel is gone
	oom        bool   // the cgroup's oom_kill counter rose during the cell
	pidsDenied bool   // the cgroup's pids limit refused a fork during the cell
	diskFull   bool   // the workspace's filesystem has no block or inode left
	exit       string // the sandbox's wait status, as "exited with status 1"

	// woke says why waking the session lost its variables (a hibernated
	// kernel restored cold), "" if it did not.
	woke string
	// died says how the kernel was found gone before the cell ran and was
	// replaced by a fresh one, "" if it was not.
	died string
}

// verdict is what a cell's result says about it: the fields of Result the
// host decides.
type verdict struct {
	Status      string
	Limits      []string
	Error       *CellError
	State       string
	StateReason string
	// Lost: the kernel is gone (or must go); drop it and start another.
	Lost bool
}

// freshKernel ends every reason a kernel was lost for.
const freshKernel = "a fresh kernel is started for the next cell (variables are gone, files remain; execution_count starts again at 1)"

// judge decides a cell's verdict from what the host measured. Pure: no
// clock, no I/O, so every combination is table-tested (verdict_test.go).
// Order matters: the host's own clock first, then the request's
// cancellation, then the cgroup's OOM counter, then the kernel's death; the
// kernel's claimed status counts only when none of them fired.
func judge(m measured) verdict {
	v := verdict{State: StateKept, Lost: m.linkLost || m.killed}
	if c := m.claim; c != nil {
		if c.Status == StatusOK || c.Status == StatusError {
			v.Status = c.Status
		}
		if c.Error != nil {
			e := *c.Error
			v.Error = &e
		}
	}
	switch {
	case m.timedOut:
		v.Status = StatusTimeout
		v.Limits = append(v.Limits, "time")
		msg := fmt.Sprintf("cell exceeded its %s timeout", m.timeout)
		if m.lifetime > 0 {
			msg = fmt.Sprintf("the session reached its max_lifetime (%s) while the cell ran", m.lifetime)
		}
		if v.Error == nil || v.Error.Type != "KeyboardInterrupt" {
			v.Error = &CellError{Type: "Timeout", Message: msg}
		} else {
			v.Error.Message = msg + " and was interrupted"
		}
	case m.canceled:
		v.Status = StatusKilled
		v.Error = &CellError{Type: "Cancelled", Message: "the request was cancelled while the cell ran; the cell was interrupted"}
	case m.oom:
		v.Status = StatusOOM
		v.Error = &CellError{Type: "OutOfMemory", Message: fmt.Sprintf("a process of the cell was killed for exceeding the %d-byte memory limit", m.memoryBytes)}
	case v.Lost:
		v.Status = StatusKilled
		v.Error = &CellError{Type: "KernelDied", Message: "the Python kernel " + m.exit}
	}
	if v.Status == "" {
		// No result and no host measurement to explain it.
		v.Status = StatusKilled
	}
	if m.oom {
		v.Limits = append(v.Limits, "memory")
	}
	if m.pidsDenied {
		v.Limits = append(v.Limits, "pids")
	}
	// The host counts output bytes itself (runner.Conn.Exec); a kernel that
	// claims a cut it did not make only flags its own output.
	if c := m.claim; c != nil && (c.StdoutTruncated || c.StderrTruncated) {
		v.Limits = append(v.Limits, "output")
	}
	if m.diskFull {
		v.Limits = append(v.Limits, "disk")
	}
	switch {
	case m.timedOut && m.lifetime > 0:
		v.State, v.StateReason = StateLost, fmt.Sprintf("the session reached its max_lifetime (%s) and is ended (variables and files are gone); a request for it answers expired", m.lifetime)
	case v.Lost:
		v.State = StateLost
		switch {
		case m.killed && m.canceled:
			v.StateReason = "the request was cancelled and the cell did not stop after its interrupt, so the sandbox was killed; " + freshKernel
		case m.killed:
			v.StateReason = "the cell did not stop after its interrupt, so the sandbox was killed; " + freshKernel
		case m.oom:
			v.StateReason = "the kernel was killed for exceeding the memory limit; " + freshKernel
		default:
			v.StateReason = "the kernel " + m.exit + "; " + freshKernel
		}
	case m.died != "":
		v.State, v.StateReason = StateLost, m.died+"; a fresh kernel was started and ran this cell (variables are gone, files remain)"
	case m.woke != "":
		v.State, v.StateReason = StateLost, m.woke
	}
	return v
}
