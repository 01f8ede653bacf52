package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxManagerMethods is the session Manager's budget: the lifecycle
// (admission, the session table, the cell path, lifetimes) and nothing
// else, about the size of the managers engineers hold up as models (runc's
// Container has 59 methods, gVisor's Sandbox 69). A concern that would
// push it over belongs to a part the Manager hands it to (warm starts,
// durability, the workspace, the environment) or to Config if the
// configuration alone decides it.
const maxManagerMethods = 70

// TestManagerKeepsToTheLifecycle counts the methods declared on
// session.Manager, exported or not, in the package's source.
func TestManagerKeepsToTheLifecycle(t *testing.T) {
	dir := filepath.Join("..", "..", "session")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok && id.Name == "Manager" {
				names = append(names, fn.Name.Name+" ("+n+")")
			}
		}
	}
	if len(names) < 20 {
		// The parse found the wrong package or none: a count this low
		// would pass for the wrong reason.
		t.Fatalf("found only %d methods on session.Manager in %s: %v", len(names), dir, names)
	}
	if len(names) > maxManagerMethods {
		sort.Strings(names)
		t.Errorf("session.Manager has %d methods, budget %d: hand a concern to a part (warmStarts, durable, Workspace, environ) or to Config; methods: %s",
			len(names), maxManagerMethods, strings.Join(names, ", "))
	}
	t.Logf("session.Manager: %d methods (budget %d)", len(names), maxManagerMethods)
}
