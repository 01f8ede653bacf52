package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/jailcell/jailcell/"

// builtHeading opens the README's list of the product's packages, top to
// bottom; the first fenced block after it has one package a line.
const builtHeading = "## How it is built"

// layers returns the README's product packages, top first.
func layers(t *testing.T, readme string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+builtHeading+"\n")
	if !ok {
		t.Fatalf("README has no %q section", builtHeading)
	}
	_, rest, ok = strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("README's %q has no fenced list", builtHeading)
	}
	block, _, _ := strings.Cut(rest, "```")
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.TrimSuffix(f[0], "/"))
		}
	}
	return out
}

// layerOf is the index of the listed package p belongs to (itself or
// the longest listed prefix), or -1.
func layerOf(list []string, p string) int {
	best, n := -1, 0
	for i, l := range list {
		if (p == l || strings.HasPrefix(p, l+"/")) && len(l) > n {
			best, n = i, len(l)
		}
	}
	return best
}

// TestImportsPointDown holds the product's packages to the README's list:
// a package imports only packages listed below its own (or its own
// sub-packages, or internal/ helpers), and runner and isolate never import
// each other. An arrow back up is how a layered design erodes one
// convenient import at a time.
func TestImportsPointDown(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list the packages' imports: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	list := layers(t, string(readme))
	if len(list) < 5 || list[0] != "cmd/jailcell" {
		t.Fatalf("README's package list parsed as %q; want cmd/jailcell first", list)
	}
	cmd := exec.Command(goTool, "list", "-tags", "seccomp", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := strings.TrimPrefix(f[0], module)
		li := layerOf(list, from)
		if li < 0 || from == "internal/testenv" {
			continue // not product: clients, tests, examples, the test harness
		}
		checked++
		for _, imp := range f[1:] {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			lj := layerOf(list, to)
			switch {
			case lj == li:
				// its own package or sub-package
			case lj < 0 && strings.HasPrefix(to, "internal/"):
				// a helper below everything
			case strings.Contains(to, "/internal/") && strings.HasPrefix(from, to[:strings.Index(to, "/internal/")]):
				// a family's private helper, which Go lets only that family import
			case lj < 0:
				t.Errorf("%s imports %s, which the README's %q does not place", from, to, builtHeading)
			case lj < li:
				t.Errorf("%s imports %s, which the README lists above it: imports only point down", from, to)
			case (list[li] == "runner" && list[lj] == "isolate") || (list[li] == "isolate" && list[lj] == "runner"):
				t.Errorf("%s imports %s: runner and isolate never import each other", from, to)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d product packages; the list or go list output is not what this test expects", checked)
	}
}

func TestLayersParse(t *testing.T) {
	readme := "x\n## How it is built\n\ntext\n\n```\ncmd/jailcell  flags\napi           wire\nsession       life\n```\n"
	got := layers(t, readme)
	if strings.Join(got, ",") != "cmd/jailcell,api,session" {
		t.Fatalf("layers = %q", got)
	}
	if layerOf(got, "api/jsonl") != 1 || layerOf(got, "session/seam") != 2 || layerOf(got, "apix") != -1 {
		t.Fatal("layerOf does not match a package to its listed family")
	}
}

// TestEveryPackageHasDocGo: each package says in a doc.go what it is for
// and what it must never do, where a newcomer looks first.
func TestEveryPackageHasDocGo(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list the packages: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-tags", "seccomp", "-f", "{{.ImportPath}} {{.Dir}}", module+"...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		n++
		b, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("%s has no doc.go", path)
			continue
		}
		if !strings.Contains(string(b), "// Package ") && !strings.Contains(string(b), "// Command ") {
			t.Errorf("%s: doc.go has no package comment", path)
		}
	}
	if n < 20 {
		t.Fatalf("listed only %d packages", n)
	}
}
