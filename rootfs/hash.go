package rootfs

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// hashDomain starts every tree hash so that a change of format changes every
// hash instead of colliding with an old one.
const hashDomain = "jailcell rootfs tree hash v1\x00"

// node is one entry of a tree as Hash sees it.
type node struct {
	rel  string // slash-separated path relative to the tree, "." for the tree itself
	kind byte   // d, f, l, c, b, p or s
	mode uint32 // permission bits with setuid, setgid and sticky
	uid  uint32
	gid  uint32
	data string   // symlink target, or device number for c and b
	sum  [32]byte // content sha256 for f
	size int64

	// Not hashed: what the verification stamp compares (stamp.go).
	dev, ino     uint64
	mtime, ctime int64 // ns since the epoch
}

// Hash computes the content hash of the tree at dir, "sha256:<hex>", and
// counts its regular files and their bytes.
//
// The hash covers, for every entry including dir itself, in byte order of the
// slash-separated relative path: the path, the file type, the permission bits
// with setuid/setgid/sticky, the owner uid and gid, the target of a symlink,
// the device number of a device node, and the sha256 of a regular file's
// content. Each field is NUL-terminated (no path or link target can contain
// NUL). It ignores times, xattrs and hardlink identity. Symlinks are recorded,
// never followed, and nothing is skipped. Files are read in parallel, one
// reader per CPU.
func Hash(dir string) (hash string, files int, size int64, err error) {
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return "", 0, 0, fmt.Errorf("hash tree: %w", err)
	}
	nodes, err := scan(dir)
	if err != nil {
		return "", 0, 0, fmt.Errorf("hash tree %s: %w", dir, err)
	}
	return hashNodes(dir, nodes)
}

// hashNodes reads the content of a scan's regular files and hashes the tree.
func hashNodes(dir string, nodes []node) (hash string, files int, size int64, err error) {
	if err := sumFiles(dir, nodes); err != nil {
		return "", 0, 0, fmt.Errorf("hash tree %s: %w", dir, err)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].rel < nodes[j].rel })

	h := sha256.New()
	w := bufio.NewWriterSize(h, 64<<10)
	w.WriteString(hashDomain)
	var hexsum [64]byte
	for i := range nodes {
		n := &nodes[i]
		data := n.data
		if n.kind == 'f' {
			hex.Encode(hexsum[:], n.sum[:])
			data = string(hexsum[:])
			files++
			size += n.size
		}
		w.WriteString(n.rel)
		w.WriteByte(0)
		w.WriteByte(n.kind)
		w.WriteByte(0)
		w.WriteString(strconv.FormatUint(uint64(n.mode), 8))
		w.WriteByte(0)
		w.WriteString(strconv.FormatUint(uint64(n.uid), 10))
		w.WriteByte(0)
		w.WriteString(strconv.FormatUint(uint64(n.gid), 10))
		w.WriteByte(0)
		w.WriteString(data)
		w.WriteByte(0)
	}
	if err := w.Flush(); err != nil {
		return "", 0, 0, fmt.Errorf("hash tree %s: %w", dir, err)
	}
	return hashPrefix + hex.EncodeToString(h.Sum(nil)), files, size, nil
}

// scan lstats every entry under dir.
func scan(dir string) ([]node, error) {
	var nodes []node
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no unix stat", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		n := node{
			rel:   filepath.ToSlash(rel),
			mode:  st.Mode & 0o7777,
			uid:   st.Uid,
			gid:   st.Gid,
			size:  st.Size,
			dev:   st.Dev,
			ino:   st.Ino,
			mtime: st.Mtim.Nano(),
			ctime: st.Ctim.Nano(),
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			n.kind = 'd'
		case syscall.S_IFREG:
			n.kind = 'f'
		case syscall.S_IFLNK:
			n.kind = 'l'
			if n.data, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFCHR:
			n.kind = 'c'
			n.data = strconv.FormatUint(uint64(st.Rdev), 10)
		case syscall.S_IFBLK:
			n.kind = 'b'
			n.data = strconv.FormatUint(uint64(st.Rdev), 10)
		case syscall.S_IFIFO:
			n.kind = 'p'
		case syscall.S_IFSOCK:
			n.kind = 's'
		default:
			return fmt.Errorf("stat %s: unknown file type %#o", p, st.Mode&syscall.S_IFMT)
		}
		nodes = append(nodes, n)
		return nil
	})
	return nodes, err
}

// sumFiles fills in the content hash of every regular file, reading files on
// as many goroutines as there are CPUs: the tree is mostly small files, so
// the time goes to syscalls as much as to sha256.
func sumFiles(dir string, nodes []node) error {
	return forEachFile(nodes, func() func(*node) error {
		buf := make([]byte, 256<<10)
		return func(n *node) error { return sumFile(filepath.Join(dir, filepath.FromSlash(n.rel)), n, buf) }
	})
}

// forEachFile runs a worker made by newWorker (each with its own state)
// on every regular file of nodes, on up to 8 goroutines, and stops at the
// first error, which it returns.
func forEachFile(nodes []node, newWorker func() func(*node) error) error {
	work := make(chan int, 256)
	var (
		wg       sync.WaitGroup
		failed   atomic.Bool
		errOnce  sync.Once
		firstErr error
	)
	for range min(runtime.GOMAXPROCS(0), 8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := newWorker()
			for i := range work {
				if failed.Load() {
					continue
				}
				if err := do(&nodes[i]); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		}()
	}
	for i := range nodes {
		if failed.Load() {
			break
		}
		if nodes[i].kind == 'f' {
			work <- i
		}
	}
	close(work)
	wg.Wait()
	return firstErr
}

func sumFile(p string, n *node, buf []byte) error {
	// O_NOFOLLOW and O_NONBLOCK: if the entry was swapped for a symlink or a
	// FIFO since the scan, fail instead of following it or blocking.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: changed type while hashing", p)
	}
	h := sha256.New()
	var size int64
	for {
		k, err := f.Read(buf)
		h.Write(buf[:k])
		size += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	h.Sum(n.sum[:0])
	n.size = size
	return nil
}
