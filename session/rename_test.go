package session

import (
	"context"
	"errors"
	"maps"
	"testing"
)

// TestRename: a rename is one move in the workspace, whatever it holds:
// the kernel sees the new path at once, the metadata goes along, a file
// replaces a file, a directory goes only to a new path, nothing moves into
// itself, and a symlink the cell planted is moved, never followed, on
// either side.
func TestRename(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id, ws := info.ID, e.m.Workspace()
	meta := map[string]string{"k": "v"}
	if _, err := ws.Upload(ctx, 1000, id, "a.txt", []byte("a"), meta); err != nil {
		t.Fatal(err)
	}
	if res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: `import os
os.makedirs('d/deep')
open('d/deep/f.txt', 'w').write('f')
open('other.txt', 'w').write('other')
os.symlink('/etc', 'evil')`}); err != nil || res.Error != nil {
		t.Fatalf("cell: %+v, %v", res, err)
	}
	got, err := ws.Rename(ctx, 1000, id, "a.txt", "/home/user/sub/b.txt")
	if err != nil || got.Path != "sub/b.txt" || !maps.Equal(got.Metadata, meta) {
		t.Fatalf("rename a file into a new directory = %+v, %v", got, err)
	}
	if _, err := ws.Stat(ctx, 1000, id, "a.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the old path after a rename: %v; want not found", err)
	}
	if got, err := ws.Rename(ctx, 1000, id, "d", "e"); err != nil || !got.Dir {
		t.Errorf("rename a directory = %+v, %v", got, err)
	}
	res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "print(open('sub/b.txt').read() + open('e/deep/f.txt').read(), os.path.exists('d'))"})
	if err != nil || res.Stdout != "af False\n" {
		t.Errorf("the kernel after the renames: %+v, %v", res, err)
	}
	if _, err := ws.Rename(ctx, 1000, id, "other.txt", "sub/b.txt"); err != nil {
		t.Errorf("a file onto a file: %v; want it replaced", err)
	}
	if dl, err := ws.Download(ctx, 1000, id, "sub/b.txt"); err != nil || string(dl.Data) != "other" {
		t.Errorf("the replaced file: %+v, %v", dl, err)
	}
	for _, c := range []struct{ from, to string }{
		{"e", "sub/b.txt"},   // a directory onto a file
		{"sub/b.txt", "e"},   // a file onto a directory
		{"e", "e/inside"},    // into itself
		{"e", "e"},           // onto itself
		{"evil/passwd", "x"}, // through a symlink
		{"sub/b.txt", "evil/x"},
	} {
		if _, err := ws.Rename(ctx, 1000, id, c.from, c.to); !errors.Is(err, ErrBadRequest) {
			t.Errorf("rename %s to %s: %v; want a bad request", c.from, c.to, err)
		}
	}
	if _, err := ws.Rename(ctx, 1000, id, "nothing", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rename of a missing path: %v; want not found", err)
	}
	if got, err := ws.Rename(ctx, 1000, id, "evil", "link"); err != nil || !got.Symlink || got.Link != "/etc" {
		t.Errorf("rename of a symlink = %+v, %v; want the link itself moved", got, err)
	}
	res, err = e.m.Exec(ctx, 1000, id, ExecRequest{Code: "print(os.path.islink('link'), os.path.exists('/etc/passwd'), os.path.exists('/etc/x'))"})
	if err != nil || res.Stdout != "True True False\n" {
		t.Errorf("after moving the link: %+v, %v", res, err)
	}
}
