package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// pyCycles prints each import cycle among the modules of the Python
// package in argv[1], one a line ("a -> b -> a"). Every import counts:
// module level, inside functions (the usual way a cycle is hidden) and
// under TYPE_CHECKING.
const pyCycles = `
import ast, os, sys
root = sys.argv[1]
pkg = os.path.basename(os.path.normpath(root))
mods = {f[:-3] for f in os.listdir(root) if f.endswith(".py")}
edges = {m: set() for m in mods}
for m in mods:
    tree = ast.parse(open(os.path.join(root, m + ".py")).read(), m)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                targets.append(node.module.split(".")[0])
            elif node.level == 1:
                targets += [a.name for a in node.names]
            elif node.level == 0 and node.module and node.module.split(".")[0] == pkg:
                parts = node.module.split(".")
                targets += [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == pkg and len(parts) > 1:
                    targets.append(parts[1])
        edges[m] |= {t for t in targets if t in mods and t != m}
seen, cycles = {}, set()
def visit(m, path):
    seen[m] = 1
    for n in sorted(edges[m]):
        if seen.get(n) == 1:
            c = path[path.index(n):] + [n]
            i = c.index(min(c[:-1]))
            cycles.add(" -> ".join(c[i:-1] + c[:i] + [c[i]]))
        elif n not in seen:
            visit(n, path + [n])
    seen[m] = 2
for m in sorted(mods):
    if m not in seen:
        visit(m, [m])
for c in sorted(cycles):
    print(c)
`

// PythonImportCycles returns the import cycles among the modules of the
// Python package in dir (a directory of .py files), each as
// "a -> b -> a". It fails the test if the package cannot be read.
func PythonImportCycles(t testing.TB, dir string) []string {
	t.Helper()
	out, err := exec.Command("python3", "-c", pyCycles, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("read the imports of %s: %v\n%s", dir, err, out)
	}
	var cycles []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			cycles = append(cycles, l)
		}
	}
	return cycles
}
