package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// difference is a deliberate way our filter is stricter than Docker's
// default profile for an unprivileged container: Docker allows the call
// (for the arguments refused says), we refuse it.
type difference struct {
	// refused picks the argument vectors of the deliberate refusal; nil:
	// every call of that name.
	refused func(args []uint64) bool
	reason  string
}

// deliberate lists every deliberate difference. A new difference (a
// changed Docker profile, a new entry in denied) fails TestSeccompParity
// until it is listed here with its reason; a listed difference that no
// longer exists fails it too.
var deliberate = map[string]difference{
	"ptrace":            {nil, "process inspection; CVE-2019-13272 (PTRACE_TRACEME)"},
	"process_vm_readv":  {nil, "cross-process memory access"},
	"process_vm_writev": {nil, "cross-process memory access"},
	"personality":       {nil, "READ_IMPLIES_EXEC and other legacy execution domains"},
	"inotify_init":      {nil, "inotify instances are charged up to host root's uid: a cell holding them starves the host and other sessions"},
	"inotify_init1":     {nil, "inotify instances are charged up to host root's uid: a cell holding them starves the host and other sessions"},
	"io_setup":          {nil, aioReason},
	"io_submit":         {nil, aioReason},
	"io_cancel":         {nil, aioReason},
	"io_getevents":      {nil, aioReason},
	"io_pgetevents":     {nil, aioReason},
	"io_destroy":        {nil, aioReason},
	"modify_ldt":        {nil, "custom LDT segments: CVE-2017-17053, espfix and 16-bit segment bugs; nothing a cell runs uses them"},
	"socket": {func(a []uint64) bool { return !SocketAllowed(a[0], a[2]) },
		"only Unix, IPv4 and IPv6 (TCP, UDP, ping) and netlink route sockets: any other family or protocol has the host load its module (CVE-2010-3904 RDS, CVE-2021-3609 CAN BCM); " +
			"NETLINK_AUDIT reaches the host's audit subsystem, which is not namespaced; protocols are matched in all 64 bits"},
	"mmap":         {func(a []uint64) bool { return HugePagesAsked("mmap", a) }, hugeReason},
	"shmget":       {func(a []uint64) bool { return HugePagesAsked("shmget", a) }, hugeReason},
	"memfd_create": {func(a []uint64) bool { return HugePagesAsked("memfd_create", a) }, hugeReason},
	"socketpair": {func(a []uint64) bool { return a[0] != unix.AF_UNIX },
		"Unix sockets only: a socketpair of another family loads its module as a socket does"},
}

const hugeReason = "huge pages of the host's pool are charged to no memory limit and sandboxes get no hugetlb limit: one cell could take the pool"

const aioReason = "fs.aio-max-nr is one host-wide count: one io_setup took it all from every session and the host"

// deliberateArches: Docker also allows the 32-bit and x32 ABIs of the
// native architecture; we allow the native ABI only (CVE-2009-0835: the
// 32-bit entry point has been the way around filters).
var deliberateArches = map[string]bool{"x86": true, "x32": true, "arm": true}

// runcArch is libseccomp's architecture name as runc's config spells it.
var runcArch = map[string]string{"SCMP_ARCH_X86_64": "amd64", "SCMP_ARCH_X86": "x86", "SCMP_ARCH_X32": "x32",
	"SCMP_ARCH_AARCH64": "arm64", "SCMP_ARCH_ARM": "arm"}

// rule is one seccomp rule in a form both profiles convert to.
type rule struct {
	allow bool
	conds []specs.LinuxSeccompArg
}

var configOps = map[configs.Operator]specs.LinuxSeccompOperator{
	configs.EqualTo: specs.OpEqualTo, configs.NotEqualTo: specs.OpNotEqual,
	configs.GreaterThan: specs.OpGreaterThan, configs.GreaterThanOrEqualTo: specs.OpGreaterEqual,
	configs.LessThan: specs.OpLessThan, configs.LessThanOrEqualTo: specs.OpLessEqual,
	configs.MaskEqualTo: specs.OpMaskedEqual,
}

// ourRules is the filter a sandbox gets, by call name. A rule allows
// unless its action refuses (errno, kill, trap): log, trace or notify would
// let the call through, so they count as allowing.
func ourRules(t *testing.T) (*configs.Seccomp, map[string][]rule) {
	t.Helper()
	cfg, err := Config(1)
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if cfg.DefaultAction != configs.Errno {
		t.Fatalf("default action %v, want errno", cfg.DefaultAction)
	}
	out := map[string][]rule{}
	for _, c := range cfg.Syscalls {
		r := rule{allow: !slices.Contains([]configs.Action{configs.Errno, configs.Kill, configs.KillThread, configs.KillProcess, configs.Trap}, c.Action)}
		for _, a := range c.Args {
			op, ok := configOps[a.Op]
			if !ok {
				t.Fatalf("%s: unknown operator %v", c.Name, a.Op)
			}
			r.conds = append(r.conds, specs.LinuxSeccompArg{Index: a.Index, Value: a.Value, ValueTwo: a.ValueTwo, Op: op})
		}
		out[c.Name] = append(out[c.Name], r)
	}
	return cfg, out
}

// dockerRules is Docker's default profile as it applies to a container
// with no capabilities on this architecture and kernel, evaluated here from
// the rule list and its include/exclude filters (not through the helper
// Config uses), and its architectures.
func dockerRules(t *testing.T) ([]string, map[string][]rule) {
	t.Helper()
	prof := mobyseccomp.DefaultProfile()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	var kmaj, kmin uint64
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &kmaj, &kmin)
	kernelAtLeast := func(v *mobyseccomp.KernelVersion) bool {
		return v == nil || kmaj > v.Kernel || kmaj == v.Kernel && kmin >= v.Major
	}
	arch := runtime.GOARCH
	out := map[string][]rule{}
	for _, s := range prof.Syscalls {
		if in := s.Includes; in != nil {
			if len(in.Caps) > 0 || len(in.Arches) > 0 && !slices.Contains(in.Arches, arch) || !kernelAtLeast(in.MinKernel) {
				continue
			}
		}
		if ex := s.Excludes; ex != nil {
			// No capabilities: a caps exclusion never removes a rule.
			if slices.Contains(ex.Arches, arch) || ex.MinKernel != nil && kernelAtLeast(ex.MinKernel) {
				continue
			}
		}
		names := s.Names
		if s.Name != "" {
			names = append(slices.Clone(names), s.Name)
		}
		for _, n := range names {
			out[n] = append(out[n], rule{allow: s.Action == specs.ActAllow, conds: s.Args})
		}
	}
	native := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[arch]
	var arches []string
	for _, a := range prof.ArchMap {
		if a.Arch == native {
			arches = append(arches, runcArch[string(a.Arch)])
			for _, sa := range a.SubArches {
				arches = append(arches, runcArch[string(sa)])
			}
		}
	}
	return arches, out
}

// allows: ours counts a call allowed if any allowing rule matches (the
// reading most favourable to a difference); Docker's only if an allowing
// rule matches and no refusing one does.
func allows(rs []rule, args []uint64, strict bool) bool {
	allow, refuse := false, false
	for _, r := range rs {
		if ruleAdmits(r.conds, args) {
			allow = allow || r.allow
			refuse = refuse || !r.allow
		}
	}
	if strict {
		return allow && !refuse
	}
	return allow
}

// vectors is a grid of argument vectors around every constant either
// profile compares a call's arguments with, plus values with garbage in
// the upper 32 bits.
func vectors(rs ...[]rule) [][]uint64 {
	vals := map[uint][]uint64{}
	for _, set := range rs {
		for _, r := range set {
			for _, c := range r.conds {
				for _, v := range []uint64{c.Value, c.ValueTwo, c.Value & c.ValueTwo, c.ValueTwo | ^c.Value} {
					vals[c.Index] = append(vals[c.Index], v-1, v, v+1, v|1<<32, v|1<<63)
				}
			}
		}
	}
	grid := [][]uint64{make([]uint64, 6)}
	for idx, vs := range vals {
		vs = append(vs, 0, 1, 2, 3, 9, 31, 32, 0xffffffff, ^uint64(0))
		slices.Sort(vs)
		vs = slices.Compact(vs)
		var next [][]uint64
		for _, g := range grid {
			for _, v := range vs {
				a := slices.Clone(g)
				a[idx] = v
				next = append(next, a)
			}
		}
		grid = next
	}
	return grid
}

// TestSeccompParity compares our filter with Docker's default profile for
// an unprivileged container (github.com/moby/profiles/seccomp) rule by
// rule: no call, for any argument vector on the grid, may be allowed by
// ours and refused by Docker's; every call Docker allows and we refuse is
// a deliberate difference with its reason.
func TestSeccompParity(t *testing.T) {
	cfg, ours := ourRules(t)
	dArches, docker := dockerRules(t)
	for _, a := range cfg.Architectures {
		if !slices.Contains(dArches, a) {
			t.Errorf("architecture %s is allowed here, not by Docker (%v)", a, dArches)
		}
	}
	for _, a := range dArches {
		if !slices.Contains(cfg.Architectures, a) && !deliberateArches[a] {
			t.Errorf("architecture %s: Docker allows it, we do not, and that is not a listed difference", a)
		}
	}

	names := map[string]bool{}
	for n := range ours {
		names[n] = true
	}
	for n := range docker {
		names[n] = true
	}
	seen := map[string]bool{}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		var wider, stricter [][]uint64
		for _, args := range vectors(ours[n], docker[n]) {
			o, d := allows(ours[n], args, false), allows(docker[n], args, true)
			switch {
			case o && !d:
				wider = append(wider, args)
			case d && !o:
				stricter = append(stricter, args)
			}
		}
		if len(wider) > 0 {
			t.Errorf("%s: allowed here and refused by Docker's profile for %d argument vectors, e.g. %#x", n, len(wider), wider[0])
		}
		if len(stricter) == 0 {
			continue
		}
		diff, ok := deliberate[n]
		if !ok {
			t.Errorf("%s: Docker allows it (e.g. %#x), we refuse it, and that is not a listed difference", n, stricter[0])
			continue
		}
		seen[n] = true
		for _, args := range stricter {
			if diff.refused != nil && !diff.refused(args) {
				t.Errorf("%s%#x: Docker allows it, we refuse it, outside the listed difference (%s)", n, args[:3], diff.reason)
				break
			}
		}
		if diff.refused != nil {
			// Every vector the listed difference names must be refused here
			// (the difference is really in force), and Docker must allow it.
			for _, args := range vectors(ours[n], docker[n]) {
				if diff.refused(args) && allows(ours[n], args, false) {
					t.Errorf("%s%#x: listed as refused (%s) but allowed", n, args[:3], diff.reason)
					break
				}
			}
		}
	}
	for n, d := range deliberate {
		if !seen[n] {
			t.Errorf("%s is listed as a deliberate difference (%s) but is no difference: remove it", n, d.reason)
		}
	}
	t.Logf("%d calls compared; deliberate differences: %d calls, arches %v", len(names), len(seen), dArches)
}

// TestRuleAdmits: runc's reading of argument conditions (ANDed, or each a
// rule of its own when two test the same argument).
func TestRuleAdmits(t *testing.T) {
	eq := func(i uint, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: specs.OpEqualTo}
	}
	cases := []struct {
		conds []specs.LinuxSeccompArg
		args  []uint64
		want  bool
	}{
		{nil, []uint64{5}, true},
		{[]specs.LinuxSeccompArg{eq(0, 16), eq(2, 9)}, []uint64{16, 3, 9}, true},
		{[]specs.LinuxSeccompArg{eq(0, 16), eq(2, 9)}, []uint64{16, 3, 9 | 1<<32}, false},
		{[]specs.LinuxSeccompArg{eq(0, 16), eq(0, 17)}, []uint64{17, 0, 0}, true}, // same index: ORed
		{[]specs.LinuxSeccompArg{{Index: 0, Value: 0x7e020000, ValueTwo: 0, Op: specs.OpMaskedEqual}}, []uint64{0x10000000}, false},
		{[]specs.LinuxSeccompArg{{Index: 0, Value: 3, Op: specs.OpLessThan}}, []uint64{2}, true},
	}
	for _, c := range cases {
		if got := ruleAdmits(c.conds, c.args); got != c.want {
			t.Errorf("ruleAdmits(%+v, %#x) = %v, want %v", c.conds, c.args, got, c.want)
		}
	}
}

// TestSocketFamiliesMinimal: the filter admits socket(family, type, proto)
// for exactly the families and protocols of the sockets table, over every
// family the kernel numbers and the IP protocols whose modules a socket
// would load (SCTP, DCCP, L2TP), with garbage in the upper bits refused.
func TestSocketFamiliesMinimal(t *testing.T) {
	_, ours := ourRules(t)
	protos := []uint64{0, 1, 6, 9, 17, 33, 58, 115, 132, 256, 1 << 32, 6 | 1<<32}
	admitted := 0
	for family := uint64(0); family <= 50; family++ {
		for _, proto := range protos {
			for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET} {
				got := allows(ours["socket"], []uint64{family, typ, proto, 0, 0, 0}, false)
				if want := SocketAllowed(family, proto); got != want {
					t.Errorf("socket(%d, %d, %#x): admitted %v, want %v", family, typ, proto, got, want)
				}
				if got {
					admitted++
				}
			}
		}
		if got := allows(ours["socketpair"], []uint64{family, unix.SOCK_STREAM, 0, 0, 0, 0}, false); got != (family == unix.AF_UNIX) {
			t.Errorf("socketpair(%d): admitted %v", family, got)
		}
	}
	for _, bad := range [][2]uint64{{unix.AF_INET, unix.IPPROTO_SCTP}, {unix.AF_INET6, unix.IPPROTO_SCTP}, {unix.AF_INET, unix.IPPROTO_L2TP},
		{unix.AF_NETLINK, unix.NETLINK_AUDIT}, {unix.AF_NETLINK, unix.NETLINK_NETFILTER}, {unix.AF_TIPC, 0}, {unix.AF_RDS, 0}, {unix.AF_CAN, 0}, {unix.AF_PACKET, 0}} {
		if SocketAllowed(bad[0], bad[1]) {
			t.Errorf("socket(%d, _, %d) is in the table", bad[0], bad[1])
		}
	}
	if admitted == 0 {
		t.Fatal("no socket admitted at all")
	}
	if _, ok := ours["modify_ldt"]; ok && allows(ours["modify_ldt"], make([]uint64, 6), false) {
		t.Error("modify_ldt is allowed")
	}
}
