package isolate

import (
	"fmt"
	"os"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/hostfeatures"
)

// Features, ProblemID and Problem are declared in internal/hostfeatures,
// below this package, so the API can show what the host gives without
// importing isolate (and with it libcontainer), and isolate still knows
// nothing above it.
type (
	Features  = hostfeatures.Features
	ProblemID = hostfeatures.ProblemID
	Problem   = hostfeatures.Problem
)

// The kinds of probe problems.
const (
	ProblemCgroupController ProblemID = "cgroup_controller"
	ProblemSwapAccounting   ProblemID = "swap_accounting"
	ProblemUserNS           ProblemID = "user_namespace"
	ProblemOverlay          ProblemID = "overlay"
	ProblemIDMap            ProblemID = "idmapped_mounts"
	ProblemSeccomp          ProblemID = "seccomp"
)

// Probe inspects the host. It creates nothing it does not remove.
func Probe() Features {
	var f Features
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		f.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	problem := func(id ProblemID, format string, a ...any) {
		f.Problems = append(f.Problems, Problem{ID: id, Text: fmt.Sprintf(format, a...)})
	}

	switch {
	case cgroups.IsCgroup2UnifiedMode():
		f.CgroupMode = "v2"
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		have := strings.Fields(string(b))
		for _, c := range []string{"memory", "pids", "cpu"} {
			if contains(have, c) {
				f.Controllers = append(f.Controllers, c)
			} else {
				problem(ProblemCgroupController, "cgroup v2 controller %q is not enabled at /sys/fs/cgroup/cgroup.controllers", c)
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
				problem(ProblemCgroupController, "cgroup v1 controller %q is not mounted at /sys/fs/cgroup/%s", c, c)
			}
		}
		_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
		f.SwapLimit = err == nil
		if !f.SwapLimit && hasSwap() {
			problem(ProblemSwapAccounting, "swap is on but the memory cgroup cannot limit it: boot with swapaccount=1 or turn swap off")
		}
	}

	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) != "0" {
		f.UserNS = true
	} else {
		problem(ProblemUserNS, "user namespaces are disabled: sysctl user.max_user_namespaces must be > 0")
	}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil {
		f.Overlay = strings.Contains(string(b), "\toverlay\n")
	}
	if !f.Overlay {
		problem(ProblemOverlay, "overlayfs is not available: modprobe overlay")
	}
	// Idmapped mounts arrived in 5.12 (overlayfs lower layers honour them).
	var maj, min int
	fmt.Sscanf(f.Kernel, "%d.%d", &maj, &min)
	f.IDMap = maj > 5 || (maj == 5 && min >= 12)
	if !f.IDMap {
		problem(ProblemIDMap, "kernel %s has no idmapped mounts: 5.12 or newer is needed", f.Kernel)
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
		problem(ProblemSeccomp, "seccomp is not available (kernel without CONFIG_SECCOMP_FILTER, or jailcell built without -tags seccomp)")
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
