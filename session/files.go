package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/confined"
)

// Host-side file access into a session never follows a link and never
// blocks: a workspace is written by its cell, which may plant a symlink, a
// FIFO, a socket or a device and swap them while the host walks. Every
// path goes through internal/confined (one component at a time,
// descriptor-relative, O_PATH|O_NOFOLLOW and fstat; see its package
// comment); a FIFO, socket, device or symlink anywhere in a path is
// ErrBadRequest naming the path. Symlinks are not followed even inside
// the workspace.

const (
	// maxWorkspaceEntries bounds a workspace scan.
	maxWorkspaceEntries = 100000
	// maxScanDepth bounds directory nesting in a scan: each level holds a
	// descriptor and a read buffer.
	maxScanDepth = 256
	// maxScanPathBytes bounds the bytes of the paths one scan records
	// (a snapshot is kept per session).
	maxScanPathBytes = 16 << 20
	// scanTimeout bounds one workspace scan.
	scanTimeout = 5 * time.Second
)

// Why a scan is incomplete. errScanChanged is the workspace changing under
// the scan (a cell renaming); a retry may succeed.
var (
	errScanChanged = fmt.Errorf("%w: the workspace changed while it was scanned (a process in the session is renaming or removing files); try again", ErrBusy)
	errScanLimit   = fmt.Errorf("%w: workspace scan", ErrLimit)
)

// cleanRel checks a workspace path from a client or the store and returns
// it relative to the working directory: Workdir's own prefix (or HomeDir's,
// its second name) is dropped (the cell sees its files there), then the rest
// must already be a clean relative path (confined.Check): "..", "." and
// "//" are refused, never resolved, so the name checked is the name used
// and reported.
func cleanRel(p string) (string, error) {
	for _, name := range []string{Workdir, HomeDir} {
		if r, ok := strings.CutPrefix(p, name+"/"); ok {
			p = r
			break
		}
	}
	if err := confined.Check(p); err != nil {
		return "", fmt.Errorf("%w: %w (paths are relative to the workspace, or absolute under %s/ or %s/, its two names)", ErrBadRequest, err, Workdir, HomeDir)
	}
	return p, nil
}

// badRequest marks confined's refusals (a path or a file type no client
// may name) as ErrBadRequest.
func badRequest(err error) error {
	if errors.Is(err, confined.ErrPath) || errors.Is(err, confined.ErrType) {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return err
}

// openFile opens the regular file rel below root (confined.OpenFile:
// nothing but directories on the way, no link followed, no FIFO opened).
func openFile(root *os.Root, rel string, flags, uid int) (*os.File, error) {
	f, err := confined.OpenFile(root, rel, flags, uid)
	return f, badRequest(err)
}

// openWorkspace opens the workspace directory below base (an overlay root or
// upper layer). The "work" name is resolved without following a link or
// opening anything but a directory: a cell that replaced /work with a
// symlink or a FIFO gets ErrBadRequest, and an overlay whiteout (the cell
// removed /work) is fs.ErrNotExist.
func openWorkspace(base string) (*os.Root, error) {
	bfd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox root: %w", err)
	}
	defer unix.Close(bfd)
	name := strings.TrimPrefix(Workdir, "/")
	pfd, st, err := confined.OpenPath(bfd, name)
	if err == unix.ENOENT {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	unix.Close(pfd)
	if isWhiteout(&st) {
		return nil, fs.ErrNotExist
	}
	if !confined.IsType(&st, unix.S_IFDIR) {
		return nil, fmt.Errorf("%w: the working directory %s is %s, not a directory", ErrBadRequest, Workdir, confined.TypeName(st.Mode))
	}
	// O_DIRECTORY: if it was swapped since, this fails instead of blocking.
	wfd, err := unix.Openat(bfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the working directory %s changed while it was opened: %v", ErrBusy, Workdir, err)
	}
	defer unix.Close(wfd)
	// os.Root has no constructor from a descriptor; reopening it through
	// its /proc magic link reaches the same inode, a directory.
	r, err := os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", wfd))
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return r, nil
}

// mkWorkdir makes the workspace directory in an upper layer if it is
// missing, owned by uid, through descriptors: never a chown by path in a
// tree the cell writes.
func mkWorkdir(upper string, uid int) error {
	ufd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open upper layer: %w", err)
	}
	defer unix.Close(ufd)
	name := strings.TrimPrefix(Workdir, "/")
	err = unix.Mkdirat(ufd, name, 0o755)
	if err == unix.EEXIST {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", Workdir, err)
	}
	fd, st, err := confined.OpenPath(ufd, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", Workdir, err)
	}
	defer unix.Close(fd)
	if !confined.IsType(&st, unix.S_IFDIR) {
		return fmt.Errorf("%w: the working directory %s is %s, not a directory", ErrBadRequest, Workdir, confined.TypeName(st.Mode))
	}
	if err := unix.Fchownat(fd, "", uid, uid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown %s: %w", Workdir, err)
	}
	return nil
}

// fileStamp identifies a version of a file cheaply.
type fileStamp struct {
	size  int64
	mtime int64
	ctime int64
	ino   uint64
	dir   bool
}

// fileStamps maps workspace paths to their stamps (not to be confused
// with a CRIU snapshot, snapshot.go). A partial one (the scan
// was cut short by a bound or a concurrent change) lists only some of the
// files that exist: its absences mean nothing.
type fileStamps struct {
	files   map[string]fileStamp
	partial bool
}

// dirNode is a directory a walk read, with its stamp as it was before the
// read, to check at the end that it did not change meanwhile.
type dirNode struct {
	name  string
	stamp [4]int64 // ino, ctime, mtime, size
	kids  []*dirNode
}

func dirStamp(st *unix.Stat_t) [4]int64 {
	return [4]int64{int64(st.Ino), st.Ctim.Nano(), st.Mtim.Nano(), st.Size}
}

// walker is one bounded walk.
type walker struct {
	visit func(p string, st *unix.Stat_t)
	// detail, if set, is called right after each visit with the
	// entry's directory descriptor, to read what its lstat does not say.
	detail   func(dirfd int, name string, st *unix.Stat_t)
	deadline time.Time
	seen     int // directory entries examined, whiteouts included
	n        int // entries visited
	bytes    int
	stop     error // why the walk is incomplete
}

func (w *walker) fail(err error) {
	if w.stop == nil {
		w.stop = err
	}
}

// walk visits every entry of the workspace under root, parents before
// children, without following symlinks or opening anything but
// directories, and skipping overlay whiteouts. It returns nil only if the
// walk is complete: every directory read whole, within maxWorkspaceEntries,
// maxScanDepth, maxScanPathBytes and deadline, and none of them changed
// while the walk ran (checked at the end through their stamps, ctime being
// fine-grained once queried), so that a rename or an exchange during the
// walk cannot hide a file. Otherwise the error wraps errScanChanged or
// errScanLimit and the entries visited are only some of those that exist.
func walk(root *os.Root, deadline time.Time, visit func(p string, st *unix.Stat_t)) error {
	fd, err := confined.RootFD(root)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return walkFD(fd, &walker{visit: visit, deadline: deadline})
}

// walkFD is walk over the workspace open at fd, with w's callbacks.
func walkFD(fd int, w *walker) error {
	top := &dirNode{}
	w.dir(fd, "", 0, top)
	if w.stop == nil {
		w.check(fd, top)
	}
	return w.stop
}

// dir reads the directory open at fd (its workspace path p) into node.
func (w *walker) dir(fd int, p string, depth int, node *dirNode) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.fail(fmt.Errorf("%w: stat %s: %v", errScanChanged, p, err))
		return
	}
	node.stamp = dirStamp(&st)
	buf := make([]byte, 8<<10)
	for w.stop == nil {
		nb, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.fail(fmt.Errorf("%w: read %s: %v", errScanChanged, p, err))
			return
		}
		if nb == 0 {
			return
		}
		_, _, names := unix.ParseDirent(buf[:nb], -1, nil)
		for _, name := range names {
			if w.stop != nil {
				return
			}
			w.entry(fd, p, name, depth, node)
		}
	}
}

// entry visits name in the directory open at fd.
func (w *walker) entry(fd int, dir, name string, depth int, node *dirNode) {
	w.seen++
	if w.seen%64 == 0 && time.Now().After(w.deadline) {
		w.fail(fmt.Errorf("%w: not done within %s", errScanLimit, scanTimeout))
		return
	}
	p := name
	if dir != "" {
		p = dir + "/" + name
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		// Gone since the directory was read: moved, perhaps to a place
		// already read.
		w.fail(fmt.Errorf("%w: %s vanished", errScanChanged, p))
		return
	}
	// An overlay whiteout (char device 0:0) marks a deletion.
	if confined.IsType(&st, unix.S_IFCHR) && st.Rdev == 0 {
		return
	}
	if w.n >= maxWorkspaceEntries {
		w.fail(fmt.Errorf("%w: more than %d entries", errScanLimit, maxWorkspaceEntries))
		return
	}
	w.n++
	w.bytes += len(p)
	if w.bytes > maxScanPathBytes || len(p) > 4096 {
		w.fail(fmt.Errorf("%w: paths longer than %d bytes in all, or one longer than 4096", errScanLimit, maxScanPathBytes))
		return
	}
	w.visit(p, &st)
	if w.detail != nil {
		w.detail(fd, name, &st)
	}
	if !confined.IsType(&st, unix.S_IFDIR) {
		return
	}
	if depth+1 >= maxScanDepth {
		w.fail(fmt.Errorf("%w: directories nested deeper than %d", errScanLimit, maxScanDepth))
		return
	}
	// O_DIRECTORY|O_NONBLOCK: a FIFO swapped in fails with ENOTDIR
	// instead of blocking.
	cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		w.fail(fmt.Errorf("%w: open %s: %v", errScanChanged, p, err))
		return
	}
	defer unix.Close(cfd)
	var cst unix.Stat_t
	if err := unix.Fstat(cfd, &cst); err != nil || cst.Ino != st.Ino || cst.Dev != st.Dev {
		w.fail(fmt.Errorf("%w: %s was replaced", errScanChanged, p))
		return
	}
	kid := &dirNode{name: name}
	node.kids = append(node.kids, kid)
	w.dir(cfd, p, depth+1, kid)
}

// check compares every directory read with its stamp before the read.
func (w *walker) check(fd int, node *dirNode) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || dirStamp(&st) != node.stamp {
		w.fail(errScanChanged)
		return
	}
	for _, kid := range node.kids {
		if w.stop != nil {
			return
		}
		cfd, err := unix.Openat(fd, kid.name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			w.fail(errScanChanged)
			return
		}
		w.check(cfd, kid)
		unix.Close(cfd)
	}
}

// scan records the stamp of every directory, regular file and symlink. A
// scan that is not complete returns a partial snapshot and the reason.
func scan(root *os.Root) (fileStamps, error) {
	s := fileStamps{files: map[string]fileStamp{}}
	err := walk(root, time.Now().Add(scanTimeout), func(p string, st *unix.Stat_t) {
		if !confined.IsType(st, unix.S_IFDIR) && !confined.IsType(st, unix.S_IFREG) && !confined.IsType(st, unix.S_IFLNK) {
			return
		}
		s.files[p] = fileStamp{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ino: st.Ino, dir: confined.IsType(st, unix.S_IFDIR)}
	})
	s.partial = err != nil
	return s, err
}

// fillPartial completes a partial snapshot with the entries of an earlier
// one it did not see, so that they are neither reported deleted now nor
// created later; the next complete scan settles them. The result is
// bounded at twice maxWorkspaceEntries: an entry dropped is at worst
// reported created again, never deleted.
func fillPartial(after, before fileStamps) {
	if !after.partial || after.files == nil {
		return
	}
	for p, b := range before.files {
		if len(after.files) >= 2*maxWorkspaceEntries {
			return
		}
		if _, ok := after.files[p]; !ok {
			after.files[p] = b
		}
	}
}

// diff lists files created, modified or deleted between two snapshots
// (directories are not reported), sorted by path. A partial after reports
// no deletion (an absence in it proves nothing) and is filled in with
// before's unseen entries (fillPartial), so that the caller keeps it as
// the next before.
func diff(before, after fileStamps) []FileChange {
	var out []FileChange
	for p, a := range after.files {
		if a.dir {
			continue
		}
		b, ok := before.files[p]
		switch {
		case !ok || b.dir:
			out = append(out, FileChange{Path: p, Size: a.size, Change: "created"})
		case b != a:
			out = append(out, FileChange{Path: p, Size: a.size, Change: "modified"})
		}
	}
	if after.partial {
		fillPartial(after, before)
	} else {
		for p, b := range before.files {
			if b.dir {
				continue
			}
			if a, ok := after.files[p]; !ok || a.dir {
				out = append(out, FileChange{Path: p, Change: "deleted"})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// exists says whether rel names anything (of any type) below root, or
// whether that cannot be told (a component that is not a directory, an
// error): only a definite "no such file" is false.
func exists(root *os.Root, rel string) bool {
	fd, err := confined.RootFD(root)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	pfd, base, err := confined.OpenParent(fd, rel, false, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return false
	}
	return err != nil || !isWhiteout(&st)
}

// isWhiteout reports an overlay whiteout: a 0/0 character device in an
// upper layer stands for a file the sandbox deleted.
func isWhiteout(st *unix.Stat_t) bool {
	return confined.IsType(st, unix.S_IFCHR) && st.Rdev == 0
}

// readFile reads a regular file through root, refusing symlinks, FIFOs,
// sockets and devices anywhere in its path, and anything larger than
// limit.
func readFile(root *os.Root, rel string, limit int64) ([]byte, error) {
	f, err := openFile(root, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d allowed", ErrLimit, rel, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s grew past %d bytes", ErrLimit, rel, limit)
	}
	return b, nil
}

// writeFile creates or replaces rel through root with data, owned by uid
// (the sandbox's root), creating parent directories likewise. Ownership is
// set on descriptors, never by path; a FIFO, socket, device or symlink
// anywhere in the path is refused (ErrBadRequest) without being opened.
func writeFile(root *os.Root, rel string, data []byte, uid int, metadata map[string]string) error {
	return badRequest(confined.WriteFile(root, rel, data, uid, func(fd int) error { return setMetadata(fd, metadata) }))
}

// listWithin returns the workspace entries under root, or an error if the
// walk is not complete by deadline (errScanChanged, errScanLimit): never a
// listing that leaves out files that exist.
func listWithin(root *os.Root, deadline time.Time, base int) ([]Entry, error) {
	var out []Entry
	fd, err := confined.RootFD(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	w := &walker{deadline: deadline, visit: func(p string, st *unix.Stat_t) {
		out = append(out, entryOf(p, st, base))
	}}
	// Link targets (4 KiB each at most) and metadata (MaxMetadataBytes)
	// are the sandbox's to inflate: 100,000 entries could carry 800 MB of
	// them. The listing holds them to the bound of its paths.
	detail := 0
	w.detail = func(dirfd int, name string, st *unix.Stat_t) {
		e := &out[len(out)-1]
		entryDetail(e, dirfd, name, st)
		detail += len(e.Link)
		for k, v := range e.Metadata {
			detail += len(k) + len(v)
		}
		if detail > maxScanPathBytes {
			w.fail(fmt.Errorf("%w: symlink targets and metadata of more than %d bytes in all", errScanLimit, maxScanPathBytes))
		}
	}
	if err := walkFD(fd, w); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// list returns the workspace entries under root (see listWithin), owners
// as the host sees them.
func list(root *os.Root) ([]Entry, error) {
	return listWithin(root, time.Now().Add(scanTimeout), 0)
}

// entryOf is the entry of the file at workspace path p whose lstat is st,
// in a sandbox whose root is host uid base: its permission bits, and its
// owner and group as the sandbox sees them (an id outside the sandbox's
// map shows as the overflow id, 65534, as the kernel shows it inside).
func entryOf(p string, st *unix.Stat_t, base int) Entry {
	return Entry{Path: p, Size: st.Size, Dir: confined.IsType(st, unix.S_IFDIR), Symlink: confined.IsType(st, unix.S_IFLNK),
		Mode: st.Mode & 0o7777, UID: sandboxID(st.Uid, base), GID: sandboxID(st.Gid, base),
		ModTime: time.Unix(0, st.Mtim.Nano()).UTC().Truncate(time.Millisecond)}
}

// overflowID is the id the kernel shows for one a user namespace does not
// map (/proc/sys/kernel/overflowuid).
const overflowID = 65534

func sandboxID(hostID uint32, base int) int {
	if id := int64(hostID) - int64(base); id >= 0 && id < idsPerSandbox {
		return int(id)
	}
	return overflowID
}

// idsPerSandbox is how many ids a sandbox's user namespace maps.
const idsPerSandbox = 65536

// readLink is the target of the symlink name in the directory open at fd,
// "" if it cannot be read (gone or replaced since its stat). The target is
// the sandbox's own text, never followed here: at most PATH_MAX bytes, as
// the kernel bounds it, and cut to valid UTF-8 for the wire.
func readLink(fd int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil || n <= 0 {
		return ""
	}
	return strings.ToValidUTF8(string(buf[:n]), "\uFFFD")
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
