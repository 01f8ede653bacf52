package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors: every error of this package carries one.
var (
	// ErrNotFound: no object (or record) under the key.
	ErrNotFound = errors.New("not in the store")
	// ErrCorrupt: an object read back does not match its checksum or size,
	// or carries none: it was changed behind jailcell's back.
	ErrCorrupt = errors.New("store object corrupt")
	// ErrConflict: a Swap lost (the record changed since it was read).
	ErrConflict = errors.New("store record changed")
	// ErrQuota: a Put would pass the store's byte quota.
	ErrQuota = errors.New("store quota")
	// ErrTooLarge: an object is larger than the caller's bound.
	ErrTooLarge = errors.New("store object too large")
	// ErrBadKey: a key outside CheckKey's rules.
	ErrBadKey = errors.New("bad store key")
	// ErrUnavailable: the store did not answer, or answered with an error
	// of its own, within its bound.
	ErrUnavailable = errors.New("store unavailable")
)

// Object describes a stored object.
type Object struct {
	Key  string
	Size int64
	// SHA256 is the hex checksum recorded with the object ("" in a listing).
	SHA256 string
}

// Store is one backend. Implementations are safe for concurrent use.
type Store interface {
	// Name names the store in errors and logs (its URL, no credentials).
	Name() string
	// Shared says whether other nodes may use this store (S3 always; a
	// directory when configured so): hibernated sessions then live in it.
	Shared() bool
	// Put stores size bytes from r under key, replacing what was there.
	// Nothing is visible under key until the whole object (and its sha256)
	// is: a failed or interrupted Put leaves the old object or none. r is
	// read twice if it is an io.Seeker (the checksum goes first on S3), else
	// buffered in a temporary file.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error)
	// Get opens the object under key; an object larger than max is refused
	// with ErrTooLarge. The reader yields at most the recorded size and
	// returns ErrCorrupt instead of io.EOF if the bytes do not match the
	// recorded checksum: use what it returned only after a clean io.EOF.
	Get(ctx context.Context, key string, max int64) (io.ReadCloser, Object, error)
	// List returns the objects whose keys start with prefix, at most max
	// of them (more: ErrTooLarge), sorted by key.
	List(ctx context.Context, prefix string, max int) ([]Object, error)
	// Delete removes the object under key; a missing one is not an error.
	Delete(ctx context.Context, key string) error
	// Record reads a small record written by Swap and its version.
	Record(ctx context.Context, key string, max int64) ([]byte, string, error)
	// Swap writes the record under key if its version is still old ("":
	// only if there is none) and returns the new version; else
	// ErrConflict. On S3 this is a conditional PUT (If-Match /
	// If-None-Match: *), atomic on the server.
	Swap(ctx context.Context, key, old string, data []byte) (string, error)
}

// MaxKey is the longest key accepted, in bytes (S3's own limit is 1024,
// and a prefix is added to it).
const MaxKey = 900

// CheckKey says whether key is a valid key.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKey {
		return fmt.Errorf("%w %q: want 1 to %d bytes", ErrBadKey, trunc(key), MaxKey)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w %q: not UTF-8", ErrBadKey, trunc(key))
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("%w %q: control characters and backslashes are not allowed", ErrBadKey, trunc(key))
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: empty, \".\" or \"..\" segment", ErrBadKey, trunc(key))
		}
		if strings.HasPrefix(seg, TmpPrefix) {
			return fmt.Errorf("%w %q: segments starting %q are the store's own", ErrBadKey, trunc(key), TmpPrefix)
		}
	}
	return nil
}

// checkPrefix accepts "" or a key prefix ending in "/".
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w: prefix %q must end with /", ErrBadKey, trunc(prefix))
	}
	return CheckKey(strings.TrimSuffix(prefix, "/"))
}

// TmpPrefix starts the names of files being written into a file store
// (by Put, or by session's sparse copies of persisted workspaces): a key
// segment may not start with it, and a listing skips them.
const TmpPrefix = ".jc-tmp-"

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// OwnerPrefix is the key prefix of everything owner (a uid) keeps in a
// store: a key is chosen by its caller, so with one flat namespace any
// user of the service could read or overwrite another's objects by naming
// them.
func OwnerPrefix(owner int) string { return "uid=" + strconv.Itoa(owner) + "/" }

// verifier yields at most size bytes of r and checks them against sum at
// the end.
type verifier struct {
	r     io.ReadCloser
	name  string
	key   string
	size  int64
	sum   string
	n     int64
	h     hash.Hash
	err   error
	close func()
}

func newVerifier(r io.ReadCloser, name, key string, size int64, sum string, done func()) *verifier {
	return &verifier{r: r, name: name, key: key, size: size, sum: sum, h: sha256.New(), close: done}
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if rest := v.size - v.n + 1; int64(len(p)) > rest {
		p = p[:rest] // one byte more than promised is enough to notice
	}
	n, err := v.r.Read(p)
	v.n += int64(n)
	if v.n > v.size {
		v.err = fmt.Errorf("%w: %s in %s: more than its recorded %d bytes", ErrCorrupt, v.key, v.name, v.size)
		return 0, v.err
	}
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		switch got := hex.EncodeToString(v.h.Sum(nil)); {
		case v.n != v.size:
			v.err = fmt.Errorf("%w: %s in %s: %d bytes, recorded %d", ErrCorrupt, v.key, v.name, v.n, v.size)
		case got != v.sum:
			v.err = fmt.Errorf("%w: %s in %s: sha256 %s, recorded %s", ErrCorrupt, v.key, v.name, got, v.sum)
		default:
			v.err = io.EOF
		}
		if v.err != io.EOF {
			return 0, v.err
		}
		return n, io.EOF
	}
	if err != nil {
		v.err = unavailable(v.name, fmt.Errorf("read %s: %w", v.key, err))
		return n, v.err
	}
	return n, nil
}

func (v *verifier) Close() error {
	err := v.r.Close()
	if v.close != nil {
		v.close()
		v.close = nil
	}
	return err
}

// unavailable wraps err as the store name's ErrUnavailable (err may
// already carry a sentinel of this package: it is kept).
func unavailable(name string, err error) error {
	for _, s := range []error{ErrNotFound, ErrUnsigned, ErrCorrupt, ErrConflict, ErrQuota, ErrTooLarge, ErrBadKey, ErrUnavailable} {
		if errors.Is(err, s) {
			return err
		}
	}
	return fmt.Errorf("%w: store %s: %w", ErrUnavailable, name, err)
}

// bound is ctx limited to d more.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// ReadAll reads the whole of key (at most max bytes), verified.
func ReadAll(ctx context.Context, s Store, key string, max int64) ([]byte, error) {
	rc, obj, err := s.Get(ctx, key, max)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, 0, obj.Size)
	b, err = readAll(rc, b)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// sumOf hashes size bytes of r.
func sumOf(r io.Reader, size int64) (string, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, size+1))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("source has %d bytes, %d announced", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
