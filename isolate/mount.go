package isolate

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// userns returns an open nsfs handle of a user namespace that maps uid and
// gid 0..size-1 to hostID..hostID+size-1. A process is spawned in a new user
// namespace with those mappings and stopped by PTRACE_TRACEME before it ever
// runs code (as libcontainer's internal/userns does); its namespace handle
// outlives it.
func userns(hostID, size int) (*os.File, error) {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: size}}
	p, err := os.StartProcess("/proc/self/exe", []string{"jailcell-userns"}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: m,
			GidMappings: m,
			Ptrace:      true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("spawn user namespace holder: %w", err)
	}
	defer func() {
		_ = p.Kill()
		_, _ = p.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", p.Pid))
	if err != nil {
		return nil, fmt.Errorf("open user namespace of holder: %w", err)
	}
	return f, nil
}

// mountIDMapped makes an idmapped, read-only, recursive bind of src at dst,
// so files owned by host uid N appear as N+hostID. The Python rootfs is owned
// by host root; seen through this mount from the sandbox's user namespace it
// is owned by the sandbox's root, which overlayfs needs for copy-up.
func mountIDMapped(src, dst string, usernsFile *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(usernsFile.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("%w: idmap mount of %s: %v", ErrUnsupported, src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// mountTmpfs mounts a size- and inode-bounded tmpfs: the sandbox's disk.
func mountTmpfs(dst string, size, inodes int64) error {
	data := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0711", size, inodes)
	if err := unix.Mount("jailcell", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount tmpfs %s: %w", dst, err)
	}
	return nil
}

// mountOverlay mounts the sandbox's root: the read-only lower tree under a
// writable upper layer that lives on the sandbox's bounded disk. lower,
// upper and work are relative to dir: overlayfs shows its options in the
// sandbox's own /proc/self/mountinfo, and relative ones do not leak the
// host's state directory or the session id.
func mountOverlay(dir, lower, upper, work, dst string) error {
	for _, p := range []string{lower, upper, work} {
		// overlayfs option syntax has no escaping for these.
		if strings.ContainsAny(p, ",:") {
			return fmt.Errorf("mount overlay: path %q contains ',' or ':'", p)
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	errc := make(chan error, 1)
	go func() {
		// The working directory is per process; unshare it for this
		// thread only, and let the thread die with the goroutine rather
		// than go back to the scheduler with another cwd.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- fmt.Errorf("chdir %s: %w", dir, err)
			return
		}
		errc <- unix.Mount("jailcell", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data)
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("%w: mount overlay %s: %v", ErrUnsupported, dst, err)
	}
	return nil
}

// unmount detaches dst; a path that is not mounted is not an error.
func unmount(dst string) error {
	err := unix.Unmount(dst, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", dst, err)
}

// detachMountsIn detaches every mount inside a container's state
// directory, before libcontainer removes it: its restore binds the
// sandbox's root at criu-root there and only detaches it when the restore
// returns, so a daemon that died during a restore left it mounted, and
// the directory's removal then failed on it (EBUSY) for good, leaving the
// mount with no session or daemon to own it.
func detachMountsIn(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("list mounts under %s: %w", dir, err)
	}
	var errs []error
	for _, mp := range mps {
		if err := unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir, deepest first, from
// /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	// Not /proc/self: libcontainer may leave the thread group leader parked
	// in a sandbox's mount namespace, and /proc/self shows the leader's.
	runtime.LockOSThread()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest (and latest) first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
