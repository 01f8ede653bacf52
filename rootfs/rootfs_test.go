package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testVersion = "bookworm-0123456789ab"

// fixedTime is the mtime given to the sample tree's regular files so tests can
// check it survives export and import.
var fixedTime = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// makeTree writes a small tree with every kind of entry a real rootfs has:
// nested directories, a sticky directory, a setuid file, relative and
// absolute symlinks, a hardlink, an empty file and a name too long for ustar.
func makeTree(t testing.TB, root string) {
	t.Helper()
	long := strings.Repeat("d", 60) + "/" + strings.Repeat("e", 60)
	dirs := []struct {
		p    string
		mode fs.FileMode
	}{
		{"", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"etc", 0o755},
		{"tmp", 0o777 | fs.ModeSticky}, {"work", 0o755}, {"usr/" + long, 0o700},
	}
	for _, d := range dirs {
		p := filepath.Join(root, d.p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	files := []struct {
		p, data string
		mode    fs.FileMode
	}{
		{"usr/bin/python3.11", "\x7fELF not really python", 0o755},
		{"usr/bin/su", "setuid", 0o755 | fs.ModeSetuid},
		{"etc/pip.conf", "[global]\nno-index = true\n", 0o644},
		{"etc/empty", "", 0o600},
		{"usr/" + long + "/deep.py", "print('deep')\n", 0o644},
	}
	for _, f := range files {
		p := filepath.Join(root, f.p)
		if err := os.WriteFile(p, []byte(f.data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, fixedTime, fixedTime); err != nil {
			t.Fatal(err)
		}
	}
	links := [][2]string{
		{"python3.11", "usr/bin/python3"},
		{"usr/bin", "bin"},
		{"/etc/pip.conf", "etc/pip-abs"},
		{"/proc/self/fd", "dev-fd"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(root, "usr/bin/python3.11"), filepath.Join(root, "usr/bin/python3.11-hl")); err != nil {
		t.Fatal(err)
	}
}

func mustHash(t testing.TB, dir string) string {
	t.Helper()
	h, _, _, err := Hash(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("requires root: %s", why)
	}
}

func TestHashCounts(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	makeTree(t, root)
	h, files, size, err := Hash(root)
	if err != nil {
		t.Fatal(err)
	}
	if !hashRE.MatchString(h) {
		t.Errorf("hash %q is not sha256:<64 hex>", h)
	}
	// Five files plus the hardlink, which is hashed (and counted) by content.
	wantSize := int64(len("\x7fELF not really python")*2 + len("setuid") +
		len("[global]\nno-index = true\n") + len("print('deep')\n"))
	if files != 6 || size != wantSize {
		t.Errorf("Hash counted %d files, %d bytes; want 6, %d", files, size, wantSize)
	}
}

func TestHashDeterministic(t *testing.T) {
	a := filepath.Join(t.TempDir(), "a")
	b := filepath.Join(t.TempDir(), "b")
	makeTree(t, a)
	time.Sleep(10 * time.Millisecond) // different mtimes and inodes
	makeTree(t, b)
	if ha, hb := mustHash(t, a), mustHash(t, b); ha != hb {
		t.Fatalf("identical trees hash differently: %s vs %s", ha, hb)
	}
	if h1, h2 := mustHash(t, a), mustHash(t, a); h1 != h2 {
		t.Fatalf("same tree hashes differently: %s vs %s", h1, h2)
	}
	// Hashing through a symlink to the tree hashes the tree.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	if mustHash(t, link) != mustHash(t, a) {
		t.Fatal("hash through a symlink to the tree differs")
	}
}

func TestHashChanges(t *testing.T) {
	tests := []struct {
		name   string
		root   bool // needs root
		change func(t *testing.T, root string) error
		same   bool
	}{
		{name: "nothing", same: true, change: func(*testing.T, string) error { return nil }},
		{name: "mtime only", same: true, change: func(_ *testing.T, r string) error {
			now := time.Now()
			return os.Chtimes(filepath.Join(r, "etc/pip.conf"), now, now)
		}},
		{name: "hardlink split into a copy", same: true, change: func(_ *testing.T, r string) error {
			p := filepath.Join(r, "usr/bin/python3.11-hl")
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte("\x7fELF not really python"), 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o755)
		}},
		{name: "content, same length", change: func(_ *testing.T, r string) error {
			return os.WriteFile(filepath.Join(r, "etc/pip.conf"), []byte("[global]\nno-index = falsy"), 0o644)
		}},
		{name: "content appended", change: func(_ *testing.T, r string) error {
			f, err := os.OpenFile(filepath.Join(r, "etc/empty"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			f.Write([]byte{0})
			return f.Close()
		}},
		{name: "file mode", change: func(_ *testing.T, r string) error {
			return os.Chmod(filepath.Join(r, "etc/pip.conf"), 0o600)
		}},
		{name: "setuid bit dropped", change: func(_ *testing.T, r string) error {
			return os.Chmod(filepath.Join(r, "usr/bin/su"), 0o755)
		}},
		{name: "sticky bit dropped", change: func(_ *testing.T, r string) error {
			return os.Chmod(filepath.Join(r, "tmp"), 0o777)
		}},
		{name: "tree root mode", change: func(_ *testing.T, r string) error {
			return os.Chmod(r, 0o700)
		}},
		{name: "symlink target", change: func(_ *testing.T, r string) error {
			p := filepath.Join(r, "usr/bin/python3")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("python3.12", p)
		}},
		{name: "symlink became file with its target as content", change: func(_ *testing.T, r string) error {
			p := filepath.Join(r, "usr/bin/python3")
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte("python3.11"), 0o777); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		}},
		{name: "new empty file", change: func(_ *testing.T, r string) error {
			return os.WriteFile(filepath.Join(r, "work/new"), nil, 0o644)
		}},
		{name: "new empty dir", change: func(_ *testing.T, r string) error {
			return os.Mkdir(filepath.Join(r, "work/new"), 0o755)
		}},
		{name: "rename", change: func(_ *testing.T, r string) error {
			return os.Rename(filepath.Join(r, "etc/empty"), filepath.Join(r, "etc/empty2"))
		}},
		{name: "file removed", change: func(_ *testing.T, r string) error {
			return os.Remove(filepath.Join(r, "etc/empty"))
		}},
		{name: "owner", root: true, change: func(_ *testing.T, r string) error {
			return os.Lchown(filepath.Join(r, "etc/pip.conf"), 1000, 1000)
		}},
		{name: "symlink owner", root: true, change: func(_ *testing.T, r string) error {
			return os.Lchown(filepath.Join(r, "bin"), 1000, 1000)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				requireRoot(t, "chown to another uid")
			}
			root := filepath.Join(t.TempDir(), "root")
			makeTree(t, root)
			before := mustHash(t, root)
			if err := tt.change(t, root); err != nil {
				t.Fatal(err)
			}
			after := mustHash(t, root)
			if (before == after) != tt.same {
				t.Errorf("hash before %s, after %s; want same=%v", before, after, tt.same)
			}
		})
	}
}

// sealed builds and seals a sample version under a new base, with current
// pointing at it, and returns the base and the manifest.
func sealed(t testing.TB) (base string, m *Manifest) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(base, testVersion)
	makeTree(t, filepath.Join(vdir, treeName))
	pkgs := []Package{{"python3", "3.11.2-1+b1"}, {"libc6", "2.36-9"}}
	m, err = Seal(vdir, pkgs, "3.11.2", Profile{})
	if err != nil {
		t.Fatal(err)
	}
	if err := setCurrent(base, testVersion); err != nil {
		t.Fatal(err)
	}
	return base, m
}

func TestSealOpenVerify(t *testing.T) {
	base, m := sealed(t)
	vdir := filepath.Join(base, testVersion)
	if m.Version != testVersion || m.PythonVersion != "3.11.2" || m.Files != 6 {
		t.Errorf("manifest = %+v", m)
	}
	if m.Packages[0].Name != "libc6" {
		t.Errorf("packages not sorted by name: %v", m.Packages)
	}
	if time.Since(m.BuiltAt) > time.Minute || m.BuiltAt.Location() != time.UTC {
		t.Errorf("built_at = %v, want now in UTC", m.BuiltAt)
	}
	if want := mustHash(t, filepath.Join(vdir, treeName)); m.ContentHash != want {
		t.Errorf("content hash %s, tree hashes to %s", m.ContentHash, want)
	}
	data, err := os.ReadFile(filepath.Join(vdir, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"version"`, `"built_at"`, `"python_version"`, `"packages"`, `"size_bytes"`, `"files"`, `"content_hash"`, `"name"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("manifest.json lacks key %s:\n%s", key, data)
		}
	}
	for _, p := range []string{base, vdir, filepath.Join(vdir, treeName), filepath.Join(base, currentName)} {
		r, err := Open(p)
		if err != nil {
			t.Fatalf("Open(%s): %v", p, err)
		}
		if r.Dir != vdir || r.Root != filepath.Join(vdir, treeName) {
			t.Errorf("Open(%s) = Dir %s Root %s; want %s", p, r.Dir, r.Root, vdir)
		}
		if r.Manifest.ContentHash != m.ContentHash || !r.Manifest.BuiltAt.Equal(m.BuiltAt) ||
			!slices.Equal(r.Manifest.Packages, m.Packages) || r.Manifest.SizeBytes != m.SizeBytes {
			t.Errorf("Open(%s) manifest = %+v, sealed %+v", p, r.Manifest, m)
		}
		if err := r.Verify(); err != nil {
			t.Errorf("Verify after Open(%s): %v", p, err)
		}
	}
}

func TestVerifyDetectsTamper(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(root string) error
	}{
		{"content", func(r string) error {
			return os.WriteFile(filepath.Join(r, "etc/pip.conf"), []byte("[global]\nindex-url = http://evil\n"), 0o644)
		}},
		{"mode", func(r string) error { return os.Chmod(filepath.Join(r, "usr/bin/python3.11"), 0o777) }},
		{"planted file", func(r string) error { return os.WriteFile(filepath.Join(r, "work/x"), nil, 0o644) }},
		{"symlink", func(r string) error {
			os.Remove(filepath.Join(r, "bin"))
			return os.Symlink("/tmp", filepath.Join(r, "bin"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, m := sealed(t)
			r, err := Open(base)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.tamper(r.Root); err != nil {
				t.Fatal(err)
			}
			err = r.Verify()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify after tampering = %v, want ErrCorrupt", err)
			}
			if got := mustHash(t, r.Root); !strings.Contains(err.Error(), m.ContentHash) || !strings.Contains(err.Error(), got) {
				t.Errorf("error %q does not name both hashes", err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, base string) string // returns the path to Open
		want  error
	}{
		{"empty base", func(_ *testing.T, b string) string { return b }, ErrNotFound},
		{"missing path", func(_ *testing.T, b string) string { return filepath.Join(b, "nope") }, ErrNotFound},
		{"dangling current", func(t *testing.T, b string) string {
			os.Symlink("gone", filepath.Join(b, currentName))
			return b
		}, ErrNotFound},
		{"tree without manifest", func(t *testing.T, b string) string {
			os.MkdirAll(filepath.Join(b, testVersion, treeName), 0o755)
			return filepath.Join(b, testVersion)
		}, ErrNotFound},
		{"manifest without tree", func(t *testing.T, b string) string {
			os.MkdirAll(filepath.Join(b, testVersion), 0o755)
			os.WriteFile(filepath.Join(b, testVersion, manifestName), []byte("{}"), 0o644)
			return filepath.Join(b, testVersion)
		}, ErrNotFound},
		{"garbage manifest", func(t *testing.T, b string) string {
			os.MkdirAll(filepath.Join(b, testVersion, treeName), 0o755)
			os.WriteFile(filepath.Join(b, testVersion, manifestName), []byte("{not json"), 0o644)
			return filepath.Join(b, testVersion)
		}, ErrCorrupt},
		{"manifest for another version", func(t *testing.T, b string) string {
			os.MkdirAll(filepath.Join(b, testVersion, treeName), 0o755)
			m := `{"version":"bookworm-ffffffffffff","content_hash":"sha256:` + strings.Repeat("0", 64) + `"}`
			os.WriteFile(filepath.Join(b, testVersion, manifestName), []byte(m), 0o644)
			return filepath.Join(b, testVersion)
		}, ErrCorrupt},
		{"manifest without hash", func(t *testing.T, b string) string {
			os.MkdirAll(filepath.Join(b, testVersion, treeName), 0o755)
			os.WriteFile(filepath.Join(b, testVersion, manifestName), []byte(`{"version":"`+testVersion+`"}`), 0o644)
			return filepath.Join(b, testVersion)
		}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.setup(t, t.TempDir()))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, want %v", err, tt.want)
			}
			if tt.want == ErrNotFound && !strings.Contains(err.Error(), "make rootfs") {
				t.Errorf("not-found error %q does not say how to get a rootfs", err)
			}
		})
	}
}

func exportSample(t testing.TB) (*Rootfs, []byte) {
	t.Helper()
	base, _ := sealed(t)
	r, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Export(r, &buf); err != nil {
		t.Fatal(err)
	}
	return r, buf.Bytes()
}

func TestExportImportRoundTrip(t *testing.T) {
	src, archive := exportSample(t)
	base := filepath.Join(t.TempDir(), "base")
	got, err := Import(bytes.NewReader(archive), base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Manifest.ContentHash != src.Manifest.ContentHash || got.Manifest.Version != testVersion {
		t.Fatalf("imported manifest %+v, exported %+v", got.Manifest, src.Manifest)
	}
	if h := mustHash(t, got.Root); h != src.Manifest.ContentHash {
		t.Fatalf("imported tree hashes to %s, want %s", h, src.Manifest.ContentHash)
	}
	if link, err := os.Readlink(filepath.Join(base, currentName)); err != nil || link != testVersion {
		t.Fatalf("current -> %q (%v), want relative %q", link, err, testVersion)
	}
	// What the hash does not cover but a rootfs needs: hardlinks stay
	// hardlinks, and mtimes survive, since .pyc files are checked against
	// their source's mtime.
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(got.Root, "usr/bin/python3.11"), &a)
	syscall.Stat(filepath.Join(got.Root, "usr/bin/python3.11-hl"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hardlink not preserved: inodes %d, %d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	fi, err := os.Stat(filepath.Join(got.Root, "etc/pip.conf"))
	if err != nil || !fi.ModTime().Equal(fixedTime) {
		t.Errorf("mtime of etc/pip.conf = %v (%v), want %v", fi.ModTime(), err, fixedTime)
	}
	fi, err = os.Stat(filepath.Join(got.Root, "usr/bin/su"))
	if err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("setuid bit of usr/bin/su lost: %v (%v)", fi.Mode(), err)
	}
	assertOnly(t, base, currentName, testVersion)

	// The same version again is a no-op that still succeeds.
	again, err := Import(bytes.NewReader(archive), base)
	if err != nil || again.Dir != got.Dir {
		t.Fatalf("second Import = %v, %v; want %s", again, err, got.Dir)
	}
	assertOnly(t, base, currentName, testVersion)

	// Exports are reproducible: same tree, same bytes.
	var buf bytes.Buffer
	if err := Export(got, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), archive) {
		t.Error("re-export of the imported tree differs from the original export")
	}
}

// assertOnly fails unless dir holds exactly the named entries.
func assertOnly(t testing.TB, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func dirEnt(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func fileEnt(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
}

func linkEnt(typ byte, name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: typ, Name: name, Linkname: target, Mode: 0o777}}
}

// makeArchive gzips a tar of entries. An entry whose body is shorter than
// its Size ends the archive right after its header.
func makeArchive(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := e.hdr
		h.Uid, h.Gid = os.Getuid(), os.Getgid()
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if int64(len(e.body)) < h.Size {
			tw.Flush()
			gz.Close()
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// maliciousArchives are the archives Import must refuse, without writing
// anything outside its base. outside is an absolute directory the archives
// try to reach. They are also FuzzImport's seeds.
func maliciousArchives(t testing.TB, outside string) []struct {
	name string
	data []byte
} {
	v := testVersion
	manifest := `{"version":"` + v + `","content_hash":"sha256:` + strings.Repeat("0", 64) + `"}`
	pre := []tarEntry{dirEnt(v + "/"), fileEnt(v+"/manifest.json", manifest), dirEnt(v + "/root/")}
	with := func(es ...tarEntry) []byte { return makeArchive(t, append(slices.Clone(pre), es...)...) }
	dev := tarEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: v + "/root/null", Mode: 0o666, Devmajor: 1, Devminor: 3}}
	fifo := tarEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: v + "/root/fifo", Mode: 0o666}}
	huge := tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: v + "/root/huge", Mode: 0o644, Size: maxImportBytes + 1}}
	truncated := tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: v + "/root/short", Mode: 0o644, Size: 1000}, body: "x"}

	return []struct {
		name string
		data []byte
	}{
		{"dotdot escape", with(fileEnt(v+"/root/../../../escape", "x"))},
		{"dotdot first entry", makeArchive(t, fileEnt("../escape", "x"))},
		{"dotdot directory", makeArchive(t, dirEnt(v+"/"), dirEnt(v+"/root/"), dirEnt(v+"/root/../../../escape/"))},
		{"absolute path", with(fileEnt(outside+"/abs-escape", "x"))},
		{"absolute first entry", makeArchive(t, dirEnt(outside+"/"), fileEnt(outside+"/abs-escape", "x"))},
		{"file through absolute symlink", with(linkEnt(tar.TypeSymlink, v+"/root/link", outside), fileEnt(v+"/root/link/pwned", "x"))},
		{"dir through absolute symlink", with(linkEnt(tar.TypeSymlink, v+"/root/link", outside), dirEnt(v+"/root/link/sub/"))},
		{"file through relative symlink", with(linkEnt(tar.TypeSymlink, v+"/root/up", "../../.."), fileEnt(v+"/root/up/escape", "x"))},
		{"symlink replaced by file", with(linkEnt(tar.TypeSymlink, v+"/root/a", outside+"/pwned"), fileEnt(v+"/root/a", "x"))},
		{"hardlink to absolute path", with(linkEnt(tar.TypeLink, v+"/root/h", outside+"/target"))},
		{"hardlink with dotdot", with(linkEnt(tar.TypeLink, v+"/root/h", v+"/root/../../../target"))},
		{"hardlink to manifest", with(linkEnt(tar.TypeLink, v+"/root/h", v+"/manifest.json"))},
		{"hardlink through symlink", with(linkEnt(tar.TypeSymlink, v+"/root/link", outside), linkEnt(tar.TypeLink, v+"/root/h", v+"/root/link/target"))},
		{"device node", with(dev)},
		{"fifo", with(fifo)},
		{"duplicate file", with(fileEnt(v+"/root/a", "one"), fileEnt(v+"/root/a", "two"))},
		{"second top-level directory", with(dirEnt("other/"), fileEnt("other/x", "x"))},
		{"entry beside the tree", with(fileEnt(v+"/extra", "x"))},
		{"file before its directory", with(fileEnt(v+"/root/nodir/x", "x"))},
		{"version not a plain name", makeArchive(t, dirEnt(".hidden/"), dirEnt(".hidden/root/"))},
		{"no manifest", makeArchive(t, dirEnt(v+"/"), dirEnt(v+"/root/"))},
		{"manifest is a symlink", makeArchive(t, dirEnt(v+"/"), linkEnt(tar.TypeSymlink, v+"/manifest.json", "/etc/passwd"), dirEnt(v+"/root/"))},
		{"content hash mismatch", with(fileEnt(v+"/root/a", "x"))},
		{"manifest for another version", makeArchive(t, dirEnt(v+"/"),
			fileEnt(v+"/manifest.json", strings.Replace(manifest, v, "bookworm-ffffffffffff", 1)), dirEnt(v+"/root/"))},
		{"declared size over the bound", with(huge)},
		{"truncated file", with(truncated)},
		{"not gzip", []byte("plain text, not an archive")},
		{"empty archive", makeArchive(t)},
	}
}

func TestImportRejects(t *testing.T) {
	top := t.TempDir()
	outside := filepath.Join(top, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range maliciousArchives(t, outside) {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(top, "base")
			defer os.RemoveAll(base)
			r, err := Import(bytes.NewReader(tt.data), base)
			if err == nil {
				t.Fatalf("Import accepted the archive: %+v", r)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Import = %v, want ErrCorrupt", err)
			}
			assertOnly(t, outside)
			assertOnly(t, base) // no staging leftovers, no current
			assertOnly(t, top, "base", "outside")
		})
	}
}

// TestImportKeepsSymlinksAsLinks checks that a well-formed archive with an
// absolute symlink extracts it as a link, not as its target.
func TestImportKeepsSymlinksAsLinks(t *testing.T) {
	_, archive := exportSample(t)
	base := filepath.Join(t.TempDir(), "base")
	r, err := Import(bytes.NewReader(archive), base)
	if err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{"etc/pip-abs": "/etc/pip.conf", "dev-fd": "/proc/self/fd", "bin": "usr/bin"} {
		if got, err := os.Readlink(filepath.Join(r.Root, link)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
}

func FuzzImport(f *testing.F) {
	outside := filepath.Join(f.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		f.Fatal(err)
	}
	for _, a := range maliciousArchives(f, outside) {
		f.Add(a.data)
	}
	_, valid := exportSample(f)
	f.Add(valid)
	f.Fuzz(func(t *testing.T, data []byte) {
		top := t.TempDir()
		base := filepath.Join(top, "base")
		r, err := Import(bytes.NewReader(data), base)
		if err != nil {
			assertOnly(t, base)
		} else {
			if err := r.Verify(); err != nil {
				t.Errorf("Import accepted a tree that fails Verify: %v", err)
			}
			assertOnly(t, base, currentName, r.Manifest.Version)
		}
		assertOnly(t, top, "base")
		assertOnly(t, outside)
	})
}

func TestInspect(t *testing.T) {
	status := `Package: libc6
Status: install ok installed
Priority: optional
Version: 2.36-9+deb12u10
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: python3.11-minimal
Status: install ok installed
Version: 3.11.2-6+deb12u6

Package: removed-pkg
Status: deinstall ok config-files
Version: 1.0-1

Package: python3-numpy
Status: install ok installed
Version: 1:1.24.2-1+deb12u1
`
	tests := []struct {
		name   string
		layout func(root string) error
		want   string
	}{
		{"python3 symlink", func(r string) error {
			return os.Symlink("python3.11", filepath.Join(r, "usr/bin/python3"))
		}, "3.11.2"},
		{"absolute python3 symlink", func(r string) error {
			return os.Symlink("/usr/bin/python3.11", filepath.Join(r, "usr/bin/python3"))
		}, "3.11.2"},
		{"stdlib directory only", func(r string) error {
			return os.Mkdir(filepath.Join(r, "usr/lib/python3.11"), 0o755)
		}, "3.11.2"},
		{"other minor, no package", func(r string) error {
			return os.Symlink("python3.13", filepath.Join(r, "usr/bin/python3"))
		}, "3.13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"usr/bin", "usr/lib/python3", "var/lib/dpkg"} {
				os.MkdirAll(filepath.Join(root, d), 0o755)
			}
			os.WriteFile(filepath.Join(root, dpkgStatus), []byte(status), 0o644)
			if err := tt.layout(root); err != nil {
				t.Fatal(err)
			}
			py, pkgs, err := Inspect(root)
			if err != nil {
				t.Fatal(err)
			}
			if py != tt.want {
				t.Errorf("python version %q, want %q", py, tt.want)
			}
			want := []Package{{"libc6", "2.36-9+deb12u10"}, {"python3-numpy", "1:1.24.2-1+deb12u1"}, {"python3.11-minimal", "3.11.2-6+deb12u6"}}
			if !slices.Equal(pkgs, want) {
				t.Errorf("packages %v, want %v", pkgs, want)
			}
		})
	}
	if _, _, err := Inspect(t.TempDir()); err == nil {
		t.Error("Inspect of an empty tree succeeded")
	}
}

// openReal opens the rootfs that `make rootfs` builds, or skips.
func openReal(t *testing.T) *Rootfs {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(DefaultBase, currentName)); errors.Is(err, fs.ErrNotExist) {
		t.Skip("requires the built rootfs at /var/lib/jailcell/rootfs: run make rootfs")
	}
	r, err := Open(DefaultBase)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRealRootfs(t *testing.T) {
	r := openReal(t)
	m := r.Manifest
	if !strings.HasPrefix(m.Version, "bookworm-") || !strings.HasPrefix(m.PythonVersion, "3.11") {
		t.Errorf("version %q, python %q; want bookworm-*, 3.11*", m.Version, m.PythonVersion)
	}
	have := map[string]bool{}
	for _, p := range m.Packages {
		have[p.Name] = true
	}
	for _, want := range []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-openpyxl", "python3-pip", "python3-ipython"} {
		if !have[want] {
			t.Errorf("package %s missing from the manifest", want)
		}
	}
	if m.Files < 10000 || m.SizeBytes < 500<<20 {
		t.Errorf("only %d files, %d bytes", m.Files, m.SizeBytes)
	}
	paths := []string{"work", "run/jailcell", "opt/jailcell/wheelhouse", "etc/pip.conf", "usr/bin/python3"}
	if os.Geteuid() == 0 { // the tree's /root is 0700
		paths = append(paths, "root/.config/matplotlib", "root/.cache/matplotlib")
	}
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(r.Root, p)); err != nil {
			t.Errorf("tree lacks /%s: %v", p, err)
		}
	}
}

func TestRealRootfsVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("not with -short: needs to hash the whole real rootfs (~1.3 GB)")
	}
	r := openReal(t)
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestSealRecordsProfile(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(base, testVersion)
	makeTree(t, filepath.Join(vdir, treeName))
	pkgs := []Package{{"python3", "3.11.2-1+b1"}, {"python3-scipy", "1.10.1-2"}, {"libc6", "2.36-9"}}
	if _, err := Seal(vdir, pkgs, "3.11.2", Profile{Name: "default", Packages: []string{"python3-sklearn", "python3"}}); err == nil ||
		!strings.Contains(err.Error(), "python3-sklearn") {
		t.Fatalf("Seal with a profile package that is not installed: err = %v, want one naming python3-sklearn", err)
	}
	if _, err := os.Stat(filepath.Join(vdir, manifestName)); !os.IsNotExist(err) {
		t.Fatalf("a refused seal left a manifest: %v", err)
	}
	m, err := Seal(vdir, pkgs, "3.11.2", Profile{Name: "default", Packages: []string{"python3-scipy", "python3"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Profile != "default" || !slices.Equal(m.ProfilePackages, []string{"python3", "python3-scipy"}) {
		t.Errorf("profile %q %v, want default [python3 python3-scipy] (sorted)", m.Profile, m.ProfilePackages)
	}
	r, err := Open(vdir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest.Profile != m.Profile || !slices.Equal(r.Manifest.ProfilePackages, m.ProfilePackages) {
		t.Errorf("Open: profile %q %v, sealed %q %v", r.Manifest.Profile, r.Manifest.ProfilePackages, m.Profile, m.ProfilePackages)
	}
}

// A manifest's profile comes from an imported archive: hostile input.
func TestDecodeManifestChecksProfile(t *testing.T) {
	hash := `"content_hash":"sha256:` + strings.Repeat("0", 64) + `"`
	for _, tt := range []struct {
		name, profile string
		ok            bool
	}{
		{"before profiles", ``, true},
		{"default", `,"profile":"default","profile_packages":["python3","python3-scipy"]`, true},
		{"name with escape", `,"profile":"de\u001b[31mfault","profile_packages":["python3"]`, false},
		{"name with slash", `,"profile":"../x","profile_packages":["python3"]`, false},
		{"name too long", `,"profile":"` + strings.Repeat("a", 33) + `","profile_packages":["python3"]`, false},
		{"packages without name", `,"profile_packages":["python3"]`, false},
		{"name without packages", `,"profile":"default"`, false},
		{"bad package", `,"profile":"default","profile_packages":["Python3"]`, false},
		{"package with space", `,"profile":"default","profile_packages":["python3 x"]`, false},
		{"too many packages", `,"profile":"default","profile_packages":[` + strings.Repeat(`"python3",`, maxProfilePackages) + `"python3"]`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeManifest(strings.NewReader(`{"version":"` + testVersion + `",` + hash + tt.profile + `}`))
			if tt.ok && err != nil {
				t.Fatalf("decodeManifest: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeManifest: err = %v, want ErrCorrupt", err)
			}
		})
	}
}
