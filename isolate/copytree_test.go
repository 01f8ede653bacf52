package isolate

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
)

// TestCopyTreeHostileSource: a copied upper layer keeps symlinks as
// symlinks (never copies what they point at), keeps hard links as links,
// keeps whiteouts and opaque directories, drops other devices and file
// capabilities, and moves every owner to the destination slot.
func TestCopyTreeHostileSource(t *testing.T) {
	testenv.RequiresRoot(t)
	const from, to = 200000, 300000
	src, dst := t.TempDir(), t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(secret, []byte("host secret"), 0o600))
	must(os.MkdirAll(filepath.Join(src, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a", "b", "data"), []byte("hello"), 0o4755))
	must(os.Symlink(secret, filepath.Join(src, "escape")))
	must(os.Symlink("/etc", filepath.Join(src, "a", "etc")))
	must(os.Link(filepath.Join(src, "a", "b", "data"), filepath.Join(src, "hard")))
	must(unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0))
	must(unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Setxattr(filepath.Join(src, "a"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Setxattr(filepath.Join(src, "a", "b", "data"), "security.capability", []byte{1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0))
	filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, from+1000, from+1000) })
	must(os.Lchown(filepath.Join(src, "escape"), 0, 0))            // an unmapped owner
	must(unix.Chmod(filepath.Join(src, "a", "b", "data"), 0o4755)) // chown cleared it

	must(copyTree(src, dst, from, to, unmetered{}))

	if l, err := os.Readlink(filepath.Join(dst, "escape")); err != nil || l != secret {
		t.Errorf("escape: %q %v, want the symlink itself", l, err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "a", "etc")); l != "/etc" {
		t.Errorf("a/etc = %q", l)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a", "b", "data")); !bytes.Equal(b, []byte("hello")) {
		t.Errorf("data = %q", b)
	}
	var s1, s2 syscall.Stat_t
	must(syscall.Stat(filepath.Join(dst, "a", "b", "data"), &s1))
	must(syscall.Stat(filepath.Join(dst, "hard"), &s2))
	if s1.Ino != s2.Ino {
		t.Error("hard link copied as two files")
	}
	if s1.Uid != to+1000 || s1.Gid != to+1000 {
		t.Errorf("owner %d:%d, want %d", s1.Uid, s1.Gid, to+1000)
	}
	if s1.Mode&0o7777 != 0o4755 {
		t.Errorf("mode %o, want 4755", s1.Mode&0o7777)
	}
	if _, err := unix.Getxattr(filepath.Join(dst, "a", "b", "data"), "security.capability", make([]byte, 64)); err == nil {
		t.Error("file capability copied")
	}
	if v := make([]byte, 8); true {
		n, err := unix.Getxattr(filepath.Join(dst, "a"), "trusted.overlay.opaque", v)
		if err != nil || string(v[:n]) != "y" {
			t.Errorf("opaque dir lost its mark: %v", err)
		}
	}
	var w syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dst, "gone"), &w); err != nil || w.Mode&syscall.S_IFMT != syscall.S_IFCHR || w.Rdev != 0 {
		t.Errorf("whiteout not kept: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "null")); err == nil {
		t.Error("a device node was copied")
	}
	var e syscall.Stat_t
	must(syscall.Lstat(filepath.Join(dst, "escape"), &e))
	if e.Uid != to+65534 {
		t.Errorf("unmapped owner became %d, want the slot's nobody %d", e.Uid, to+65534)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret" {
		t.Error("the host file changed")
	}
}

// TestCopyTreeDepthBound: a tree nested past the bound is refused, not
// walked with ever more descriptors.
func TestCopyTreeDepthBound(t *testing.T) {
	testenv.RequiresRoot(t)
	src, dst := t.TempDir(), t.TempDir()
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxCopyDepth+5; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	unix.Close(fd)
	if err := copyTree(src, dst, 0, 100000, unmetered{}); err == nil {
		t.Fatal("copy of a too deep tree succeeded")
	}
}

// allocated is what the files under dir take on their filesystem, as du
// counts it: st_blocks, not apparent sizes.
func allocated(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writeSparse makes n files of size bytes under dir, each holding one byte
// at its end and "mid" in the middle: almost all hole.
func writeSparse(t *testing.T, dir string, n int, size int64) {
	t.Helper()
	for i := range n {
		f, err := os.Create(filepath.Join(dir, "sparse"+string(rune('a'+i%26))+string(rune('a'+i/26))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("mid"), size/2); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{'z'}, size-1); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// TestHostileSparseFilesCopyTree: 32 files of 16 MiB holding a few bytes
// each (the disk-amplification attack on a dense copy: 512 MiB written for
// 256 KiB allocated) copy within a 1 MiB budget, keep their holes, sizes and
// contents.
func TestHostileSparseFilesCopyTree(t *testing.T) {
	testenv.RequiresRoot(t)
	src, dst := t.TempDir(), t.TempDir()
	const size = 16 << 20
	writeSparse(t, src, 32, size)
	m := &ByteCap{Max: 1 << 20}
	if err := copyTree(src, dst, 0, 100000, m); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if got := allocated(t, dst); got > 1<<20 {
		t.Errorf("copy allocates %d bytes on the host, want at most the 1 MiB budget (the source allocates %d)", got, allocated(t, src))
	}
	if m.Used <= 0 || m.Used > 1<<20 {
		t.Errorf("meter charged %d bytes", m.Used)
	}
	ents, err := os.ReadDir(dst)
	if err != nil || len(ents) != 32 {
		t.Fatalf("copied %d files (%v), want 32", len(ents), err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dst, e.Name()))
		if err != nil || len(b) != size || b[size-1] != 'z' || string(b[size/2:size/2+3]) != "mid" || b[0] != 0 {
			t.Fatalf("%s: %d bytes, %v", e.Name(), len(b), err)
		}
	}
}

// TestCopyBudgetStopsCopy: a copy that would allocate more than its budget
// stops with ErrCopyBudget before it writes past it.
func TestCopyBudgetStopsCopy(t *testing.T) {
	testenv.RequiresRoot(t)
	src, dst := t.TempDir(), t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(src, name), bytes.Repeat([]byte{'x'}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := &ByteCap{Max: 2<<20 + 8192}
	err := copyTree(src, dst, 0, 100000, m)
	if !errors.Is(err, ErrCopyBudget) {
		t.Fatalf("copy of 3 MiB with a 2 MiB budget: %v, want ErrCopyBudget", err)
	}
	if got := allocated(t, dst); got > m.Max+64<<10 {
		t.Errorf("stopped copy allocated %d bytes, budget %d", got, m.Max)
	}
	// Directories cost a block each on the host though tmpfs charges none.
	src2, dst2 := t.TempDir(), t.TempDir()
	for i := range 10 {
		if err := os.Mkdir(filepath.Join(src2, string(rune('a'+i))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyTree(src2, dst2, 0, 100000, &ByteCap{Max: 5 * blockSize}); !errors.Is(err, ErrCopyBudget) {
		t.Fatalf("10 directories in a 5-block budget: %v, want ErrCopyBudget", err)
	}
}

// TestCopyFileDataGrowingSource: only what the source held when opened is
// copied, holes included.
func TestCopyFileDataGrowingSource(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.WriteAt([]byte("end"), 8<<20); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	m := &ByteCap{Max: 64 << 10}
	if err := CopyFileData(dst, src, m); err != nil {
		t.Fatal(err)
	}
	fi, _ := dst.Stat()
	if fi.Size() != 8<<20+3 || fi.Sys().(*syscall.Stat_t).Blocks*512 > 64<<10 {
		t.Fatalf("copy: size %d, %d blocks", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks)
	}
	if m.Used != blockSize {
		t.Errorf("charged %d, want one block", m.Used)
	}
}

// TestCopyFileDataSum: the sum fed during a sparse copy is the sha256 of
// the whole copy, holes (leading, inner and trailing) read as zeros, and
// the copy stays sparse.
func TestCopyFileDataSum(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, off := range []int64{3 << 20, 5<<20 + 17} {
		if _, err := src.WriteAt(bytes.Repeat([]byte("data"), 3000), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Truncate(9 << 20); err != nil { // a hole at the end
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	h := sha256.New()
	if err := CopyFileDataSum(dst, src, &ByteCap{Max: 1 << 20}, h); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(b); !bytes.Equal(h.Sum(nil), want[:]) || len(b) != 9<<20 {
		t.Fatalf("sum fed during the copy %x, the copy's (%d bytes) %x", h.Sum(nil), len(b), want)
	}
	if fi, _ := dst.Stat(); fi.Sys().(*syscall.Stat_t).Blocks*512 > 256<<10 {
		t.Errorf("the copy is not sparse: %d blocks", fi.Sys().(*syscall.Stat_t).Blocks)
	}
}

// TestLoadUpperReadsOnlyItsOwnHostID: a saved layer's host id file that
// is a link (it may come from a store) is not followed, and a FIFO is
// not waited on: the load is refused, naming neither's target.
func TestLoadUpperReadsOnlyItsOwnHostID(t *testing.T) {
	h := newTestHost(t)
	d := testDisk(t, h, policy.Default(), "hostid")
	for name, plant := range map[string]func(p string) error{
		"symlink": func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo":    func(p string) error { return unix.Mkfifo(p, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "upper"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := plant(filepath.Join(dir, hostIDFile)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.LoadUpper(dir) }()
			select {
			case err := <-done:
				host, _ := os.ReadFile("/etc/hostname")
				if err == nil || (len(host) > 0 && strings.Contains(err.Error(), strings.TrimSpace(string(host)))) {
					t.Fatalf("LoadUpper = %v, want a refusal that names no host file's content", err)
				}
				t.Logf("refused: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("LoadUpper waits on a FIFO")
			}
		})
	}
}
