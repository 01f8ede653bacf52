package seccomp

import (
	"fmt"
	"runtime"
	"slices"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/errdefs"
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
	// inotify instances and watches are counted per user namespace up to
	// host root's (a sandbox's namespace is root's), against one limit
	// for the whole host user (fs.inotify.max_user_instances, 128): a
	// cell holding them starved host root and every other session of
	// inotify (systemd, udev, editors). Sessions' watches are the host's
	// polling (session/watch.go), never inotify in the sandbox.
	"inotify_init",  //
	"inotify_init1", //
	// fanotify groups and marks: counted the same way. Docker's profile
	// refuses it without CAP_SYS_ADMIN already; named here so that a
	// profile that ever allows it does not bring the hole back.
	"fanotify_init", //
	// Linux AIO contexts: fs.aio-max-nr is one host-wide count, not per
	// namespace or user, and one io_setup(65536) took all of it for the
	// session's life (every other session's and the host's databases'
	// io_setup then failed). CPython and the wheels a cell loads do not
	// use it.
	"io_setup",     //
	"io_submit",    //
	"io_cancel",    //
	"io_getevents", //
	"io_pgetevents",
	"io_destroy", //
	// Custom LDT segments: a kernel corner with its own CVEs
	// (CVE-2017-17053, espfix and 16-bit segment bugs); neither CPython
	// nor the wheels a cell loads use them.
	"modify_ldt", //
}

// Deliberately still refused, as by Docker without CAP_SYS_NICE: mbind,
// set_mempolicy and get_mempolicy (NUMA placement, which on a shared host
// is the neighbours' business too). OpenBLAS's worker threads call
// mbind(MPOL_PREFERRED) on their buffers as a hint and carry on when it
// fails; session's TestProfileImportsInSandbox runs numpy, scipy and
// scikit-learn through that path.

// socketRule is a family a sandbox may open sockets of, and the
// protocols it may ask for; nil: any.
type socketRule struct {
	family uint64
	protos []uint64
}

// sockets is every socket a sandbox may open. Docker's profile admits
// about thirty families (TIPC, RDS, CAN, KCM, SMC, NFC, ...), every IP
// protocol (SCTP, L2TP) and every netlink protocol but audit: creating
// one has the host load its module (request_module("net-pf-N..."), from
// any namespace, before any capability check), and then the cell drives
// its unprivileged paths: CVE-2010-3904 (RDS), CVE-2021-3609 (CAN BCM),
// CVE-2017-6074 (DCCP). A Python cell needs Unix sockets, TCP, UDP and
// ping over IPv4 and IPv6, and netlink's route protocol (getifaddrs,
// if_nameindex). Protocols are compared in all 64 bits: a value with
// garbage in its upper half, which the kernel truncates to int, matches
// no rule. The audit protocol (not namespaced) is outside too.
var sockets = []socketRule{
	{unix.AF_UNIX, nil},
	{unix.AF_INET, []uint64{0, unix.IPPROTO_ICMP, unix.IPPROTO_TCP, unix.IPPROTO_UDP}},
	{unix.AF_INET6, []uint64{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMPV6}},
	{unix.AF_NETLINK, []uint64{unix.NETLINK_ROUTE}},
}

// hugeFlag is a call that can take huge pages, and the argument and bit
// that ask for them.
type hugeFlag struct {
	name string
	arg  uint
	bit  uint64
}

// hugeFlags are the ways to ask the kernel for huge pages outside the
// memory cgroup. Pages of the host's hugetlb pool are charged to no
// memory limit on a v1 or hybrid host (and on v2 only with the
// memory_hugetlb_accounting mount option), and sandboxes get no hugetlb
// limit: on a host with vm.nr_hugepages above 0 one cell could take the
// whole pool from the host's databases and every other session. CPython
// and the wheels a cell loads never ask for them (glibc only with its
// hugetlb tunable); transparent huge pages (madvise) are ordinary,
// charged memory and stay allowed. SHM_HUGETLB is 04000 (linux/shm.h).
var hugeFlags = []hugeFlag{
	{"mmap", 3, unix.MAP_HUGETLB},
	{"shmget", 2, 0o4000},
	{"memfd_create", 1, unix.MFD_HUGETLB},
}

// Config builds the sandbox's filter from Docker's default allowlist
// (github.com/moby/profiles, computed for a process with no capabilities,
// which also removes mount, unshare, setns, namespace clone flags, reboot,
// kexec, module loading and clock setting), minus the calls in denied, and
// with sockets only of the families and protocols in sockets. Only the native ABI is
// allowed: 32-bit and x32 entry points are refused (the 32-bit path has
// been the way around filters before, e.g. CVE-2009-0835). Nothing Docker
// refuses an unprivileged container is allowed here; TestSeccompParity
// compares the two rule by rule and lists every deliberate difference.
func Config(errno uint) (*configs.Seccomp, error) {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	prof, err := mobyseccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("build seccomp profile: %w", err)
	}
	native, ok := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("%w: seccomp profile for %s", errdefs.ErrUnsupported, runtime.GOARCH)
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
	prof.Syscalls = noHugePages(ownSockets(calls))
	cfg, err := specconv.SetupSeccomp(prof)
	if err != nil {
		return nil, fmt.Errorf("convert seccomp profile: %w", err)
	}
	return cfg, nil
}

// ownSockets takes socket and socketpair out of every allowing rule and
// allows them only as sockets says (socketpair: Unix sockets, the one
// family that pairs; another family's module is loaded by a socketpair
// too).
func ownSockets(calls []specs.LinuxSyscall) []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, c := range calls {
		if c.Action == specs.ActAllow {
			c.Names = slices.DeleteFunc(slices.Clone(c.Names), func(n string) bool { return n == "socket" || n == "socketpair" })
			if len(c.Names) == 0 {
				continue
			}
		}
		out = append(out, c)
	}
	out = append(out, specs.LinuxSyscall{Names: []string{"socketpair"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_UNIX, Op: specs.OpEqualTo}}})
	for _, r := range sockets {
		if r.protos == nil {
			out = append(out, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: r.family, Op: specs.OpEqualTo}}})
			continue
		}
		for _, proto := range r.protos {
			out = append(out, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: r.family, Op: specs.OpEqualTo},
				{Index: 2, Value: proto, Op: specs.OpEqualTo},
			}})
		}
	}
	return out
}

// noHugePages takes each call of hugeFlags out of every allowing rule and
// allows it only with its huge-page bit clear. The bit is tested alone,
// so garbage elsewhere in the argument changes nothing.
func noHugePages(calls []specs.LinuxSyscall) []specs.LinuxSyscall {
	isHuge := func(n string) bool {
		return slices.ContainsFunc(hugeFlags, func(h hugeFlag) bool { return h.name == n })
	}
	var out []specs.LinuxSyscall
	for _, c := range calls {
		if c.Action == specs.ActAllow {
			c.Names = slices.DeleteFunc(slices.Clone(c.Names), isHuge)
			if len(c.Names) == 0 {
				continue
			}
		}
		out = append(out, c)
	}
	for _, h := range hugeFlags {
		out = append(out, specs.LinuxSyscall{Names: []string{h.name}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: h.arg, Value: h.bit, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
	}
	return out
}

// HugePagesAsked reports whether a call of this name with these
// arguments asks for huge pages the filter refuses, for tests and docs.
func HugePagesAsked(name string, args []uint64) bool {
	for _, h := range hugeFlags {
		if h.name == name && int(h.arg) < len(args) {
			return args[h.arg]&h.bit != 0
		}
	}
	return false
}

// SocketAllowed reports whether a sandbox may call socket(family, _,
// proto): the sockets table, for tests and docs.
func SocketAllowed(family, proto uint64) bool {
	for _, r := range sockets {
		if r.family == family {
			return r.protos == nil || slices.Contains(r.protos, proto)
		}
	}
	return false
}

// ruleAdmits reports whether a rule with these argument conditions matches
// a call with args, as runc installs it: the conditions are ANDed, unless
// two of them test the same argument, in which case runc adds each as a
// rule of its own (ORed).
func ruleAdmits(conds []specs.LinuxSeccompArg, args []uint64) bool {
	if len(conds) == 0 {
		return true
	}
	seen := map[uint]bool{}
	or := false
	for _, c := range conds {
		or = or || seen[c.Index]
		seen[c.Index] = true
	}
	for _, c := range conds {
		m := c.Index < uint(len(args)) && argAdmits(c, args[c.Index])
		if or && m {
			return true
		}
		if !or && !m {
			return false
		}
	}
	return !or
}

// argAdmits evaluates one libseccomp comparison on a 64-bit argument.
func argAdmits(c specs.LinuxSeccompArg, x uint64) bool {
	switch c.Op {
	case specs.OpEqualTo:
		return x == c.Value
	case specs.OpNotEqual:
		return x != c.Value
	case specs.OpLessThan:
		return x < c.Value
	case specs.OpLessEqual:
		return x <= c.Value
	case specs.OpGreaterThan:
		return x > c.Value
	case specs.OpGreaterEqual:
		return x >= c.Value
	case specs.OpMaskedEqual:
		return x&c.Value == c.ValueTwo
	}
	return true // unknown: assume it matches, so a check built on it fails closed
}
