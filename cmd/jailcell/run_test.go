package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/session"
)

// TestWriteReturnedConfined: a one-shot cell's returned files are written
// under --out only by a clean relative path through directories: a path
// with "..", an absolute one, or one through a symlink already in the
// output directory is refused and named, and the others are written.
func TestWriteReturnedConfined(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	files := []session.FileChange{
		{Path: "ok.txt", Change: "created", Data: []byte("ok")},
		{Path: "sub/dir/x.txt", Change: "modified", Data: []byte("x")},
		{Path: "../escape.txt", Change: "created", Data: []byte("no")},
		{Path: "a/../../escape.txt", Change: "created", Data: []byte("no")},
		{Path: filepath.Join(outside, "abs.txt"), Change: "created", Data: []byte("no")},
		{Path: "link/through.txt", Change: "created", Data: []byte("no")},
		{Path: "link", Change: "created", Data: []byte("no")},
		{Path: "gone.txt", Change: "deleted"},
	}
	var stderr bytes.Buffer
	err := writeReturned(dir, files, &stderr)
	if err == nil || !strings.Contains(err.Error(), "5 returned file(s)") {
		t.Fatalf("writeReturned = %v, want 5 files refused", err)
	}
	for _, p := range []string{"../escape.txt", "a/../../escape.txt", "abs.txt", "link/through.txt", `"link"`} {
		if !strings.Contains(stderr.String(), p) {
			t.Errorf("stderr does not name %s:\n%s", p, stderr.String())
		}
	}
	for p, want := range map[string]string{"ok.txt": "ok", "sub/dir/x.txt": "x"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{filepath.Join(filepath.Dir(dir), "escape.txt"), filepath.Join(outside, "abs.txt"), filepath.Join(outside, "through.txt")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s written outside --out", p)
		}
	}
}
