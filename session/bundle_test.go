package session

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
)

// hostileTar builds a tar from headers (a regular file's body is its
// Linkname field's text, for brevity).
func hostileTar(hdrs ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body, h.Linkname = h.Linkname, ""
			if h.Size == 0 {
				h.Size = int64(len(body))
			}
		}
		h.Format = tar.FormatPAX
		tw.WriteHeader(&h)
		tw.Write([]byte(body))
	}
	tw.Close()
	return buf.Bytes()
}

// hostileTars are upper-layer bundles a store could hand back, each with
// what must be true after unpacking it (nil: only that nothing left dir).
var hostileTars = []struct {
	name  string
	tar   []byte
	check func(t *testing.T, dir string, err error)
}{
	{"dotdot", hostileTar(tar.Header{Name: "../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"}), refused},
	{"absolute", hostileTar(tar.Header{Name: "/tmp/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"}), refused},
	{"through a symlink", hostileTar(
		tar.Header{Name: "upper/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "upper/l", Typeflag: tar.TypeSymlink, Linkname: "/"},
		tar.Header{Name: "upper/l/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"}), nil},
	{"through a relative symlink", hostileTar(
		tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../.."},
		tar.Header{Name: "l/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"}), nil},
	{"a real device", hostileTar(tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}), refused},
	{"a block device", hostileTar(tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}), refused},
	{"a hard link out", hostileTar(tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}), refused},
	{"too large", hostileTar(tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2 << 20, Linkname: strings.Repeat("a", 2<<20)}), refused},
	{"setuid and capabilities dropped", hostileTar(tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755, Linkname: "x",
		PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "SCHILY.xattr.user.kept": "yes"}}),
		func(t *testing.T, dir string, err error) {
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(filepath.Join(dir, "suid"))
			if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
				t.Fatalf("suid unpacked as %v (%v), want 0755 without setuid", fi.Mode(), err)
			}
			if _, err := unix.Lgetxattr(filepath.Join(dir, "suid"), "security.capability", make([]byte, 64)); err == nil {
				t.Fatal("security.capability unpacked")
			}
			if n, err := unix.Lgetxattr(filepath.Join(dir, "suid"), "user.kept", make([]byte, 64)); err != nil || n != 3 {
				t.Fatalf("user.kept not unpacked: %v", err)
			}
		}},
	{"whiteout and symlink kept", hostileTar(
		tar.Header{Name: "upper/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1 << 30, Gid: 1 << 30},
		tar.Header{Name: "upper/gone", Typeflag: tar.TypeChar, Mode: 0o600},
		tar.Header{Name: "upper/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}),
		func(t *testing.T, dir string, err error) {
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(dir, "upper/gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
				t.Fatalf("whiteout: %+v %v", st, err)
			}
			if l, err := os.Readlink(filepath.Join(dir, "upper/link")); err != nil || l != "/etc/passwd" {
				t.Fatalf("symlink: %q %v", l, err)
			}
			if err := unix.Lstat(filepath.Join(dir, "upper"), &st); err != nil || st.Uid != 1<<30 {
				t.Fatalf("owner of upper: %d %v", st.Uid, err)
			}
		}},
}

func refused(t *testing.T, _ string, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("unpacked, want refused")
	}
}

// TestUntarTreeHostile: a bundle from the store cannot put anything
// outside its directory, bring a device, a hard link out or a setuid bit,
// or pass its size bound.
func TestUntarTreeHostile(t *testing.T) {
	testenv.RequiresRoot(t)
	for _, c := range hostileTars {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "unpacked")
			err := untarTree(bytes.NewReader(c.tar), dir, 1<<20)
			assertOnlyUnder(t, base, dir)
			if c.check != nil {
				c.check(t, dir, err)
			}
		})
	}
}

// assertOnlyUnder checks base holds nothing but dir, and that nothing
// named "escaped" was written anywhere it could reach.
func assertOnlyUnder(t testing.TB, base, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if filepath.Join(base, e.Name()) != dir {
			t.Fatalf("unpacking left %s beside its directory", e.Name())
		}
	}
	for _, p := range []string{"/escaped", "/tmp/escaped", filepath.Join(filepath.Dir(base), "escaped")} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Fatalf("unpacking wrote %s", p)
		}
	}
}

// FuzzUntarTree feeds arbitrary bytes to the bundle reader: it never
// panics and never writes outside its directory.
func FuzzUntarTree(f *testing.F) {
	for _, c := range hostileTars {
		f.Add(c.tar)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if os.Getuid() != 0 {
			t.Skip("requires root: unpacking sets owners")
		}
		base := t.TempDir()
		dir := filepath.Join(base, "unpacked")
		_ = untarTree(bytes.NewReader(b), dir, 1<<20)
		assertOnlyUnder(t, base, dir)
	})
}
