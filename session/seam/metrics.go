package seam

import "time"

// SessionMetrics is one sample of what a session's sandbox uses, read on
// the host from its cgroup and its disk (E2B's get_metrics fields).
type SessionMetrics struct {
	Timestamp time.Time `json:"timestamp"`
	// CPUUsedPct is the CPU time used since the previous sample (or since
	// the kernel started) over the wall time between them and the
	// policy's CPUs, in percent.
	CPUUsedPct float64 `json:"cpu_used_pct"`
	// CPUCount is the policy's CPU bandwidth, in CPUs.
	CPUCount float64 `json:"cpu_count"`
	// CPUSeconds is the CPU time of the current sandbox since it started.
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemUsed is the memory charged to the sandbox now, MemPeak its
	// high-water mark, MemTotal the policy's limit (bytes).
	MemUsed  int64 `json:"mem_used"`
	MemPeak  int64 `json:"mem_peak"`
	MemTotal int64 `json:"mem_total"`
	// DiskUsed and DiskTotal are the sandbox's writable disk (a tmpfs of
	// the policy's disk_bytes holding everything it wrote), in bytes.
	DiskUsed  int64 `json:"disk_used"`
	DiskTotal int64 `json:"disk_total"`
	// Running: the session has a live sandbox (not hibernated, not
	// starting); the CPU and memory figures are zero otherwise.
	Running bool `json:"running"`
}

// SessionUsage is what a live session's sandbox costs, read from its cgroup
// on the host (never from anything the sandbox reports).
type SessionUsage struct {
	ID     string
	Policy string
	// CPU is the CPU time of the session's current sandbox; it starts
	// again from zero when a lost kernel is replaced.
	CPU time.Duration
	// MemoryBytes is the memory charged to the sandbox now.
	MemoryBytes int64
	// MemoryPeakBytes is the high-water mark since the last cell began.
	MemoryPeakBytes int64
}
