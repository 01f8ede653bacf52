package isolate

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jailcell/jailcell/isolate/criu"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
)

// DefaultCriu is the criu `make criu` builds (criu.DefaultBin).
const DefaultCriu = criu.DefaultBin

// CriuPATH returns path (a PATH value) with criu's directory first
// (criu.PATH). isolate never sets it: the process's owner (main, TestMain)
// does, once, before any goroutine runs criu.
func CriuPATH(bin, path string) string { return criu.PATH(bin, path) }

// criuBound is how long one checkpoint or restore of a sandbox with
// memory bytes of memory limit may take: Config.CriuTimeout if set, else
// 60 s plus 1 s per 16 MiB.
func (h *Host) criuBound(memory int64) time.Duration {
	if h.cfg.CriuTimeout > 0 {
		return h.cfg.CriuTimeout
	}
	if memory < 0 {
		memory = 0
	}
	return criu.BaseBound + time.Duration(memory/criu.BytesPerS)*time.Second
}

// probeBound bounds each step of the criu probe.
func (h *Host) probeBound() time.Duration {
	if t := h.cfg.CriuTimeout; t > 0 && t < criu.ProbeBound {
		return t
	}
	return criu.ProbeBound
}

// CriuCheck says whether checkpoint and restore work on this host, or why
// not (ErrUnsupported). It probes once per Host and keeps the verdict:
// "criu" on PATH is the configured binary, `criu check` passes, and a tiny
// process is really dumped and restored, each step bounded. A host where
// dumps hang (the nested-virt hardware breakpoint bug that
// runtime/criu-patches/0002-no-hw-breakpoints.patch fixes) so answers
// "unavailable" instead of hanging every checkpoint.
func (h *Host) CriuCheck() error {
	h.criu.once.Do(func() {
		if err := criu.OnPath(h.cfg.Criu); err != nil {
			h.criu.err = fmt.Errorf("%w: %w", ErrUnsupported, err)
			return
		}
		h.criu.err = criu.Probe(h.cfg.Criu, h.probeBound())
	})
	return h.criu.err
}

// ProbeCriu says whether bin can checkpoint and restore on this host: the
// probe of CriuCheck without its PATH check, run afresh each call (each
// step bounded by 30 s), for callers without a Host: doctor and tests.
func ProbeCriu(bin string) error { return criu.Probe(bin, criu.ProbeBound) }

// Criu is the criu binary the host was configured with.
func (h *Host) Criu() string { return h.cfg.Criu }

// afterDumpTimeout decides what a timed-out dump leaves: criu froze the
// sandbox's cgroup and seized its tasks; its death released the tasks
// (ptrace detaches a dead tracer's tracees), the cgroup is thawed here,
// and the sandbox goes on running. If its init died on the way, that is
// said, loudly: the sandbox's state is lost.
func (s *Sandbox) afterDumpTimeout(err error) error {
	if errors.Is(err, criu.ErrStuck) {
		return err
	}
	_ = s.container.Resume() // ErrNotPaused unless criu left it frozen
	if !procfs.Alive(s.pid) {
		return fmt.Errorf("%w; sandbox %s did not survive it: its processes and their state are lost", err, s.ID)
	}
	return fmt.Errorf("%w; sandbox %s goes on running", err, s.ID)
}

// CheckpointIdentity names what a checkpoint taken on this host depends on
// besides the policy and the sandbox's own program: the rootfs (its
// resolved path, the root directory's inode and change time, and the
// manifest.json beside it if any) and the criu binary (path, size, change
// time). A checkpoint whose identity differs from the host's must not be
// restored here: a kernel restored onto another rootfs maps files that
// changed under it.
func (h *Host) CheckpointIdentity() string {
	var b strings.Builder
	root, err := filepath.EvalSymlinks(h.cfg.Rootfs)
	if err != nil {
		root = h.cfg.Rootfs
	}
	fmt.Fprintf(&b, "rootfs=%s\n", root)
	if st, err := os.Stat(root); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(&b, "rootfs-ino=%d ctime=%d.%d\n", sys.Ino, sys.Ctim.Sec, sys.Ctim.Nsec)
		}
	}
	if f, err := os.Open(filepath.Join(filepath.Dir(root), "manifest.json")); err == nil {
		h := sha256.New()
		_, _ = io.Copy(h, io.LimitReader(f, 16<<20))
		f.Close()
		fmt.Fprintf(&b, "manifest=%x\n", h.Sum(nil))
	}
	if bin, err := exec.LookPath(h.cfg.Criu); err == nil {
		if st, err := os.Stat(bin); err == nil {
			fmt.Fprintf(&b, "criu=%s size=%d mtime=%d\n", bin, st.Size(), st.ModTime().UnixNano())
		}
	}
	return b.String()
}
