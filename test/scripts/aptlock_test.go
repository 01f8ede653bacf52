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

// bareApt is an apt-get command word that is not the wrapper's path.
var bareApt = regexp.MustCompile(`(^|[\s;&|({"'])apt-get(\s|$)`)

// TestAptWaitsForLock: every apt-get that takes a lock goes through
// scripts/apt-get.sh, which waits for every lock, bounded. On a fresh
// machine unattended-upgrades or another build holds apt's locks for
// minutes after boot, make test's two guests install beside each other,
// and an apt-get that does not wait fails at once (DPkg::Lock::Timeout
// alone waits for dpkg's lock, not the lists'; TestAptWrapperWaits).
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
		if filepath.Base(f) == "apt-get.sh" {
			continue // the wrapper itself
		}
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
			if m := bareApt.FindString(code); m != "" {
				t.Errorf("%s:%d: apt-get run directly (%q), not through scripts/apt-get.sh, which waits for apt's locks: %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no apt-get runs: the walk is broken")
	}
}
