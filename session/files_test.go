package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/confined"
	"github.com/jailcell/jailcell/internal/testenv"
)

// TestCleanRel: the workspace's own prefix, under either name, is dropped; anything
// not already a clean relative path is a bad request naming what was
// wrong (the rule itself is internal/confined's, fuzzed there).
func TestCleanRel(t *testing.T) {
	good := map[string]string{"a.txt": "a.txt", "/work/a": "a", "/work/a/b": "a/b", "work/a": "work/a",
		"/home/user/a": "a", "/home/user/a/b": "a/b", "home/user/a": "home/user/a"}
	for in, want := range good {
		if got, err := cleanRel(in); err != nil || got != want {
			t.Errorf("cleanRel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	refused := map[string]string{"": "empty", ".": `"."`, "..": `".."`, "../etc/passwd": `".."`, "/etc/passwd": "absolute",
		"/work": "absolute", "/work/": "empty", "/work/../etc": `".."`, "a/../../b": `".."`, "a/b/../c": `".."`,
		"a/./b": `"."`, "a//b": "empty", "a\x00b": "NUL", "a/..": `".."`,
		"/home/user": "absolute", "/home/user/../../etc/passwd": `".."`, "/home/other/a": "absolute", "/work/home/user/../x": `".."`}
	for in, why := range refused {
		got, err := cleanRel(in)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), why) {
			t.Errorf("cleanRel(%q) = %q, %v; want a bad request saying %s", in, got, err, why)
		}
	}
}

// hostTree is testenv.HostileTree: a FIFO "p", a socket "sock", a
// symlink "l" to a decoy directory and a regular file "f.txt", opened as
// a root.
func hostTree(t *testing.T) (string, *os.Root) { return testenv.HostileTree(t) }

// bounded fails the test if op does not return within 5 s; release (the
// FIFO opened for writing) then unblocks it.
func bounded(t *testing.T, what string, release func(), op func()) {
	t.Helper()
	within(t, 5*time.Second, what, release, op)
}

// TestHostileFIFOInPathHostTree: a FIFO, socket or symlink anywhere in a
// path is a bad request naming the path, returned at once, never opened.
func TestHostileFIFOInPathHostTree(t *testing.T) {
	dir, r := hostTree(t)
	release := func() {
		if fd, err := unix.Open(filepath.Join(dir, "p"), unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	}
	for _, p := range []string{"p", "p/x", "p/a/b", "sock", "sock/x", "l", "l/passwd", "f.txt/x"} {
		bounded(t, "writeFile "+p, release, func() {
			err := writeFile(r, p, []byte("x"), 0, nil)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), p) {
				t.Errorf("writeFile(%s) = %v, want a bad request naming it", p, err)
			}
		})
		bounded(t, "readFile "+p, release, func() {
			_, err := readFile(r, p, 1<<20)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), p) {
				t.Errorf("readFile(%s) = %v, want a bad request naming it", p, err)
			}
		})
	}
	testenv.DecoyIntact(t, dir)
	if _, err := readFile(r, "missing/x", 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readFile(missing/x) = %v, want not exist", err)
	}
	if err := writeFile(r, "new/dir/x.txt", []byte("ok"), 0, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := readFile(r, "new/dir/x.txt", 10); err != nil || string(b) != "ok" {
		t.Fatalf("readFile = %q, %v", b, err)
	}
	if _, err := readFile(r, "new/dir/x.txt", 1); !errors.Is(err, ErrLimit) {
		t.Errorf("readFile over its limit = %v, want ErrLimit", err)
	}
	bounded(t, "list", release, func() {
		ents, err := list(r)
		if err != nil || len(ents) != 7 {
			t.Errorf("list = %v, %v; want 7 entries", ents, err)
		}
	})
}

// TestHostileExchangeRaceHostTree: a directory and a FIFO swapped in a loop
// (renameat2 RENAME_EXCHANGE, the CVE-2018-15664 pattern) while the tree
// is scanned: no scan blocks, and one that says it is complete lists every
// file that exists.
func TestHostileExchangeRaceHostTree(t *testing.T) {
	dir, r := hostTree(t)
	for _, d := range []string{"a", "d", "z"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "in.txt"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				swapped <- n
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "d"), unix.AT_FDCWD, filepath.Join(dir, "p"), unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	}()
	release := func() {
		for _, n := range []string{"d", "p"} {
			if fd, err := unix.Open(filepath.Join(dir, n), unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	}
	complete, partial := 0, 0
	before := fileStamps{files: map[string]fileStamp{"a/in.txt": {}, "z/in.txt": {}, "f.txt": {}}}
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) && !t.Failed() {
		bounded(t, "scan", release, func() {
			s, err := scan(r)
			if (err != nil) != s.partial {
				t.Errorf("scan: err %v but partial %v", err, s.partial)
			}
			if err != nil {
				if !errors.Is(err, errScanChanged) {
					t.Errorf("scan: %v", err)
				}
				partial++
			} else {
				complete++
				_, d := s.files["d/in.txt"]
				_, p := s.files["p/in.txt"]
				if d == p {
					t.Errorf("complete scan lists the moving file under neither or both names: %v", s.files)
				}
			}
			for _, c := range diff(before, s) {
				if c.Change == "deleted" {
					t.Errorf("scan (partial %v) reports %s deleted; it exists", s.partial, c.Path)
				}
			}
		})
	}
	close(stop)
	t.Logf("%d swaps; %d complete scans, %d partial", <-swapped, complete, partial)
}

// TestDiffPartial: a partial scan reports nothing deleted and keeps the
// entries it did not see for the next diff; the persist sync deletes from
// the store only what exists in no form.
func TestDiffPartial(t *testing.T) {
	_, r := hostTree(t)
	for p, want := range map[string]bool{"p": true, "l": true, "sock": true, "f.txt": true, "p/x": true, "nope": false, "nope/x": false} {
		if got := exists(r, p); got != want {
			t.Errorf("exists(%s) = %v, want %v", p, got, want)
		}
	}
	before := fileStamps{files: map[string]fileStamp{"a": {size: 1}, "b": {size: 1}, "c": {size: 1}}}
	after := fileStamps{files: map[string]fileStamp{"a": {size: 2}, "n": {size: 1}}, partial: true}
	got := diff(before, after)
	if len(got) != 2 || got[0].Path != "a" || got[0].Change != "modified" || got[1].Path != "n" || got[1].Change != "created" {
		t.Fatalf("diff = %+v", got)
	}
	if _, ok := after.files["b"]; !ok || len(after.files) != 4 {
		t.Fatalf("partial after not filled in: %v", after.files)
	}
	complete := fileStamps{files: map[string]fileStamp{"a": {size: 2}, "n": {size: 1}}}
	got = diff(after, complete)
	if len(got) != 2 || got[0].Path != "b" || got[0].Change != "deleted" || got[1].Path != "c" {
		t.Fatalf("diff after the partial one = %+v", got)
	}
}

// TestWalkSeesMoveIntoReadDirectory: a file moved from a directory not
// yet read into one already read would be missed by every read; the walk
// must say it is incomplete rather than list the tree without it.
func TestWalkSeesMoveIntoReadDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, d+".txt"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var first string
	moved := false
	err = walk(r, time.Now().Add(time.Minute), func(p string, st *unix.Stat_t) {
		if !confined.IsType(st, unix.S_IFDIR) || strings.Contains(p, "/") {
			return
		}
		if first == "" {
			first = p
			return
		}
		// p is about to be read, first was read whole: move p's file
		// into first.
		if err := os.Rename(filepath.Join(dir, p, p+".txt"), filepath.Join(dir, first, p+".txt")); err != nil {
			t.Fatal(err)
		}
		moved = true
	})
	if !moved {
		t.Fatal("the walk did not visit two directories")
	}
	if !errors.Is(err, errScanChanged) {
		t.Fatalf("walk = %v, want errScanChanged", err)
	}
}
