package session

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCheckMetadata(t *testing.T) {
	for _, c := range []struct {
		name string
		m    map[string]string
		want string // "" ok, else a word the refusal names
	}{
		{"none", nil, ""},
		{"two", map[string]string{"author": "mish", "purpose": "upload"}, ""},
		{"spaces and punctuation", map[string]string{"a b!~": "x y = z"}, ""},
		{"empty value", map[string]string{"k": ""}, ""},
		{"empty key", map[string]string{"": "v"}, "empty"},
		{"newline in key", map[string]string{"key\n": "v"}, "printable"},
		{"newline in value", map[string]string{"k": "v\n"}, "printable"},
		{"non-ASCII value", map[string]string{"k": "ü"}, "printable"},
		{"key at the bound", map[string]string{strings.Repeat("k", MaxMetadataKey): "v"}, ""},
		{"key past the bound", map[string]string{strings.Repeat("k", MaxMetadataKey+1): "v"}, "bytes"},
		{"total at the bound", map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-len(MetadataPrefix)-1)}, ""},
		{"total past the bound", map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-len(MetadataPrefix))}, "4096"},
	} {
		err := checkMetadata(c.m)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", c.name, err)
		case c.want != "" && (!errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want a bad request naming %q", c.name, err, c.want)
		}
	}
}

// TestFileMetadata: metadata an upload sets is what stat and listings
// show and what the sandbox reads as user.e2b.* attributes; what the
// sandbox sets there shows too, within the bounds, and nothing else; a
// new upload replaces it; a refused one writes nothing.
func TestFileMetadata(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id, ws := info.ID, e.m.Workspace()
	meta := map[string]string{"author": "mish", "purpose": "up load"}
	up, err := ws.Upload(ctx, 1000, id, "m.txt", []byte("content"), meta)
	if err != nil || !maps.Equal(up.Metadata, meta) {
		t.Fatalf("upload with metadata = %+v, %v", up, err)
	}
	if st, err := ws.Stat(ctx, 1000, id, "m.txt"); err != nil || !maps.Equal(st.Metadata, meta) {
		t.Errorf("stat = %+v, %v; want metadata %v", st, err, meta)
	}
	res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: `import os
os.mkdir('d')
open('c.txt', 'w').write('c')
os.setxattr('c.txt', 'user.e2b.k', b'v')
os.setxattr('c.txt', 'user.other', b'not metadata')
os.setxattr('c.txt', 'user.e2b.big', b'x' * 5000)
os.setxattr('c.txt', 'user.e2b.ctl', b'a\x1b[2Jb')
os.setxattr('d', 'user.e2b.dir', b'yes')
print(os.getxattr('m.txt', 'user.e2b.author').decode())`})
	if err != nil || res.Error != nil || res.Stdout != "mish\n" {
		t.Fatalf("cell: %+v, %v; want the sandbox to read the upload's metadata", res, err)
	}
	// A value larger than the bound, or one with a control byte, is the
	// sandbox's own doing and not shown; other namespaces are not metadata.
	if st, err := ws.Stat(ctx, 1000, id, "c.txt"); err != nil || !maps.Equal(st.Metadata, map[string]string{"k": "v"}) {
		t.Errorf("stat of a file the sandbox labelled = %+v, %v; want only k=v", st, err)
	}
	files, err := ws.Files(ctx, 1000, id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, f := range files {
		got[f.Path] = f.Metadata
	}
	if !maps.Equal(got["m.txt"], meta) || !maps.Equal(got["d"], map[string]string{"dir": "yes"}) || !maps.Equal(got["c.txt"], map[string]string{"k": "v"}) {
		t.Errorf("listing's metadata = %v", got)
	}

	// A new upload replaces the metadata: none clears it.
	if up, err := ws.Upload(ctx, 1000, id, "m.txt", []byte("second"), nil); err != nil || up.Metadata != nil {
		t.Fatalf("upload without metadata = %+v, %v", up, err)
	}
	if st, err := ws.Stat(ctx, 1000, id, "m.txt"); err != nil || st.Metadata != nil {
		t.Errorf("stat after an upload without metadata = %+v, %v; want none", st, err)
	}
	if _, err := ws.Upload(ctx, 1000, id, "m.txt", []byte("third"), map[string]string{"purpose": "new"}); err != nil {
		t.Fatal(err)
	}
	if st, err := ws.Stat(ctx, 1000, id, "m.txt"); err != nil || !maps.Equal(st.Metadata, map[string]string{"purpose": "new"}) {
		t.Errorf("stat after a new upload = %+v, %v; want only purpose=new", st, err)
	}

	// Refused metadata writes nothing.
	for _, bad := range []map[string]string{{"bad\nkey": "v"}, {"k": strings.Repeat("v", MaxMetadataBytes)}} {
		if _, err := ws.Upload(ctx, 1000, id, "bad.txt", []byte("x"), bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("upload with bad metadata: %v; want a bad request", err)
		}
	}
	if _, err := ws.Stat(ctx, 1000, id, "bad.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("stat after refused uploads: %v; want no file", err)
	}
}

// TestFileMetadataTravels: a hibernated session and a fork keep their
// files' metadata (their copies carry user.* attributes).
func TestFileMetadataTravels(t *testing.T) {
	requiresCriu(t)
	r := newRestartable(t)
	ctx := context.Background()
	m := r.startWith(func(*Config) {})
	defer m.Shutdown(ctx)
	info, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"stage": "kept"}
	if _, err := m.Workspace().Upload(ctx, 1000, info.ID, "m.txt", []byte("x"), meta); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Durability().Hibernate(ctx, 1000, info.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Workspace().Stat(ctx, 1000, info.ID, "m.txt"); err != nil || !maps.Equal(st.Metadata, meta) {
		t.Errorf("stat while hibernated = %+v, %v; want %v", st, err, meta)
	}
	child, err := m.Durability().Fork(ctx, 1000, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := m.Workspace().Stat(ctx, 1000, child.ID, "m.txt"); err != nil || !maps.Equal(st.Metadata, meta) {
		t.Errorf("stat in the fork = %+v, %v; want %v", st, err, meta)
	}
	res, err := m.Exec(ctx, 1000, child.ID, ExecRequest{Code: "import os; print(os.getxattr('m.txt', 'user.e2b.stage').decode())"})
	if err != nil || res.Stdout != "kept\n" {
		t.Errorf("the fork's kernel reads %+v, %v; want kept", res, err)
	}
}

// TestReadMetadataStaysBelowItsDirectory: readMetadata reads one name in
// the directory it is given, with the l*xattr calls: ".." or a path would
// read another directory's attributes (a walk out of the workspace), a
// symlink is not followed to its target, and a FIFO is never opened (it
// would block the reader).
func TestReadMetadataStaysBelowItsDirectory(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	set := func(p, v string) {
		if err := unix.Setxattr(p, MetadataPrefix+"k", []byte(v), 0); err != nil {
			t.Skipf("the test directory's filesystem takes no user xattrs (%v)", err)
		}
	}
	set(top, "outside")
	set(dir, "dir")
	set(filepath.Join(dir, "f"), "file")
	if err := os.Symlink(filepath.Join(dir, "f"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	var dirSt, fileSt unix.Stat_t
	if err := unix.Lstat(dir, &dirSt); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(filepath.Join(dir, "f"), &fileSt); err != nil {
		t.Fatal(err)
	}
	if got := readMetadata(dfd, "f", &fileSt); got["k"] != "file" {
		t.Errorf("f: %v; want k=file", got)
	}
	for _, name := range []string{"..", ".", "../ws/f", "f/", ""} {
		if got := readMetadata(dfd, name, &dirSt); got != nil {
			t.Errorf("%q: %v; want nothing read outside one name below the directory", name, got)
		}
	}
	// Given a regular file's lstat for a name that is now a symlink or a
	// FIFO (swapped meanwhile): nothing is followed or opened.
	for _, name := range []string{"link", "fifo"} {
		done := make(chan map[string]string, 1)
		go func() { done <- readMetadata(dfd, name, &fileSt) }()
		select {
		case got := <-done:
			if got != nil {
				t.Errorf("%s: %v; want nothing (a symlink's target or a FIFO read)", name, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: readMetadata blocked", name)
		}
	}
}
