package confined

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The two refusals. Callers map them to their own "bad request".
var (
	// ErrPath: the path is not a clean relative path.
	ErrPath = errors.New("unsafe path")
	// ErrType: a component is a symlink, FIFO, socket or device, or a
	// file where a directory is needed.
	ErrType = errors.New("unsafe file type")
	// ErrTooLarge: WriteFrom's reader held more than its limit.
	ErrTooLarge = errors.New("over its size limit")
)

const (
	// MaxPathBytes bounds a path (PATH_MAX).
	MaxPathBytes = 4096
	// maxNameBytes bounds one component (NAME_MAX).
	maxNameBytes = 255
	// want is what Check accepts, for its errors.
	want = `want a clean relative path: names separated by single "/", none empty, "." or ".."`
)

// Check returns nil if p is a clean relative path (see the package
// comment), else an error wrapping ErrPath that names what was wrong.
func Check(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: the path is empty; %s", ErrPath, want)
	case len(p) > MaxPathBytes:
		return fmt.Errorf("%w: the path is %d bytes, at most %d", ErrPath, len(p), MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: path %q contains a NUL byte", ErrPath, p)
	case p[0] == '/':
		return fmt.Errorf("%w: path %q is absolute; %s", ErrPath, p, want)
	}
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "":
			return fmt.Errorf("%w: path %q has an empty name (a doubled or trailing \"/\"); %s", ErrPath, p, want)
		case c == "." || c == "..":
			return fmt.Errorf("%w: path %q has a %q component, refused rather than resolved; %s", ErrPath, p, c, want)
		case len(c) > maxNameBytes:
			return fmt.Errorf("%w: path %q has a name of %d bytes, at most %d", ErrPath, p, len(c), maxNameBytes)
		}
	}
	return nil
}

// TypeName says what a stat mode is, for errors.
func TypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "of an unknown type"
}

// IsType says whether st is of type t (unix.S_IFDIR, unix.S_IFREG...).
func IsType(st *unix.Stat_t, t uint32) bool { return st.Mode&unix.S_IFMT == t }

// RootFD returns a new descriptor of root's own directory. It cannot
// block: root was checked to be a directory when it was opened, and "."
// names that same inode.
func RootFD(root *os.Root) (int, error) {
	f, err := root.OpenFile(".", os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := sc.Control(func(raw uintptr) { fd, derr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	return fd, derr
}

// OpenPath opens the single name below dirfd as O_PATH without following
// it and returns the descriptor with its stat. Opening O_PATH performs no
// open on the file itself: a FIFO, socket or device is not touched.
func OpenPath(dirfd int, name string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// OpenParent checks rel (Check), resolves the directories leading to it
// below dirfd and returns an O_PATH descriptor of rel's parent and rel's
// last name. Every component before the last must be a directory:
// anything else is ErrType naming it. With create, missing directories
// are made (mode 0755) and, if uid > 0, those owned by root handed to
// uid, through the descriptor.
func OpenParent(dirfd int, rel string, create bool, uid int) (int, string, error) {
	if err := Check(rel); err != nil {
		return -1, "", err
	}
	parts := strings.Split(rel, "/")
	cur, err := unix.Openat(dirfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open the top directory: %w", err)
	}
	for i, name := range parts[:len(parts)-1] {
		sub := strings.Join(parts[:i+1], "/")
		if create {
			if err := unix.Mkdirat(cur, name, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(cur)
				return -1, "", fmt.Errorf("create %s: %w", sub, err)
			}
		}
		next, st, err := OpenPath(cur, name)
		unix.Close(cur)
		if err != nil {
			return -1, "", &fs.PathError{Op: "open", Path: sub, Err: err}
		}
		if !IsType(&st, unix.S_IFDIR) {
			unix.Close(next)
			return -1, "", fmt.Errorf("%w: %s: %s is %s, not a directory", ErrType, rel, sub, TypeName(st.Mode))
		}
		if create && st.Uid == 0 && uid > 0 {
			if err := unix.Fchownat(next, "", uid, uid, unix.AT_EMPTY_PATH); err != nil {
				unix.Close(next)
				return -1, "", fmt.Errorf("chown %s: %w", sub, err)
			}
		}
		cur = next
	}
	return cur, parts[len(parts)-1], nil
}

// OpenFile opens rel below root for I/O with flags (O_RDONLY or O_WRONLY,
// optionally O_CREAT; a new file gets mode 0644), only if it is a regular
// file reached through directories only; missing directories are made as
// OpenParent does. The returned file is checked with fstat: a swap
// between the check and the open yields a non-regular descriptor, refused
// before any I/O.
func OpenFile(root *os.Root, rel string, flags int, uid int) (*os.File, error) {
	dirfd, err := RootFD(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	pfd, base, err := OpenParent(dirfd, rel, flags&unix.O_CREAT != 0, uid)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	probe, st, err := OpenPath(pfd, base)
	switch {
	case err == nil:
		unix.Close(probe)
		if !IsType(&st, unix.S_IFREG) {
			return nil, fmt.Errorf("%w: %s is %s, not a regular file", ErrType, rel, TypeName(st.Mode))
		}
	case flags&unix.O_CREAT != 0 && err == unix.ENOENT:
	default:
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return openRegularAt(pfd, base, rel, flags)
}

// openRegularAt opens the single name base below the directory pfd with
// flags (a new file gets mode 0644), only as a regular file: a symlink,
// directory, FIFO or device there, or swapped in since a check, is
// ErrType naming rel; a missing one is a PathError of ENOENT.
func openRegularAt(pfd int, base, rel string, flags int) (*os.File, error) {
	// O_NONBLOCK: a FIFO swapped in meanwhile opens at once (or fails
	// with ENXIO) instead of waiting for a peer; O_NOCTTY: a terminal
	// never becomes ours.
	fd, err := unix.Openat(pfd, base, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	switch {
	case err == unix.ELOOP || err == unix.ENXIO || err == unix.EISDIR:
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrType, rel)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", rel, err)
	}
	if !IsType(&st, unix.S_IFREG) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s is %s, not a regular file", ErrType, rel, TypeName(st.Mode))
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// WriteFile creates or replaces rel below root with data, creating parent
// directories; with uid >= 0 the file (and, if uid > 0, each directory
// made that root owns) is handed to uid, on descriptors, never by path.
// The file is truncated only once it is known to be a regular file.
// prepare, if set, runs on the open file's descriptor before the data is
// written (its attributes, say); its error is returned as it is.
func WriteFile(root *os.Root, rel string, data []byte, uid int, prepare func(fd int) error) error {
	f, err := OpenFile(root, rel, unix.O_WRONLY|unix.O_CREAT, uid)
	if err != nil {
		if errors.Is(err, ErrPath) || errors.Is(err, ErrType) {
			return err
		}
		return fmt.Errorf("create %s: %w", rel, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("truncate %s: %w", rel, err)
	}
	if uid >= 0 {
		if err := f.Chown(uid, uid); err != nil {
			f.Close()
			return fmt.Errorf("chown %s: %w", rel, err)
		}
	}
	if prepare != nil {
		if err := prepare(int(f.Fd())); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	return f.Close()
}

// WriteFrom is WriteFile for bytes that come from r as they arrive: at
// most limit of them, copied through buf, into a new file beside rel
// (".jailcell-upload-" and a random name, made with O_EXCL: never an
// existing file or link). Once it is whole it becomes rel: renamed into
// place where rel does not exist; copied into rel where rel is a regular
// file, so rel keeps its inode (a watcher sees it written, as envd's
// in-place write shows it, and a reader holding it open sees the new
// bytes). A read or write error, or more than limit bytes (ErrTooLarge),
// leaves rel as it was and removes the new file. It returns how many
// bytes rel holds.
func WriteFrom(root *os.Root, rel string, r io.Reader, limit int64, buf []byte, uid int, prepare func(fd int) error) (int64, error) {
	dirfd, err := RootFD(root)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dirfd)
	pfd, base, err := OpenParent(dirfd, rel, true, uid)
	if err != nil {
		return 0, err
	}
	defer unix.Close(pfd)
	if probe, st, err := OpenPath(pfd, base); err == nil {
		unix.Close(probe)
		if !IsType(&st, unix.S_IFREG) {
			return 0, fmt.Errorf("%w: %s is %s, not a regular file", ErrType, rel, TypeName(st.Mode))
		}
	} else if err != unix.ENOENT {
		return 0, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmp := ".jailcell-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(pfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, &fs.PathError{Op: "create", Path: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	defer unix.Unlinkat(pfd, tmp, 0) // gone once renamed: ENOENT, ignored
	if uid >= 0 {
		if err := f.Chown(uid, uid); err != nil {
			return 0, fmt.Errorf("chown %s: %w", rel, err)
		}
	}
	n, err := io.CopyBuffer(onlyWriter{f}, io.LimitReader(r, limit+1), buf)
	switch {
	case err != nil:
		return 0, fmt.Errorf("write %s: %w", rel, err)
	case n > limit:
		return 0, fmt.Errorf("%w: %s: more than %d bytes", ErrTooLarge, rel, limit)
	}
	// Into the file that is there (a swap since the probe is refused).
	t, err := openRegularAt(pfd, base, rel, unix.O_WRONLY)
	switch {
	case errors.Is(err, unix.ENOENT):
		if prepare != nil {
			if err := prepare(int(f.Fd())); err != nil {
				return 0, err
			}
		}
		if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
			if err == unix.EISDIR || err == unix.ENOTEMPTY || err == unix.EEXIST {
				return 0, fmt.Errorf("%w: %s is not a regular file", ErrType, rel)
			}
			return 0, &fs.PathError{Op: "rename", Path: rel, Err: err}
		}
		return n, nil
	case err != nil:
		return 0, err
	}
	defer t.Close()
	if uid >= 0 {
		if err := t.Chown(uid, uid); err != nil {
			return 0, fmt.Errorf("chown %s: %w", rel, err)
		}
	}
	if prepare != nil {
		if err := prepare(int(t.Fd())); err != nil {
			return 0, err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if err := t.Truncate(0); err != nil {
		return 0, fmt.Errorf("truncate %s: %w", rel, err)
	}
	// File to file: the kernel copies (copy_file_range), no buffer here.
	// A copy cut short (the disk filled: the new bytes are on it twice for
	// a moment) would leave rel part-written: the whole new file is
	// renamed over it instead, which needs no space (a new inode then).
	if _, err := io.Copy(t, f); err != nil {
		if rerr := unix.Renameat(pfd, tmp, pfd, base); rerr != nil {
			return 0, fmt.Errorf("write %s: %w", rel, err)
		}
	}
	return n, t.Close()
}

// onlyWriter hides a file's ReadFrom, so a copy goes through the buffer
// given (its size is what the caller weighed) rather than one of its own.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
