package api

import (
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
