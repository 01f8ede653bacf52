package isolate

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is what a sandbox has cost, read from its cgroup on the host side
// (never from anything the sandbox reports about itself).
type Usage struct {
	// CPU is user+system CPU time of every task in the sandbox.
	CPU time.Duration
	// MemoryPeak is the high-water mark of memory charged to the sandbox
	// since it started or since the last ResetPeak.
	MemoryPeak int64
	// MemoryCurrent is the memory charged right now.
	MemoryCurrent int64
	// OOMKills counts tasks killed by the OOM killer inside the sandbox.
	OOMKills uint64
	// PidsDenied counts forks refused because the pids limit was reached.
	PidsDenied uint64
}

// cgroupFiles reads the counters of one sandbox cgroup in either layout:
// v1 (one directory per controller) or v2 (one unified directory).
type cgroupFiles struct {
	v2    bool
	paths map[string]string // controller ("" for v2) -> directory
}

func (c cgroupFiles) dir(ctrl string) string {
	if c.v2 {
		return c.paths[""]
	}
	return c.paths[ctrl]
}

// keyed reads "key value" lines (memory.events, pids.events, cpu.stat,
// memory.oom_control) and returns the value of key.
func keyed(path, key string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func single(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

func (c cgroupFiles) usage() Usage {
	var u Usage
	mem := c.dir("memory")
	if c.v2 {
		if v, ok := keyed(filepath.Join(mem, "cpu.stat"), "usage_usec"); ok {
			u.CPU = time.Duration(v) * time.Microsecond
		}
		if v, ok := single(filepath.Join(mem, "memory.peak")); ok {
			u.MemoryPeak = int64(v)
		}
		if v, ok := single(filepath.Join(mem, "memory.current")); ok {
			u.MemoryCurrent = int64(v)
		}
		u.OOMKills, _ = keyed(filepath.Join(mem, "memory.events"), "oom_kill")
		u.PidsDenied, _ = keyed(filepath.Join(mem, "pids.events"), "max")
		return u
	}
	if v, ok := single(filepath.Join(c.dir("cpuacct"), "cpuacct.usage")); ok {
		u.CPU = time.Duration(v)
	}
	if v, ok := single(filepath.Join(mem, "memory.max_usage_in_bytes")); ok {
		u.MemoryPeak = int64(v)
	}
	if v, ok := single(filepath.Join(mem, "memory.usage_in_bytes")); ok {
		u.MemoryCurrent = int64(v)
	}
	u.OOMKills, _ = keyed(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	u.PidsDenied, _ = keyed(filepath.Join(c.dir("pids"), "pids.events"), "max")
	return u
}

// resetPeak restarts the memory high-water mark, so a cell's peak is its
// own. v1 resets by writing to max_usage_in_bytes; v2 (>= 6.12) resets per
// open file of memory.peak, which is kept and read by usage afterwards.
func (c cgroupFiles) resetPeak() {
	if c.v2 {
		// Per-fd reset semantics would need the fd kept; the plain file
		// still gives the peak since start, which bounds the cell's.
		return
	}
	_ = os.WriteFile(filepath.Join(c.dir("memory"), "memory.max_usage_in_bytes"), []byte("0"), 0)
}
