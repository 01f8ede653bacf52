package session

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

// HostCapacity is what AutoMaxSessions sizes sessions.max from.
type HostCapacity struct {
	MemoryBytes uint64 // the machine's RAM
	CPUs        int
	Slots       int    // sandbox uid slots of the host (isolate.Config.Slots)
	FileLimit   uint64 // this process's hard RLIMIT_NOFILE (Go raises the soft one to it)
	TaskLimit   uint64 // tasks the kernel allows at all: the smaller of kernel.pid_max and kernel.threads-max
}

// ReadHostCapacity reads this machine's figures; a figure it cannot read
// is 0 and bounds nothing.
func ReadHostCapacity(slots int) HostCapacity {
	c := HostCapacity{CPUs: runtime.NumCPU(), Slots: slots}
	if c.Slots == 0 {
		c.Slots = isolate.DefaultSlots
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		c.MemoryBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		c.FileLimit = rl.Max
	}
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (c.TaskLimit == 0 || v < c.TaskLimit) {
			c.TaskLimit = v
		}
	}
	return c
}

// What an idle session costs, for sizing (docs/performance.md measures
// them): forked from its policy's zygote, 9.1 MB charged to its own
// cgroup, rounded up to leave room for the page cache and the daemon; a
// kernel that imported the preload itself, about 70 MB (poolMemberEstimate
// rounds it to 100 MB).
const (
	idleForkedEstimate = 12_000_000
	// sessionsPerCPU: idle sessions cost no CPU, but each one's janitor
	// checks, TTLs and the cells that wake them do; a 2-core host serves
	// a thousand.
	sessionsPerCPU = 512
	// slotsReserve: uid slots the daemon takes besides sessions (a zygote
	// and a template build per policy, pool refills, forks in flight).
	slotsReserve = 64
	// fdsPerSession: the daemon's descriptors per live session (its
	// socket, listener, log and cgroup files: the soak measured 11.6),
	// rounded up; fdsReserve for the listeners, clients and stores.
	fdsPerSession = 16
	fdsReserve    = 1024
	// Tasks (pids and threads) are one count the whole host shares: every
	// session may take its policy's pids at once (a fork bomb in each),
	// and then the host must still have a quarter of its tasks for
	// itself. Without this bound, sessions.max times a policy's pids
	// could pass kernel.pid_max, and a caller's fork bombs would starve
	// the host of processes.
	tasksShareNum, tasksShareDen = 3, 4
	// MaxSessionsCeiling is sessions.max's upper bound.
	MaxSessionsCeiling = 4096
)

// AutoMaxSessions is sessions.max when it is "auto": the smallest of
// half the machine's memory at an idle session's cost (12 MB forked from a
// zygote, 100 MB without one), 512 per CPU, the uid slots less 64 the
// daemon keeps, the descriptors the daemon may open at 16 a session (1024
// kept), and three quarters of the host's tasks at pids (the largest
// policy's) a session; at least 1, at most 4096. why says which bound
// decided.
func AutoMaxSessions(c HostCapacity, zygote bool, pids int64) (n int, why string) {
	n, why = MaxSessionsCeiling, "the ceiling of sessions.max"
	bound := func(v uint64, reason string) {
		if v < uint64(n) {
			n, why = int(v), reason
		}
	}
	if c.MemoryBytes > 0 {
		per, kind := uint64(idleForkedEstimate), "12 MB a zygote-forked idle session"
		if !zygote {
			per, kind = poolMemberEstimate, "100 MB an idle session without a zygote"
		}
		bound(c.MemoryBytes/2/per, fmt.Sprintf("half of %d MiB of memory at %s", c.MemoryBytes>>20, kind))
	}
	if c.CPUs > 0 {
		bound(uint64(c.CPUs)*sessionsPerCPU, fmt.Sprintf("%d per CPU on %d CPUs", sessionsPerCPU, c.CPUs))
	}
	if c.Slots > 0 {
		bound(uint64(max(c.Slots-slotsReserve, 0)), fmt.Sprintf("%d uid slots less %d the daemon keeps", c.Slots, slotsReserve))
	}
	if c.FileLimit > 0 {
		var v uint64
		if c.FileLimit > fdsReserve {
			v = (c.FileLimit - fdsReserve) / fdsPerSession
		}
		bound(v, fmt.Sprintf("a file limit of %d at %d per session, %d kept", c.FileLimit, fdsPerSession, fdsReserve))
	}
	if c.TaskLimit > 0 && pids > 0 {
		bound(c.TaskLimit*tasksShareNum/tasksShareDen/uint64(pids),
			fmt.Sprintf("3/4 of the host's %d tasks (kernel.pid_max, threads-max) at %d pids a session", c.TaskLimit, pids))
	}
	if n < 1 {
		n = 1
	}
	return n, why
}

// MaxPolicyPids is the largest pids limit of policies, policy.Default's
// included where policies has no "default" (the one its sessions get):
// every session may take its policy's.
func MaxPolicyPids(policies map[string]policy.Policy) int64 {
	var n int64
	if _, ok := policies["default"]; !ok {
		n = policy.Default().Pids
	}
	for _, p := range policies {
		n = max(n, p.Pids)
	}
	return n
}
