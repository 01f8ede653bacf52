package session

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// checkCleanRel is the invariant every accepted path keeps: relative,
// clean, inside the workspace.
func checkCleanRel(t *testing.T, in string) {
	got, err := cleanRel(in)
	if err != nil {
		return
	}
	if got == "" || path.IsAbs(got) || got == ".." || strings.HasPrefix(got, "../") || path.Clean(got) != got || strings.ContainsRune(got, 0) {
		t.Fatalf("cleanRel(%q) = %q: escapes or unclean", in, got)
	}
}

func TestCleanRel(t *testing.T) {
	good := map[string]string{"a.txt": "a.txt", "/work/a": "a", "a/./b//c": "a/b/c", "a/b/../c": "a/c"}
	for in, want := range good {
		if got, err := cleanRel(in); err != nil || got != want {
			t.Errorf("cleanRel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "..", "../etc/passwd", "/etc/passwd", "a/../../b", "a\x00b", "a/.."} {
		if got, err := cleanRel(in); err == nil {
			t.Errorf("cleanRel(%q) = %q, want refused", in, got)
		}
	}
	// The fuzz seeds hold the same invariant.
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzCleanRel/*")
	if len(seeds) == 0 {
		t.Fatal("no fuzz seeds")
	}
	for _, s := range seeds {
		b, _ := os.ReadFile(s)
		lines := strings.SplitN(string(b), "\n", 3)
		if len(lines) < 2 {
			t.Fatalf("bad seed %s", s)
		}
		checkCleanRel(t, strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
	}
}

func FuzzCleanRel(f *testing.F) {
	f.Add("a/b")
	f.Fuzz(checkCleanRel)
}
