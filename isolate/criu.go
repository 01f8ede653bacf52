package isolate

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Checkpoint and restore of a whole sandbox with CRIU, through libcontainer.
// A checkpointed sandbox's processes and memory are gone; its disk (the
// overlay's upper layer) stays, and Disk.Restore brings the processes back on
// it from the image directory.

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// criuConfig is the criu configuration file passed to every dump and restore
// (libcontainer's org.criu.config label). Network locking is skipped: a
// sandbox's network namespace has only loopback when it is dumped (an
// allowlist sandbox's gateway link is removed first), and criu's iptables
// lock needs iptables on the host.
const criuConfig = "network-lock skip\n"

const (
	dumpConf    = "dump.conf"
	restoreConf = "restore.conf"
	stdioName   = "stdio"
)

func writeCriuConfig(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write criu config: %w", err)
	}
	return nil
}

// externalStdio returns criu's external keys (file[mnt_id:inode]) of the
// regular files that are pid's stdout and stderr, "" for anything else.
func externalStdio(pid int) ([2]string, error) {
	var keys [2]string
	for i, fd := range []int{1, 2} {
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
		if err != nil {
			return keys, fmt.Errorf("read fdinfo of sandbox init: %w", err)
		}
		var mnt int
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "mnt_id:"); ok {
				_, _ = fmt.Sscan(strings.TrimSpace(v), &mnt)
			}
		}
		keys[i] = fmt.Sprintf("file[%x:%x]", mnt, fi.Sys().(*syscall.Stat_t).Ino)
	}
	return keys, nil
}

const criuConfigLabel = "org.criu.config"

func criuOpts(imageDir string, leaveRunning bool) *libcontainer.CriuOpts {
	return &libcontainer.CriuOpts{
		ImagesDirectory: imageDir,
		WorkDirectory:   imageDir,
		LeaveRunning:    leaveRunning,
		FileLocks:       true,
		// The cgroup is the sandbox's own, created by libcontainer on
		// restore with the policy's limits; criu moves tasks into it and
		// sets no property of a cgroup it did not create ("soft"). Not
		// "ignore": criu then skips the cgroup namespace, and a restored
		// sandbox ran in the host's (seeing the host's cgroup paths), which
		// the posture check caught. A child cgroup an image asks criu to
		// create is refused by the posture check.
		ManageCgroupsMode: "soft",
	}
}

// Image ownership. During a restore criu's root task reads images (the time
// namespace's, first) from inside the new user namespace twice over: before
// criu's parent has written the namespace's uid map, and later as the
// namespace's root. Before the map exists the task is still host uid and gid
// 0 but holds no capability that reaches files of unmapped owners; after it
// switched credentials it is the sandbox's mapped root. A directory and files
// owned by the mapped root and group host root (0) serve both without a
// capability, whichever way the race between the map and the read goes: the
// map written late gave "Unable to open timens-0.img: Permission denied".
// No one else reaches them: the session state directory above is host root's,
// 0700, and no sandbox mounts it.
const (
	imageDirMode  = 0o770
	imageFileMode = 0o660
)

// prepareImageDir creates dir for criu with the image ownership above.
func (d *Disk) prepareImageDir(dir string) error {
	if err := os.Mkdir(dir, imageDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create image dir: %w", err)
	}
	if err := os.Chown(dir, d.HostID(), 0); err != nil {
		return fmt.Errorf("chown image dir: %w", err)
	}
	if err := os.Chmod(dir, imageDirMode); err != nil {
		return fmt.Errorf("chmod image dir: %w", err)
	}
	return chownImages(dir, d.HostID())
}

// Checkpoint dumps every process of the sandbox into imageDir (created if
// missing; it must not be writable by the sandbox). Unless leaveRunning, the
// processes are gone afterwards and the caller destroys the sandbox; its
// disk stays for Restore. The sandbox's connections to the host must be
// closed first: criu refuses sockets whose peer is outside.
func (s *Sandbox) Checkpoint(imageDir string, leaveRunning bool) (retErr error) {
	h := s.disk.h
	if err := h.CriuCheck(); err != nil {
		return err
	}
	if s.net != nil {
		// The gateway is the daemon's, outside the sandbox: criu cannot
		// carry its link. The dump is taken with loopback only (closed,
		// never open), and a sandbox that goes on running gets a new
		// gateway with the same allowlist; a restore builds its own.
		if err := s.detachNetwork(); err != nil {
			return err
		}
		defer func() {
			if leaveRunning || retErr != nil {
				if err := s.AttachNetwork(s.policy); err != nil && retErr == nil {
					retErr = err
				}
			}
		}()
	}
	if err := s.disk.prepareImageDir(imageDir); err != nil {
		return err
	}
	// The sandbox's stdout and stderr are the host's log file, which no
	// mount inside shows: criu records it as external, and restore gives
	// the restored tasks the log file the restoring caller passes.
	ext, err := externalStdio(s.pid)
	if err != nil {
		return err
	}
	var conf strings.Builder
	conf.WriteString(criuConfig)
	keys := map[string]bool{}
	for _, k := range ext {
		if !keys[k] {
			fmt.Fprintf(&conf, "external %s\n", k)
			keys[k] = true
		}
	}
	if err := writeCriuConfig(filepath.Join(imageDir, dumpConf), conf.String()); err != nil {
		return err
	}
	if err := writeCriuConfig(filepath.Join(imageDir, stdioName), strings.Join(ext[:], "\n")); err != nil {
		return err
	}
	cfg := s.container.Config()
	cfg.Labels = append(withoutLabel(cfg.Labels, criuConfigLabel), criuConfigLabel+"="+filepath.Join(imageDir, dumpConf))
	if err := s.container.Set(cfg); err != nil {
		return fmt.Errorf("label sandbox %s for criu: %w", s.ID, err)
	}
	what := "checkpoint of sandbox " + s.ID
	err = criuOp(what, h.criuBound(s.policy.MemoryBytes), func() error {
		return s.container.Checkpoint(criuOpts(imageDir, leaveRunning))
	})
	if errors.Is(err, ErrTimeout) {
		return s.afterDumpTimeout(err)
	}
	if err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w%s", s.ID, err, criuLogTail(imageDir, "dump.log"))
	}
	// criu dumps as host root, 0600: give the files the image ownership.
	return chownImages(imageDir, s.disk.HostID())
}

func withoutLabel(labels []string, key string) []string {
	var out []string
	for _, l := range labels {
		if !strings.HasPrefix(l, key+"=") {
			out = append(out, l)
		}
	}
	return out
}

// criuLogTail is criu's first error from its log, for an error message.
func criuLogTail(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	var errs []string
	for _, l := range strings.Split(string(b), "\n") {
		// criu always fails to raise its own RLIMIT_NOFILE in a user
		// namespace, harmlessly.
		if strings.Contains(l, "Error (") && !strings.Contains(l, "rlimit:") {
			errs = append(errs, strings.TrimSpace(l))
			if len(errs) == 2 {
				break
			}
		}
	}
	if len(errs) == 0 {
		return ""
	}
	return " (criu: " + strings.Join(errs, "; ") + ")"
}

// Restore brings back on d the sandbox checkpointed into imageDir, on d's
// disk or on another one with a copy of its files (CopyUpper, LoadUpper).
// spec must be the one the sandbox was built with, except for bind sources
// (a fork's control directory is its own). On failure everything done is undone; the
// disk and the images stay.
func (d *Disk) Restore(imageDir string, spec Spec) (*Sandbox, error) {
	return d.restore(imageDir, spec, true)
}

// RestoreIfIdle is Restore, unless another checkpoint or restore of this
// process is running (they run one at a time): then it answers ErrBusy at
// at once (having built nothing, or undone what it built) instead of
// queueing behind it. For callers
// with another way to start a kernel (session templates import instead).
func (d *Disk) RestoreIfIdle(imageDir string, spec Spec) (*Sandbox, error) {
	select {
	case criuSlot <- struct{}{}:
		<-criuSlot // a cheap look before building; criuOpWait takes it for real
	default:
		return nil, ErrBusy
	}
	return d.restore(imageDir, spec, false)
}

func (d *Disk) restore(imageDir string, spec Spec, wait bool) (*Sandbox, error) {
	if err := d.h.CriuCheck(); err != nil {
		return nil, err
	}
	if err := spec.Policy.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(imageDir, "inventory.img")); err != nil {
		return nil, fmt.Errorf("%w: no checkpoint in %s", ErrNotFound, imageDir)
	}
	// A checkpoint taken on another disk (a fork, a disk rebuilt after a
	// reboot) comes back in this disk's uid slot.
	if err := moveUserns(imageDir, d.HostID()); err != nil {
		return nil, err
	}
	if err := d.prepareImageDir(imageDir); err != nil {
		return nil, err
	}
	// The external stdio of the dump becomes the caller's spec.Log, which
	// libcontainer hands criu as its fds 1 and 2.
	var conf strings.Builder
	conf.WriteString(criuConfig)
	if b, err := os.ReadFile(filepath.Join(imageDir, stdioName)); err == nil {
		seen := map[string]bool{}
		for i, k := range strings.Split(string(b), "\n") {
			if k != "" && !seen[k] && i < 2 {
				fmt.Fprintf(&conf, "inherit-fd fd[%d]:%s\n", i+1, k)
				seen[k] = true
			}
		}
	}
	confPath := filepath.Join(imageDir, restoreConf)
	if err := writeCriuConfig(confPath, conf.String()); err != nil {
		return nil, err
	}
	return d.build(spec, []string{criuConfigLabel + "=" + confPath}, true, func(c *libcontainer.Container, p *libcontainer.Process, id string) (*libcontainer.Container, *os.Process, error) {
		err := criuOpWait("restore of sandbox "+id, d.h.criuBound(spec.Policy.MemoryBytes), wait, func() error {
			return c.Restore(p, criuOpts(imageDir, false))
		})
		if err != nil {
			reapCriuZombies()
			return nil, nil, fmt.Errorf("restore sandbox %s: %w%s", id, err, criuLogTail(imageDir, "restore.log"))
		}
		// A restored container stays in libcontainer's "restored" state,
		// which refuses a pause (a fork's freeze); loaded again from its
		// state it is an ordinary running container.
		lc, err := libcontainer.Load(d.h.containersDir(), id)
		if err != nil {
			return nil, nil, fmt.Errorf("reload restored sandbox %s: %w", id, err)
		}
		return lc, nil, nil
	})
}

// reapCriuZombies waits for the children a failed restore left: criu
// creates the restored root task as this process's child (libcontainer
// restores "as a sibling"), and when criu gives up that task dies as our
// child, still named criu, and nothing else would ever wait for it. Only
// zombies named criu are taken: a sandbox's init, also our child, is
// waited for by its own watcher.
func reapCriuZombies() {
	self := os.Getpid()
	for try := 0; try < 5; try++ {
		for pid, st := range procTable() {
			if st.state == "Z" && st.comm == "criu" && st.ppid == self {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Shared images: the memory pages of a template checkpoint are hard-linked
// into each restore's image directory instead of copied (70 MB a session,
// twenty at once in a burst: the copies alone were seconds of disk writes).
// They are host root's, mode 0644: readable by criu's restoring task under
// either credential (see Image ownership), writable by no one but host root,
// and never chowned to one sandbox's uid (the next restore is another's).
// criu only reads pages on restore (no auto-dedup here). The directories
// above them stay host root's, 0700: no other user reaches them by path.
const sharedImageMode = 0o644

// sharedImage reports whether f is a shared template image (by its owner,
// mode and link count).
func sharedImage(f *os.File) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return st.Uid == 0 && st.Gid == 0 && st.Mode&0o7777 == sharedImageMode && st.Nlink > 1
}

// LinkImages makes dst (new) a restorable copy of the checkpoint in src:
// memory pages (pages-*.img, nearly all of it) hard-linked as shared images,
// the rest copied (a restore rewrites some: the user namespace's ids).
// src's pages files become shared images (root's, 0644). It returns the
// bytes its copies allocate (CopyFileData, holes kept).
func LinkImages(src, dst string) (int64, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	var copied int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if strings.HasPrefix(e.Name(), "pages-") && strings.HasSuffix(e.Name(), ".img") {
			if err := os.Chown(from, 0, 0); err != nil {
				return copied, err
			}
			if err := os.Chmod(from, sharedImageMode); err != nil {
				return copied, err
			}
			if err := os.Link(from, to); err != nil {
				return copied, err
			}
			continue
		}
		n, err := copyImage(from, to)
		copied += n
		if err != nil {
			return copied, err
		}
	}
	return copied, nil
}

func copyImage(from, to string) (int64, error) {
	in, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	used := &ByteCap{Max: math.MaxInt64}
	err = CopyFileData(out, in, used)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return used.Used, err
}

// chownImages gives every regular file directly in dir the image ownership
// (owner uid, group host root, imageFileMode), through an opened
// descriptor, never following a symlink.
func chownImages(dir string, uid int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read images %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("open image %s: %w", e.Name(), err)
		}
		if sharedImage(f) {
			f.Close()
			continue
		}
		err = f.Chown(uid, 0)
		if err == nil {
			err = f.Chmod(imageFileMode)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("chown image %s: %w", e.Name(), err)
		}
	}
	return nil
}
