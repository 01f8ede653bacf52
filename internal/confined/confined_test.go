package confined

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
)

// clean is the rule Check enforces, said another way (the standard
// library's own notion of clean), for the fuzz target to compare with.
func clean(p string) bool {
	if p == "" || len(p) > MaxPathBytes || strings.ContainsRune(p, 0) || path.IsAbs(p) || path.Clean(p) != p || p == "." {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." || len(c) > maxNameBytes {
			return false
		}
	}
	return true
}

// checkPath: Check accepts exactly the clean relative paths, and every
// refusal is ErrPath quoting the path (or saying it is empty or long).
func checkPath(t *testing.T, p string) {
	err := Check(p)
	if (err == nil) != clean(p) {
		t.Fatalf("Check(%q) = %v, but clean is %v", p, err, clean(p))
	}
	if err != nil && !errors.Is(err, ErrPath) {
		t.Fatalf("Check(%q) = %v, not ErrPath", p, err)
	}
}

func TestCheck(t *testing.T) {
	for _, p := range []string{"a.txt", "a/b/c", "..a", "a..", ".hidden/x", "a b/ü"} {
		if err := Check(p); err != nil {
			t.Errorf("Check(%q) = %v, want accepted", p, err)
		}
	}
	refused := map[string]string{
		"":                         "empty",
		".":                        `"." component`,
		"..":                       `".." component`,
		"../etc/passwd":            `".." component`,
		"a/../b":                   `".." component`,
		"a/..":                     `".." component`,
		"a/./b":                    `"." component`,
		"a//b":                     "empty name",
		"a/":                       "empty name",
		"/etc/passwd":              "absolute",
		"a\x00b":                   "NUL",
		strings.Repeat("a", 256):   "256 bytes",
		strings.Repeat("a/", 2100): "bytes, at most 4096",
	}
	for p, why := range refused {
		err := Check(p)
		if !errors.Is(err, ErrPath) || !strings.Contains(err.Error(), why) {
			t.Errorf("Check(%.40q) = %v, want ErrPath saying %q", p, err, why)
		}
	}
	// The fuzz seeds hold the same invariant.
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzCheck/*")
	if len(seeds) == 0 {
		t.Fatal("no fuzz seeds")
	}
	for _, s := range seeds {
		b, _ := os.ReadFile(s)
		lines := strings.SplitN(string(b), "\n", 3)
		if len(lines) < 2 {
			t.Fatalf("bad seed %s", s)
		}
		checkPath(t, strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("a/b")
	f.Fuzz(checkPath)
}

// TestHostileUnsafeTypesConfined: a symlink (CVE-2024-28185), FIFO,
// socket or file anywhere in a path, or a path that is not clean, is
// refused at once, naming the path, and nothing outside the root is
// written; a clean path to a new file is written with its directories.
func TestHostileUnsafeTypesConfined(t *testing.T) {
	dir, r := testenv.HostileTree(t)
	if err := os.Symlink("l/passwd", filepath.Join(dir, "lf")); err != nil {
		t.Fatal(err)
	}
	cases := map[string]error{
		"p": ErrType, "p/x": ErrType, "sock": ErrType, "sock/x": ErrType, "l": ErrType, "l/passwd": ErrType,
		"lf": ErrType, "f.txt/x": ErrType, "../x": ErrPath, "x/../../x": ErrPath,
	}
	// An absolute path names the decoy, never a host file.
	decoy, err := os.Readlink(filepath.Join(dir, "l"))
	if err != nil {
		t.Fatal(err)
	}
	cases[filepath.Join(decoy, "passwd")] = ErrPath
	for p, want := range cases {
		done := make(chan error, 1)
		go func() { done <- WriteFile(r, p, []byte("x"), -1, nil) }()
		select {
		case err := <-done:
			if !errors.Is(err, want) || !strings.Contains(err.Error(), strings.TrimPrefix(p, "/")) {
				t.Errorf("WriteFile(%s) = %v, want %v naming it", p, err, want)
			}
		case <-time.After(5 * time.Second):
			// Unblock it: the FIFO was opened.
			if fd, err := unix.Open(filepath.Join(dir, "p"), unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
			t.Fatalf("WriteFile(%s) blocked", p)
		}
	}
	testenv.DecoyIntact(t, dir)
	if _, err := OpenFile(r, "missing/x", unix.O_RDONLY, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenFile(missing/x) = %v, want not exist", err)
	}
	if err := WriteFile(r, "new/dir/x.txt", []byte("ok"), -1, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(r, "new/dir/x.txt", []byte("k"), -1, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "new/dir/x.txt")); err != nil || string(b) != "k" {
		t.Fatalf("rewritten file = %q, %v; want %q", b, err, "k")
	}
}

// TestWriteFrom: a streamed write replaces the file only once whole (an
// existing file keeps its inode: a watcher sees it written); more
// than its limit (ErrTooLarge), a failing reader or a failing prepare
// leave the file as it was and nothing beside it; a directory, a symlink
// or a FIFO in its place is refused as a type, never written through.
func TestWriteFrom(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	buf := make([]byte, 4)
	if n, err := WriteFrom(root, "a/f", strings.NewReader("hello"), 5, buf, -1, nil); err != nil || n != 5 {
		t.Fatalf("write 5 of 5: %d %v", n, err)
	}
	var before unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "a/f"), &before); err != nil {
		t.Fatal(err)
	}
	if n, err := WriteFrom(root, "a/f", strings.NewReader("hi"), 5, buf, -1, nil); err != nil || n != 2 {
		t.Fatalf("overwrite with 2 bytes: %d %v", n, err)
	}
	var after unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "a/f"), &after); err != nil || after.Ino != before.Ino || after.Size != 2 {
		t.Errorf("an overwrite: inode %d -> %d, size %d; want the same inode, 2 bytes", before.Ino, after.Ino, after.Size)
	}
	if _, err := WriteFrom(root, "a/f", strings.NewReader("hello"), 5, buf, -1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFrom(root, "a/f", strings.NewReader("toolong"), 5, buf, -1, nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("7 bytes with a limit of 5: %v, want ErrTooLarge", err)
	}
	if _, err := WriteFrom(root, "a/f", errReader{}, 5, buf, -1, nil); err == nil {
		t.Error("a failing reader: no error")
	}
	if _, err := WriteFrom(root, "a/f", strings.NewReader("x"), 5, buf, -1, func(int) error { return errors.New("no") }); err == nil {
		t.Error("a failing prepare: no error")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a/f")); err != nil || string(b) != "hello" {
		t.Errorf("after three failed writes the file holds %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "a")); len(ents) != 1 {
		t.Errorf("%d entries beside the file, want none: %v", len(ents)-1, ents)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "link", "fifo"} {
		if _, err := WriteFrom(root, p, strings.NewReader("x"), 5, buf, -1, nil); !errors.Is(err, ErrType) {
			t.Errorf("write over %s: %v, want ErrType", p, err)
		}
	}
	if b, _ := os.ReadFile("/etc/passwd"); strings.HasPrefix(string(b), "x") {
		t.Error("a write went through the symlink")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("broken") }
