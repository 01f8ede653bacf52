package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mapHeading opens the README's map of the top-level folders; the first
// fenced block after it has one folder a line, "name/  what it holds".
const mapHeading = "## Where things are"

var mapEntry = regexp.MustCompile(`^([A-Za-z0-9_-]+)/\s+\S`)

// readmeMap returns the folders the README's map names, in its order.
func readmeMap(t *testing.T, readme string) []string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n"+mapHeading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section mapping the top-level folders", mapHeading)
	}
	if next := strings.Index(after, "\n## "); next >= 0 {
		after = after[:next]
	}
	_, block, ok := strings.Cut(after, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatalf("README.md's %q section has no fenced block of folders", mapHeading)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		m := mapEntry.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("README.md's folder map: %q is not \"name/  what it holds\"", line)
			continue
		}
		if slices.Contains(names, m[1]) {
			t.Errorf("README.md's folder map names %s/ twice", m[1])
		}
		names = append(names, m[1])
	}
	return names
}

// trackedTopDirs returns the top-level directories git tracks a file
// under, without the dot-directories (.ci).
func trackedTopDirs(t *testing.T, root string) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the tracked folders cannot be listed")
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		if _, serr := os.Stat(filepath.Join(root, ".git")); serr != nil {
			t.Skipf("no git checkout here (%v): the tracked folders cannot be listed", serr)
		}
		t.Fatalf("git ls-files: %v", err)
	}
	var dirs []string
	for _, f := range strings.Split(string(out), "\x00") {
		dir, _, ok := strings.Cut(f, "/")
		if !ok || strings.HasPrefix(dir, ".") || slices.Contains(dirs, dir) {
			continue
		}
		dirs = append(dirs, dir)
	}
	if len(dirs) < 5 {
		t.Fatalf("git ls-files found only %q: not this repository's tree", dirs)
	}
	return dirs
}

// TestReadmeMapsTopLevel: the README's map of the top-level folders names
// every folder git tracks at the top (dot-directories aside) and nothing
// else, so a folder added, moved or removed updates the map a newcomer
// reads first.
func TestReadmeMapsTopLevel(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	mapped := readmeMap(t, string(b))
	tracked := trackedTopDirs(t, root)
	for _, d := range tracked {
		if !slices.Contains(mapped, d) {
			t.Errorf("top-level folder %s/ is missing from README.md's map (%q)", d, mapHeading)
		}
	}
	for _, d := range mapped {
		if !slices.Contains(tracked, d) {
			t.Errorf("README.md's map (%q) names %s/, which is not a top-level folder of the repository", mapHeading, d)
		}
	}
}

// TestReadmeMapParse: the parser finds the entries, stops at the block's
// end and refuses a line that is not an entry, so a malformed map fails
// rather than passing empty.
func TestReadmeMapParse(t *testing.T) {
	readme := "# x\n\n" + mapHeading + "\n\nText.\n\n```\napi/     the API\nrootfs/  the tree\n```\n\nafter/ not an entry\n\n## Next\n\n```\nnext/  other\n```\n"
	if got := readmeMap(t, readme); !slices.Equal(got, []string{"api", "rootfs"}) {
		t.Errorf("map = %q, want [api rootfs]", got)
	}
	for _, line := range []string{"api the API", "api/", "../up/  no"} {
		if m := mapEntry.FindStringSubmatch(line); m != nil {
			t.Errorf("%q parsed as an entry %q", line, m[1])
		}
	}
}
