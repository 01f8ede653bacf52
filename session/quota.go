package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/store"
)

// Host disk. What the daemon writes outside the sandboxes on a session's
// behalf is charged as allocated bytes (st_blocks, what du counts), never
// apparent sizes: a cell's 16 MiB file holding one byte takes one page of
// its disk and one block on the host (isolate.CopyFileData keeps holes).
//
// Per session, each copy of its workspace (a hibernation's, a snapshot's,
// a fork's) is capped at its policy's disk_bytes, and each set of
// checkpoint images at its memory_bytes plus imagesSlack. A session holds
// at most two of each at once (a snapshot being replaced, or a snapshot
// and a hibernation). All of it together is capped by StateQuota, and all
// persisted workspaces together by StoreQuota; a persisted workspace is
// capped at the disk_bytes of the session that writes it, less
// restoreHeadroom, so it always restores into a session of that policy.

// imagesSlack is what a checkpoint may take beyond the kernel's memory
// limit: criu's own records of processes, files and mounts.
const imagesSlack = 32 << 20

// restoreHeadroom is kept free on a persisted workspace's disk: what a new
// session's disk holds before its files are restored (the kernel script,
// the control socket, the overlay's directories).
const restoreHeadroom = 1 << 20

// quota counts the bytes charged against one configured byte quota.
type quota struct {
	key      string // the config key, named in errors
	sentinel error
	limit    int64

	mu    sync.Mutex
	used  int64
	items map[string]int64 // what was charged, by path
}

func newQuota(key string, sentinel error, limit int64) *quota {
	return &quota{key: key, sentinel: sentinel, limit: limit, items: map[string]int64{}}
}

// charge adds n bytes for item if they fit.
func (q *quota) charge(item string, n int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n > q.limit-q.used {
		return fmt.Errorf("%w: %d MiB more would pass %s = %d MiB (%d MiB in use)", q.sentinel, mib(n), q.key, q.limit>>20, mib(q.used))
	}
	q.used += n
	if item != "" {
		q.items[item] += n
	}
	return nil
}

// force charges n bytes for item whether they fit or not: bytes already
// on disk (a previous daemon's), measured.
func (q *quota) force(item string, n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used += n
	q.items[item] += n
}

// adjust corrects the count by n bytes (negative: freed), for what is
// measured rather than itemized (the store).
func (q *quota) adjust(n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used = max(q.used+n, 0)
}

// release drops the charges of the path item and of everything below it.
func (q *quota) release(item string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, n := range q.items {
		if k == item || strings.HasPrefix(k, item+"/") {
			q.used -= n
			delete(q.items, k)
		}
	}
}

// rename moves item's charge to another path (a directory renamed).
func (q *quota) rename(from, to string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, n := range q.items {
		if k == from || strings.HasPrefix(k, from+"/") {
			delete(q.items, k)
			q.items[to+strings.TrimPrefix(k, from)] += n
		}
	}
}

func (q *quota) inUse() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// meter charges a copy to a per-copy cap and to a quota, under item.
type meter struct {
	cap  isolate.ByteCap
	q    *quota
	item string
}

func (m *meter) Charge(n int64) error {
	if err := m.cap.Charge(n); err != nil {
		return err
	}
	return m.q.charge(m.item, n)
}

// stateMeter is the meter of a copy of s's workspace into the state dir
// at dir: s's disk_bytes at most, and the state quota.
func (m *durable) stateMeter(s *Session, dir string) *meter {
	return &meter{cap: isolate.ByteCap{Max: s.policy.DiskBytes}, q: m.stateQuota, item: dir}
}

// copyLimit turns a copy stopped by its cap into an ErrLimit that names
// the session's disk limit; other errors are kept.
func copyLimit(s *Session, what string, err error) error {
	if errors.Is(err, isolate.ErrCopyBudget) {
		return fmt.Errorf("%w: %s of session %s: its files would take more than its disk limit (disk_bytes = %d MiB) on the host: %v", ErrLimit, what, s.id, s.policy.DiskBytes>>20, err)
	}
	return err
}

// imagesReserve is what the state quota holds for a checkpoint of a kernel
// of policy p while criu writes it.
func imagesReserve(p policy.Policy) int64 { return p.MemoryBytes + imagesSlack }

// reserveImages charges the state quota for checkpoint images about to be
// written at dir.
func (m *durable) reserveImages(s *Session, dir string) error {
	if err := m.stateQuota.charge(dir, imagesReserve(s.policy)); err != nil {
		return fmt.Errorf("checkpoint of session %s: %w", s.id, err)
	}
	return nil
}

// settleImages replaces the reservation for the images at dir with what
// they take; images larger than reserved (criu copies the content of open
// deleted files, ghost files, densely) are refused: the caller removes them.
func (m *durable) settleImages(s *Session, dir string) error {
	n := allocatedBytes(dir)
	m.stateQuota.release(dir)
	if n > imagesReserve(s.policy) {
		return fmt.Errorf("%w: checkpoint of session %s takes %d MiB on the host, more than its memory limit and %d MiB (memory_bytes = %d MiB)", ErrLimit, s.id, mib(n), imagesSlack>>20, s.policy.MemoryBytes>>20)
	}
	return m.stateQuota.charge(dir, n)
}

// initQuotas makes the host-disk quotas and charges the store with what it
// holds.
func (m *durable) initQuotas() {
	m.stateQuota = newQuota("state_quota_bytes", ErrStateQuota, m.cfg.StateQuota)
	m.storeQuota = newQuota("store_quota_bytes", ErrStoreQuota, m.cfg.StoreQuota)
	m.entryLocks = map[string]*entryLock{}
	if m.cfg.StoreDir != "" {
		m.storeQuota.force("", allocatedBytes(m.cfg.StoreDir))
	}
}

// chargeAdopted charges the state quota with what the sessions a previous
// daemon left already hold on disk.
func (m *durable) chargeAdopted() {
	// s.dir is set when s is made and never changes.
	for _, s := range m.mgr.sessionsWhere(func(*Session) bool { return true }) {
		for _, name := range []string{imagesName, savedName, snapshotName, snapshotName + ".new"} {
			p := filepath.Join(s.dir, name)
			if n := allocatedBytes(p); n > 0 {
				m.stateQuota.force(p, n)
			}
		}
	}
}

// allocatedBytes is what the tree at root takes on its filesystem (du): a
// host-owned tree, walked without following symlinks.
func allocatedBytes(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// defaultQuota is a quarter of the filesystem holding dir (or its nearest
// existing parent), 1 GiB if that cannot be read.
func defaultQuota(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err == nil {
			return int64(st.Blocks) * st.Bsize / 4
		}
		if d == filepath.Dir(d) {
			return 1 << 30
		}
	}
}

// storeEntry accounts one sync of a persisted workspace: the entry is
// locked against another session's sync, measured before and after, and
// each file copied is charged to the entry's cap and the store quota.
type storeEntry struct {
	m       *durable
	s       *Session
	dir     string
	unlock  func()
	before  int64
	used    int64 // the entry's estimated size during the sync
	charged int64 // net bytes charged to the store quota during the sync
}

// beginPersist starts a sync of s's store entry st; changes are the ones
// about to be applied (deletions are credited up front).
func (m *durable) beginPersist(s *Session, st *os.Root, changes []FileChange) *storeEntry {
	dir := st.Name()
	e := &storeEntry{m: m, s: s, dir: dir, unlock: m.lockEntry(dir)}
	e.before = allocatedBytes(dir)
	e.used = e.before
	for _, c := range changes {
		if c.Change == "deleted" {
			n := fileBytes(st, c.Path)
			e.used -= n
			e.charged -= n
		}
	}
	m.storeQuota.adjust(e.charged)
	return e
}

// end measures the entry and corrects the store quota to it.
func (e *storeEntry) end() {
	after := allocatedBytes(e.dir)
	e.m.storeQuota.adjust(after - e.before - e.charged)
	e.unlock()
}

// copy copies the workspace file rel into the entry, sparse, within the
// entry's cap (the session's disk, so that it restores) and the store
// quota, hashing it as it goes. The copy is written under a temporary
// name beside rel and renamed over it only once complete, its sha256
// recorded (store.SetFileSum; not for an empty file) and its data synced:
// a copy that fails half-way (quota, disk full, a crash) is never visible
// as rel. A copy that fails is refused and rel removed: the store keeps no
// stale version of a file the workspace changed.
func (e *storeEntry) copy(ws, st *os.Root, rel string) error {
	src, err := openFile(ws, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil // a symlink, a device, gone: not persisted
	}
	defer src.Close()
	// The new copy replaces the old one: the old one's bytes are free for
	// it (credited now, though they stay on disk until the rename).
	old := fileBytes(st, rel)
	capBytes := max(e.s.policy.DiskBytes-restoreHeadroom-(e.used-old), 0)
	mt := &meter{cap: isolate.ByteCap{Max: capBytes}, q: e.m.storeQuota}
	defer func() { e.charged += mt.cap.Used }()
	// A directory costs the host a block (a tmpfs nothing): a cell's
	// thousands of empty directories are charged like data.
	if n := missingDirs(st, rel); n > 0 {
		if err := mt.Charge(n * dirBlock); err != nil {
			return e.refused(rel, err)
		}
		e.used += n * dirBlock
	}
	tmp := path.Join(path.Dir(rel), store.TempName())
	dst, err := openFile(st, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, os.Getuid())
	if err != nil {
		return fmt.Errorf("persist %s: %w", rel, err)
	}
	e.used -= old
	e.charged -= old
	e.m.storeQuota.adjust(-old)
	before := mt.cap.Used
	h := sha256.New()
	err = isolate.CopyFileDataSum(dst, src, mt, h)
	var fst unix.Stat_t
	if err == nil {
		err = unix.Fstat(int(dst.Fd()), &fst)
	}
	// An empty file has nothing to check and nothing to sync: a cell's
	// thousands of them cost the store no checksum block and no flushes.
	if err == nil && fst.Size > 0 {
		err = store.SetFileSum(dst, hex.EncodeToString(h.Sum(nil)))
		// The checksum may not fit in the inode: an xattr block it takes
		// is charged like data.
		if err == nil {
			err = unix.Fstat(int(dst.Fd()), &fst)
		}
		if extra := fst.Blocks*512 - (mt.cap.Used - before); err == nil && extra > 0 {
			err = mt.Charge(extra)
		}
		// Synced before the rename, so a crash cannot leave rel empty or
		// short under its name.
		if err == nil {
			err = dst.Sync()
		}
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = st.Rename(tmp, rel)
	}
	if err != nil {
		_ = st.Remove(tmp)
		_ = st.Remove(rel)
		return e.refused(rel, err)
	}
	e.used += mt.cap.Used - before
	return nil
}

// dirBlock is what a directory is charged in the store.
const dirBlock = 4096

// refused says why rel was not persisted.
func (e *storeEntry) refused(rel string, err error) error {
	if errors.Is(err, isolate.ErrCopyBudget) {
		return fmt.Errorf("%w: %s not persisted: the persisted workspace %q would take more than the disk limit of session %s (disk_bytes = %d MiB, less %d MiB kept free to restore it): %v", ErrLimit, rel, e.s.persist, e.s.id, e.s.policy.DiskBytes>>20, restoreHeadroom>>20, err)
	}
	return fmt.Errorf("%s not persisted: %w", rel, err)
}

// missingDirs counts the parent directories of rel that do not exist yet
// below root.
func missingDirs(root *os.Root, rel string) int64 {
	var n int64
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if _, err := root.Lstat(d); err == nil {
			break
		}
		n++
	}
	return n
}

// lockEntry takes the lock of the store entry dir; it returns the unlock.
func (m *durable) lockEntry(dir string) func() {
	m.entryMu.Lock()
	l := m.entryLocks[dir]
	if l == nil {
		l = &entryLock{}
		m.entryLocks[dir] = l
	}
	l.refs++
	m.entryMu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.entryMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.entryLocks, dir)
		}
		m.entryMu.Unlock()
	}
}

type entryLock struct {
	sync.Mutex
	refs int
}

// fileBytes is what the regular file rel under root takes on disk (0 if
// it is not one).
func fileBytes(root *os.Root, rel string) int64 {
	fi, err := root.Lstat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// defaultObjectQuota is the store quota of a store with no filesystem of
// its own to measure (S3).
const defaultObjectQuota = 64 << 30
