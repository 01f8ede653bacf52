package isolate

import (
	"testing"

	"github.com/jailcell/jailcell/policy"
	"golang.org/x/sys/unix"
)

// TestTightenRlimitsLowersOnlyLooserLimits: a restored checkpoint from
// before the kernel-count shares carries the host's looser limits; the
// restore lowers them to the configuration's, and leaves a limit the task
// holds lower as it is.
func TestTightenRlimitsLowersOnlyLooserLimits(t *testing.T) {
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	pid := sb.Pid()
	waitExec(t, pid)
	// Not even root may raise a hard limit here, so the configuration is
	// made tighter than the sandbox instead: the sandbox then holds what
	// an old checkpoint would, looser limits.
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 4096, Max: 4096}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := h.containerConfig(Spec{Policy: policy.Default()}, sb.ID, "/", 0, nil)
	for i, r := range cfg.Rlimits {
		if r.Type == unix.RLIMIT_SIGPENDING {
			cfg.Rlimits[i].Soft, cfg.Rlimits[i].Hard = 16, 16
		}
	}
	if err := tightenRlimits(sb, cfg); err != nil {
		t.Fatal(err)
	}
	for res, want := range map[int]uint64{unix.RLIMIT_SIGPENDING: 16, unix.RLIMIT_MEMLOCK: 4096, unix.RLIMIT_MSGQUEUE: MsgqueueShare} {
		var got unix.Rlimit
		if err := unix.Prlimit(pid, res, nil, &got); err != nil {
			t.Fatal(err)
		}
		if got.Cur != want || got.Max != want {
			t.Errorf("rlimit %d = %d/%d after tightening, want %d", res, got.Cur, got.Max, want)
		}
	}
}
