package criu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/procfs"
)

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// BaseConfig is the criu configuration file passed to every dump and restore
// (libcontainer's org.criu.config label). Network locking is skipped: a
// sandbox's network namespace has only loopback when it is dumped (an
// allowlist sandbox's gateway link is removed first), and criu's iptables
// lock needs iptables on the host. TCP connections inside the sandbox
// (a cell's client of its own server, one the host opened to a server:
// isolate.DialPort) are dumped closed and come back closed, as a paused
// machine's peers see them end, instead of refusing the dump: criu cannot
// carry an established connection's peer outside the tree, and one just
// closed lingers in CLOSE_WAIT until its server reads the end.
const BaseConfig = "network-lock skip\ntcp-close\n"

const (
	DumpConf    = "dump.conf"
	RestoreConf = "restore.conf"
	StdioName   = "stdio"
)

func WriteConfig(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write criu config: %w", err)
	}
	return nil
}

// ExternalStdio returns criu's external keys (file[mnt_id:inode]) of the
// regular files that are pid's stdout and stderr, "" for anything else.
func ExternalStdio(pid int) ([2]string, error) {
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

// stdioKey is the shape of a key ExternalStdio writes.
var stdioKey = regexp.MustCompile(`^file\[[0-9a-f]{1,16}:[0-9a-f]{1,16}\]$`)

// StdioKey says whether k has the shape of a key ExternalStdio writes,
// and so is safe on a line of criu's config.
func StdioKey(k string) bool { return stdioKey.MatchString(k) }

const ConfigLabel = "org.criu.config"

func Opts(imageDir string, leaveRunning bool) *libcontainer.CriuOpts {
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
	ImageDirMode  = 0o770
	ImageFileMode = 0o660
)

func WithoutLabel(labels []string, key string) []string {
	var out []string
	for _, l := range labels {
		if !strings.HasPrefix(l, key+"=") {
			out = append(out, l)
		}
	}
	return out
}

// LogTail is criu's first error from its log, for an error message.
func LogTail(dir, name string) string {
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

// ReapZombies waits for the children a failed restore left: criu
// creates the restored root task as this process's child (libcontainer
// restores "as a sibling"), and when criu gives up that task dies as our
// child, still named criu, and nothing else would ever wait for it. Only
// zombies named criu are taken: a sandbox's init, also our child, is
// waited for by its own watcher.
func ReapZombies() {
	self := os.Getpid()
	for try := 0; try < 5; try++ {
		for pid, st := range procfs.Table() {
			if st.State == "Z" && st.Comm == "criu" && st.PPid == self {
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
const SharedImageMode = 0o644

// sharedImage reports whether f is a shared template image (by its owner,
// mode and link count).
func sharedImage(f *os.File) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return st.Uid == 0 && st.Gid == 0 && st.Mode&0o7777 == SharedImageMode && st.Nlink > 1
}

// ChownImages gives every regular file directly in dir the image ownership
// (owner uid, group host root, ImageFileMode), through an opened
// descriptor, never following a symlink.
func ChownImages(dir string, uid int) error {
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
			err = f.Chmod(ImageFileMode)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("chown image %s: %w", e.Name(), err)
		}
	}
	return nil
}
