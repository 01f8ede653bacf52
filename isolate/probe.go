package isolate

import (
	"fmt"
	"os"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

// Features is what this host can give a sandbox, found by probing.
type Features struct {
	Kernel string `json:"kernel"`
	// CgroupMode is "v2" (unified), "hybrid" (v1 controllers plus a v2
	// mount) or "v1".
	CgroupMode string `json:"cgroup_mode"`
	// Controllers lists the needed controllers found (memory, pids, cpu).
	Controllers []string `json:"controllers"`
	// SwapLimit says whether swap can be held at zero for a sandbox.
	SwapLimit bool `json:"swap_limit"`
	UserNS    bool `json:"user_namespace"`
	Overlay   bool `json:"overlay"`
	IDMap     bool `json:"idmapped_mounts"`
	Seccomp   bool `json:"seccomp"`
	// SeccompVersion is libseccomp's version, when compiled in.
	SeccompVersion string `json:"seccomp_version,omitempty"`
	// Problems lists, in words, each missing feature and how to fix it.
	Problems []string `json:"problems,omitempty"`
}

// OK reports whether a sandbox can be built with full isolation.
func (f Features) OK() bool { return len(f.Problems) == 0 }

// Probe inspects the host. It creates nothing it does not remove.
func Probe() Features {
	var f Features
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		f.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	problem := func(format string, a ...any) { f.Problems = append(f.Problems, fmt.Sprintf(format, a...)) }

	switch {
	case cgroups.IsCgroup2UnifiedMode():
		f.CgroupMode = "v2"
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		have := strings.Fields(string(b))
		for _, c := range []string{"memory", "pids", "cpu"} {
			if contains(have, c) {
				f.Controllers = append(f.Controllers, c)
			} else {
				problem("cgroup v2 controller %q is not enabled at /sys/fs/cgroup/cgroup.controllers", c)
			}
		}
		f.SwapLimit = true
	default:
		f.CgroupMode = "v1"
		if cgroups.IsCgroup2HybridMode() {
			f.CgroupMode = "hybrid"
		}
		for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "devices"} {
			if _, err := os.Stat("/sys/fs/cgroup/" + c); err == nil {
				f.Controllers = append(f.Controllers, c)
			} else {
				problem("cgroup v1 controller %q is not mounted at /sys/fs/cgroup/%s", c, c)
			}
		}
		_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
		f.SwapLimit = err == nil
		if !f.SwapLimit && hasSwap() {
			problem("swap is on but the memory cgroup cannot limit it: boot with swapaccount=1 or turn swap off")
		}
	}

	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) != "0" {
		f.UserNS = true
	} else {
		problem("user namespaces are disabled: sysctl user.max_user_namespaces must be > 0")
	}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil {
		f.Overlay = strings.Contains(string(b), "\toverlay\n")
	}
	if !f.Overlay {
		problem("overlayfs is not available: modprobe overlay")
	}
	// Idmapped mounts arrived in 5.12 (overlayfs lower layers honour them).
	var maj, min int
	fmt.Sscanf(f.Kernel, "%d.%d", &maj, &min)
	f.IDMap = maj > 5 || (maj == 5 && min >= 12)
	if !f.IDMap {
		problem("kernel %s has no idmapped mounts: 5.12 or newer is needed", f.Kernel)
	}
	if seccomp.Enabled {
		if _, err := os.Stat("/proc/self/status"); err == nil {
			b, _ := os.ReadFile("/proc/self/status")
			f.Seccomp = strings.Contains(string(b), "Seccomp:")
		}
		a, b, c := seccomp.Version()
		f.SeccompVersion = fmt.Sprintf("%d.%d.%d", a, b, c)
	}
	if !f.Seccomp {
		problem("seccomp is not available (kernel without CONFIG_SECCOMP_FILTER, or jailcell built without -tags seccomp)")
	}
	return f
}

func hasSwap() bool {
	b, err := os.ReadFile("/proc/swaps")
	return err == nil && len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
