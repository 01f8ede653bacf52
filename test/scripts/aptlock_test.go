package scripts

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// aptLocking matches an apt-get run that takes the dpkg or lists lock.
// download and source write only into the working directory.
var aptLocking = regexp.MustCompile(`\bapt-get\b[^|;&]*?\b(update|install|upgrade|dist-upgrade|full-upgrade|remove|purge|autoremove|build-dep)\b`)

// TestAptWaitsForLock: every apt-get that takes a lock waits for it, bounded.
// On a fresh machine unattended-upgrades or another build holds the dpkg
// lock for minutes after boot, and an apt-get without a timeout fails at once.
func TestAptWaitsForLock(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "Makefile")}
	for _, dir := range []string{"scripts", "runtime", "test", "deploy", ".ci"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if strings.HasSuffix(path, ".sh") || d.Name() == "run" || strings.HasSuffix(path, ".mk") {
				files = append(files, path)
			}
			return nil
		})
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(strings.TrimSpace(line), "#")
			if strings.Contains(code, "die ") {
				continue // a message naming the command, not a run of it
			}
			if !aptLocking.MatchString(code) {
				continue
			}
			checked++
			if !strings.Contains(code, "DPkg::Lock::Timeout=") {
				t.Errorf("%s:%d: apt-get without -o DPkg::Lock::Timeout=: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no apt-get runs: the walk is broken")
	}
}
