package session

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestJudge covers every verdict judge can give: each host measurement on
// its own, their combinations in order of precedence, and kernel claims
// the host's measurements contradict (which must never win).
func TestJudge(t *testing.T) {
	ok := func() *Result { return &Result{Status: StatusOK} }
	pyErr := func(typ string) *Result {
		return &Result{Status: StatusError, Error: &CellError{Type: typ, Message: "m"}}
	}
	const sec = time.Second
	const died = "the kernel was killed by signal 9 after the previous cell"
	tests := []struct {
		name string
		m    measured
		// want
		status, state, errType string
		limits                 []string
		lost                   bool
		reason, message        string // substrings of StateReason, Error.Message
	}{
		{name: "ok", m: measured{claim: ok()}, status: StatusOK, state: StateKept},
		{name: "python error", m: measured{claim: pyErr("ValueError")}, status: StatusError, state: StateKept, errType: "ValueError"},

		// The host's clock.
		{name: "timeout, interrupted, kernel kept",
			m:      measured{claim: pyErr("KeyboardInterrupt"), timedOut: true, timeout: 2 * sec},
			status: StatusTimeout, state: StateKept, errType: "KeyboardInterrupt", limits: []string{"time"},
			message: "cell exceeded its 2s timeout and was interrupted"},
		{name: "timeout, cell swallowed the interrupt and finished ok",
			m:      measured{claim: ok(), timedOut: true, timeout: 2 * sec},
			status: StatusTimeout, state: StateKept, errType: "Timeout", limits: []string{"time"},
			message: "cell exceeded its 2s timeout"},
		{name: "timeout, killed after grace",
			m:      measured{timedOut: true, killed: true, linkLost: true, timeout: 2 * sec, exit: "was killed by signal 9"},
			status: StatusTimeout, state: StateLost, errType: "Timeout", limits: []string{"time"}, lost: true,
			reason: "did not stop after its interrupt, so the sandbox was killed"},
		{name: "timeout killed and OOM",
			m:      measured{timedOut: true, killed: true, linkLost: true, oom: true, timeout: 2 * sec},
			status: StatusTimeout, state: StateLost, errType: "Timeout", limits: []string{"time", "memory"}, lost: true,
			reason: "did not stop after its interrupt"},
		{name: "lifetime reached, interrupted: the session ends anyway",
			m:      measured{claim: pyErr("KeyboardInterrupt"), timedOut: true, timeout: 800 * time.Millisecond, lifetime: 3 * sec},
			status: StatusTimeout, state: StateLost, errType: "KeyboardInterrupt", limits: []string{"time"},
			reason: "reached its max_lifetime (3s) and is ended", message: "the session reached its max_lifetime (3s) while the cell ran and was interrupted"},
		{name: "lifetime reached, killed after grace",
			m:      measured{timedOut: true, killed: true, linkLost: true, timeout: 800 * time.Millisecond, lifetime: 3 * sec, exit: "was killed by signal 9"},
			status: StatusTimeout, state: StateLost, errType: "Timeout", limits: []string{"time"}, lost: true,
			reason: "reached its max_lifetime (3s) and is ended", message: "the session reached its max_lifetime (3s) while the cell ran"},

		// The request's cancellation.
		{name: "cancelled, interrupted",
			m:      measured{claim: pyErr("KeyboardInterrupt"), canceled: true},
			status: StatusKilled, state: StateKept, errType: "Cancelled"},
		{name: "cancelled, killed after grace",
			m:      measured{canceled: true, killed: true, linkLost: true},
			status: StatusKilled, state: StateLost, errType: "Cancelled", lost: true,
			reason: "the request was cancelled and the cell did not stop"},

		// The cgroup's counters.
		{name: "OOM, kernel killed",
			m:      measured{oom: true, linkLost: true, memoryBytes: 1 << 20, exit: "was killed by signal 9"},
			status: StatusOOM, state: StateLost, errType: "OutOfMemory", limits: []string{"memory"}, lost: true,
			reason: "killed for exceeding the memory limit", message: "1048576-byte memory limit"},
		{name: "OOM of a child, kernel survived",
			m:      measured{claim: pyErr("CalledProcessError"), oom: true, memoryBytes: 1 << 20},
			status: StatusOOM, state: StateKept, errType: "OutOfMemory", limits: []string{"memory"}},
		{name: "pids limit hit",
			m:      measured{claim: pyErr("RuntimeError"), pidsDenied: true},
			status: StatusError, state: StateKept, errType: "RuntimeError", limits: []string{"pids"}},
		{name: "every limit at once",
			m: measured{claim: &Result{Status: StatusOK, StdoutTruncated: true, StderrTruncated: true},
				timedOut: true, oom: true, pidsDenied: true, diskFull: true},
			status: StatusTimeout, state: StateKept, errType: "Timeout",
			limits: []string{"time", "memory", "pids", "output", "disk"}},

		// The sandbox's wait status.
		{name: "kernel exited during the cell",
			m:      measured{linkLost: true, exit: "exited with status 3"},
			status: StatusKilled, state: StateLost, errType: "KernelDied", lost: true,
			reason: "the kernel exited with status 3; a fresh kernel", message: "the Python kernel exited with status 3"},
		{name: "kernel died before the cell, cell ran in a fresh one",
			m:      measured{claim: ok(), died: died},
			status: StatusOK, state: StateLost, reason: died + "; a fresh kernel was started and ran this cell"},
		{name: "kernel died before the cell and the fresh one died too",
			m:      measured{died: died, linkLost: true, exit: "exited with status 1"},
			status: StatusKilled, state: StateLost, errType: "KernelDied", lost: true,
			reason: "the kernel exited with status 1"},
		{name: "woken cold",
			m:      measured{claim: ok(), woke: "the hibernated kernel could not be restored"},
			status: StatusOK, state: StateLost, reason: "the hibernated kernel could not be restored"},
		{name: "woken cold and died before the cell: the later loss is told",
			m:      measured{claim: ok(), woke: "woke", died: died},
			status: StatusOK, state: StateLost, reason: died},

		// Output and disk.
		{name: "stdout truncated", m: measured{claim: &Result{Status: StatusOK, StdoutTruncated: true}},
			status: StatusOK, state: StateKept, limits: []string{"output"}},
		{name: "stderr truncated", m: measured{claim: &Result{Status: StatusError, StderrTruncated: true}},
			status: StatusError, state: StateKept, limits: []string{"output"}},
		{name: "disk full", m: measured{claim: pyErr("OSError"), diskFull: true},
			status: StatusError, state: StateKept, errType: "OSError", limits: []string{"disk"}},

		// Forged claims: the kernel runs inside the sandbox.
		{name: "forged ok under OOM",
			m:      measured{claim: ok(), oom: true, linkLost: true, memoryBytes: 1 << 20, exit: "was killed by signal 9"},
			status: StatusOOM, state: StateLost, errType: "OutOfMemory", limits: []string{"memory"}, lost: true},
		{name: "forged ok under timeout",
			m:      measured{claim: ok(), timedOut: true, timeout: sec},
			status: StatusTimeout, state: StateKept, errType: "Timeout", limits: []string{"time"}},
		{name: "forged ok after the link broke",
			m:      measured{claim: ok(), linkLost: true, exit: "exited with status 0"},
			status: StatusKilled, state: StateLost, errType: "KernelDied", lost: true},
		{name: "forged status the host did not measure",
			m:      measured{claim: &Result{Status: StatusTimeout}},
			status: StatusKilled, state: StateKept},
		{name: "forged oom status", m: measured{claim: &Result{Status: StatusOOM}},
			status: StatusKilled, state: StateKept},
		{name: "forged KernelDied exception is only an error",
			m:      measured{claim: pyErr("KernelDied")},
			status: StatusError, state: StateKept, errType: "KernelDied"},
		{name: "no result and no measurement", m: measured{}, status: StatusKilled, state: StateKept},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before *CellError
			if tc.m.claim != nil && tc.m.claim.Error != nil {
				c := *tc.m.claim.Error
				before = &c
			}
			v := judge(tc.m)
			if v.Status != tc.status || v.State != tc.state || v.Lost != tc.lost {
				t.Errorf("status %q state %q lost %v, want %q %q %v", v.Status, v.State, v.Lost, tc.status, tc.state, tc.lost)
			}
			if !slices.Equal(v.Limits, tc.limits) {
				t.Errorf("limits %q, want %q", v.Limits, tc.limits)
			}
			switch {
			case tc.errType == "" && v.Error != nil:
				t.Errorf("error %+v, want none", v.Error)
			case tc.errType != "" && (v.Error == nil || v.Error.Type != tc.errType):
				t.Errorf("error %+v, want type %q", v.Error, tc.errType)
			case tc.message != "" && !strings.Contains(v.Error.Message, tc.message):
				t.Errorf("error message %q, want it to contain %q", v.Error.Message, tc.message)
			}
			if (v.State == StateLost) != (v.StateReason != "") || !strings.Contains(v.StateReason, tc.reason) {
				t.Errorf("state %q reason %q, want a reason containing %q exactly when lost", v.State, v.StateReason, tc.reason)
			}
			if e := tc.m.claim; before != nil && (e.Error.Type != before.Type || e.Error.Message != before.Message) {
				t.Errorf("judge changed the kernel's claim: %+v, was %+v", tc.m.claim.Error, before)
			}
		})
	}
}

// TestJudgeForgedClaimNeverWins checks, over every combination of host
// measurements, that nothing the kernel claims changes the status, limits
// or state the host's measurements decide.
func TestJudgeForgedClaimNeverWins(t *testing.T) {
	claims := []*Result{
		nil,
		{Status: StatusOK},
		{Status: StatusError, Error: &CellError{Type: "KeyboardInterrupt"}},
		{Status: StatusError, Error: &CellError{Type: "OutOfMemory"}},
		{Status: StatusOOM},
		{Status: StatusTimeout},
		{Status: "anything"},
	}
	n := 0
	for bits := range 1 << 7 {
		m := measured{
			timedOut: bits&1 != 0, canceled: bits&2 != 0, killed: bits&4 != 0, linkLost: bits&8 != 0,
			oom: bits&16 != 0, pidsDenied: bits&32 != 0, diskFull: bits&64 != 0, timeout: time.Second,
		}
		hostSaid := m.timedOut || m.canceled || m.oom || m.linkLost || m.killed
		for _, c := range claims {
			m.claim = c
			v := judge(m)
			n++
			if v.Status == "" || v.State == "" {
				t.Fatalf("%+v: empty status or state: %+v", m, v)
			}
			if hostSaid {
				// The host's verdict is the same whatever the claim.
				m.claim = nil
				want := judge(m)
				m.claim = c
				if v.Status != want.Status || v.State != want.State || v.Lost != want.Lost {
					t.Errorf("%+v claim %+v: %s/%s, the host's own verdict %s/%s", m, c, v.Status, v.State, want.Status, want.State)
				}
			}
			if (v.Status == StatusTimeout) != m.timedOut || (v.Status == StatusOOM) != (m.oom && !m.timedOut && !m.canceled) {
				t.Errorf("%+v claim %+v: status %s not the host's measurement", m, c, v.Status)
			}
			if slices.Contains(v.Limits, "memory") != m.oom || slices.Contains(v.Limits, "time") != m.timedOut ||
				slices.Contains(v.Limits, "pids") != m.pidsDenied || slices.Contains(v.Limits, "disk") != m.diskFull {
				t.Errorf("%+v claim %+v: limits %q not the host's measurements", m, c, v.Limits)
			}
			if v.Lost != (m.linkLost || m.killed) || (v.State == StateLost) != v.Lost {
				t.Errorf("%+v claim %+v: lost %v state %s", m, c, v.Lost, v.State)
			}
		}
	}
	t.Logf("%d combinations", n)
}
