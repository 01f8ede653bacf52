package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/store"
)

// sumOfFile is the sha256 a store file holds and the one recorded on it.
func sumOfFile(t *testing.T, p string) (got, recorded string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded, err = store.FileSum(f)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), recorded
}

// wantCorrupt asserts a create from a damaged file store entry fails as
// unavailable naming the file and, if given, both digests.
func wantCorrupt(t *testing.T, e *env, persist, file string, words ...string) {
	t.Helper()
	_, err := e.m.Create(context.Background(), CreateOptions{Persist: persist})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), file) {
		t.Fatalf("create from a damaged entry: %v, want unavailable naming %s", err, file)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("create from a damaged entry: %v, want it to say %q", err, w)
		}
	}
}

// TestPersistFileStoreChecksummed: files persisted into a file store carry
// their sha256 (the store's xattr); a file changed, truncated or placed
// behind the daemon's back fails the next create as unavailable, naming
// the file and both digests, instead of coming back silently.
func TestPersistFileStoreChecksummed(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{Persist: "proj"})
	e.exec(t, id, "import os\nos.makedirs('data', exist_ok=True)\nopen('data/model.txt','w').write('weights v1 ' * 1000)\nopen('notes.txt','w').write('kept')", 0)
	if err := e.m.Close(ctx, 0, id); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(e.state, "store", "uid=0", "proj")
	model := filepath.Join(entry, "data", "model.txt")
	got, recorded := sumOfFile(t, model)
	if recorded != got {
		t.Fatalf("persisted file's recorded sha256 %q, its content's %s", recorded, got)
	}
	orig, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(ctx, CreateOptions{Persist: "proj"})
	if err != nil || len(info.Restored) != 2 {
		t.Fatalf("restore of an intact entry: %v %+v", err, info)
	}

	// Changed behind the daemon's back: same size, one byte different
	// (the xattr stays: the old sum is checked).
	bad := append([]byte{}, orig...)
	bad[100] ^= 1
	if err := os.WriteFile(model, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	badSum := sha256.Sum256(bad)
	wantCorrupt(t, e, "proj", "data/model.txt", "sha256", recorded, hex.EncodeToString(badSum[:]))

	// Put back as it was: it restores again.
	if err := os.WriteFile(model, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Create(ctx, CreateOptions{Persist: "proj"}); err != nil {
		t.Fatalf("restore after the file was put back: %v", err)
	}

	// Truncated.
	if err := os.Truncate(model, 10); err != nil {
		t.Fatal(err)
	}
	truncSum := sha256.Sum256(orig[:10])
	wantCorrupt(t, e, "proj", "data/model.txt", recorded, hex.EncodeToString(truncSum[:]), "10 bytes")
	if err := os.WriteFile(model, orig, 0o644); err != nil {
		t.Fatal(err)
	}

	// Placed by hand: no checksum in an entry the daemon checksummed.
	if err := os.WriteFile(filepath.Join(entry, "planted.py"), []byte("import os"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, e, "proj", "planted.py", "no checksum")
	if err := os.Remove(filepath.Join(entry, "planted.py")); err != nil {
		t.Fatal(err)
	}

	// A checksum that is not one.
	if err := unix.Setxattr(model, "user.jailcell.sha256", []byte("not a sum"), 0); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, e, "proj", "data/model.txt", "not a sha256")
}

// TestPersistFileStoreOlderEntry: an entry an older daemon wrote (files
// without checksums, entry not marked) restores once, with a warning; its
// files get their checksums then, so a later change is caught.
func TestPersistFileStoreOlderEntry(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	entry := filepath.Join(e.state, "store", "uid=0", "old")
	if err := os.MkdirAll(filepath.Join(entry, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a.txt": "from an older daemon", "sub/b.txt": "and this"} {
		if err := os.WriteFile(filepath.Join(entry, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	info, err := e.m.Create(ctx, CreateOptions{Persist: "old"})
	if err != nil || len(info.Restored) != 2 {
		t.Fatalf("restore of an older daemon's entry: %v %+v", err, info)
	}
	if res := e.exec(t, info.ID, "print(open('a.txt').read())", 0); res.Stdout != "from an older daemon\n" {
		t.Fatalf("restored: %+v", res)
	}
	for _, name := range []string{"a.txt", "sub/b.txt"} {
		if got, recorded := sumOfFile(t, filepath.Join(entry, name)); got != recorded {
			t.Fatalf("%s after its first restore: recorded sha256 %q, content's %s", name, recorded, got)
		}
	}
	if err := os.WriteFile(filepath.Join(entry, "a.txt"), []byte("FROM an older daemon"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, e, "old", "a.txt", "sha256")
}

// TestPersistFileStoreNoHalfFile: a copy into the file store that fails
// part-way (here the store quota runs out after some of a file's extents
// are written) leaves no half file under its name nor a temporary file
// behind, and the entry still restores; a workspace file named like the
// store's temporary files is not persisted.
func TestPersistFileStoreNoHalfFile(t *testing.T) {
	e := sparseEnv(t, func(c *Config) { c.StoreQuota = 4 << 20 })
	ctx := context.Background()
	id := e.create(t, CreateOptions{Persist: "half"})
	e.exec(t, id, "open('data.bin','wb').write(b'v1' * 1000)\nopen('small.txt','w').write('small')", 0)
	entry := filepath.Join(e.state, "store", "uid=0", "half")
	if got, recorded := sumOfFile(t, filepath.Join(entry, "data.bin")); got != recorded {
		t.Fatalf("data.bin v1: recorded %q, content %s", recorded, got)
	}
	// Eight 1 MiB extents 2 MiB apart: each is charged as it is copied,
	// so the copy stops part-way through, with data already written.
	res := e.exec(t, id, "f = open('data.bin','r+b')\nfor i in range(8):\n    f.seek(i * (2 << 20)); f.write(b'x' * (1 << 20))\nf.close()\n"+
		"open('.jc-tmp-mine','w').write('mine')\nprint('ok')", 0)
	if res.Stdout != "ok\n" {
		t.Fatalf("cell: %+v", res)
	}
	if err := e.m.Close(ctx, 0, id); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(entry)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if strings.Join(names, " ") != "small.txt" {
		t.Fatalf("entry holds %v after a copy that failed part-way, want only small.txt (no half data.bin, no temporary file, no .jc-tmp-mine)", names)
	}
	// What a crash mid-copy leaves: a temporary file, never restored,
	// removed once old enough not to be a copy in progress.
	oldTmp, newTmp := filepath.Join(entry, store.TmpPrefix+"crashed"), filepath.Join(entry, store.TmpPrefix+"writing")
	for _, p := range []string{oldTmp, newTmp} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(oldTmp, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(ctx, CreateOptions{Persist: "half"})
	if err != nil || len(info.Restored) != 1 || info.Restored[0] != "small.txt" {
		t.Fatalf("restore after a failed copy: %v %+v", err, info)
	}
	if _, err := os.Stat(oldTmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a crash's temporary file two hours old is still there: %v", err)
	}
	if _, err := os.Stat(newTmp); err != nil {
		t.Errorf("a fresh temporary file (maybe a copy in progress) was removed: %v", err)
	}
}
