package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// HostileTree makes a directory holding what a cell may plant where the
// host opens files: a FIFO "p" (opening it blocks), a socket "sock", a
// symlink "l" to /etc (CVE-2024-28185) and a regular file "f.txt"; it
// returns the directory and the directory opened as a root, closed when
// the test ends.
func HostileTree(t testing.TB) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, "sock")}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if err := os.Symlink("/etc", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, r
}
