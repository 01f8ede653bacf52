package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileRunOutConfined: the files a cell returns are named by the
// sandbox, so `jailcell run --out` must write them under --out and nowhere
// else, whatever they are called and whatever already sits in --out. The
// "outside" directory stands for any host path: a symlink planted in --out
// (as a second user sharing it could) points at it, and it must stay
// empty. Privileged tier (the real binary builds a sandbox).
func TestHostileRunOutConfined(t *testing.T) {
	top := t.TempDir()
	out, outside := filepath.Join(top, "out"), filepath.Join(top, "outside")
	for _, d := range []string{out, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("untouched\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Planted before the run: a directory link and a file link out of --out.
	if err := os.Symlink(outside, filepath.Join(out, "trap")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(out, "over.txt")); err != nil {
		t.Fatal(err)
	}
	code := `import os
os.makedirs('sub/deep', exist_ok=True)
open('sub/deep/ok.txt', 'w').write('fine')
open('ok.txt', 'w').write('fine')
os.makedirs('trap', exist_ok=True)
open('trap/pwned.txt', 'w').write('escaped')
open('over.txt', 'w').write('escaped')
open('new\nline.txt', 'w').write('odd name, still inside')
open('..dots', 'w').write('a name, not a parent')
os.symlink('/etc/shadow', 'shadow-link')
os.symlink('..', 'up')
os.mkfifo('fifo')
`
	status, _, stderr := runJailcell(t, code, "--out", out)
	if status != exitRunFailed {
		t.Errorf("exit %d, want %d (some returned files could not be written); stderr:\n%s", status, exitRunFailed, stderr)
	}
	for _, want := range []string{`not writing "trap/pwned.txt"`, `not writing "over.txt"`, "returned file(s) could not be written under " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Nothing reached outside; the planted links are still links.
	entries, err := os.ReadDir(outside)
	if err != nil || len(entries) != 1 || entries[0].Name() != "victim.txt" {
		t.Errorf("outside holds %v (%v), want only victim.txt", entries, err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "untouched\n" {
		t.Errorf("victim.txt = %q, %v", b, err)
	}
	for _, l := range []string{"trap", "over.txt"} {
		if fi, err := os.Lstat(filepath.Join(out, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s in --out is no longer the planted link: %v %v", l, fi, err)
		}
	}
	// What could be written was, as regular files under --out; the
	// sandbox's links and FIFO were not reproduced on the host.
	for name, want := range map[string]string{"ok.txt": "fine", "sub/deep/ok.txt": "fine", "new\nline.txt": "odd name, still inside", "..dots": "a name, not a parent"} {
		p := filepath.Join(out, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%q: %v %v, want a regular file", name, fi, err)
			continue
		}
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%q = %q, want %q", name, b, want)
		}
	}
	for _, name := range []string{"shadow-link", "up", "fifo"} {
		if _, err := os.Lstat(filepath.Join(out, name)); err == nil {
			t.Errorf("%s was reproduced in --out", name)
		}
	}
	err = filepath.Walk(top, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(top, p); !strings.HasPrefix(rel, "out") && !strings.HasPrefix(rel, "outside") && rel != "." {
			t.Errorf("%s was written beside --out", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
