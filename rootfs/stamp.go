package rootfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A service rehashes its rootfs against the manifest before it builds a
// sandbox. Natively that is 2-4 s; on an emulated or slow host it is
// minutes at every start (110 s under QEMU's TCG here), though nothing
// changed. The verification stamp lets a restart skip the content hash
// when the tree's metadata is exactly what it was at the last full hash:
// every entry's path, type, mode, owner, size, device, inode, link target,
// mtime and ctime. Changing a file's content through any file system call
// moves its ctime to the current time, which nobody can set back by a file
// system call, so an unchanged scan with every ctime older than the last
// full hash means the content is what that hash read. A write through a
// writable shared mapping moves the times only at its first write to each
// page: no stamp is written or trusted while any file of the tree is open
// for writing (writers.go). What the stamp does not see: writes to the
// block device under the file system, bit rot, writes by another kernel
// (a network or shared file system), and a root user who sets the clock
// back before editing; a full hash still runs once the stamp is older than
// the caller's bound, and `jailcell rootfs verify` and doctor always hash.

// stampVersion changes when what the stamp compares changes.
const stampVersion = 2

// racyMargin is far more than a tick of the kernel's coarse clock, which
// file times come from.
const racyMargin = 2 * time.Second

// maxStampBytes bounds the stamp file read back.
const maxStampBytes = 4 << 10

type verifyStamp struct {
	Version     int    `json:"version"`
	Root        string `json:"root"`
	ContentHash string `json:"content_hash"`
	// Dev is the tree's st_dev: the same inodes and times on another
	// file system say nothing about its content.
	Dev uint64 `json:"dev"`
	// StatDigest is the sha256 of the scan before the full hash.
	StatDigest string `json:"stat_digest"`
	// HashedAt is when the full hash started: every ctime of the tree
	// was before it.
	HashedAt time.Time `json:"hashed_at"`
}

// VerifyResult says how VerifyStamped checked the tree.
type VerifyResult struct {
	// Hashed is true when the content was hashed, false when the stamp of
	// an earlier full hash matched the tree's metadata.
	Hashed bool
	// Why says why it was hashed (no stamp, metadata changed, stamp too
	// old, a file open for writing...), or when the matching stamp's
	// hash ran.
	Why string
	// Unstamped says why a successful full hash recorded no stamp (an
	// entry changed too recently, a file of the tree open for writing,
	// as a writable shared mapping holds it...); empty when it did, or
	// when the stamp vouched.
	Unstamped string
}

// VerifyStamped is Verify that skips the content hash when the stamp at
// stampPath records a full hash of this tree, younger than maxAge, and the
// tree's metadata has not changed since (see above). A successful full
// hash writes the stamp; a failed one removes it. maxAge 0 always hashes.
// The stamp belongs in a directory only the daemon's user can write: who
// can write it can make a restart trust a changed tree.
func (r *Rootfs) VerifyStamped(stampPath string, maxAge time.Duration, now time.Time) (VerifyResult, error) {
	nodes, err := scan(r.Root)
	if err != nil {
		return VerifyResult{Hashed: true}, fmt.Errorf("verify rootfs %s: %w", r.Dir, err)
	}
	digest, newest := statDigest(nodes)
	dev := nodes[0].dev // scan's first entry is the tree itself
	// After the stat scan, before the content hash (writers.go).
	var writer string
	if maxAge > 0 {
		writer = treeWriter(r.Root, nodes)
	}
	why := "no earlier hash recorded"
	if maxAge <= 0 {
		why = "hashed at every start (rootfs_rehash_after: 0)"
	} else if st, err := readStamp(stampPath); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			why = "stamp unreadable: " + err.Error()
		}
	} else {
		switch {
		case st.Version != stampVersion || st.Root != r.Root || st.ContentHash != r.Manifest.ContentHash:
			why = "stamp is for another tree"
		case st.Dev != dev:
			why = fmt.Sprintf("the tree is on another device (st_dev %d:%d, was %d:%d)",
				unix.Major(dev), unix.Minor(dev), unix.Major(st.Dev), unix.Minor(st.Dev))
		case st.HashedAt.After(now):
			why = "stamp is from the future (clock set back?)"
		case now.Sub(st.HashedAt) >= maxAge:
			why = fmt.Sprintf("last full hash %s ago, rehashed every %s", now.Sub(st.HashedAt).Round(time.Second), maxAge)
		case writer != "":
			why = writer
		case st.StatDigest != digest:
			why = "the tree's metadata changed since the last full hash"
		case newest >= st.HashedAt.UnixNano():
			why = "an entry changed at or after the last full hash"
		default:
			return VerifyResult{Why: "metadata unchanged since the full hash of " + st.HashedAt.UTC().Format(time.RFC3339)}, nil
		}
	}
	_ = os.Remove(stampPath)
	res := VerifyResult{Hashed: true, Why: why}
	got, _, _, err := hashNodes(r.Root, nodes)
	if err != nil {
		return res, fmt.Errorf("verify rootfs %s: %w", r.Dir, err)
	}
	if got != r.Manifest.ContentHash {
		return res, fmt.Errorf("verify rootfs %s: %w: tree hashes to %s, manifest says %s",
			r.Dir, ErrCorrupt, got, r.Manifest.ContentHash)
	}
	switch {
	case maxAge <= 0:
	case writer != "":
		res.Unstamped = writer
	case newest >= now.Add(-racyMargin).UnixNano():
		// Two changes within one tick of the file system's coarse clock
		// leave one ctime ("racy git"): a tree with an entry changed in
		// the last racyMargin before the scan gets no stamp.
		res.Unstamped = fmt.Sprintf("an entry changed less than %s before the scan", racyMargin)
	default:
		if err := writeStamp(stampPath, verifyStamp{Version: stampVersion, Root: r.Root,
			ContentHash: got, Dev: dev, StatDigest: digest, HashedAt: now}); err != nil {
			return res, fmt.Errorf("verify rootfs %s: record the hash: %w", r.Dir, err)
		}
	}
	return res, nil
}

// treeWriter says which file of the tree is open for writing, and by
// whom if /proc shows a writable shared mapping of it, or why that cannot
// be ruled out; empty if no file is.
func treeWriter(root string, nodes []node) string {
	n, err := openForWrite(root, nodes)
	switch {
	case err != nil:
		return "cannot rule out a writable mapping of the tree: " + err.Error()
	case n == nil:
		return ""
	}
	by := "no process in /proc maps it writable: a descriptor open for writing, or a process out of its sight"
	if h := procMaps.holder(n.dev, n.ino); h != "" {
		by = "writable shared mapping by " + h
	}
	return fmt.Sprintf("%s is open for writing: %s", n.rel, by)
}

// statDigest hashes what a scan saw, and returns the newest ctime.
func statDigest(nodes []node) (string, int64) {
	sorted := make([]*node, len(nodes))
	for i := range nodes {
		sorted[i] = &nodes[i]
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].rel < sorted[j].rel })
	h := sha256.New()
	var newest int64
	var num [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(num[:], v)
		h.Write(num[:])
	}
	for _, n := range sorted {
		io.WriteString(h, n.rel)
		h.Write([]byte{0, n.kind, 0})
		io.WriteString(h, n.data)
		h.Write([]byte{0})
		put(uint64(n.mode))
		put(uint64(n.uid))
		put(uint64(n.gid))
		put(uint64(n.size))
		put(n.dev)
		put(n.ino)
		put(uint64(n.mtime))
		put(uint64(n.ctime))
		newest = max(newest, n.ctime)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), newest
}

func readStamp(path string) (verifyStamp, error) {
	var st verifyStamp
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return st, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStampBytes+1))
	if err != nil {
		return st, err
	}
	if len(b) > maxStampBytes {
		return st, fmt.Errorf("%s is over %d bytes", path, maxStampBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("decode %s: %w", path, err)
	}
	return st, nil
}

func writeStamp(path string, st verifyStamp) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".rootfs-verified-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
