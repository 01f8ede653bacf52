package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ticket matches a comment citing a tracker's issue by its number (the
// word, then the number): the tracker is not in the repository, so such a
// comment tells a reader nothing; a comment says why, or names the threat.
var ticket = regexp.MustCompile(`(//|#|/\*).*\b[Ii]ssues? ?#?[0-9]+\b`)

var sourceFile = regexp.MustCompile(`(\.(go|py|sh|ts|mjs|js)|(^|/)Makefile)$`)

// TestNoCommentCitesATicket holds every tracked source file to it.
func TestNoCommentCitesATicket(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("no git on PATH to list the tracked files: %v", err)
	}
	root := filepath.Join("..", "..")
	cmd := exec.Command(git, "ls-files")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("no git checkout here (%v): the tracked files cannot be listed", err)
	}
	n := 0
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !sourceFile.MatchString(f) || strings.Contains(f, "node_modules/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if ticket.MatchString(line) {
				t.Errorf("%s:%d cites a tracker issue: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if n < 100 {
		t.Fatalf("read only %d source files; the listing is not what this test expects", n)
	}
}

func TestTicketPattern(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"// see " + "issue " + "24", true},
		{"# " + "issues #" + "25 and 27", true},
		{"// golang/go#75804, fixed in Go 1.27", false},
		{`x := "issue 3" // a string`, false},
		{"// https://github.com/o/r/issues/12", false},
	} {
		if got := ticket.MatchString(c.line); got != c.want {
			t.Errorf("%q: %v, want %v", c.line, got, c.want)
		}
	}
}
