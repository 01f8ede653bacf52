package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// HostileTree makes a directory holding what a cell may plant where the
// host opens files: a FIFO "p" (opening it blocks), a socket "sock", a
// symlink "l" out of the tree (CVE-2024-28185) and a regular file "f.txt";
// it returns the directory and the directory opened as a root, closed when
// the test ends. "l" points at a decoy directory holding a file "passwd"
// (DecoyPasswd), never at a host file: code under test that follows it
// fails the test, not the machine.
func HostileTree(t testing.TB) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	decoy := t.TempDir()
	if err := os.WriteFile(filepath.Join(decoy, "passwd"), []byte(DecoyPasswd), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err := os.Symlink(decoy, filepath.Join(dir, "l")); err != nil {
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

// DecoyPasswd is the content of the decoy file behind HostileTree's "l".
const DecoyPasswd = "decoy, never to be written\n"

// DecoyIntact fails the test if the decoy file behind dir's "l" was
// changed: something followed the symlink out of the tree.
func DecoyIntact(t testing.TB, dir string) {
	t.Helper()
	decoy, err := os.Readlink(filepath.Join(dir, "l"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(decoy, "passwd")); err != nil || string(b) != DecoyPasswd {
		t.Fatalf("the file behind the symlink l was written (%q, %v): a write followed a symlink out of the tree", b, err)
	}
}
