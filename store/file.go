package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sumXattr holds a file object's sha256 (hex). The data stays a plain file
// (an operator can read a persisted workspace with ls and cp); a file
// changed behind jailcell's back keeps its old sum and is caught on read.
const sumXattr = "user.jailcell.sha256"

// fileStore keeps objects as files under a directory. Every path goes
// through an os.Root: a key never leaves the directory, whatever symlinks
// it holds.
type fileStore struct {
	dir     string
	root    *os.Root
	shared  bool
	timeout time.Duration
}

func openFile(dir string, shared bool, timeout time.Duration) (*fileStore, error) {
	if !path.IsAbs(dir) {
		return nil, fmt.Errorf("store file://%s: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store directory %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open store directory %s: %w", dir, err)
	}
	f := &fileStore{dir: dir, root: root, shared: shared, timeout: timeout}
	// Fail closed at start: a filesystem without user xattrs could not keep
	// the checksums.
	probe := TmpPrefix + "probe"
	pf, err := root.OpenFile(probe, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("store %s: cannot write: %w", f.Name(), err)
	}
	xerr := unix.Fsetxattr(int(pf.Fd()), sumXattr, []byte("x"), 0)
	pf.Close()
	_ = root.Remove(probe)
	if xerr != nil {
		root.Close()
		return nil, fmt.Errorf("store %s: its filesystem keeps no user xattrs (%v), where object checksums live", f.Name(), xerr)
	}
	return f, nil
}

// SetFileSum records sum (hex sha256) on f as its checksum, the way Put
// does: session's sparse copies into a file store use it, so a persisted
// workspace's files are checked like any object.
func SetFileSum(f *os.File, sum string) error {
	if !isSum(sum) {
		return fmt.Errorf("checksum %q: want 64 hex digits", trunc(sum))
	}
	if err := unix.Fsetxattr(int(f.Fd()), sumXattr, []byte(sum), 0); err != nil {
		return fmt.Errorf("record checksum of %s: %w", f.Name(), err)
	}
	return nil
}

// FileSum is the checksum recorded on f by SetFileSum (or Put), "" if it
// has none; one that is not a sha256 is ErrCorrupt.
func FileSum(f *os.File) (string, error) {
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(int(f.Fd()), sumXattr, buf)
	if errors.Is(err, unix.ENODATA) {
		return "", nil
	}
	if errors.Is(err, unix.ERANGE) {
		return "", fmt.Errorf("%w: %s: its checksum is longer than a sha256", ErrCorrupt, f.Name())
	}
	if err != nil {
		return "", fmt.Errorf("read checksum of %s: %w", f.Name(), err)
	}
	if !isSum(string(buf[:n])) {
		return "", fmt.Errorf("%w: %s: its checksum %q is not a sha256", ErrCorrupt, f.Name(), buf[:n])
	}
	return string(buf[:n]), nil
}

func isSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// TempName is a new name for a file being written into a file store's
// directory: it starts with TmpPrefix, so it is never taken for an object,
// and it is renamed to its key only once complete.
func TempName() string { return TmpPrefix + randHex() }

func (f *fileStore) Name() string { return "file://" + f.dir }
func (f *fileStore) Shared() bool { return f.shared }

// Dir is the directory, for session's sparse copies of persisted
// workspaces.
func (f *fileStore) Dir() string { return f.dir }

// do runs op within the store's bound: a hung filesystem (NFS) makes the
// call answer ErrUnavailable; op goes on in the background and must check
// ctx before anything that makes its work visible.
func (f *fileStore) do(ctx context.Context, op func(ctx context.Context) error) error {
	ctx, cancel := bound(ctx, f.timeout)
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	select {
	case err := <-done:
		cancel()
		if err != nil {
			return unavailable(f.Name(), err)
		}
		return nil
	case <-ctx.Done():
		cancel()
		return unavailable(f.Name(), fmt.Errorf("no answer within %s: %w", f.timeout, ctx.Err()))
	}
}

func (f *fileStore) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if err := CheckKey(key); err != nil {
		return Object{}, err
	}
	obj := Object{Key: key, Size: size}
	err := f.do(ctx, func(ctx context.Context) error {
		sum, err := f.write(ctx, key, r, size)
		obj.SHA256 = sum
		return err
	})
	return obj, err
}

// write puts r into a temporary file beside key and renames it into place
// once complete, synced and checksummed.
func (f *fileStore) write(ctx context.Context, key string, r io.Reader, size int64) (string, error) {
	dir := path.Dir(key)
	if dir != "." {
		if err := f.root.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("create %s: %w", dir, err)
		}
	}
	tmp := path.Join(dir, TempName())
	w, err := f.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	ok := false
	defer func() {
		if !ok {
			w.Close()
			_ = f.root.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, size+1))
	if err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	if n != size {
		return "", fmt.Errorf("write %s: source has %d bytes, %d announced", key, n, size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := SetFileSum(w, sum); err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	if err := w.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", err // the caller gave up: nothing becomes visible
	}
	if err := f.root.Rename(tmp, key); err != nil {
		return "", fmt.Errorf("commit %s: %w", key, err)
	}
	ok = true
	return sum, nil
}

func (f *fileStore) Get(ctx context.Context, key string, max int64) (io.ReadCloser, Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, Object{}, err
	}
	var file *os.File
	obj := Object{Key: key}
	err := f.do(ctx, func(ctx context.Context) error {
		fl, o, err := f.open(key)
		if err == nil && ctx.Err() != nil {
			// Opened after the caller was told the store did not answer:
			// nobody is left to close it.
			fl.Close()
			return ctx.Err()
		}
		file, obj = fl, o
		return err
	})
	if err != nil {
		if file != nil {
			file.Close()
		}
		return nil, Object{}, err
	}
	if obj.Size > max {
		file.Close()
		return nil, Object{}, fmt.Errorf("%w: %s in %s is %d bytes, more than the %d allowed", ErrTooLarge, key, f.Name(), obj.Size, max)
	}
	return newVerifier(file, f.Name(), key, obj.Size, obj.SHA256, nil), obj, nil
}

func (f *fileStore) open(key string) (*os.File, Object, error) {
	// A store others write may hold a FIFO or a device under an object's
	// name: an open for reading of a FIFO blocks until a writer comes, so
	// every Get of it would leave a goroutine and an fd behind past its
	// timeout. The name is pinned with O_PATH (which opens nothing), and
	// only a regular file is opened for reading, through that very inode.
	pin, err := f.root.OpenFile(key, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil, Object{}, fmt.Errorf("%w: %s in %s", ErrNotFound, key, f.Name())
	}
	if err != nil {
		return nil, Object{}, fmt.Errorf("open %s: %w", key, err)
	}
	defer pin.Close()
	fi, err := pin.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, Object{}, fmt.Errorf("%w: %s in %s", ErrNotFound, key, f.Name())
	}
	file, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(pin.Fd())), os.O_RDONLY, 0)
	if err != nil {
		return nil, Object{}, fmt.Errorf("open %s: %w", key, err)
	}
	sum, err := FileSum(file)
	if err != nil || sum == "" {
		file.Close()
		return nil, Object{}, fmt.Errorf("%w: %s in %s has no checksum", ErrCorrupt, key, f.Name())
	}
	return file, Object{Key: key, Size: fi.Size(), SHA256: sum}, nil
}

func (f *fileStore) List(ctx context.Context, prefix string, max int) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	var objs []Object
	err := f.do(ctx, func(ctx context.Context) error {
		start := "."
		if prefix != "" {
			start = strings.TrimSuffix(prefix, "/")
		}
		var list []Object
		err := fs.WalkDir(f.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == start && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipAll
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), TmpPrefix) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if len(list) == max {
				return fmt.Errorf("%w: more than %d objects under %q in %s", ErrTooLarge, max, prefix, f.Name())
			}
			fi, err := d.Info()
			if err != nil {
				return nil // gone since
			}
			list = append(list, Object{Key: p, Size: fi.Size()})
			return nil
		})
		objs = list
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	return objs, nil
}

func (f *fileStore) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return f.do(ctx, func(context.Context) error {
		if err := f.root.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		// Empty parents go (a non-empty one stays: Remove refuses it).
		for d := path.Dir(key); d != "."; d = path.Dir(d) {
			if f.root.Remove(d) != nil {
				break
			}
		}
		return nil
	})
}

func (f *fileStore) Record(ctx context.Context, key string, max int64) ([]byte, string, error) {
	b, err := ReadAll(ctx, f, key, max)
	if err != nil {
		return nil, "", err
	}
	return b, recordVersion(b), nil
}

// recordVersion is a file record's version: its checksum (records carry
// a generation of their own, so equal contents do not recur).
func recordVersion(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// lockName is the file every Swap of this store holds while it compares
// and writes: an flock, so several daemons on one host (or on NFS, where
// flock maps to byte-range locks) take turns.
const lockName = TmpPrefix + "swap.lock"

func (f *fileStore) Swap(ctx context.Context, key, old string, data []byte) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	ctx, cancel := bound(ctx, f.timeout)
	defer cancel()
	lf, err := f.root.OpenFile(lockName, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", unavailable(f.Name(), fmt.Errorf("open swap lock: %w", err))
	}
	defer lf.Close()
	for {
		err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return "", unavailable(f.Name(), fmt.Errorf("take swap lock: %w", err))
		}
		select {
		case <-ctx.Done():
			return "", unavailable(f.Name(), fmt.Errorf("swap lock not free within %s", f.timeout))
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	cur, ver, err := f.Record(ctx, key, int64(len(data))+maxRecordSlack)
	switch {
	case errors.Is(err, ErrNotFound):
		ver = ""
	case errors.Is(err, ErrTooLarge):
		ver = "?" // matches no version a caller holds
	case err != nil:
		return "", err
	}
	_ = cur
	if ver != old {
		return "", fmt.Errorf("%w: %s in %s", ErrConflict, key, f.Name())
	}
	if _, err := f.Put(ctx, key, strings.NewReader(string(data)), int64(len(data))); err != nil {
		return "", err
	}
	return recordVersion(data), nil
}

// maxRecordSlack is how much larger than the new record the old one may
// be for Swap to read it.
const maxRecordSlack = 1 << 20

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
