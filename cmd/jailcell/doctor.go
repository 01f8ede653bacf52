package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/rootfs"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/store"
)

const (
	statusOK   = "ok"
	statusFail = "FAIL"
	statusWarn = "warn"
	// statusNote: the service is not installed or not running here.
	// Nothing about whether this host can run sandboxes: a development
	// host that builds and runs jailcell without installing it passes.
	statusNote = "note"
)

// check is one line of the doctor's report.
type check struct {
	status, name, found, fix string
	// ids pick out the isolate.Probe problems that belong to this check,
	// so the report and NewHost's refusal can never disagree.
	ids []isolate.ProblemID
}

func newDoctorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can build sandboxes, then build one",
		Long: `Check the host feature by feature (kernel, user namespaces, overlayfs,
idmapped mounts, cgroups, swap accounting, seccomp, privileges, the rootfs,
the state directory and the store), then the installed service as its
clients see it (the socket and its directory, their modes and group,
reaching the service as this user, the config file's readability for
clients, the systemd units), one line each: ok, warn or FAIL, what was
found and how to fix it. Then build a real sandbox and run print(1) in it.

Exits non-zero if a check fails or the sandbox cannot be built.`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(cmd)
	hf.client = true // a group member checks the service too; the file's readability is a check
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out := cmd.OutOrStdout()
		ok := doctor(out, hf)
		if !ok {
			return exitError{1}
		}
		return nil
	}
	return cmd
}

func doctor(out io.Writer, hf *hostFlags) bool {
	f := isolate.Probe()
	checks := []*check{
		checkKernel(f),
		checkRoot(),
		checkUserNS(f),
		checkOverlay(f),
		checkIDMap(f),
		checkCgroupMode(f),
		checkControllers(f),
		checkSwap(f),
		checkSeccomp(f),
		checkCorePattern("/proc/sys/kernel/core_pattern"),
	}
	checks = placeProblems(checks, f.Problems)
	failed := false
	for _, c := range checks {
		failed = failed || c.status == statusFail
		printCheck(out, c)
	}
	r, rc := checkRootfs(hf.rootfs)
	printCheck(out, rc)
	sc := checkStateDir(hf.stateDir)
	printCheck(out, sc)
	failed = failed || rc.status == statusFail || sc.status == statusFail
	criu := isolate.DefaultCriu
	if cfg, err := hf.config(); err == nil && cfg.Criu != "" {
		criu = cfg.Criu
	}
	printCheck(out, checkCriu(criu))
	var stc *check
	var svc []*check
	if cfg, err := hf.config(); err == nil {
		stc = doctorStore(cfg.Store)
		printCheck(out, stc)
		svc = serviceChecks(cfg)
	}
	svcFailed, noted := false, false
	for _, c := range svc {
		printCheck(out, c)
		svcFailed = svcFailed || c.status == statusFail
		noted = noted || c.status == statusNote
	}

	// The final word: build a real sandbox with the same code path as
	// `jailcell run`.
	var sb *check
	if r == nil {
		sb = &check{status: statusFail, name: "sandbox", found: "not attempted: no usable rootfs", fix: "fix the rootfs check above"}
	} else {
		sb = checkSandbox(hf)
	}
	printCheck(out, sb)
	failed = failed || sb.status == statusFail
	warned := sb.status == statusWarn || rc.status == statusWarn || sc.status == statusWarn
	warned = warned || (stc != nil && stc.status == statusWarn)
	for _, c := range append(checks, svc...) {
		warned = warned || c.status == statusWarn
	}
	switch {
	case failed:
		fmt.Fprintln(out, "\nsome checks FAILED: jailcell cannot run sandboxes here until they are fixed")
	case svcFailed:
		fmt.Fprintln(out, "\nthis host runs sandboxes, but the service's checks FAILED: its clients cannot use it until they are fixed")
	default:
		msg := "\nall checks passed"
		if warned {
			msg = "\nno check failed; read the warn lines above"
		}
		if noted {
			msg += "; the service is not installed or not running here (note lines)"
		}
		fmt.Fprintln(out, msg)
	}
	return !failed && !svcFailed
}

// placeProblems attributes every problem the probe found to the check
// that names its kind; any left over is reported on its own rather than
// dropped.
func placeProblems(checks []*check, problems []isolate.Problem) []*check {
	owner := map[isolate.ProblemID]*check{}
	for _, c := range checks {
		for _, id := range c.ids {
			owner[id] = c
		}
	}
	for _, p := range problems {
		c, ok := owner[p.ID]
		if !ok {
			checks = append(checks, &check{status: statusFail, name: "host", found: p.Text})
			continue
		}
		if c.status != statusFail { // else the check said it already
			c.status = statusFail
			c.found += "; " + p.Text
		}
	}
	return checks
}

func printCheck(w io.Writer, c *check) {
	line := fmt.Sprintf("%-4s  %-16s %s", c.status, c.name, c.found)
	if c.fix != "" && c.status != statusOK {
		line += " — fix: " + c.fix
	}
	fmt.Fprintln(w, line)
}

func checkKernel(f isolate.Features) *check {
	c := &check{status: statusOK, name: "kernel", found: "Linux " + f.Kernel}
	if !f.IDMap {
		c.status, c.fix = statusFail, "upgrade to Linux 5.12 or newer (idmapped mounts)"
	}
	return c
}

func checkRoot() *check {
	if uid := os.Geteuid(); uid != 0 {
		return &check{status: statusFail, name: "privileges", found: fmt.Sprintf("running as uid %d", uid),
			fix: "run jailcell as root (sudo): it creates cgroups, idmapped mounts and per-sandbox uid ranges"}
	}
	return &check{status: statusOK, name: "privileges", found: "running as root"}
}

func checkUserNS(f isolate.Features) *check {
	b, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
	c := &check{status: statusOK, name: "user namespaces", found: "user.max_user_namespaces = " + strings.TrimSpace(string(b)),
		ids: []isolate.ProblemID{isolate.ProblemUserNS}, fix: "sysctl -w user.max_user_namespaces=15000"}
	if !f.UserNS {
		c.status = statusFail
	}
	return c
}

func checkOverlay(f isolate.Features) *check {
	c := &check{status: statusOK, name: "overlayfs", found: "overlay listed in /proc/filesystems",
		ids: []isolate.ProblemID{isolate.ProblemOverlay}, fix: "modprobe overlay"}
	if !f.Overlay {
		c.status, c.found = statusFail, "overlay is not in /proc/filesystems"
	}
	return c
}

func checkIDMap(f isolate.Features) *check {
	c := &check{status: statusOK, name: "idmapped mounts",
		found: "kernel " + f.Kernel + " is 5.12 or newer (exercised by the sandbox check below)",
		ids:   []isolate.ProblemID{isolate.ProblemIDMap}, fix: "upgrade to Linux 5.12 or newer"}
	if !f.IDMap {
		c.status, c.found = statusFail, "kernel "+f.Kernel+" predates idmapped mounts (5.12)"
	}
	return c
}

// checkCgroupMode says which hierarchy limits really go through: on a
// hybrid host that is v1, whatever the cgroup2 mount beside it offers.
func checkCgroupMode(f isolate.Features) *check {
	c := &check{status: statusOK, name: "cgroup mode"}
	v2 := cgroup2Mounts()
	switch f.CgroupMode {
	case "v2":
		c.found = "v2 (unified) at /sys/fs/cgroup"
	case "hybrid":
		var extra []string
		for _, m := range v2 {
			ctrls := strings.TrimSpace(readSmall(filepath.Join(m, "cgroup.controllers")))
			if ctrls == "" {
				ctrls = "none"
			}
			extra = append(extra, fmt.Sprintf("a cgroup2 mount at %s with controllers [%s]", m, ctrls))
		}
		c.found = "hybrid: limits are enforced through the v1 controllers at /sys/fs/cgroup/<controller>"
		if len(extra) > 0 {
			c.found += "; " + strings.Join(extra, ", ") + " is not used for limits"
		}
	default:
		c.found = "v1 only"
	}
	return c
}

func checkControllers(f isolate.Features) *check {
	c := &check{status: statusOK, name: "cgroup ctrls", ids: []isolate.ProblemID{isolate.ProblemCgroupController}}
	where := "/sys/fs/cgroup/<name> (v1)"
	if f.CgroupMode == "v2" {
		where = "/sys/fs/cgroup/cgroup.controllers"
		c.fix = `enable them: echo "+memory +pids +cpu" > /sys/fs/cgroup/cgroup.subtree_control`
	} else {
		c.fix = "mount the missing v1 controller hierarchies (or boot with cgroup v2)"
	}
	c.found = fmt.Sprintf("found %s at %s", strings.Join(f.Controllers, ", "), where)
	if len(f.Controllers) == 0 {
		c.found = "no usable controllers at " + where
	}
	return c
}

func checkSwap(f isolate.Features) *check {
	c := &check{name: "swap limit", ids: []isolate.ProblemID{isolate.ProblemSwapAccounting}, fix: "boot with swapaccount=1, or turn swap off (swapoff -a)"}
	swapOn := swapDevices()
	switch {
	case f.SwapLimit && f.CgroupMode == "v2":
		c.status, c.found = statusOK, "memory.swap.max can hold a sandbox's swap at zero"
	case f.SwapLimit:
		c.status, c.found = statusOK, "memory.memsw.limit_in_bytes present: a sandbox's swap is held at zero"
	case swapOn > 0:
		c.status, c.found = statusFail, fmt.Sprintf("%d swap device(s) on and no swap accounting: memory limits can be bypassed by swapping", swapOn)
	default:
		c.status, c.found = statusWarn, "no swap accounting; harmless while swap stays off (it is off now)"
	}
	return c
}

// checkCorePattern warns of a core_pattern that pipes to a helper: the
// kernel ignores a sandbox's RLIMIT_CORE of 0 for it, and every crash in
// a cell starts that helper as root on the host, outside the sandbox's
// cgroup.
func checkCorePattern(path string) *check {
	c := &check{name: "core dumps", status: statusOK}
	b, err := os.ReadFile(path)
	pattern := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		c.status, c.found = statusWarn, "cannot read "+path+": "+err.Error()
	case strings.HasPrefix(pattern, "|"):
		c.status = statusWarn
		c.found = fmt.Sprintf("kernel.core_pattern pipes to %q: a crash in a cell starts it as root on the host, outside the sandbox's limits (RLIMIT_CORE 0 does not stop a pipe)", pattern)
		c.fix = "sysctl kernel.core_pattern=core (or disable the helper, e.g. systemd-coredump's Storage=none)"
	default:
		c.found = "kernel.core_pattern writes a file; a sandbox's RLIMIT_CORE 0 keeps cells from dumping"
	}
	return c
}

func checkSeccomp(f isolate.Features) *check {
	c := &check{name: "seccomp", ids: []isolate.ProblemID{isolate.ProblemSeccomp}}
	switch {
	case !seccomp.Enabled:
		c.status, c.found = statusFail, "this jailcell binary was built without seccomp support"
		c.fix = "rebuild with CGO_ENABLED=1 go build -tags seccomp (needs libseccomp-dev)"
	case !f.Seccomp:
		c.status, c.found = statusFail, "the kernel reports no seccomp in /proc/self/status"
		c.fix = "use a kernel built with CONFIG_SECCOMP_FILTER"
	default:
		c.status = statusOK
		c.found = "kernel filters available; libseccomp " + f.SeccompVersion + " compiled in"
		if !strings.Contains(readSmall("/proc/self/status"), "Seccomp_filters:") {
			c.found += " (kernel does not report Seccomp_filters; filter mode is exercised by the sandbox check)"
		}
	}
	return c
}

// checkRootfs opens the rootfs and rehashes it against its manifest.
func checkRootfs(path string) (*rootfs.Rootfs, *check) {
	c := &check{name: "rootfs"}
	r, err := rootfs.Open(path)
	if err != nil {
		c.status, c.found = statusFail, err.Error()
		switch {
		case errors.Is(err, rootfs.ErrNotFound):
			c.fix = "build it with `make rootfs`, or `jailcell rootfs import` an exported one"
		case errors.Is(err, fs.ErrPermission):
			c.fix = "run as root"
		}
		return nil, c
	}
	start := time.Now()
	err = r.Verify()
	took := time.Since(start).Round(10 * time.Millisecond)
	if err != nil {
		c.status, c.found = statusFail, fmt.Sprintf("%s (checked in %s)", err, took)
		switch {
		case errors.Is(err, rootfs.ErrCorrupt):
			c.fix = "rebuild it (`make rootfs`) or re-import it; never edit a sealed tree"
		case errors.Is(err, fs.ErrPermission):
			c.fix = "run as root: parts of the tree are readable by root only"
		}
		return nil, c
	}
	m := r.Manifest
	c.status = statusOK
	c.found = fmt.Sprintf("%s at %s: profile %s, python %s, %d files, %s, content hash matches the manifest (verified in %s)",
		m.Version, r.Dir, profileName(m.Profile), m.PythonVersion, m.Files, sizeMB(m.SizeBytes), took)
	return r, c
}

// checkStateDir creates the state directory if needed and writes a file
// in it. Overlay upper layers live there, so its filesystem matters too.
func checkStateDir(dir string) *check {
	c := &check{name: "state dir"}
	abs, err := filepath.Abs(dir)
	if err == nil {
		err = os.MkdirAll(abs, 0o711)
	}
	var tmp *os.File
	if err == nil {
		tmp, err = os.CreateTemp(abs, ".doctor-*")
	}
	if err != nil {
		c.status, c.found = statusFail, "not writable: "+err.Error()
		c.fix = "run as root, or pass a writable --state-dir"
		return c
	}
	tmp.Close()
	os.Remove(tmp.Name())
	c.status, c.found = statusOK, abs+" is writable"
	var st unix.Statfs_t
	if unix.Statfs(abs, &st) == nil {
		switch fs := fsName(st.Type); fs {
		case "overlay", "nfs", "fuse":
			c.status = statusWarn
			c.found += fmt.Sprintf(" but on %s, which cannot hold an overlay's upper layer", fs)
			c.fix = "put --state-dir on ext4, xfs, btrfs or tmpfs"
		default:
			c.found += " (" + fs + ")"
		}
	}
	return c
}

// doctorStore opens the store and round-trips a checksummed object through
// it. A store that fails is a warning: cells run without it, persist and
// hibernation into a shared store answer unavailable.
func doctorStore(o store.Options) *check {
	c := &check{name: "store"}
	start := time.Now()
	st, err := store.Open(o)
	if err == nil {
		err = storeRoundTrip(st)
	}
	if err != nil {
		c.status, c.found = statusWarn, err.Error()
		c.fix = "persist and shared hibernation answer unavailable until it works: check store.url, store.s3.*, the AWS_* credentials and store.key_file (docs/store.md)"
		return c
	}
	c.status = statusOK
	what := "a checksummed object"
	if k, ok := store.Signer(st); ok {
		what = fmt.Sprintf("an object signed with fleet key %q", k)
	}
	c.found = fmt.Sprintf("%s: %s written, read back, verified and removed in %s", st.Name(), what, time.Since(start).Round(time.Millisecond))
	return c
}

func storeRoundTrip(st store.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := fmt.Sprintf("doctor/probe-%d-%d", os.Getpid(), time.Now().UnixNano())
	data := []byte("jailcell doctor")
	if _, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return err
	}
	defer st.Delete(ctx, key)
	got, err := store.ReadAll(ctx, st, key, int64(len(data)))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("store %s gave back %q for %q", st.Name(), got, data)
	}
	return nil
}

func checkSandbox(hf *hostFlags) *check {
	c := &check{name: "sandbox"}
	log, err := hf.logger()
	if err != nil {
		c.status, c.found = statusFail, err.Error()
		return c
	}
	start := time.Now()
	st, err := hf.build(log)
	if errors.Is(err, errStateBusy) {
		c.status, c.found = statusWarn, "not built: "+err.Error()
		c.fix = "rerun with a different --state-dir to test without disturbing it"
		return c
	}
	if err != nil {
		c.status, c.found = statusFail, "cannot build: "+err.Error()
		c.fix = "fix the FAIL lines above"
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := st.manager.RunOnce(ctx, os.Getuid(), "", session.ExecRequest{Code: "print(1)", Timeout: 60 * time.Second})
	took := time.Since(start).Round(time.Millisecond)
	if serr := st.shutdown(30 * time.Second); serr != nil && err == nil {
		err = serr
	}
	switch {
	case err != nil:
		c.status, c.found = statusFail, fmt.Sprintf("print(1) could not run: %v", err)
	case res.Status != session.StatusOK || res.Stdout != "1\n":
		c.status = statusFail
		c.found = fmt.Sprintf("print(1) ended %s with stdout %q stderr %q", res.Status, res.Stdout, truncate(res.Stderr, 300))
		if res.Error != nil {
			c.found += fmt.Sprintf(" (%s: %s)", res.Error.Type, res.Error.Message)
		}
	default:
		c.status = statusOK
		c.found = fmt.Sprintf("built a sandbox and ran print(1) in %s (cell %d ms, peak memory %s)",
			took, res.Usage.WallMS, humanBytes(res.Usage.PeakMemoryBytes))
	}
	return c
}

// cgroup2Mounts lists where cgroup2 is mounted, from mountinfo.
func cgroup2Mounts() []string {
	var out []string
	for _, line := range strings.Split(readSmall("/proc/self/mountinfo"), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		if f := strings.Fields(post); len(f) > 0 && f[0] == "cgroup2" {
			if pf := strings.Fields(pre); len(pf) > 4 {
				out = append(out, pf[4])
			}
		}
	}
	return out
}

func swapDevices() int {
	lines := strings.Split(strings.TrimSpace(readSmall("/proc/swaps")), "\n")
	return max(len(lines)-1, 0)
}

// readSmall reads a small kernel file; "" on any error.
func readSmall(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

func fsName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("filesystem 0x%x", magic)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkCriu says whether sessions can hibernate: a warning only, sessions
// work without it.
func checkCriu(criu string) *check {
	c := &check{status: statusOK, name: "hibernation", found: "criu check passed and a test process was dumped and restored: " + criu}
	if err := isolate.ProbeCriu(criu); err != nil {
		c.status, c.found, c.fix = statusWarn, "off: "+err.Error(), "make criu (builds criu 4.x into /var/lib/jailcell/criu)"
	}
	return c
}
