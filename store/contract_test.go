package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/store"
)

// backend is one store under test and how to reach behind its back.
type backend struct {
	name string
	st   store.Store
	// file is where the backend keeps key's bytes on this host.
	file func(key string) string
	// down makes the store stop answering; up brings it back.
	down, up func()
}

func fileBackend(t *testing.T) backend {
	dir := t.TempDir()
	st, err := store.Open(store.Options{URL: "file://" + dir, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Down: a filesystem that hangs (a dead NFS server) is, here, an object
	// under a write lease this test holds and never gives up while down: an
	// open of it for reading waits for the lease's break (45 s by default),
	// as an open on a dead server waits. Up gives the lease back.
	hung := filepath.Join(dir, "uid=1", "d", "x")
	var lease *os.File
	return backend{name: "file", st: st, file: func(k string) string { return filepath.Join(dir, k) },
		down: func() {
			os.MkdirAll(filepath.Dir(hung), 0o700)
			if err := os.WriteFile(hung, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			if lease, err = os.OpenFile(hung, os.O_RDWR, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.FcntlInt(lease.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
				t.Fatalf("take a write lease on %s (the hung filesystem): %v", hung, err)
			}
		},
		up: func() {
			if lease != nil {
				unix.FcntlInt(lease.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
				lease.Close()
			}
			os.Remove(hung)
		}}
}

func s3Backend(t *testing.T) backend {
	srv := testenv.StartS3(t)
	srv.SetEnv(t)
	st, err := store.OpenUnsigned(store.Options{URL: "s3://" + srv.Bucket + "/node-test", Timeout: 5 * time.Second,
		S3: store.S3Options{Endpoint: srv.Endpoint, Region: "us-east-1"}})
	if err != nil {
		t.Fatal(err)
	}
	return backend{name: "s3", st: st,
		file: func(k string) string { return srv.ObjectPath("node-test/" + k) },
		down: srv.Stop, up: func() { srv.Start(t) }}
}

// signed is b under the fleet key: what a node with store.key_file uses.
func signed(t *testing.T, b backend) backend {
	keys, err := store.NewKeyring([2]string{"k1", strings.Repeat("k", 32)})
	if err != nil {
		t.Fatal(err)
	}
	b.name, b.st = "signed-"+b.name, store.Sign(b.st, keys)
	return b
}

// TestContract runs one contract against every backend: the file store
// and S3 (a real versitygw on loopback), bare and signed.
func TestContract(t *testing.T) {
	t.Run("file", func(t *testing.T) { contract(t, fileBackend(t)) })
	t.Run("s3", func(t *testing.T) { contract(t, s3Backend(t)) })
	t.Run("signed-file", func(t *testing.T) { contract(t, signed(t, fileBackend(t))) })
	t.Run("signed-s3", func(t *testing.T) { contract(t, signed(t, s3Backend(t))) })
}

func contract(t *testing.T, b backend) {
	ctx := context.Background()
	st := b.st
	put := func(key string, data []byte) store.Object {
		t.Helper()
		o, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return o
	}
	get := func(key string, max int64) ([]byte, error) {
		return store.ReadAll(ctx, st, key, max)
	}
	big := make([]byte, 3<<20+17)
	rand.Read(big)

	t.Run("PutGetListDelete", func(t *testing.T) {
		put("uid=1/a/x.txt", []byte("hello"))
		put("uid=1/a/dir/big.bin", big)
		put("uid=1/a/empty", nil)
		if got, err := get("uid=1/a/x.txt", 100); err != nil || string(got) != "hello" {
			t.Fatalf("get: %q %v", got, err)
		}
		if got, err := get("uid=1/a/dir/big.bin", int64(len(big))); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("get big: %d bytes, %v", len(got), err)
		}
		if got, err := get("uid=1/a/empty", 0); err != nil || len(got) != 0 {
			t.Fatalf("get empty: %q %v", got, err)
		}
		// Bounded: the caller's limit holds whatever the store says.
		if _, err := get("uid=1/a/dir/big.bin", 1<<20); !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("get over the bound: %v, want ErrTooLarge", err)
		}
		objs, err := st.List(ctx, "uid=1/a/", 100)
		if err != nil {
			t.Fatal(err)
		}
		if keys := keysOf(objs); keys != "uid=1/a/dir/big.bin uid=1/a/empty uid=1/a/x.txt" {
			t.Fatalf("list: %s", keys)
		}
		if _, err := st.List(ctx, "uid=1/a/", 2); !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("list over its bound: %v", err)
		}
		put("uid=1/a/x.txt", []byte("replaced"))
		if got, _ := get("uid=1/a/x.txt", 100); string(got) != "replaced" {
			t.Fatalf("replaced: %q", got)
		}
		for _, k := range []string{"uid=1/a/x.txt", "uid=1/a/dir/big.bin", "uid=1/a/empty", "uid=1/a/never"} {
			if err := st.Delete(ctx, k); err != nil {
				t.Fatalf("delete %s: %v", k, err)
			}
		}
		if _, err := get("uid=1/a/x.txt", 100); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted: %v", err)
		}
		if objs, err := st.List(ctx, "uid=1/a/", 100); err != nil || len(objs) != 0 {
			t.Fatalf("list after delete: %v %v", keysOf(objs), err)
		}
	})

	t.Run("BadKeys", func(t *testing.T) {
		for _, k := range []string{"", "/abs", "a//b", "a/../b", "..", "a/./b", "a/", "x\x00y", "x\ny", `a\b`, ".jc-tmp-x", "a/.jc-tmp-1", strings.Repeat("k", store.MaxKey+1)} {
			if _, err := st.Put(ctx, k, strings.NewReader("x"), 1); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("put %q: %v, want ErrBadKey", k, err)
			}
			if _, _, err := st.Get(ctx, k, 1); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("get %q: %v, want ErrBadKey", k, err)
			}
		}
	})

	t.Run("ChecksumMismatch", func(t *testing.T) {
		data := []byte("the variables of a session, pickled")
		put("uid=1/c/obj", data)
		// Behind the store's back: same size, one byte changed.
		p := b.file("uid=1/c/obj")
		orig, err := os.ReadFile(p)
		// A signed store keeps its signature in front of the data.
		if err != nil || !bytes.HasSuffix(orig, data) {
			t.Fatalf("backend file %s: %q %v", p, orig, err)
		}
		raw := bytes.Clone(orig)
		raw[len(raw)-len(data)+3] ^= 1
		if err := os.WriteFile(p, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := get("uid=1/c/obj", 100); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "sha256") {
			t.Fatalf("corrupted object read back: %v, want ErrCorrupt naming the sha256", err)
		}
		// Longer than recorded (a file store reads its size from the file;
		// S3 may serve the new length): still refused.
		if err := os.WriteFile(p, append(orig, "and more"...), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := get("uid=1/c/obj", 100); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("grown object read back: %q %v, want ErrCorrupt", got, err)
		}
	})

	t.Run("PartialUploadInvisible", func(t *testing.T) {
		put("uid=1/p/kept", []byte("old and whole"))
		for _, key := range []string{"uid=1/p/new", "uid=1/p/kept"} {
			// The source dies halfway through (an upload cut off).
			r := io.MultiReader(bytes.NewReader(big[:1<<20]), errReader{})
			_, err := st.Put(ctx, key, r, int64(len(big)))
			if err == nil {
				t.Fatalf("put %s from a failing source succeeded", key)
			}
			// The upload itself is cut off halfway (the server has begun
			// receiving the body).
			failAt := int64(1 << 20)
			if strings.HasSuffix(b.name, "s3") {
				failAt += int64(len(big)) // after the checksum pass
			}
			fr := &failingSeeker{r: bytes.NewReader(big), failAt: failAt}
			if _, err := st.Put(ctx, key, fr, int64(len(big))); err == nil {
				t.Fatalf("put %s cut off mid-upload succeeded", key)
			}
			// Shorter than announced: refused too.
			if _, err := st.Put(ctx, key, bytes.NewReader(big[:100]), 200); err == nil {
				t.Fatalf("put %s of a short source succeeded", key)
			}
		}
		if _, err := get("uid=1/p/new", int64(len(big))); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a failed upload is visible: %v", err)
		}
		if got, err := get("uid=1/p/kept", 100); err != nil || string(got) != "old and whole" {
			t.Fatalf("a failed replacement changed the object: %q %v", got, err)
		}
		if objs, _ := st.List(ctx, "uid=1/p/", 100); keysOf(objs) != "uid=1/p/kept" {
			t.Fatalf("list after failed uploads: %s", keysOf(objs))
		}
	})

	t.Run("OwnerNamespacing", func(t *testing.T) {
		put(store.OwnerPrefix(1000)+"ws/f", []byte("mine"))
		put(store.OwnerPrefix(1001)+"ws/f", []byte("theirs"))
		put(store.OwnerPrefix(10000)+"ws/f", []byte("a longer uid"))
		objs, err := st.List(ctx, store.OwnerPrefix(1000), 100)
		if err != nil || keysOf(objs) != "uid=1000/ws/f" {
			t.Fatalf("owner 1000 sees %s (%v)", keysOf(objs), err)
		}
		if got, _ := get(store.OwnerPrefix(1001)+"ws/f", 100); string(got) != "theirs" {
			t.Fatalf("owner 1001's object: %q", got)
		}
	})

	t.Run("Quota", func(t *testing.T) {
		q := store.Quota(st, 1000+quotaBase(t, st), "store_quota_bytes")
		if _, err := q.Put(ctx, "uid=2/q/a", bytes.NewReader(make([]byte, 600)), 600); err != nil {
			t.Fatal(err)
		}
		_, err := q.Put(ctx, "uid=2/q/b", bytes.NewReader(make([]byte, 600)), 600)
		if !errors.Is(err, store.ErrQuota) || !strings.Contains(err.Error(), "store_quota_bytes") {
			t.Fatalf("put past the quota: %v, want ErrQuota naming store_quota_bytes", err)
		}
		if _, err := get("uid=2/q/b", 1000); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused object stored: %v", err)
		}
		// Replacing frees the old object's bytes; deleting frees them all.
		if _, err := q.Put(ctx, "uid=2/q/a", bytes.NewReader(make([]byte, 900)), 900); err != nil {
			t.Fatalf("replace within the quota: %v", err)
		}
		if err := q.Delete(ctx, "uid=2/q/a"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, "uid=2/q/b", bytes.NewReader(make([]byte, 1000)), 1000); err != nil {
			t.Fatalf("put after delete: %v", err)
		}
	})

	t.Run("Swap", func(t *testing.T) {
		key := "leases/s1"
		v1, err := st.Swap(ctx, key, "", []byte(`{"node":"a","gen":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Swap(ctx, key, "", []byte(`{"node":"b","gen":1}`)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second create: %v, want ErrConflict", err)
		}
		data, v, err := st.Record(ctx, key, 100)
		if err != nil || v != v1 || string(data) != `{"node":"a","gen":1}` {
			t.Fatalf("record: %q %q %v (want version %q)", data, v, err, v1)
		}
		v2, err := st.Swap(ctx, key, v1, []byte(`{"node":"b","gen":2}`))
		if err != nil {
			t.Fatal(err)
		}
		// The loser of a race held v1 too.
		if _, err := st.Swap(ctx, key, v1, []byte(`{"node":"c","gen":2}`)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("stale swap: %v, want ErrConflict", err)
		}
		if data, v, _ := st.Record(ctx, key, 100); v != v2 || !strings.Contains(string(data), `"b"`) {
			t.Fatalf("after swaps: %q %q", data, v)
		}
	})

	t.Run("Down", func(t *testing.T) {
		b.down()
		defer b.up()
		start := time.Now()
		if _, err := get("uid=1/d/x", 10); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), st.Name()) {
			t.Fatalf("get from a store that is down: %v, want ErrUnavailable naming %s", err, st.Name())
		}
		if strings.HasSuffix(b.name, "file") {
			t.Logf("hung file store answered in %s", time.Since(start).Round(time.Millisecond))
			return // a lease hangs opens of its file; writes go elsewhere
		}
		_, err := st.Put(ctx, "uid=1/d/x", strings.NewReader("x"), 1)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), st.Name()) {
			t.Fatalf("put to a store that is down: %v, want ErrUnavailable naming %s", err, st.Name())
		}
		if _, err := st.Swap(ctx, "leases/d", "", []byte("{}")); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("swap on a store that is down: %v", err)
		}
		t.Logf("store down answered in %s", time.Since(start).Round(time.Millisecond))
	})
}

// quotaBase is what the store holds before the quota test.
func quotaBase(t *testing.T, st store.Store) int64 {
	objs, err := st.List(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, o := range objs {
		n += o.Size
	}
	return n
}

// failingSeeker fails once failAt bytes have been read over all passes
// (S3's Put reads twice: checksum, then upload).
type failingSeeker struct {
	r      *bytes.Reader
	n      int64
	failAt int64
}

func (f *failingSeeker) Read(p []byte) (int, error) {
	if f.n >= f.failAt {
		return 0, fmt.Errorf("the source went away mid-upload")
	}
	if rest := f.failAt - f.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := f.r.Read(p)
	f.n += int64(n)
	return n, err
}

func (f *failingSeeker) Seek(off int64, whence int) (int64, error) { return f.r.Seek(off, whence) }

type errReader struct{}

func (errReader) Read([]byte) (int, error) {
	return 0, fmt.Errorf("connection to the cell's disk lost")
}

func keysOf(objs []store.Object) string {
	var k []string
	for _, o := range objs {
		k = append(k, o.Key)
	}
	return strings.Join(k, " ")
}

func TestOpenRefuses(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	for _, c := range []struct{ url, endpoint, want string }{
		{"file://relative/dir", "", "ABSOLUTE"},
		{"file:///a/../b", "", "clean absolute"},
		{"ftp://x/y", "", "want file:///DIR or s3://BUCKET/PREFIX"},
		{"s3://Bad_Bucket/p", "http://127.0.0.1:1", "bucket"},
		{"s3://bucket/p", "127.0.0.1:9000", "store.s3.endpoint"},
		{"s3://bucket/p", "http://127.0.0.1:1/path", "store.s3.endpoint"},
		{"s3://key:secret@bucket/p", "http://127.0.0.1:1", "no user"},
		{"s3://bucket/p", "http://127.0.0.1:1", "no S3 credentials"},
	} {
		_, err := store.Open(store.Options{URL: c.url, S3: store.S3Options{Endpoint: c.endpoint}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("open %s (endpoint %q): %v, want an error saying %q", c.url, c.endpoint, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("open %s: the error shows the credentials: %v", c.url, err)
		}
	}
	// A credentials file (AWS shared format) is enough.
	cf := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(cf, []byte("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n"), 0o600)
	if _, err := store.Open(store.Options{URL: "s3://bucket/p", S3: store.S3Options{Endpoint: "http://127.0.0.1:1", CredentialsFile: cf}, Keys: ring(t, newKey)}); err != nil {
		t.Fatalf("open with a credentials file: %v", err)
	}
}

var keySeeds = []string{"uid=1/a/b", "a/../b", "/abs", "a//b", ".jc-tmp-x", "a/.jc-tmp-y/z", "x\x00", "ok.txt", "é/ü", "a\\b", ".", "..", strings.Repeat("a/", 500)}

// FuzzCheckKey: an accepted key is a clean relative path with no ".."
// and no store-owned segment, so it never names anything outside a file
// store's directory.
func FuzzCheckKey(f *testing.F) {
	for _, k := range keySeeds {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if store.CheckKey(k) != nil {
			return
		}
		if filepath.IsAbs(k) || filepath.Clean(k) != k || k == ".." || strings.HasPrefix(k, "../") || strings.Contains(k, "/../") || strings.Contains(k, ".jc-tmp-") && strings.Contains("/"+k, "/.jc-tmp-") {
			t.Fatalf("CheckKey accepted %q", k)
		}
	})
}

// TestHostileFIFOUnderAnObjectName: whoever else writes a shared file
// store can put a FIFO where an object is looked for. Before the fix a Get
// opened it for reading and blocked until a writer came: the caller got
// the store's timeout and a goroutine and an fd stayed behind, per call.
// Now it is not an object, at once, and nothing is left open.
func TestHostileFIFOUnderAnObjectName(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenUnsigned(store.Options{URL: "file://" + dir, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "uid=1", "d", "fifo")
	os.MkdirAll(filepath.Dir(fifo), 0o700)
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Free an open that blocked, so a failing run does not hang.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}()
	start := time.Now()
	_, _, err = st.Get(context.Background(), "uid=1/d/fifo", 10)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a FIFO: %v, want ErrNotFound", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get of a FIFO answered after %s: it waited for a writer", d)
	}
}
