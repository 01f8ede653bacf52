package isolate

import (
	"fmt"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// A sandbox's user namespace is created by host root (or, for a zygote's
// fork, nests in the zygote's, which host root created), and the kernel
// charges some counts at every level of user namespaces up to the initial
// one: pending signals, POSIX message queue bytes and SHM_LOCKed memory
// (RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, RLIMIT_MEMLOCK), inotify instances
// and watches, fanotify groups and marks, and namespaces of every kind.
// Whatever a cell holds of them is then also held by host root's uid, so
// a cell that holds all of one starves the host's services and every
// other session (a DoS across the sandbox wall). Each is bounded below:
// the rlimit counts to a per-session share small enough that the host's
// own limit (sized for one user) outlasts sessions.max sessions holding
// theirs, the rest refused outright by the seccomp filter (see seccomp.denied).
// SECURITY.md's "Kernel counts" lists every count, its bound and its test.
const (
	// SigpendingShare is a sandbox's RLIMIT_SIGPENDING: queued signals
	// (real-time signals, sigqueue, timers with signal notification).
	// Host root's own is about 96,000 on a 24 GiB host.
	SigpendingShare = 64
	// MsgqueueShare is a sandbox's RLIMIT_MSGQUEUE in bytes: one small
	// POSIX queue. The host's default is 819,200 per user.
	MsgqueueShare = 8 << 10
	// MemlockShare is a sandbox's RLIMIT_MEMLOCK in bytes: mlock and
	// SHM_LOCK. Nothing in the Python stack locks memory.
	MemlockShare = 64 << 10
)

// tightenRlimits lowers, in every task of the sandbox, each of cfg's
// limits that the task holds higher (a restore of an older checkpoint).
// Only lowering: a limit the task holds lower stays, and the posture
// check that follows still compares the init with cfg.
func tightenRlimits(s *Sandbox, cfg *configs.Config) error {
	dir, ok := s.cgDirs()["pids"]
	if !ok {
		return fmt.Errorf("tighten rlimits: no pids cgroup")
	}
	pids, err := cgroups.GetAllPids(dir)
	if err != nil {
		return fmt.Errorf("tighten rlimits: list tasks: %w", err)
	}
	for _, pid := range pids {
		for _, r := range cfg.Rlimits {
			var cur unix.Rlimit
			if err := unix.Prlimit(pid, r.Type, nil, &cur); err != nil {
				if err == unix.ESRCH {
					break // gone: nothing to tighten
				}
				return fmt.Errorf("tighten rlimits: read %d of pid %d: %w", r.Type, pid, err)
			}
			want := unix.Rlimit{Cur: min(cur.Cur, r.Soft), Max: min(cur.Max, r.Hard)}
			want.Cur = min(want.Cur, want.Max)
			if want == cur {
				continue
			}
			if err := unix.Prlimit(pid, r.Type, &want, nil); err != nil && err != unix.ESRCH {
				return fmt.Errorf("tighten rlimits: set %d of pid %d: %w", r.Type, pid, err)
			}
		}
	}
	return nil
}
