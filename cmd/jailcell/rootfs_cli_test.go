package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/rootfs"
)

// fixtureTree writes a tiny rootfs version directory: a python3.11 symlink
// inside the tree, a dpkg status naming two packages, a few files. It is
// what `jailcell rootfs seal` inspects, without the 1 GB of the real one.
func fixtureTree(t *testing.T, dir string) {
	t.Helper()
	root := filepath.Join(dir, "root")
	files := map[string]string{
		"usr/bin/python3.11":         "#!/bin/false\n",
		"usr/lib/python3.11/os.py":   "# the os module\n",
		"usr/lib/python3.11/json.py": strings.Repeat("# json\n", 200),
		"var/lib/dpkg/status": "Package: python3.11-minimal\nStatus: install ok installed\nVersion: 3.11.2-6+deb12u6\n\n" +
			"Package: python3-numpy\nStatus: install ok installed\nVersion: 1:1.24.2-1\n\n" +
			"Package: removed-one\nStatus: deinstall ok config-files\nVersion: 1.0\n",
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Relative, inside the tree: never a link to a real host path.
	if err := os.Symlink("python3.11", filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}
}

// tamper rewrites a gzip tarball with one file's content changed (same
// size, so only the content hash can tell).
func tamper(t *testing.T, in []byte, name string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(zr)
	found := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(hdr.Name, name) && hdr.Typeflag == tar.TypeReg {
			data = bytes.Replace(data, []byte("os module"), []byte("OS MODULE"), 1)
			found = true
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Fatalf("%s is not in the archive", name)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestRootfsCommands drives the real `jailcell rootfs` on a small fixture:
// seal, verify, export to a tarball, import it elsewhere (from a file and
// from stdin), info (text and JSON) showing its manifest and content hash;
// a tampered or garbage tarball is refused and leaves nothing behind.
func TestRootfsCommands(t *testing.T) {
	top := t.TempDir()
	src := filepath.Join(top, "src", "bookworm-fixture1")
	fixtureTree(t, src)
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		status, stdout, stderr := runBin(t, nil, "", append([]string{"rootfs"}, args...)...)
		if status != want {
			t.Fatalf("jailcell rootfs %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, status, want, stdout, stderr)
		}
		return stdout, stderr
	}

	// A profile package the tree does not have is refused, by name.
	if _, stderr := run(1, "seal", "--profile", "default", "--profile-packages", "python3-numpy,python3-scipy", src); !strings.Contains(stderr, "python3-scipy") {
		t.Fatalf("seal with a missing profile package: %q", stderr)
	}
	stdout, _ := run(0, "seal", "--profile", "default", "--profile-packages", "python3-numpy", src)
	hash := regexp.MustCompile(`sha256:[0-9a-f]{64}`).FindString(stdout)
	if hash == "" || !strings.Contains(stdout, "sealed rootfs bookworm-fixture1: profile default, python 3.11.2, 2 packages, 4 files") {
		t.Fatalf("seal: %q", stdout)
	}
	if stdout, _ := run(0, "verify", src); !strings.Contains(stdout, "rootfs bookworm-fixture1 ok: "+hash) {
		t.Fatalf("verify: %q", stdout)
	}

	tarball := filepath.Join(top, "rootfs.tar.gz")
	if _, stderr := run(0, "export", "--base", src, "--out", tarball); !strings.Contains(stderr, "exported rootfs bookworm-fixture1 to "+tarball) {
		t.Fatalf("export: %q", stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(top, ".rootfs.tar.gz.*")); len(left) != 0 {
		t.Errorf("export left its temporary file: %v", left)
	}
	dst := filepath.Join(top, "dst")
	if stdout, _ := run(0, "import", tarball, "--base", dst); !strings.Contains(stdout, "rootfs bookworm-fixture1 is current at "+filepath.Join(dst, "bookworm-fixture1")) {
		t.Fatalf("import: %q", stdout)
	}
	stdout, _ = run(0, "info", "--base", dst)
	for _, want := range []string{"version:  bookworm-fixture1\n", "profile:  default\n", "python:   3.11.2\n", "hash:     " + hash + "\n",
		"packages: 2 installed, 1 asked for by the profile", "\n  python3-numpy                    1:1.24.2-1\n", "in 4 files\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "python3.11-minimal") {
		t.Errorf("info lists a package the profile did not ask for:\n%s", stdout)
	}
	if stdout, _ = run(0, "info", "--base", dst, "--all"); !strings.Contains(stdout, "\n  python3.11-minimal               3.11.2-6+deb12u6\n") {
		t.Errorf("info --all lacks python3.11-minimal:\n%s", stdout)
	}
	stdout, _ = run(0, "info", "--base", dst, "--json")
	var m rootfs.Manifest
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || m.ContentHash != hash || m.Version != "bookworm-fixture1" || len(m.Packages) != 2 ||
		m.Profile != "default" || len(m.ProfilePackages) != 1 ||
		m.Packages[0].Name != "python3-numpy" || m.Packages[0].Version != "1:1.24.2-1" {
		t.Fatalf("info --json: %+v %v\n%s", m, err, stdout)
	}
	if stdout, _ := run(0, "verify", dst); !strings.Contains(stdout, "ok: "+hash) {
		t.Fatalf("verify the import: %q", stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "bookworm-fixture1/root/usr/lib/python3.11/os.py")); err != nil || string(b) != "# the os module\n" {
		t.Errorf("imported file: %q %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "bookworm-fixture1/root/usr/bin/python3")); err != nil || l != "python3.11" {
		t.Errorf("imported symlink: %q %v", l, err)
	}

	// From standard input, as over ssh.
	data, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	piped := filepath.Join(top, "piped")
	if status, stdout, stderr := runBin(t, nil, string(data), "rootfs", "import", "-", "--base", piped); status != 0 || !strings.Contains(stdout, "is current at") {
		t.Fatalf("import -: exit %d %q %q", status, stdout, stderr)
	}

	// Refused: a tampered tree, and something that is no tarball at all.
	for _, tc := range []struct{ name, data, want string }{
		{"tampered", string(tamper(t, data, "usr/lib/python3.11/os.py")), "rootfs corrupt: tree hashes to"},
		{"garbage", "not a tarball\n", "rootfs corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := filepath.Join(top, tc.name+".tar.gz")
			if err := os.WriteFile(in, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			base := filepath.Join(top, "refused-"+tc.name)
			_, stderr := run(1, "import", in, "--base", base)
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want %q", stderr, tc.want)
			}
			if left, _ := os.ReadDir(base); len(left) != 0 {
				t.Errorf("a refused import left %v in %s", left, base)
			}
			if _, stderr := run(1, "info", "--base", base); !strings.Contains(stderr, "rootfs not found") || !strings.Contains(stderr, "jailcell rootfs import") {
				t.Errorf("info after a refused import: %q", stderr)
			}
		})
	}
}
