package api

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRouteTableMatchesOpenAPI: openapi.json documents exactly the paths
// and methods of Routes, and the mux sends each pattern to the route and
// op the table names.
func TestRouteTableMatchesOpenAPI(t *testing.T) {
	s := loadSpec(t)
	documented := map[string][]string{}
	for tmpl, item := range s.paths() {
		for method := range item.(map[string]any) {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			documented[tmpl] = append(documented[tmpl], strings.ToUpper(method))
		}
	}
	seen := map[string]bool{}
	for _, r := range Routes {
		if seen[r.Path] {
			t.Errorf("route table lists %s twice", r.Path)
		}
		seen[r.Path] = true
		want := slices.Sorted(slices.Values(r.Methods))
		got := documented[r.Path]
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: openapi.json documents %v, the route table serves %v", r.Path, got, want)
		}
		if r.Path == mcpPath {
			continue
		}
		path := strings.NewReplacer("{id}", "s1", "{path}", "dir/a.txt").Replace(r.Path)
		rt, err := matchRoute(path)
		if err != nil || rt.name != r.Name || rt.op != r.Op {
			t.Errorf("%s: the mux routes it to %q op %q (%v), the table says %q op %q", r.Path, rt.name, rt.op, err, r.Name, r.Op)
		}
	}
	for p := range documented {
		if !seen[p] {
			t.Errorf("openapi.json documents %s, which the route table lacks", p)
		}
	}
}

// tableRoutes is the route table as "op METHOD pattern" lines, the form
// each client's op-to-route table is brought to for comparison.
func tableRoutes() []string {
	var out []string
	for _, r := range Routes {
		for m, op := range r.Ops {
			out = append(out, op+" "+m+" "+r.Path)
		}
	}
	slices.Sort(out)
	return out
}

// TestRouteTableMatchesTypeScriptClient: the TypeScript client's ROUTES
// (client/typescript/src/transport.ts) sends each op to the method and
// path the route table gives it, and knows every op the table routes.
func TestRouteTableMatchesTypeScriptClient(t *testing.T) {
	src, err := os.ReadFile("../client/typescript/src/transport.ts")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(src), "const ROUTES: Record<string, Route> = {\n")
	block, _, ok2 := strings.Cut(block, "\n};")
	if !ok || !ok2 {
		t.Fatal("transport.ts: no ROUTES table found; if it moved, teach this test where")
	}
	entry := regexp.MustCompile(`^\s*(\w+): (.*),$`)
	method := regexp.MustCompile(`method: "([A-Z]+)"`)
	literal := regexp.MustCompile(`"(/[^"]*)"`)
	session := regexp.MustCompile(`sessionPath\(s(?:, "([^"]+)")?\)`)
	under := regexp.MustCompile(`pathIn\("([^"]+)"\)`)
	var got []string
	for _, line := range strings.Split(block, "\n") {
		m := entry.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("transport.ts ROUTES: cannot read line %q", line)
			continue
		}
		op, expr := m[1], m[2]
		verb := ""
		var paths []string
		switch {
		case strings.HasPrefix(expr, "life(") || strings.HasPrefix(expr, "assist("):
			verb = "POST"
			paths = append(paths, "/v1/sessions/{id}/"+strings.Trim(expr[strings.Index(expr, "(")+1:len(expr)-1], `"`))
		default:
			if mm := method.FindStringSubmatch(expr); mm != nil {
				verb = mm[1]
			}
			for _, l := range literal.FindAllStringSubmatch(expr, -1) {
				paths = append(paths, l[1])
			}
			for _, s := range session.FindAllStringSubmatch(expr, -1) {
				p := "/v1/sessions/{id}"
				if s[1] != "" {
					p += "/" + s[1]
				}
				paths = append(paths, p)
			}
			if strings.Contains(expr, "path: filePath") {
				paths = append(paths, "/v1/sessions/{id}/files/{path}")
			}
			for _, u := range under.FindAllStringSubmatch(expr, -1) {
				paths = append(paths, "/v1/sessions/{id}/"+u[1]+"/{path}")
			}
		}
		if verb == "" || len(paths) == 0 {
			t.Errorf("transport.ts ROUTES: cannot read the method or path of %q", line)
		}
		for _, p := range paths {
			got = append(got, op+" "+verb+" "+p)
		}
	}
	slices.Sort(got)
	if want := tableRoutes(); !slices.Equal(got, want) {
		t.Errorf("transport.ts ROUTES differ from the route table:\n got %q\nwant %q", got, want)
	}
}
