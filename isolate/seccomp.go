package isolate

import (
	"fmt"
	"runtime"
	"slices"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// denied are system calls refused even where Docker's default profile allows
// them: a code-interpreter cell has no need for them and each is a known
// path to the kernel's less-hardened corners.
var denied = []string{
	"ptrace",            // process inspection; CVE-2019-13272 (PTRACE_TRACEME)
	"process_vm_readv",  // cross-process memory access
	"process_vm_writev", //
	"io_uring_setup",    // io_uring: a stream of kernel CVEs, e.g. CVE-2022-29582
	"io_uring_enter",    //
	"io_uring_register", //
	"userfaultfd",       // stretches race windows in kernel exploits
	"personality",       // READ_IMPLIES_EXEC and other legacy execution domains
	"uselib",            // a.out loader
	"perf_event_open",   // CVE-2013-2094 and kin
	"bpf",               //
	"keyctl",            // kernel keyring is not namespaced
	"add_key",           //
	"request_key",       //
}

// seccompConfig builds the sandbox's filter from Docker's default allowlist
// (github.com/moby/profiles, computed for a process with no capabilities,
// which also removes mount, unshare, setns, namespace clone flags, reboot,
// kexec, module loading and clock setting), minus the calls in denied.
// Only the native ABI is allowed: 32-bit and x32 entry points are refused
// (the 32-bit path has been the way around filters before, e.g.
// CVE-2009-0835).
func seccompConfig(errno uint) (*configs.Seccomp, error) {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	prof, err := mobyseccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("build seccomp profile: %w", err)
	}
	native, ok := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("%w: seccomp profile for %s", ErrUnsupported, runtime.GOARCH)
	}
	prof.Architectures = []specs.Arch{native}
	prof.DefaultErrnoRet = &errno
	var calls []specs.LinuxSyscall
	for _, c := range prof.Syscalls {
		if c.Action != specs.ActAllow {
			// Docker's explicit ERRNO rules (e.g. clone3 -> ENOSYS so libc
			// falls back to clone, which the filter can inspect) stay.
			calls = append(calls, c)
			continue
		}
		c.Names = slices.DeleteFunc(slices.Clone(c.Names), func(n string) bool { return slices.Contains(denied, n) })
		if len(c.Names) > 0 {
			calls = append(calls, c)
		}
	}
	prof.Syscalls = calls
	cfg, err := specconv.SetupSeccomp(prof)
	if err != nil {
		return nil, fmt.Errorf("convert seccomp profile: %w", err)
	}
	return cfg, nil
}
