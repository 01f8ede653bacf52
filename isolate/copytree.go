package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A disk's upper layer is copied when a session is forked (onto the new
// session's disk) and when it is hibernated (into the host's state
// directory, so that it outlives a reboot of the tmpfs it lives on), and
// back onto a new disk after a reboot. Each copy moves file ownership from
// the source's uid slot to the destination's.
//
// The source is written by a sandbox, which may still run (a fork) and
// can plant symlinks or swap directories while it is read: the walk is
// descriptor-relative and never follows a symlink (CVE-2018-15664, the
// docker cp symlink-exchange race, is this class of bug). Symlinks are copied
// as symlinks; hard links stay links (a file linked a thousand times is not
// copied a thousand times onto the host's disk); device nodes other than
// overlayfs whiteouts, sockets and security.* attributes (file capabilities
// embed a host uid) are dropped. The destination is a directory no sandbox
// sees yet.
//
// Every copy is metered: a 16 MiB file holding one byte takes one 4 KiB
// page on the sandbox's tmpfs, and a copy that reads it densely writes 16
// MiB to the host (the sparse-file amplification of tar and cp without
// --sparse; 32 such files in a 16 MiB disk made 512 MiB per copy). Files
// are copied extent by extent (SEEK_DATA/SEEK_HOLE), holes stay holes, and
// a Meter is charged the bytes each write will allocate before it is made.

// blockSize is what the copy charges for a directory (an ext4 directory
// takes one block where tmpfs takes none), a long symlink, and the unit a
// data extent is rounded out to.
const blockSize = 4096

// maxInlineSymlink is the longest symlink target ext4 keeps in the inode.
const maxInlineSymlink = 59

// A Meter is charged the host bytes a copy is about to allocate, before it
// writes them; an error from Charge stops the copy with that error.
type Meter interface {
	Charge(n int64) error
}

// ByteCap is a Meter that allows Max bytes in all; Used is what was charged.
type ByteCap struct {
	Max, Used int64
}

// Charge implements Meter.
func (c *ByteCap) Charge(n int64) error {
	if n > c.Max-c.Used {
		return fmt.Errorf("%w: it would allocate more than %d bytes (%d MiB)", ErrCopyBudget, c.Max, c.Max>>20)
	}
	c.Used += n
	return nil
}

// maxCopyDepth bounds directory nesting: every level holds two
// descriptors open.
const maxCopyDepth = 1024

// hostIDFile records, next to a saved upper layer, the host id its owners
// are relative to.
const hostIDFile = "hostid"

// SaveUpper copies d's upper layer into dir/upper (dir is created, 0700,
// and must not exist), keeping ownership and holes, charging m; LoadUpper
// brings it back onto another disk.
func (d *Disk) SaveUpper(dir string, m Meter) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("save upper layer: %w", err)
	}
	up := filepath.Join(dir, "upper")
	if err := os.Mkdir(up, 0o700); err != nil {
		return fmt.Errorf("save upper layer: %w", err)
	}
	if err := copyTree(d.UpperDir(), up, d.HostID(), d.HostID(), m); err != nil {
		return fmt.Errorf("save upper layer of %s: %w", d.ID, err)
	}
	return os.WriteFile(filepath.Join(dir, hostIDFile), []byte(strconv.Itoa(d.HostID())), 0o600)
}

// LoadUpper copies the upper layer SaveUpper wrote into dir onto d, whose
// upper layer must be empty (a new disk), moving ownership to d's slot.
// d's tmpfs bounds the copy; holes stay holes, so what fit on the disk it
// was saved from fits again.
func (d *Disk) LoadUpper(dir string) error {
	// The file may have come from a store (a hibernated session taken
	// over from another node): not followed if a link (to /dev/zero, to a
	// host file echoed back in the error), a FIFO never waited on, and
	// read to a bound.
	f, err := os.OpenFile(filepath.Join(dir, hostIDFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("load upper layer: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("load upper layer: %s is not a regular file", hostIDFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, 16))
	if err != nil {
		return fmt.Errorf("load upper layer: %w", err)
	}
	from, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || from < 0 {
		return fmt.Errorf("load upper layer: bad host id %q", b)
	}
	if err := copyTree(filepath.Join(dir, "upper"), d.UpperDir(), from, d.HostID(), unmetered{}); err != nil {
		return fmt.Errorf("load upper layer onto %s: %w", d.ID, err)
	}
	return nil
}

// CopyUpper copies d's upper layer onto dst, a new disk, charging m (dst's
// tmpfs bounds it too).
func (d *Disk) CopyUpper(dst *Disk, m Meter) error {
	if err := copyTree(d.UpperDir(), dst.UpperDir(), d.HostID(), dst.HostID(), m); err != nil {
		return fmt.Errorf("copy upper layer of %s to %s: %w", d.ID, dst.ID, err)
	}
	return nil
}

// ClearUpper removes everything in d's upper layer (a rollback loads a
// saved one next). No sandbox may run on d.
func (d *Disk) ClearUpper() error {
	d.mu.Lock()
	used := d.used
	d.mu.Unlock()
	if used {
		return fmt.Errorf("clear upper layer of %s: a sandbox runs on it", d.ID)
	}
	ents, err := os.ReadDir(d.UpperDir())
	if err != nil {
		return fmt.Errorf("clear upper layer of %s: %w", d.ID, err)
	}
	for _, e := range ents {
		// RemoveAll never follows a symlink the sandbox planted.
		if err := os.RemoveAll(filepath.Join(d.UpperDir(), e.Name())); err != nil {
			return fmt.Errorf("clear upper layer of %s: %w", d.ID, err)
		}
	}
	return nil
}

// unmetered charges nothing: for copies onto a tmpfs, which bounds them.
type unmetered struct{}

func (unmetered) Charge(int64) error { return nil }

type treeCopy struct {
	meter    Meter
	from, to int
	dstRoot  int                  // descriptor of the destination's root
	links    map[[2]uint64]string // source (dev, ino) -> destination path
	budget   int                  // directories left to open
}

// copyTree copies the tree under src into the existing directory dst,
// shifting owners in [from, from+idsPerSlot) to the same offset from to;
// other owners become the slot's nobody. dst's own attributes are src's.
// m is charged before each allocation (copyData says what counts).
func copyTree(src, dst string, from, to int, m Meter) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	c := &treeCopy{meter: m, from: from, to: to, dstRoot: dfd, links: map[[2]uint64]string{}, budget: 1 << 20}
	if err := c.dir(sfd, dfd, "", 0); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	return c.attrs(sfd, dfd, "", &st)
}

func (c *treeCopy) shift(id uint32) int {
	if int(id) >= c.from && int(id) < c.from+idsPerSlot {
		return int(id) - c.from + c.to
	}
	return c.to + 65534
}

// dir copies the entries of the directory sfd into dfd; rel is dfd's path
// from the destination root.
func (c *treeCopy) dir(sfd, dfd int, rel string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("%s: directories nested deeper than %d", rel, maxCopyDepth)
	}
	names, err := readDirNames(sfd)
	if err != nil {
		return fmt.Errorf("read %s: %w", relOr(rel), err)
	}
	for _, name := range names {
		if err := c.entry(sfd, dfd, name, filepath.Join(rel, name), depth); err != nil {
			return err
		}
	}
	return nil
}

func relOr(rel string) string {
	if rel == "" {
		return "/"
	}
	return rel
}

func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

func (c *treeCopy) entry(sfd, dfd int, name, rel string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed while we read: a running source
		}
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	key := [2]uint64{st.Dev, st.Ino}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		if first, ok := c.links[key]; ok {
			if err := unix.Linkat(c.dstRoot, first, dfd, name, 0); err != nil {
				return fmt.Errorf("link %s: %w", rel, err)
			}
			return nil
		}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		c.budget--
		if c.budget < 0 {
			return errors.New("too many directories")
		}
		if err := c.meter.Charge(blockSize); err != nil {
			return fmt.Errorf("mkdir %s: %w", rel, err)
		}
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", rel, err)
		}
		sub, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(sub)
		dsub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(dsub)
		if err := c.dir(sub, dsub, rel, depth+1); err != nil {
			return err
		}
		// What was opened is what gets its attributes copied.
		if err := unix.Fstat(sub, &st); err != nil {
			return err
		}
		return c.attrs(sub, dsub, rel, &st)
	case unix.S_IFREG:
		if err := c.file(sfd, dfd, name, rel); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := readlinkat(sfd, name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", rel, err)
		}
		if len(target) > maxInlineSymlink {
			if err := c.meter.Charge(blockSize); err != nil {
				return fmt.Errorf("symlink %s: %w", rel, err)
			}
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return fmt.Errorf("symlink %s: %w", rel, err)
		}
		if err := unix.Fchownat(dfd, name, c.shift(st.Uid), c.shift(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
		ts := []unix.Timespec{st.Atim, st.Mtim}
		_ = unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	case unix.S_IFCHR, unix.S_IFIFO:
		// overlayfs whiteouts are 0:0 character devices.
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev != 0 {
			return nil
		}
		if err := unix.Mknodat(dfd, name, st.Mode&(unix.S_IFMT|0o777), 0); err != nil {
			return fmt.Errorf("mknod %s: %w", rel, err)
		}
		if err := unix.Fchownat(dfd, name, c.shift(st.Uid), c.shift(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
	default:
		return nil // sockets, block devices
	}
	if st.Nlink > 1 {
		c.links[key] = rel
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(buf[:m]), nil
		}
		if n > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

// file copies one regular file, content and attributes.
func (c *treeCopy) file(sfd, dfd int, name, rel string) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("open %s: %w", rel, err)
	}
	src := os.NewFile(uintptr(in), rel)
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s changed type while copied", rel)
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	dst := os.NewFile(uintptr(out), rel)
	defer dst.Close()
	if err := copyData(out, in, st.Size, c.meter, nil); err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	return c.attrs(in, out, rel, &st)
}

// attrs gives the destination descriptor dfd the attributes of the source
// descriptor sfd (whose stat is st): owner (shifted), mode, the overlay's
// and user.* extended attributes, times.
func (c *treeCopy) attrs(sfd, dfd int, rel string, st *unix.Stat_t) error {
	if err := unix.Fchown(dfd, c.shift(st.Uid), c.shift(st.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", relOr(rel), err)
	}
	// After the chown, which clears set-id bits.
	if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod %s: %w", relOr(rel), err)
	}
	if err := copyXattrs(sfd, dfd, c.meter); err != nil {
		return fmt.Errorf("extended attributes of %s: %w", relOr(rel), err)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	_ = unix.UtimesNano("/proc/self/fd/"+strconv.Itoa(dfd), ts)
	return nil
}

// copyXattrs copies the extended attributes overlayfs keeps (opaque
// directories, redirects) and the sandbox's own user.* ones, charging
// meter their name and value bytes.
func copyXattrs(sfd, dfd int, meter Meter) error {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(sfd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(sfd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(sfd, buf)
		}
	}
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "trusted.overlay.") && !strings.HasPrefix(name, "user.") {
			continue
		}
		val := make([]byte, 64<<10)
		m, err := unix.Fgetxattr(sfd, name, val)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return err
		}
		if err := meter.Charge(int64(len(name) + m)); err != nil {
			return err
		}
		if err := unix.Fsetxattr(dfd, name, val[:m], 0); err != nil {
			return err
		}
	}
	return nil
}

// CopyFileData copies the content of the regular file src into dst, which
// must be empty, keeping holes and charging m (see copyData). Only what src
// held when it was opened is copied: a file that grows meanwhile (a running
// sandbox writes it) does not stretch the copy.
func CopyFileData(dst, src *os.File, m Meter) error {
	return CopyFileDataSum(dst, src, m, nil)
}

// CopyFileDataSum is CopyFileData that also writes to sum (if not nil) the
// bytes dst ends up holding, in order, its holes as zeros: a checksum of
// the copy without a second read (what is hashed is what was written, even
// if src changes meanwhile).
func CopyFileDataSum(dst, src *os.File, m Meter, sum io.Writer) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", src.Name())
	}
	var z *zeroFiller
	if sum != nil {
		z = &zeroFiller{w: sum}
	}
	return copyData(int(dst.Fd()), int(src.Fd()), st.Size, m, z)
}

// zeroFiller feeds a hash the bytes of a sparse copy: data as written,
// the holes between as zeros.
type zeroFiller struct {
	w   io.Writer
	pos int64
}

var zeroBlock = make([]byte, 64<<10)

// data writes b, which lands at off.
func (z *zeroFiller) data(b []byte, off int64) {
	z.fill(off)
	z.w.Write(b)
	z.pos += int64(len(b))
}

// fill writes zeros up to end.
func (z *zeroFiller) fill(end int64) {
	for z.pos < end {
		n := min(int64(len(zeroBlock)), end-z.pos)
		z.w.Write(zeroBlock[:n])
		z.pos += n
	}
}

// copyData copies the first size bytes of the file in into the empty file
// out extent by extent: SEEK_DATA finds each run of data, SEEK_HOLE its
// end, and only the data is written, so holes stay holes and out
// allocates about what in does, not its apparent size. Each extent is
// charged to m, rounded out to whole blocks, before it is written. sum
// (if not nil) is fed the bytes out holds.
func copyData(out, in int, size int64, m Meter, sum *zeroFiller) error {
	var buf []byte
	for off := int64(0); off < size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		if data >= size {
			break
		}
		end, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if end <= data {
			break // truncated while we read
		}
		first := data &^ (blockSize - 1)
		last := (end + blockSize - 1) &^ (blockSize - 1)
		if err := m.Charge(last - first); err != nil {
			return err
		}
		if buf == nil {
			buf = make([]byte, 1<<20)
		}
		for pos := data; pos < end; {
			n, err := unix.Pread(in, buf[:min(int64(len(buf)), end-pos)], pos)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if n == 0 {
				end = pos // truncated while we read
				break
			}
			if err := pwriteAll(out, buf[:n], pos); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if sum != nil {
				sum.data(buf[:n], pos)
			}
			pos += int64(n)
		}
		off = end
	}
	// The size last: a hole at the end allocates nothing.
	if err := unix.Ftruncate(out, size); err != nil {
		return fmt.Errorf("set size: %w", err)
	}
	if sum != nil {
		sum.fill(size)
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
