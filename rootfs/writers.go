package rootfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A write through a writable MAP_SHARED mapping moves the file's mtime and
// ctime only when it dirties a clean page (the kernel's page_mkwrite); more
// writes to a page that is already dirty and writable move no time. A
// mapping open when the stamp was taken could so change the tree with every
// ctime, and the whole stat digest, left as the stamp recorded them. A
// mapping made after a check that saw none starts with every page
// write-protected, so its first write to each page moves the times.
//
// Such a mapping holds its file open for writing, and the kernel counts an
// inode's writers (i_writecount) across every mount, path, hard link and
// PID namespace: it refuses a read lease (F_SETLEASE F_RDLCK) on a file
// that anyone holds open for writing, by a descriptor or a mapping. So no
// stamp is written, and none is trusted, while a regular file of the tree
// is open for writing anywhere on this kernel. The check runs after the
// stat scan and before the content hash: a writer gone by then wrote
// before the hash read the file. /proc only names the holder for the log:
// a process can be out of its sight (another PID namespace, an LSM).

// openForWrite returns a regular file of the tree that some process holds
// open for writing, nil if none. An error means it cannot tell: a file it
// cannot open or lease (a file system without leases, fs.leases-enable=0).
func openForWrite(root string, nodes []node) (*node, error) {
	// Four syscalls a file, about as many as the stat scan: on as many
	// goroutines as sumFiles.
	err := forEachFile(nodes, func() func(*node) error {
		return func(n *node) error {
			busy, err := hasWriter(filepath.Join(root, filepath.FromSlash(n.rel)))
			if busy {
				return writerFound{n}
			}
			return err
		}
	})
	var w writerFound
	if errors.As(err, &w) {
		return w.n, nil
	}
	return nil, err
}

// writerFound stops forEachFile at a file open for writing.
type writerFound struct{ n *node }

func (w writerFound) Error() string { return w.n.rel + " is open for writing" }

// hasWriter takes and drops a read lease on p. A writer that opens p while
// the lease is held waits for its release, a few microseconds.
func hasWriter(p string) (bool, error) {
	// O_NOFOLLOW and O_NONBLOCK as in sumFile; a read lease needs a
	// read-only descriptor.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return true, nil
		}
		return false, &os.PathError{Op: "lease", Path: p, Err: err}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
		return false, &os.PathError{Op: "release lease", Path: p, Err: err}
	}
	return false, nil
}

// procScan bounds the search of /proc for a writer's name.
type procScan struct {
	proc     string // where procfs is mounted
	maxProcs int    // processes read
	maxLines int    // mapping lines read, over all processes
}

// A host has hundreds of processes with a few hundred mappings each.
var procMaps = procScan{proc: "/proc", maxProcs: 1 << 16, maxLines: 1 << 20}

// maxMapsLine bounds one line of a maps file: a path of PATH_MAX and the
// fields before it.
const maxMapsLine = 8 << 10

// holder names a process with a writable shared mapping of the inode ino
// on the device dev, for the log; "" if the scan finds none or stops at a
// bound or an unreadable process.
func (ps procScan) holder(dev, ino uint64) string {
	d, err := os.Open(ps.proc)
	if err != nil {
		return ""
	}
	defer d.Close()
	procs, lines := 0, 0
	for procs < ps.maxProcs && lines < ps.maxLines {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil || pid <= 0 {
				continue
			}
			procs++
			found, n := ps.mapsOf(pid, dev, ino, ps.maxLines-lines)
			lines += n
			if found {
				comm, _ := os.ReadFile(filepath.Join(ps.proc, name, "comm"))
				return fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
			}
		}
		if err != nil {
			return ""
		}
	}
	return ""
}

// mapsOf reads at most budget lines of one process's mappings and reports
// whether one is a writable shared mapping of dev:ino.
func (ps procScan) mapsOf(pid int, dev, ino uint64, budget int) (bool, int) {
	f, err := os.Open(filepath.Join(ps.proc, strconv.Itoa(pid), "maps"))
	if err != nil {
		return false, 0
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, maxMapsLine)
	n := 0
	for ; n < budget; n++ {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && sharedWritable(line, dev, ino) {
			return true, n + 1
		}
		if err == io.EOF || (err != nil && !errors.Is(err, bufio.ErrBufferFull)) {
			break
		}
	}
	return false, n
}

// sharedWritable reports whether a maps line,
// "START-END PERMS OFFSET MAJOR:MINOR INODE [PATH]" with the device in hex,
// is a writable shared mapping of dev:ino. (maps prints the superblock's
// device, which on btrfs is not st_dev: there the holder goes unnamed.)
func sharedWritable(line []byte, dev, ino uint64) bool {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return false
	}
	perms := f[1]
	if len(perms) < 4 || perms[1] != 'w' || perms[3] != 's' {
		return false
	}
	if i, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || i != ino {
		return false
	}
	maj, min, _ := bytes.Cut(f[3], []byte(":"))
	a, err1 := strconv.ParseUint(string(maj), 16, 32)
	b, err2 := strconv.ParseUint(string(min), 16, 32)
	return err1 == nil && err2 == nil && unix.Mkdev(uint32(a), uint32(b)) == dev
}
