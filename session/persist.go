package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/session/internal/setupcell"
	"github.com/jailcell/jailcell/store"
)

var persistNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$`)

// storeRoot opens (creating) owner's store entry name. Entries are
// namespaced by owner (<store>/uid=<uid>/<name>): a persist name is chosen
// by the caller, so with one flat namespace any user of the service could
// restore (read) or overwrite another's workspace by naming it. "=" is not
// allowed in a persist name, so no name can stand for an owner's directory
// or one of an older layout's flat entries. The name is checked here, where
// it is used, whoever gave it (a request, or metadata from a store), and
// every step is taken inside an os.Root of the store: an attack had a
// stored persist name of "../../<abs path>" make a cell write as root
// outside the store.
func (m *durable) storeRoot(owner int, name string) (*os.Root, error) {
	if owner < 0 {
		return nil, fmt.Errorf("store entry %q: owner %d", name, owner)
	}
	if !persistNameRE.MatchString(name) {
		return nil, fmt.Errorf("%w: persist name %q: want 1-64 of [A-Za-z0-9._-], not starting with '.'", ErrBadRequest, trunc(name))
	}
	top, err := os.OpenRoot(m.cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("open store directory %s: %w", m.cfg.StoreDir, err)
	}
	defer top.Close()
	dir := "uid=" + strconv.Itoa(owner)
	if err := top.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create store directory of uid %d: %w", owner, err)
	}
	dir = path.Join(dir, name)
	if err := top.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create store entry: %w", err)
	}
	return top.OpenRoot(dir)
}

// syncPersist applies a cell's file changes to the session's store entry.
// Files are read through the workspace root and written through the store
// root: neither side follows a path out of its tree.
func (m *durable) syncPersist(s *Session, changes []FileChange) error {
	if m.cfg.StoreDir == "" {
		return m.syncPersistObjects(s, changes)
	}
	ws, err := s.workspace()
	if err != nil || ws == nil {
		return err
	}
	defer ws.Close()
	st, err := m.storeRoot(s.owner, s.persist)
	if err != nil {
		return err
	}
	defer st.Close()
	entry := m.beginPersist(s, st, changes)
	defer entry.end()
	var errs []error
	for _, c := range changes {
		if c.Change == "deleted" {
			// Deleted from the store only if the workspace says so now: a
			// scan the cell raced must never cost a saved file.
			if exists(ws, c.Path) {
				continue
			}
			if err := st.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if c.Size > MaxFileBytes {
			continue // too large: not persisted
		}
		if err := checkStoreName(c.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		// Sparse, and within the session's disk and the store quota.
		if err := entry.copy(ws, st, c.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restorePersist copies the store entry into the new session's workspace
// (before its first kernel starts) and returns the files restored. Every
// file is checked against the sha256 recorded when it was persisted: a
// mismatch, or a missing checksum in an entry this daemon has checksummed,
// fails the create (a workspace silently missing or changing a file is
// worse). An entry from an older daemon (not marked checksummed) is
// restored once with a warning; its files are checksummed from what was
// copied, and the entry is marked.
func (m *durable) restorePersist(s *Session) ([]string, error) {
	if m.cfg.StoreDir == "" {
		return m.restorePersistObjects(s)
	}
	st, err := m.storeRoot(s.owner, s.persist)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	checked, err := entryChecked(st)
	if err != nil {
		return nil, storeErr("file store "+m.cfg.StoreDir, err)
	}
	entries, err := list(st)
	if err != nil {
		return nil, err
	}
	ws, err := s.writableWorkspace()
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	defer ws.Close()
	names := []string{}
	var unsummed []copied
	var stale []string
	for _, e := range entries {
		if !e.Dir && strings.HasPrefix(path.Base(e.Path), store.TmpPrefix) {
			// A copy being written, or one a crash left half-done: never
			// a file of the workspace.
			if time.Since(e.ModTime) > staleTemp {
				stale = append(stale, e.Path)
			}
			continue
		}
		if e.Dir {
			continue
		}
		rel, err := cleanRel(e.Path)
		if err != nil {
			continue
		}
		ok, c, err := m.restoreFile(s, st, ws, rel, checked)
		if err != nil {
			return nil, err
		}
		if ok {
			names = append(names, rel)
		}
		if c != nil {
			unsummed = append(unsummed, *c)
		}
	}
	if !checked {
		if len(unsummed) > 0 {
			m.log().Warn("persisted workspace written by an older jailcell: its files had no checksums; restored unchecked this once and checksummed from now on",
				"owner", s.owner, "persist", s.persist, "files", len(unsummed), "entry", st.Name())
		}
		if err := m.markChecked(st, unsummed); err != nil {
			m.log().Warn("persisted workspace not marked checksummed: the next restore trusts its unchecked files again", "entry", st.Name(), "err", err)
		}
	}
	if len(stale) > 0 {
		m.removeStale(st, stale)
	}
	return names, nil
}

// staleTemp is how old a temporary file in a store entry must be to be
// taken for a crash's leftover: younger, it may be another daemon's copy
// in progress (a shared store).
const staleTemp = time.Hour

// removeStale removes the temporary files a crash left in the entry st,
// under the entry's lock (a sync of this daemon is not writing them), and
// credits the store quota.
func (m *durable) removeStale(st *os.Root, names []string) {
	defer m.lockEntry(st.Name())()
	for _, rel := range names {
		n := fileBytes(st, rel)
		if err := st.Remove(rel); err == nil {
			m.storeQuota.adjust(-n)
			m.log().Info("removed a half-written copy a crash left in the store", "file", filepath.Join(st.Name(), rel))
		}
	}
}

// copied is a file restored from an entry that recorded no checksum for
// it: the sum of what was copied, and what the file was then.
type copied struct {
	rel, sum string
	ino      uint64
	size     int64
	mtime    unix.Timespec
}

// restoreFile copies the store file rel into s's workspace, holes kept (a
// persisted workspace took no more of its session's disk than this), and
// checks it against its recorded sha256 as it copies. A file with no
// checksum is refused in a checked entry, else returned as copied.
func (m *durable) restoreFile(s *Session, st, ws *os.Root, rel string, checked bool) (bool, *copied, error) {
	src, err := openFile(st, rel, unix.O_RDONLY, 0)
	if err != nil {
		return false, nil, nil
	}
	defer src.Close()
	what := fmt.Sprintf("file store %s", m.cfg.StoreDir)
	want, err := store.FileSum(src)
	if err != nil {
		return false, nil, storeErr(what, fmt.Errorf("%s: %w", rel, err))
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &fst); err != nil {
		return false, nil, fmt.Errorf("restore %s: %w", rel, err)
	}
	if want == "" && fst.Size == 0 {
		want = emptySum // empty files are kept without one
	}
	if want == "" && checked {
		return false, nil, storeErr(what, fmt.Errorf("%w: %s has no checksum (%s, %d bytes): jailcell did not write it", store.ErrCorrupt, rel, filepath.Join(st.Name(), rel), fst.Size))
	}
	dst, err := openFile(ws, rel, unix.O_WRONLY|unix.O_CREAT, s.disk.HostID())
	if err != nil {
		return false, nil, fmt.Errorf("restore %s: %w", rel, err)
	}
	defer dst.Close()
	if err := dst.Truncate(0); err != nil {
		return false, nil, fmt.Errorf("restore %s: %w", rel, err)
	}
	if err := dst.Chown(s.disk.HostID(), s.disk.HostID()); err != nil {
		return false, nil, fmt.Errorf("restore %s: %w", rel, err)
	}
	// The disk's tmpfs bounds the copy; the cap names the limit first.
	h := sha256.New()
	err = isolate.CopyFileDataSum(dst, src, &isolate.ByteCap{Max: s.policy.DiskBytes}, h)
	if errors.Is(err, isolate.ErrCopyBudget) || errors.Is(err, syscall.ENOSPC) {
		return false, nil, fmt.Errorf("%w: workspace full restoring %s: the persisted workspace %q takes more than this session's disk (disk_bytes = %d MiB)", ErrLimit, rel, s.persist, s.policy.DiskBytes>>20)
	}
	if err != nil {
		return false, nil, fmt.Errorf("restore %s: %w", rel, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want == "" {
		return true, &copied{rel: rel, sum: got, ino: fst.Ino, size: fst.Size, mtime: fst.Mtim}, nil
	}
	if got != want {
		// The workspace never holds bytes the store could not vouch for.
		_ = dst.Truncate(0)
		_ = ws.Remove(rel)
		return false, nil, storeErr(what, fmt.Errorf("%w: %s (%s): sha256 %s (%d bytes), recorded %s: changed behind jailcell's back", store.ErrCorrupt, rel, filepath.Join(st.Name(), rel), got, fst.Size, want))
	}
	return true, nil, nil
}

// emptySum is the sha256 of nothing: the file store records no checksum
// on an empty file (it would cost a block each for nothing to check).
const emptySum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// checkedXattr marks a file store entry whose every file carries its
// sha256 (store.SetFileSum): from then on a file without one was not
// written by jailcell. Entries of older daemons have no mark.
const checkedXattr = "user.jailcell.checksummed"

// entryChecked says whether the entry st is marked checksummed.
func entryChecked(st *os.Root) (bool, error) {
	d, err := st.Open(".")
	if err != nil {
		return false, err
	}
	defer d.Close()
	buf := make([]byte, 8)
	_, err = unix.Fgetxattr(int(d.Fd()), checkedXattr, buf)
	if errors.Is(err, unix.ENODATA) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read mark of store entry %s: %w", st.Name(), err)
	}
	return true, nil
}

// markChecked records on the unchecked entry st the sums of the files
// restored from it without one (each only if it is still the file that
// was copied and still has none), then marks the entry checksummed if all
// went. An xattr block a checksum takes is charged to the store quota.
func (m *durable) markChecked(st *os.Root, files []copied) error {
	for _, c := range files {
		before := fileBytes(st, c.rel)
		f, err := openFile(st, c.rel, unix.O_RDONLY, 0)
		if err != nil {
			return fmt.Errorf("checksum %s: %w", c.rel, err)
		}
		var fst unix.Stat_t
		err = unix.Fstat(int(f.Fd()), &fst)
		var sum string
		if err == nil {
			sum, err = store.FileSum(f)
		}
		switch {
		case err != nil:
		case sum != "": // a sync wrote it meanwhile, checksummed
		case fst.Ino != c.ino || fst.Size != c.size || fst.Mtim != c.mtime:
			err = fmt.Errorf("changed since it was restored")
		default:
			err = store.SetFileSum(f, c.sum)
			m.storeQuota.adjust(fileBytes(st, c.rel) - before)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("checksum %s: %w", c.rel, err)
		}
	}
	d, err := st.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Fsetxattr(int(d.Fd()), checkedXattr, []byte("1"), 0); err != nil {
		return fmt.Errorf("mark store entry %s: %w", st.Name(), err)
	}
	return nil
}

// checkStoreName refuses a workspace path the file store keeps for itself
// (a segment starting store.TmpPrefix, its files being written), as an
// object store's key check does.
func checkStoreName(rel string) error {
	for _, seg := range strings.Split(rel, "/") {
		if strings.HasPrefix(seg, store.TmpPrefix) {
			return fmt.Errorf("%w: %s not persisted: names starting %q are the store's own", ErrBadRequest, rel, store.TmpPrefix)
		}
	}
	return nil
}

// Persisted workspaces in an object store (S3): one object per file under
// uid=<owner>/<name>/<path>, each put whole or not at all and checked
// against its sha256 when read back. What a file store does sparse, here
// goes dense: a file is capped at MaxFileBytes and at the session's disk.

// maxPersistObjects bounds the files of one persisted workspace in a store.
const maxPersistObjects = 100_000

func (m *durable) persistPrefix(s *Session) string {
	return store.OwnerPrefix(s.owner) + s.persist + "/"
}

// syncPersistObjects applies a cell's file changes to s's persisted
// workspace in the object store.
func (m *durable) syncPersistObjects(s *Session, changes []FileChange) error {
	ws, err := s.workspace()
	if err != nil || ws == nil {
		return err
	}
	defer ws.Close()
	ctx := context.Background() // every store call is bounded by the store
	prefix := m.persistPrefix(s)
	if s.persisted == nil {
		// A session adopted after a restart: read what the store holds.
		objs, err := m.objects.List(ctx, prefix, maxPersistObjects)
		if err != nil {
			return storeErr("persist to store "+m.objects.Name(), err)
		}
		s.setPersisted(prefix, objs)
	}
	var errs []error
	for _, c := range changes {
		key := prefix + c.Path
		if err := store.CheckKey(key); err != nil {
			errs = append(errs, fmt.Errorf("%s not persisted: %w", c.Path, err))
			continue
		}
		if c.Change == "deleted" {
			if exists(ws, c.Path) {
				continue
			}
			if err := m.objects.Delete(ctx, key); err != nil {
				errs = append(errs, err)
				continue
			}
			s.persistedBytes -= s.persisted[c.Path]
			delete(s.persisted, c.Path)
			continue
		}
		if c.Size > MaxFileBytes {
			continue // too large: not persisted
		}
		if err := m.putWorkspaceFile(ctx, s, ws, c.Path, key); err != nil {
			errs = append(errs, fmt.Errorf("%s not persisted: %w", c.Path, storeErr("persist to store "+m.objects.Name(), err)))
		}
	}
	return errors.Join(errs...)
}

// putWorkspaceFile uploads the workspace file rel as key. The store copies
// it to a temporary file first (it is not a seeker here): the checksum is
// of the bytes uploaded even if the kernel writes to the file meanwhile.
func (m *durable) putWorkspaceFile(ctx context.Context, s *Session, ws *os.Root, rel, key string) error {
	f, err := openFile(ws, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil // a symlink, a device, gone: not persisted
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if fi.Size() > min(MaxFileBytes, s.policy.DiskBytes-restoreHeadroom) {
		return fmt.Errorf("%w: %d MiB, more than a session's disk (disk_bytes = %d MiB) can restore", ErrLimit, mib(fi.Size()), s.policy.DiskBytes>>20)
	}
	// The objects are dense, the workspace may be sparse: a cell's
	// hundreds of sparse 256 MiB files cost its disk nothing, and each
	// went to the store whole, filling the node's store quota (every
	// other owner's persists and hibernations then refused) with a
	// workspace no create could restore. The whole entry is held to what
	// the disk can restore.
	total := s.persistedBytes - s.persisted[rel] + fi.Size()
	if limit := s.policy.DiskBytes - restoreHeadroom; total > limit {
		return fmt.Errorf("%w: the persisted workspace %q would hold %d MiB, more than a session's disk (disk_bytes = %d MiB, less %d MiB kept free) can restore (sparse files are stored whole)",
			ErrLimit, s.persist, mib(total), s.policy.DiskBytes>>20, restoreHeadroom>>20)
	}
	if _, err = m.objects.Put(ctx, key, io.LimitReader(f, fi.Size()), fi.Size()); err != nil {
		return err
	}
	s.persistedBytes = total
	s.persisted[rel] = fi.Size()
	return nil
}

// setPersisted records the objects of s's persisted workspace (under
// prefix) and their sizes.
func (s *Session) setPersisted(prefix string, objs []store.Object) {
	s.persisted, s.persistedBytes = make(map[string]int64, len(objs)), 0
	for _, o := range objs {
		s.persisted[strings.TrimPrefix(o.Key, prefix)] = o.Size
		s.persistedBytes += o.Size
	}
}

// restorePersistObjects copies s's persisted workspace from the object
// store into its new workspace; every object is verified, and a corrupt
// one fails the create (a workspace silently missing a file is worse).
func (m *durable) restorePersistObjects(s *Session) ([]string, error) {
	ctx := context.Background()
	what := fmt.Sprintf("persisted workspace %q in store %s", s.persist, m.objects.Name())
	prefix := m.persistPrefix(s)
	objs, err := m.objects.List(ctx, prefix, maxPersistObjects)
	if err != nil {
		return nil, storeErr(what, err)
	}
	s.setPersisted(prefix, objs)
	ws, err := s.writableWorkspace()
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	defer ws.Close()
	names := []string{}
	for _, o := range objs {
		rel, err := cleanRel(strings.TrimPrefix(o.Key, prefix))
		if err != nil {
			continue
		}
		if err := m.restoreObject(ctx, s, ws, o.Key, rel); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		names = append(names, rel)
	}
	return names, nil
}

func (m *durable) restoreObject(ctx context.Context, s *Session, ws *os.Root, key, rel string) error {
	rc, _, err := m.objects.Get(ctx, key, s.policy.DiskBytes)
	if errors.Is(err, store.ErrTooLarge) {
		return fmt.Errorf("%w: %s is larger than this session's disk (disk_bytes = %d MiB)", ErrLimit, rel, s.policy.DiskBytes>>20)
	}
	if err != nil {
		return storeErr("restore "+rel, err)
	}
	defer rc.Close()
	dst, err := openFile(ws, rel, unix.O_WRONLY|unix.O_CREAT, s.disk.HostID())
	if err != nil {
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	defer dst.Close()
	if err := dst.Truncate(0); err != nil {
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	if err := dst.Chown(s.disk.HostID(), s.disk.HostID()); err != nil {
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	_, err = io.Copy(dst, rc)
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: workspace full restoring %s (disk_bytes = %d MiB)", ErrLimit, rel, s.policy.DiskBytes>>20)
	}
	if err != nil {
		// What was written of a corrupt object goes: the workspace never
		// holds bytes the store could not vouch for.
		_ = dst.Truncate(0)
		_ = ws.Remove(rel)
		return storeErr("restore "+rel, err)
	}
	return nil
}

// install pip-installs requirements from the wheelhouse inside the session,
// within the configured time bound.
func (m *durable) install(ctx context.Context, s *Session, reqs []string) ([]string, error) {
	for _, r := range reqs {
		if r == "" || strings.HasPrefix(r, "-") || strings.ContainsAny(r, "\n\r\x00") || len(r) > 200 {
			return nil, fmt.Errorf("%w: requirement %q: want a pip requirement like \"name==1.0\" (no options)", ErrBadRequest, r)
		}
	}
	arg, _ := json.Marshal(reqs)
	code := fmt.Sprintf(`import subprocess, sys
_r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", %q, "--no-input", "-q", *%s], capture_output=True, text=True)
print(_r.stdout[-4000:]); print(_r.stderr[-4000:], file=sys.stderr)
if _r.returncode: raise RuntimeError("pip exited with %%d" %% _r.returncode)
del _r
`, wheelhouseMount, arg)
	res, err := m.mgr.exec(ctx, s, ExecRequest{Code: code, Timeout: m.cfg.RequirementsTimeout, Setup: setupcell.On})
	if err != nil {
		return nil, err
	}
	if res.Status != StatusOK {
		why := strings.TrimSpace(res.Stderr)
		if i := strings.LastIndex(why, "ERROR:"); i >= 0 {
			why = why[i:]
		}
		if res.Status == StatusTimeout {
			why = fmt.Sprintf("not done within %s", m.cfg.RequirementsTimeout.Round(time.Second))
		}
		return nil, fmt.Errorf("%w: could not install requirements %v from the wheelhouse: %s", ErrBadRequest, reqs, why)
	}
	return reqs, nil
}

// persistCell copies the files a cell changed to the session's persisted
// workspace, if it has one.
func (m *durable) persistCell(s *Session, changed []FileChange) {
	if s.persist == "" || (m.cfg.StoreDir == "" && m.cfg.Store == nil) || len(changed) == 0 {
		return
	}
	if err := m.syncPersist(s, changed); err != nil {
		m.log().Warn("persist workspace", "session", s.id, "persist", s.persist, "err", err)
	}
}
