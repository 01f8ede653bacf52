package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jailcell/jailcell/api"
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
	for _, r := range api.Routes {
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
		if r.Path == api.MCPPath {
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
	for _, r := range api.Routes {
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
	src, err := os.ReadFile("../../client/typescript/src/transport.ts")
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

// pythonRouteScript calls each op given on the Python client's socket
// transport with its request replaced by a recorder, and prints what it
// would send: "op METHOD path", or "op -" when the op has no route there.
const pythonRouteScript = `
import json, sys
from jailcell.errors import BadRequestError
from jailcell.transport import SocketTransport
sent = []
class Recorder(SocketTransport):
    def request(self, method, path, body=None, headers=None, timeout=None):
        sent.append((method, path))
        return 200, {}, b'{"ok": true}'
t = Recorder("/nonexistent")
for op in json.loads(sys.argv[1]):
    for session in (("s1", None) if op == "exec" else ("s1",)):
        del sent[:]
        try:
            t.call(op, {"session": session, "path": "dir/a.txt", "code": "x"})
        except BadRequestError as e:
            if "has no route" not in str(e):
                raise
            print(op, "-")
            continue
        for m, p in sent:
            print(op, m, p)
`

// pythonUnrouted are the ops the Python socket transport deliberately
// leaves to the JSON-lines transport; any other op in the route table
// must be routed there as the table says.
var pythonUnrouted = []string{api.OpComplete, api.OpInspect, api.OpIsComplete}

// TestRouteTableMatchesPythonClient: the Python client's socket transport
// sends each op to the method and path the route table gives it.
func TestRouteTableMatchesPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH: the Python client's routes are not checked")
	}
	var ops []string
	for _, r := range api.Routes {
		for _, op := range r.Ops {
			if !slices.Contains(ops, op) {
				ops = append(ops, op)
			}
		}
	}
	arg, _ := json.Marshal(ops)
	cmd := exec.Command(py, "-c", pythonRouteScript, string(arg))
	cmd.Env = append(os.Environ(), "PYTHONPATH=../../client/python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	toPattern := strings.NewReplacer("/v1/sessions/s1", "/v1/sessions/{id}", "dir/a.txt", "{path}")
	var got, unrouted []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[1] == "-":
			unrouted = append(unrouted, f[0])
		case len(f) == 3:
			got = append(got, f[0]+" "+f[1]+" "+toPattern.Replace(f[2]))
		default:
			t.Fatalf("python3: unexpected line %q", line)
		}
	}
	var want []string
	for _, r := range tableRoutes() {
		if op, _, _ := strings.Cut(r, " "); !slices.Contains(pythonUnrouted, op) {
			want = append(want, r)
		}
	}
	slices.Sort(got)
	slices.Sort(unrouted)
	if !slices.Equal(got, want) {
		t.Errorf("the Python client's routes differ from the route table:\n got %q\nwant %q", got, want)
	}
	if wantUn := slices.Sorted(slices.Values(pythonUnrouted)); !slices.Equal(unrouted, wantUn) {
		t.Errorf("the Python client leaves %q unrouted, want %q", unrouted, wantUn)
	}
}

// TestRouteTableMatchesRemote: the fleet's forwarding (Remote) sends each
// op to the method and path the route table gives it.
func TestRouteTableMatchesRemote(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	rm := NewRemote(sock)
	defer rm.Close()
	toPattern := strings.NewReplacer("/v1/sessions/s1", "/v1/sessions/{id}", "dir/a.txt", "{path}")
	var got []string
	for _, r := range api.Routes {
		for _, op := range r.Ops {
			session := "s1"
			if r.Path == "/v1/exec" {
				session = ""
			}
			req := &api.Request{Op: op, Session: session, Path: "dir/a.txt", Code: "x", Cmd: "true", Data: []byte("x"), TimeoutS: 1, Action: "start"}
			if op == api.OpRename {
				req.To = "dir/b.txt"
			}
			if err := req.Validate(); err != nil {
				t.Fatalf("op %s: the test's request is not valid: %v", op, err)
			}
			mu.Lock()
			sent = nil
			mu.Unlock()
			rm.Handle(context.Background(), 0, req, nil)
			mu.Lock()
			for _, s := range sent {
				verb, path, _ := strings.Cut(s, " ")
				got = append(got, op+" "+verb+" "+toPattern.Replace(path))
			}
			mu.Unlock()
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	if want := tableRoutes(); !slices.Equal(got, want) {
		t.Errorf("Remote's routes differ from the route table:\n got %q\nwant %q", got, want)
	}
}
