package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/workflow"
)

// specURL names the embedded document for the schema compiler.
const specURL = "mem://jailcell/openapi.json"

// spec is the OpenAPI document with its schemas compiled by a JSON Schema
// 2020-12 validator (formats and base64 content asserted).
type spec struct {
	doc      map[string]any
	c        *jsonschema.Compiler
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
	covered  map[string]bool // "METHOD /template" of every documented operation called
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPI()))
	if err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	doc, ok := raw.(map[string]any)
	if !ok || doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi.json is not an OpenAPI 3.1.0 document")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.AssertContent()
	if err := c.AddResource(specURL, raw); err != nil {
		t.Fatal(err)
	}
	return &spec{doc: doc, c: c, compiled: map[string]*jsonschema.Schema{}, covered: map[string]bool{}}
}

// schema compiles the schema at a JSON pointer fragment of the document
// ("#/components/schemas/Result").
func (s *spec) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[ptr]; ok {
		return sch
	}
	sch, err := s.c.Compile(specURL + ptr)
	if err != nil {
		t.Fatalf("compile %s: %v", ptr, err)
	}
	s.compiled[ptr] = sch
	return sch
}

// validate checks one JSON body against the schema at ptr.
func (s *spec) validate(t *testing.T, ptr string, body []byte, what string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Errorf("%s: body is not JSON: %v: %.300s", what, err, body)
		return
	}
	if err := s.schema(t, ptr).Validate(v); err != nil {
		t.Errorf("%s: does not match %s:\n%v\nbody: %.600s", what, ptr, err, body)
	}
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (s *spec) paths() map[string]any { return s.doc["paths"].(map[string]any) }

// operation is the documented operation for method on a path template.
func (s *spec) operation(method, tmpl string) (map[string]any, bool) {
	item, ok := s.paths()[tmpl].(map[string]any)
	if !ok {
		return nil, false
	}
	op, ok := item[strings.ToLower(method)].(map[string]any)
	return op, ok
}

// responseSchema is the pointer of the schema documented for a response
// of method on tmpl with this status and media type; "" if the response
// documents no content. A status or media type the document lacks fails.
func (s *spec) responseSchema(t *testing.T, method, tmpl string, status int, ctype string) string {
	t.Helper()
	op, ok := s.operation(method, tmpl)
	if !ok {
		t.Fatalf("%s %s is not in openapi.json", method, tmpl)
	}
	s.mu.Lock()
	s.covered[method+" "+tmpl] = true
	s.mu.Unlock()
	responses := op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	r, ok := responses[code].(map[string]any)
	if !ok {
		code = "default"
		if r, ok = responses[code].(map[string]any); !ok {
			t.Errorf("%s %s answered %d, which openapi.json does not document", method, tmpl, status)
			return ""
		}
	}
	ptr := "#/paths/" + jsonPointerEscape(tmpl) + "/" + strings.ToLower(method) + "/responses/" + code
	// A shared response (components/responses) is validated where it is.
	if ref, ok := r["$ref"].(string); ok {
		ptr = ref
		r = s.resolve(r).(map[string]any)
	}
	content, ok := r["content"].(map[string]any)
	if !ok {
		return ""
	}
	mt, _, _ := mime.ParseMediaType(ctype)
	if _, ok := content[mt]; !ok {
		t.Errorf("%s %s answered %d as %q; openapi.json documents %v", method, tmpl, status, ctype, keys(content))
		return ""
	}
	return ptr + "/content/" + jsonPointerEscape(mt) + "/schema"
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkBody validates a whole response body: JSON, or JSON lines.
func (s *spec) checkBody(t *testing.T, ptr, ctype string, body []byte, what string) {
	t.Helper()
	if ptr == "" {
		return
	}
	mt, _, _ := mime.ParseMediaType(ctype)
	switch {
	case mt == "application/x-ndjson":
		for i, line := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
			s.validate(t, ptr, line, fmt.Sprintf("%s line %d", what, i+1))
		}
	case strings.HasSuffix(mt, "json"):
		s.validate(t, ptr, body, what)
	}
}

// TestOpenAPIRoutes: every route and method the HTTP transport serves is
// in openapi.json and every documented path and method is served; each
// JSON-lines op has its response schema, and every $ref resolves.
func TestOpenAPIRoutes(t *testing.T) {
	s := loadSpec(t)
	// The served operations: a route name with each of its methods; the
	// session ops under one route are told apart by their op.
	served := map[string]bool{}
	for name, methods := range api.RouteMethods {
		if name == api.RouteLife || name == api.RouteAssist {
			byOp := api.LifeOps
			if name == api.RouteAssist {
				byOp = api.AssistOps
			}
			for _, op := range byOp {
				for _, m := range methods {
					served[m+" "+name+":"+op] = true
				}
			}
			continue
		}
		for _, m := range methods {
			served[m+" "+name] = true
		}
	}
	for _, m := range api.MCPMethods {
		served[m+" mcp"] = true
	}
	documented := map[string]string{}
	for tmpl, item := range s.paths() {
		path := strings.NewReplacer("{id}", "s1", "{path}", "dir/a.txt").Replace(tmpl)
		rt, err := matchRoute(path)
		if path == api.MCPPath {
			rt, err = route{name: "mcp"}, nil
		}
		if err != nil {
			t.Errorf("documented path %s (as %s) is not served: %v", tmpl, path, err)
			continue
		}
		key := rt.name
		if rt.op != "" {
			key += ":" + rt.op
		}
		for method := range item.(map[string]any) {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			k := strings.ToUpper(method) + " " + key
			if !served[k] {
				t.Errorf("documented %s %s is not served (route %s answers %v)", strings.ToUpper(method), tmpl, rt.name, api.RouteMethods[rt.name])
			}
			documented[k] = tmpl
		}
	}
	for k := range served {
		if _, ok := documented[k]; !ok {
			t.Errorf("served %s is not in openapi.json", k)
		}
	}
	// Every schema the document names compiles, which resolves its $refs.
	for name := range s.doc["components"].(map[string]any)["schemas"].(map[string]any) {
		s.schema(t, "#/components/schemas/"+name)
	}
	x := s.doc["x-jsonl"].(map[string]any)
	responses := x["responses"].(map[string]any)
	for _, op := range api.Ops() {
		if _, ok := responses[op]; !ok {
			t.Errorf("op %q has no response schema in x-jsonl", op)
		}
	}
	if len(responses) != len(api.Ops()) {
		t.Errorf("x-jsonl documents %d ops, the transport has %d: %v", len(responses), len(api.Ops()), keys(responses))
	}
	reqOps := s.doc["components"].(map[string]any)["schemas"].(map[string]any)["Request"].(map[string]any)["properties"].(map[string]any)["op"].(map[string]any)["enum"]
	if fmt.Sprint(reqOps) != fmt.Sprint(api.Ops()) {
		t.Errorf("Request.op enum %v, want the ops %v", reqOps, api.Ops())
	}
}

// TestOpenAPIWireFields: every JSON field of the wire types is a property
// of its schema, so a field added in Go without the document fails here.
func TestOpenAPIWireFields(t *testing.T) {
	s := loadSpec(t)
	schemas := s.doc["components"].(map[string]any)["schemas"].(map[string]any)
	props := func(name string) map[string]any {
		return schemas[name].(map[string]any)["properties"].(map[string]any)
	}
	for _, f := range jsonFields(api.Request{}) {
		if _, ok := props("Request")[f]; !ok {
			t.Errorf("Request field %q is not in the Request schema", f)
		}
	}
	for _, f := range jsonFields(api.Event{}) {
		if _, ok := props("Event")[f]; !ok {
			t.Errorf("Event field %q is not in the Event schema", f)
		}
	}
	// Every field a Response can carry is in at least one response schema.
	all := map[string]bool{}
	for name, sch := range schemas {
		if strings.HasSuffix(name, "Response") {
			for p := range sch.(map[string]any)["properties"].(map[string]any) {
				all[p] = true
			}
		}
	}
	for _, f := range jsonFields(api.Response{}) {
		if !all[f] {
			t.Errorf("Response field %q is in no response schema", f)
		}
	}
	for _, tc := range []struct {
		schema string
		v      any
	}{
		{"Result", seam.Result{}}, {"SessionInfo", seam.Info{}}, {"DisplayItem", seam.DisplayItem{}},
		{"CellError", seam.CellError{}}, {"Frame", seam.Frame{}}, {"FileChange", seam.FileChange{}}, {"Usage", seam.Usage{}},
		{"NetworkUsage", seam.NetworkUsage{}}, {"RefusedAttempt", seam.RefusedAttempt{}}, {"Entry", seam.Entry{}},
		{"Features", seam.Features{}}, {"Attempt", workflow.Attempt{}}, {"Fallback", workflow.Fallback{}}, {"Known", workflow.Known{}},
		{"Failure", workflow.Failure{}}, {"File", seam.File{}}, {"Chart", seam.Chart{}},
	} {
		for _, f := range jsonFields(tc.v) {
			if _, ok := props(tc.schema)[f]; !ok {
				t.Errorf("%T field %q is not in the %s schema", tc.v, f, tc.schema)
			}
		}
	}
	// A superchart's element is a whole Chart inline (ChartElement embeds
	// it): the element's own fields are in ChartElement, the rest in Chart.
	for _, f := range jsonFields(seam.ChartElement{}) {
		if _, own := props("ChartElement")[f]; !own && props("Chart")[f] == nil {
			t.Errorf("ChartElement field %q is in neither the ChartElement nor the Chart schema", f)
		}
	}
}

// TestOpenAPIContract runs real requests against a real service, over HTTP
// and JSON lines, and validates every response and event against the
// document: the schema of the route, status and media type for HTTP, the
// op's x-jsonl schema for JSON lines. It calls every documented operation
// and every op.
func TestOpenAPIContract(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 512 << 20
	m := newTestManager(t, contractCgroupRoot, p)
	d := &api.Dispatcher{Manager: m, Version: "contract-test"}
	s := loadSpec(t)

	t.Run("http", func(t *testing.T) { contractHTTP(t, s, d) })
	t.Run("jsonl", func(t *testing.T) { contractJSONL(t, s, d) })

	var missed []string
	for tmpl, item := range s.paths() {
		if tmpl == api.MCPPath {
			continue // MCP's own protocol: test/mcpclient drives it with the official client
		}
		for method := range item.(map[string]any) {
			if k := strings.ToUpper(method) + " " + tmpl; !s.covered[k] {
				missed = append(missed, k)
			}
		}
	}
	if len(missed) > 0 {
		sort.Strings(missed)
		t.Errorf("documented operations the test never called: %v", missed)
	}
}

// A cgroup root of its own (see integrationCgroupRoot).
const contractCgroupRoot = "/jailcell-test-api-contract"

// displayCell shows two figures with a pause between: two display events
// before the response.
const displayCell = "import time\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\ntime.sleep(0.3)\nplt.plot([2, 1])\nplt.show()"

type httpContract struct {
	t      *testing.T
	s      *spec
	client *http.Client
}

// call sends one request, validates its response against the document,
// and returns the status and body.
func (h *httpContract) call(method, tmpl, path string, body []byte, hdr map[string]string) (int, []byte) {
	t := h.t
	t.Helper()
	req, err := http.NewRequest(method, "http://jailcell"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	ctype := resp.Header.Get("Content-Type")
	ptr := h.s.responseSchema(t, method, tmpl, resp.StatusCode, ctype)
	if method == http.MethodHead {
		if len(b) != 0 {
			t.Errorf("HEAD %s has a body", path)
		}
	} else {
		h.s.checkBody(t, ptr, ctype, b, method+" "+path)
	}
	return resp.StatusCode, b
}

// undocumented calls what the document does not list: the answer must
// be an ErrorResponse.
func (h *httpContract) undocumented(want int, method, path string) {
	t := h.t
	t.Helper()
	req, _ := http.NewRequest(method, "http://jailcell"+path, nil)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		t.Errorf("%s %s: status %d, want %d", method, path, resp.StatusCode, want)
	}
	h.s.validate(t, "#/components/schemas/ErrorResponse", b, method+" "+path)
}

func (h *httpContract) must(want int, method, tmpl, path string, body []byte, hdr map[string]string) []byte {
	h.t.Helper()
	status, b := h.call(method, tmpl, path, body, hdr)
	if status != want {
		h.t.Fatalf("%s %s: status %d, want %d: %.500s", method, path, status, want, b)
	}
	return b
}

func contractHTTP(t *testing.T, s *spec, d *api.Dispatcher) {
	sock := filepath.Join(testenv.StateDir(t), "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(d, HTTPOptions{Logger: discardLogger()})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	h := &httpContract{t: t, s: s, client: unixClient(sock)}
	js := map[string]string{"Content-Type": "application/json"}

	h.must(200, "GET", "/healthz", "/healthz", nil, nil)
	h.must(200, "HEAD", "/healthz", "/healthz", nil, nil)
	h.must(200, "GET", "/readyz", "/readyz", nil, nil)
	h.must(200, "HEAD", "/readyz", "/readyz", nil, nil)
	h.must(200, "GET", "/metrics", "/metrics", nil, nil)
	h.must(200, "HEAD", "/metrics", "/metrics", nil, nil)
	if b := h.must(200, "GET", "/v1/openapi.json", "/v1/openapi.json", nil, nil); !bytes.Equal(b, api.OpenAPI()) {
		t.Errorf("GET /v1/openapi.json is not the embedded document")
	}
	h.must(200, "HEAD", "/v1/openapi.json", "/v1/openapi.json", nil, nil)

	var info struct {
		Session string `json:"session"`
	}
	if err := json.Unmarshal(h.must(201, "POST", "/v1/sessions", "/v1/sessions", []byte(`{"ttl_s": 600}`), js), &info); err != nil || info.Session == "" {
		t.Fatalf("create: %v %+v", err, info)
	}
	id := info.Session
	sp := "/v1/sessions/" + id
	h.must(200, "GET", "/v1/sessions", "/v1/sessions", nil, nil)
	h.must(200, "HEAD", "/v1/sessions", "/v1/sessions", nil, nil)

	var er struct {
		Result struct {
			ExecutionCount int `json:"execution_count"`
		} `json:"result"`
	}
	if err := json.Unmarshal(h.must(200, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":"x = 1\nx"}`), js), &er); err != nil || er.Result.ExecutionCount != 1 {
		t.Errorf("first exec: execution_count %d (%v), want 1", er.Result.ExecutionCount, err)
	}
	h.must(200, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":"1/0"}`), js)
	// Streamed: display events, validated line by line as ExecStreamLine.
	b := h.must(200, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":`+strconv.Quote(displayCell)+`,"timeout_s":120}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/x-ndjson"})
	checkDisplayStream(t, b)
	h.must(400, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":5}`), js)
	// A streamed exec that fails before any event: its error as one line.
	h.must(404, "POST", "/v1/sessions/{id}/exec", "/v1/sessions/nope/exec", []byte(`{"code":"1","stream":true}`), js)

	h.must(200, "PUT", "/v1/sessions/{id}/files/{path}", sp+"/files/in%20dir/a.txt", []byte("hello"), nil)
	h.must(200, "GET", "/v1/sessions/{id}/files/{path}", sp+"/files/in%20dir/a.txt", nil, nil)
	h.must(200, "HEAD", "/v1/sessions/{id}/files/{path}", sp+"/files/in%20dir/a.txt", nil, nil)
	h.must(404, "GET", "/v1/sessions/{id}/files/{path}", sp+"/files/missing.txt", nil, nil)
	// A path out of the workspace is the request's fault: 400.
	h.must(400, "GET", "/v1/sessions/{id}/files/{path}", sp+"/files/..%2Fescape.txt", nil, nil)
	h.must(400, "PUT", "/v1/sessions/{id}/files/{path}", sp+"/files/..%2Fescape.txt", []byte("x"), nil)
	h.must(200, "GET", "/v1/sessions/{id}/files", sp+"/files", nil, nil)
	h.must(200, "HEAD", "/v1/sessions/{id}/files", sp+"/files", nil, nil)

	// Interrupt: idle, then a running cell, whose own response is a
	// KeyboardInterrupt error.
	if b := h.must(200, "POST", "/v1/sessions/{id}/interrupt", sp+"/interrupt", nil, nil); !bytes.Contains(b, []byte(`"interrupted":false`)) {
		t.Errorf("interrupt of an idle session: %s", b)
	}
	interruptHTTP(h, sp)
	h.must(404, "POST", "/v1/sessions/{id}/interrupt", "/v1/sessions/nope/interrupt", nil, nil)

	// Jupyter's editing helpers, on the cells' live objects.
	if b := h.must(200, "POST", "/v1/sessions/{id}/complete", sp+"/complete", []byte(`{"code":"x.bit_len"}`), js); !bytes.Contains(b, []byte(`"bit_length"`)) {
		t.Errorf("complete x.bit_len: %s", b)
	}
	h.must(400, "POST", "/v1/sessions/{id}/complete", sp+"/complete", []byte(`{"code":"x","cursor_pos":2}`), js)
	if b := h.must(200, "POST", "/v1/sessions/{id}/inspect", sp+"/inspect", []byte(`{"code":"len(x)","cursor_pos":1}`), js); !bytes.Contains(b, []byte(`"found":true`)) {
		t.Errorf("inspect len: %s", b)
	}
	if b := h.must(200, "POST", "/v1/sessions/{id}/is_complete", sp+"/is_complete", []byte(`{"code":"for i in x:"}`), js); !bytes.Contains(b, []byte(`"status":"incomplete"`)) {
		t.Errorf("is_complete: %s", b)
	}

	e2bContractHTTP(h, sp, js)

	// Session ops; without a working criu they answer errors, which are
	// validated the same.
	status, _ := h.call("POST", "/v1/sessions/{id}/snapshot", sp+"/snapshot", nil, nil)
	t.Logf("snapshot: %d", status)
	h.call("POST", "/v1/sessions/{id}/rollback", sp+"/rollback", nil, nil)
	var forked struct {
		Session string `json:"session"`
	}
	status, b = h.call("POST", "/v1/sessions/{id}/fork", sp+"/fork", nil, nil)
	if status == 201 {
		_ = json.Unmarshal(b, &forked)
	}
	h.call("POST", "/v1/sessions/{id}/hibernate", sp+"/hibernate", nil, nil)
	h.call("POST", "/v1/sessions/{id}/restore", sp+"/restore", nil, nil)
	if forked.Session != "" {
		h.must(200, "DELETE", "/v1/sessions/{id}", "/v1/sessions/"+forked.Session, nil, nil)
	}

	h.must(200, "POST", "/v1/exec", "/v1/exec", []byte(`{"code":"open('out.txt','w').write('x')\nprint('one-shot')"}`), js)
	// Every operation on a session answers 404 for a session the caller
	// does not have, with its documented schema.
	for _, o := range docOps(t, s, false) {
		if !strings.Contains(o.tmpl, "{id}") {
			continue
		}
		var hdr map[string]string
		if o.body != nil && o.method != http.MethodPut {
			hdr = js
		}
		h.must(404, o.method, o.tmpl, strings.Replace(o.path, "/s1", "/nope", 1), o.body, hdr)
	}
	h.undocumented(405, "GET", "/v1/exec")
	h.undocumented(404, "GET", "/v2/nothing")
	h.must(200, "DELETE", "/v1/sessions/{id}", sp, nil, nil)
	h.must(404, "DELETE", "/v1/sessions/{id}", sp, nil, nil)
}

// interruptHTTP streams a cell that waits, interrupts it once its first
// output arrived, and validates every line of its stream.
func interruptHTTP(h *httpContract, sp string) {
	t := h.t
	t.Helper()
	body := `{"code":"import time\nprint('waiting', flush=True)\ntime.sleep(300)","stream":true,"timeout_s":600}`
	req, _ := http.NewRequest("POST", "http://jailcell"+sp+"/exec", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ptr := h.s.responseSchema(t, "POST", "/v1/sessions/{id}/exec", resp.StatusCode, resp.Header.Get("Content-Type"))
	br := bufio.NewReader(io.LimitReader(resp.Body, 64<<20))
	first, err := br.ReadBytes('\n')
	if err != nil || !bytes.Contains(first, []byte(`"event":"stdout"`)) {
		t.Fatalf("first line %q, %v; want the stdout event", first, err)
	}
	h.s.checkBody(t, ptr, resp.Header.Get("Content-Type"), first, "streamed exec line 1")
	// While the cell runs, what needs the kernel is busy: 409, documented
	// with its schema (a streamed exec: as its one NDJSON line).
	js := map[string]string{"Content-Type": "application/json"}
	h.must(409, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":"1"}`), js)
	h.must(409, "POST", "/v1/sessions/{id}/exec", sp+"/exec", []byte(`{"code":"1","stream":true}`), js)
	h.must(409, "POST", "/v1/sessions/{id}/complete", sp+"/complete", []byte(`{"code":"x"}`), js)
	h.must(409, "POST", "/v1/sessions/{id}/snapshot", sp+"/snapshot", nil, nil)
	if b := h.must(200, "POST", "/v1/sessions/{id}/interrupt", sp+"/interrupt", nil, nil); !bytes.Contains(b, []byte(`"interrupted":true`)) {
		t.Errorf("interrupt of a running cell: %s", b)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	h.s.checkBody(t, ptr, resp.Header.Get("Content-Type"), rest, "streamed exec after the interrupt")
	lines := bytes.Split(bytes.TrimSpace(rest), []byte("\n"))
	var last struct {
		OK     bool `json:"ok"`
		Result struct {
			Status string `json:"status"`
			State  string `json:"state"`
			Error  struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"result"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil || !last.OK || last.Result.Status != "error" ||
		last.Result.Error.Type != "KeyboardInterrupt" || last.Result.State != "kept" {
		t.Errorf("interrupted cell's response %s: want a KeyboardInterrupt error with state kept", lines[len(lines)-1])
	}
}

// checkDisplayStream: two display events, in order, before the final
// response, each equal to that item of the result's display list.
func checkDisplayStream(t *testing.T, b []byte) {
	t.Helper()
	var events []json.RawMessage
	var final struct {
		Result struct {
			Display []json.RawMessage `json:"display"`
		} `json:"result"`
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i, line := range lines {
		var head struct {
			Event   string          `json:"event"`
			Display json.RawMessage `json:"display"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if head.Event == "" {
			if i != len(lines)-1 {
				t.Errorf("the response is line %d of %d: events after it", i+1, len(lines))
			}
			if err := json.Unmarshal(line, &final); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if head.Event == api.EventDisplay {
			events = append(events, head.Display)
		}
	}
	if len(events) != 2 || len(final.Result.Display) != 2 {
		t.Fatalf("%d display events, %d display items in the result; want 2 and 2", len(events), len(final.Result.Display))
	}
	for i := range events {
		if !bytes.Equal(events[i], final.Result.Display[i]) {
			t.Errorf("display event %d differs from result.display[%d]", i, i)
		}
	}
}

func contractJSONL(t *testing.T, s *spec, d *api.Dispatcher) {
	c := startJSONL(t, d)
	x := s.doc["x-jsonl"].(map[string]any)
	responses := x["responses"].(map[string]any)
	ref := func(v any) string { return strings.TrimPrefix(v.(map[string]any)["$ref"].(string), specURL) }
	reqPtr, eventPtr, errPtr := ref(x["request"]), ref(x["event"]), ref(x["error"])
	seen := map[string]bool{}
	n := 0
	// do sends one request (validated as a Request) and validates every
	// line up to its response: events as Event, the response as the op's
	// schema or ErrorResponse. It returns the response and the events.
	do := func(op, fields string) (map[string]any, []map[string]any) {
		t.Helper()
		n++
		line := fmt.Sprintf(`{"id":%d,"op":%q%s}`, n, op, fields)
		if slices.Contains(api.Ops(), op) {
			s.validate(t, reqPtr, []byte(line), "request "+op)
		}
		c.Send(line)
		var events []map[string]any
		for {
			_, raw := c.Next()
			var v map[string]any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				t.Fatal(err)
			}
			if _, ok := v["event"]; ok {
				s.validate(t, eventPtr, []byte(raw), op+" event")
				events = append(events, v)
				continue
			}
			if v["ok"] == true {
				s.validate(t, ref(responses[op]), []byte(raw), op+" response")
			} else {
				s.validate(t, errPtr, []byte(raw), op+" error response")
			}
			seen[op] = true
			return v, events
		}
	}
	do("ping", "")
	created, _ := do("create", `,"ttl_s":600`)
	id, _ := created["session"].(string)
	if id == "" {
		t.Fatalf("create: %v", created)
	}
	sf := fmt.Sprintf(`,"session":%q`, id)
	r, _ := do("exec", sf+`,"code":"y = 2"`)
	if res, _ := r["result"].(map[string]any); res == nil || res["execution_count"] != float64(1) {
		t.Errorf("first exec: %v, want execution_count 1", r)
	}
	r, events := do("exec", sf+`,"stream":true,"timeout_s":120,"code":`+strconv.Quote(displayCell))
	var shown []any
	for _, ev := range events {
		if ev["event"] == api.EventDisplay {
			shown = append(shown, ev["display"])
		}
	}
	if res, _ := r["result"].(map[string]any); res == nil || len(shown) != 2 || fmt.Sprint(shown) != fmt.Sprint(res["display"]) {
		t.Errorf("%d display events; want 2 equal to the result's display list", len(shown))
	}
	do("exec", sf+`,"code":"1/0"`)
	do("exec", `,"code":"print(1)"`)
	do("upload", sf+`,"path":"b.bin","data":"AAEC"`)
	do("download", sf+`,"path":"b.bin"`)
	do("download", sf+`,"path":"nope.bin"`)
	do("files", sf)
	do("sessions", "")
	do("failures", "")
	r, _ = do("interrupt", sf)
	if r["interrupted"] != false {
		t.Errorf("interrupt of an idle session: %v", r)
	}
	do("interrupt", `,"session":"nope"`)
	r, _ = do("complete", sf+`,"code":"y.bit_len"`)
	if c, _ := r["completion"].(map[string]any); c == nil || !slices.Contains(c["matches"].([]any), any("bit_length")) {
		t.Errorf("complete y.bit_len: %v, want bit_length", r)
	}
	do("inspect", sf+`,"code":"len(y)","cursor_pos":1,"detail_level":1`)
	r, _ = do("is_complete", sf+`,"code":"if y:"`)
	if c, _ := r["completeness"].(map[string]any); c == nil || c["status"] != "incomplete" {
		t.Errorf("is_complete 'if y:': %v, want incomplete", r)
	}
	do("complete", sf+`,"code":"y","cursor_pos":2`)
	r, events = do("command", sf+`,"cmd":"echo $B","envs":{"B":"jl"},"stream":true`)
	if c, _ := r["command"].(map[string]any); c == nil || c["stdout"] != "jl\n" || len(events) == 0 {
		t.Errorf("command: %v (%d events), want stdout jl and a stdout event", r, len(events))
	}
	do("command", sf+`,"action":"kill"`)
	do("info", sf)
	do("set_timeout", sf+`,"timeout_s":300`)
	do("metrics", sf)
	do("mkdir", sf+`,"path":"w"`)
	r, _ = do("watch", sf+`,"path":"w"`)
	do("upload", sf+`,"path":"w/n.txt","data":"AAEC"`)
	time.Sleep(150 * time.Millisecond)
	r, _ = do("watch", sf+fmt.Sprintf(`,"action":"poll","watch":%q`, r["watch"]))
	if evs, _ := r["events"].([]any); len(evs) == 0 {
		t.Errorf("watch poll after an upload: %v, want events", r)
	}
	do("stat", sf+`,"path":"w/n.txt"`)
	if r, _ := do("rename", sf+`,"path":"w/n.txt","to":"w/m.txt"`); r["ok"] != true {
		t.Errorf("rename: %v", r)
	}
	do("remove", sf+`,"path":"w"`)
	do("stat", sf+`,"path":"w"`)
	do("snapshot", sf)
	do("rollback", sf)
	forked, _ := do("fork", sf)
	do("hibernate", sf)
	do("restore", sf)
	if fid, _ := forked["session"].(string); fid != "" && forked["ok"] == true {
		do("close", fmt.Sprintf(`,"session":%q`, fid))
	}
	do("close", sf)
	do("close", sf)
	do("bogus", "")
	for _, op := range api.Ops() {
		if !seen[op] {
			t.Errorf("op %q was never called", op)
		}
	}
}

// jsonFields lists the JSON names of a struct's fields, those of embedded
// structs included.
func jsonFields(v any) []string {
	var out []string
	var walk func(rt reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		for i := range rt.NumField() {
			f := rt.Field(i)
			tag := f.Tag.Get("json")
			if f.Anonymous && tag == "" {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	walk(reflect.TypeOf(v))
	return out
}

// e2bContractHTTP calls the E2B-shaped ops (commands, info, timeout,
// metrics, stat, dirs, remove, watch) with answers and refusals.
func e2bContractHTTP(h *httpContract, sp string, js map[string]string) {
	t := h.t
	if b := h.must(200, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"cmd":"echo $A; exit 2","envs":{"A":"hi"}}`), js); !bytes.Contains(b, []byte(`"exit_code":2`)) || !bytes.Contains(b, []byte(`"stdout":"hi\n"`)) {
		t.Errorf("command: %s", b)
	}
	b := h.must(200, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"cmd":"echo streamed; echo e >&2"}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/x-ndjson"})
	if !bytes.Contains(b, []byte(`"event":"stdout"`)) || !bytes.Contains(b, []byte(`"command":`)) {
		t.Errorf("streamed command: %s", b)
	}
	h.must(200, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"cmd":"sleep 60","background":true}`), js)
	h.must(400, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"cmd":"true","cwd":"../x"}`), js)
	h.must(400, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"cmd":"true","envs":{"A":1}}`), js)
	h.must(404, "POST", "/v1/sessions/{id}/commands", sp+"/commands", []byte(`{"action":"wait","job":"job-999"}`), js)

	if b := h.must(200, "GET", "/v1/sessions/{id}", sp, nil, nil); !bytes.Contains(b, []byte(`"state":"ready"`)) {
		t.Errorf("info: %s", b)
	}
	h.must(404, "GET", "/v1/sessions/{id}", "/v1/sessions/nope", nil, nil)
	h.must(200, "POST", "/v1/sessions/{id}/timeout", sp+"/timeout", []byte(`{"timeout_s":120}`), js)
	h.must(400, "POST", "/v1/sessions/{id}/timeout", sp+"/timeout", []byte(`{"timeout_s":1e9}`), js)
	if b := h.must(200, "GET", "/v1/sessions/{id}/metrics", sp+"/metrics", nil, nil); !bytes.Contains(b, []byte(`"running":true`)) {
		t.Errorf("metrics: %s", b)
	}
	if b := h.must(200, "PUT", "/v1/sessions/{id}/dirs/{path}", sp+"/dirs/d/e", nil, nil); !bytes.Contains(b, []byte(`"created":true`)) {
		t.Errorf("mkdir: %s", b)
	}
	b = h.must(200, "POST", "/v1/sessions/{id}/watch", sp+"/watch", []byte(`{"path":"d","recursive":true}`), js)
	var w struct {
		Watch string `json:"watch"`
	}
	if err := json.Unmarshal(b, &w); err != nil || w.Watch == "" {
		t.Fatalf("watch start: %s", b)
	}
	h.must(200, "PUT", "/v1/sessions/{id}/files/{path}", sp+"/files/d/e/f.txt", []byte("x"), nil)
	time.Sleep(150 * time.Millisecond)
	if b := h.must(200, "POST", "/v1/sessions/{id}/watch", sp+"/watch", []byte(`{"action":"poll","watch":"`+w.Watch+`"}`), js); !bytes.Contains(b, []byte(`{"name":"e/f.txt","type":"create"}`)) {
		t.Errorf("watch poll: %s", b)
	}
	h.must(400, "POST", "/v1/sessions/{id}/watch", sp+"/watch", []byte(`{"action":"poll"}`), js)
	if b := h.must(200, "GET", "/v1/sessions/{id}/stat/{path}", sp+"/stat/d/e/f.txt", nil, nil); !bytes.Contains(b, []byte(`"size":1`)) {
		t.Errorf("stat: %s", b)
	}
	h.must(404, "GET", "/v1/sessions/{id}/stat/{path}", sp+"/stat/nope", nil, nil)
	if b := h.must(200, "POST", "/v1/sessions/{id}/rename", sp+"/rename", []byte(`{"path":"d/e/f.txt","to":"d/g.txt"}`), js); !bytes.Contains(b, []byte(`"path":"d/g.txt"`)) {
		t.Errorf("rename: %s", b)
	}
	h.must(404, "POST", "/v1/sessions/{id}/rename", sp+"/rename", []byte(`{"path":"nope","to":"x"}`), js)
	h.must(400, "POST", "/v1/sessions/{id}/rename", sp+"/rename", []byte(`{"path":"d","to":"d/in"}`), js)
	h.must(200, "DELETE", "/v1/sessions/{id}/files/{path}", sp+"/files/d", nil, nil)
	h.must(404, "DELETE", "/v1/sessions/{id}/files/{path}", sp+"/files/d", nil, nil)
	h.must(400, "PUT", "/v1/sessions/{id}/dirs/{path}", sp+"/dirs/..%2Fx", nil, nil)
}
