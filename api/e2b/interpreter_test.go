package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// lines encodes what finalLines returns as the JSON the SDK reads.
func lines(t *testing.T, v []any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range v {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func types(ls []map[string]any) string {
	var s []string
	for _, l := range ls {
		s = append(s, l["type"].(string))
	}
	return strings.Join(s, ",")
}

func TestResultOfMapsMIMETypesAsE2B(t *testing.T) {
	chart := &seam.Chart{Type: "line", Title: "T", Elements: []seam.ChartElement{{Label: "a", Points: [][2]float64{{1, 2}}}}}
	l := resultOf(map[string]any{
		"text/plain":             "'quoted'",
		"text/html":              "<b>h</b>",
		"text/markdown":          "*m*",
		"image/svg+xml":          "<svg/>",
		"image/png":              "iVBO",
		"image/jpeg":             "/9j/",
		"application/pdf":        "JVBE",
		"text/latex":             "$x$",
		"application/json":       map[string]any{"k": 1.0},
		"application/javascript": "js()",
		"e2b/data":               map[string]any{"a": []any{1.0}},
		"application/x-custom":   "c",
	}, chart, nil, true)
	got := lines(t, []any{l})[0]
	want := map[string]any{
		"type": "result", "text": "quoted", "html": "<b>h</b>", "markdown": "*m*", "svg": "<svg/>",
		"png": "iVBO", "jpeg": "/9j/", "pdf": "JVBE", "latex": "$x$", "javascript": "js()", "is_main_result": true,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if j, _ := got["json"].(map[string]any); j["k"] != 1.0 {
		t.Errorf("json = %v", got["json"])
	}
	if d, _ := got["data"].(map[string]any); d["a"] == nil {
		t.Errorf("data = %v", got["data"])
	}
	if x, _ := got["extra"].(map[string]any); x["application/x-custom"] != "c" {
		t.Errorf("extra = %v", got["extra"])
	}
	c, _ := got["chart"].(map[string]any)
	if c["type"] != "line" || c["title"] != "T" || len(c["elements"].([]any)) != 1 {
		t.Errorf("chart = %v", got["chart"])
	}
	for _, tc := range []struct{ in, want string }{{`"x"`, "x"}, {"'", "'"}, {"42", "42"}, {`'a"`, `'a"`}} {
		if l := resultOf(map[string]any{"text/plain": tc.in}, nil, nil, true); *l.Text != tc.want {
			t.Errorf("text/plain %s: text %s, want %s", tc.in, *l.Text, tc.want)
		}
	}
	// A DataFrame's table is E2B's data, columns in their order.
	frame := lines(t, []any{resultOf(map[string]any{"text/plain": "   a\n0  1"}, nil, json.RawMessage(`{"b":[1,null],"a":["x","y"]}`), true)})[0]
	if d, _ := frame["data"].(map[string]any); len(d) != 2 || d["a"].([]any)[1] != "y" || d["b"].([]any)[1] != nil {
		t.Errorf("a DataFrame's data = %v", frame["data"])
	}
	if l := resultOf(nil, nil, nil, true); l != nil {
		t.Errorf("no bundle, no chart: %+v, want no line", l)
	}
}

func TestDisplayLine(t *testing.T) {
	chart := &seam.Chart{Type: "bar"}
	l := displayLine(seam.DisplayItem{MIME: "image/png", Data: "iVBO", Bundle: map[string]any{"image/png": "iVBO", "text/plain": "<Figure>"}, Chart: chart})
	if l.IsMainResult || *l.PNG != "iVBO" || *l.Text != "<Figure>" || l.Chart["type"] != "bar" {
		t.Errorf("figure: %+v", l)
	}
	if l := displayLine(seam.DisplayItem{MIME: "text/html", Data: "<i>"}); l == nil || *l.HTML != "<i>" {
		t.Errorf("an item without a bundle: %+v", l)
	}
	if l := displayLine(seam.DisplayItem{MIME: "text/plain", Data: "help", Pager: true}); l != nil {
		t.Errorf("pager text: %+v, want no line", l)
	}
}

func TestFinalLines(t *testing.T) {
	ok := &api.Response{Result: &seam.Result{
		Status:         seam.StatusOK,
		Value:          map[string]any{"text/plain": "2"},
		Display:        []seam.DisplayItem{{MIME: "text/plain", Data: "shown", Bundle: map[string]any{"text/plain": "shown"}}, {MIME: "text/plain", Data: "[1 display items dropped]"}},
		ExecutionCount: 3,
		Stdout:         "streamed already",
	}}
	ls := lines(t, finalLines(ok, nil, 1))
	if got := types(ls); got != "result,result,number_of_executions,end_of_execution" {
		t.Fatalf("lines %s", got)
	}
	if ls[0]["text"] != "[1 display items dropped]" || ls[0]["is_main_result"] != false {
		t.Errorf("the display item not streamed: %v", ls[0])
	}
	if ls[1]["text"] != "2" || ls[1]["is_main_result"] != true {
		t.Errorf("the value: %v", ls[1])
	}
	if ls[2]["execution_count"] != 3.0 {
		t.Errorf("count: %v", ls[2])
	}

	pyErr := &api.Response{Result: &seam.Result{Status: seam.StatusError, ExecutionCount: 4, State: seam.StateKept,
		Error: &seam.CellError{Type: "subprocess.CalledProcessError", Message: "exit 1", Traceback: "Traceback...\nCalledProcessError: exit 1"}}}
	ls = lines(t, finalLines(pyErr, nil, 0))
	if got := types(ls); got != "error,number_of_executions,end_of_execution" {
		t.Fatalf("lines %s", got)
	}
	if ls[0]["name"] != "CalledProcessError" || ls[0]["value"] != "exit 1" || !strings.Contains(ls[0]["traceback"].(string), "Traceback") {
		t.Errorf("error line: %v", ls[0])
	}

	for _, tc := range []struct {
		res       seam.Result
		name, has string
	}{
		{seam.Result{Status: seam.StatusTimeout, State: seam.StateKept, Error: &seam.CellError{Type: "KeyboardInterrupt", Message: "cell exceeded its 10s timeout and was interrupted"}},
			"TimeoutError", "10s timeout"},
		{seam.Result{Status: seam.StatusTimeout, State: seam.StateLost, StateReason: "the sandbox was killed", Error: &seam.CellError{Type: "Timeout", Message: "cell exceeded its 10s timeout"}},
			"TimeoutError", "the sandbox was killed"},
		{seam.Result{Status: seam.StatusOOM, State: seam.StateLost, StateReason: "fresh kernel", Error: &seam.CellError{Type: "OutOfMemory", Message: "killed"}},
			"OutOfMemoryError", "fresh kernel"},
		{seam.Result{Status: seam.StatusKilled, State: seam.StateLost, Error: &seam.CellError{Type: "KernelDied", Message: "the Python kernel exited"}},
			"KernelDied", "exited"},
		{seam.Result{Status: seam.StatusKilled}, "Error", "status killed"},
	} {
		ls := lines(t, finalLines(&api.Response{Result: &tc.res}, nil, 0))
		if ls[0]["type"] != "error" || ls[0]["name"] != tc.name || !strings.Contains(ls[0]["value"].(string), tc.has) {
			t.Errorf("%s: %v, want an error %s with %q", tc.res.Status, ls[0], tc.name, tc.has)
		}
	}

	ls = lines(t, finalLines(nil, &api.Error{Code: api.CodeNotFound, Message: "session gone"}, 0))
	if got := types(ls); got != "error,end_of_execution" || ls[0]["name"] != "SandboxError" || !strings.Contains(ls[0]["value"].(string), "session gone") {
		t.Errorf("a wire error: %v", ls)
	}
}

func TestStreamLine(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	ls := lines(t, []any{streamLine("stderr", "x\n", at)})
	if ls[0]["type"] != "stderr" || ls[0]["text"] != "x\n" || ls[0]["timestamp"] != "2025-01-02T03:04:05.000006Z" {
		t.Errorf("%v", ls[0])
	}
}

func TestCheckLanguage(t *testing.T) {
	for _, l := range []string{"", "python", " Python "} {
		if err := checkLanguage(l); err != nil {
			t.Errorf("%q: %v", l, err)
		}
	}
	for _, l := range []string{"js", "javascript", "r", "bash"} {
		if err := checkLanguage(l); err == nil || !strings.Contains(err.Error(), "only python") {
			t.Errorf("%q: %v, want a refusal naming python", l, err)
		}
	}
}

// fakeCells answers info, and exec with a busy error first, then streamed
// output and a result: the door's /execute without a sandbox.
type fakeCells struct {
	execs int
	last  *api.Request
}

func (f *fakeCells) Handle(_ context.Context, _ int, req *api.Request, emit func(api.Event)) *api.Response {
	switch req.Op {
	case api.OpInfo:
		if req.Session == "n1-gone" {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeNotFound, Message: "no session n1-gone"}}
		}
		return &api.Response{ID: req.ID, OK: true}
	case api.OpExec:
		f.execs++
		f.last = req
		if f.execs == 1 {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeBusy, Message: "running a cell"}}
		}
		emit(api.Event{Event: api.EventStdout, Text: "out\n"})
		emit(api.Event{Event: api.EventClearOutput})
		emit(api.Event{Event: api.EventDisplay, Display: &seam.DisplayItem{MIME: "text/html", Data: "<p>", Bundle: map[string]any{"text/html": "<p>"}}})
		emit(api.Event{Event: api.EventStderr, Text: "err\n"})
		return &api.Response{ID: req.ID, OK: true, Result: &seam.Result{Status: seam.StatusOK, Value: map[string]any{"text/plain": "3"},
			Display: []seam.DisplayItem{{MIME: "text/html", Data: "<p>"}}, ExecutionCount: 2}}
	}
	return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeBadRequest, Message: "unexpected op " + req.Op}}
}

func TestExecuteStreamsE2BLines(t *testing.T) {
	f := &fakeCells{}
	d, err := New(f, Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/execute", strings.NewReader(body))
		r.Header.Set("E2b-Sandbox-Id", "n1-ab")
		r.Header.Set("E2b-Sandbox-Port", "49999")
		r.Header.Set("X-Access-Token", d.accessToken(1000, "n1-ab"))
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	w := post(`{"code": "1 + 2", "env_vars": {"A": "b"}}`)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var ls []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(w.Body.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		ls = append(ls, m)
	}
	if got := types(ls); got != "stdout,result,stderr,result,number_of_executions,end_of_execution" {
		t.Fatalf("lines %s:\n%s", got, w.Body)
	}
	if ls[1]["html"] != "<p>" || ls[3]["text"] != "3" || ls[3]["is_main_result"] != true {
		t.Errorf("results: %v %v", ls[1], ls[3])
	}
	if f.execs != 2 || !f.last.Stream || f.last.Envs["A"] != "b" || f.last.Context != nil {
		t.Errorf("a busy sandbox is waited for, then the cell runs streamed with its envs in the main namespace: %d execs, %+v", f.execs, f.last)
	}
	for body, want := range map[string]string{
		`{"code": "1", "language": "js"}`:                        "runs only python",
		`{"code": "1", "language": "python", "context_id": "x"}`: "Only one of context_id or language",
		`{"code": "1", "env_vars": {"1A": "b"}}`:                 "env_vars name",
	} {
		if w := post(body); w.Code != 400 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, w.Code, w.Body, want)
		}
	}
	if w := post(`{"code": "1", "context_id": "nope"}`); w.Code != 404 || !strings.Contains(w.Body.String(), "Context nope not found") {
		t.Errorf("an unknown context: %d %s", w.Code, w.Body)
	}
}

func TestInterpreterRoutes(t *testing.T) {
	d, err := New(&fakeCells{}, Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, id string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("E2b-Sandbox-Id", id)
		r.Header.Set("E2b-Sandbox-Port", "49999")
		r.Header.Set("E2B-Traffic-Access-Token", d.accessToken(1000, id))
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		method, path, id string
		status           int
		has              string
	}{
		{"GET", "/health", "n1-ab", 200, `"OK"`},
		{"GET", "/health", "n1-gone", 502, "not running"},
		{"POST", "/execute", "n1-gone", 502, "not running"},
		{"GET", "/contexts", "n1-ab", 200, `[{"id":"default","language":"python","cwd":"/home/user"}]`},
		{"GET", "/contexts", "n1-gone", 502, "not running"},
		{"POST", "/contexts/default/restart", "n1-ab", 400, "main namespace"},
		{"DELETE", "/contexts/default", "n1-ab", 400, "main namespace"},
		{"DELETE", "/contexts/nope", "n1-ab", 404, "Context nope not found"},
		{"POST", "/contexts/nope/restart", "n1-ab", 404, "Context nope not found"},
		{"GET", "/nope", "n1-ab", 404, "not a route"},
	} {
		w := do(tc.method, tc.path, tc.id)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.has) {
			t.Errorf("%s %s (%s): %d %s, want %d with %q", tc.method, tc.path, tc.id, w.Code, w.Body, tc.status, tc.has)
		}
	}
}

// killedCells is a sandbox killed while its cell runs: the cell writes,
// then the session is gone, and the cell answers as a killed kernel's
// does (or, with wireErr, as a session lost under the call).
type killedCells struct {
	mu      sync.Mutex
	wireErr bool
	gone    bool
}

func (f *killedCells) Handle(_ context.Context, _ int, req *api.Request, emit func(api.Event)) *api.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req.Op {
	case api.OpInfo:
		if f.gone {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeNotFound, Message: "session " + req.Session + " was closed"}}
		}
		return &api.Response{ID: req.ID, OK: true, Info: &seam.Info{ID: req.Session, State: "ready"}}
	case api.OpExec:
		emit(api.Event{Event: api.EventStdout, Text: "started\n"})
		f.gone = true
		if f.wireErr {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeNotFound, Message: "session " + req.Session + " was closed"}}
		}
		return &api.Response{ID: req.ID, OK: true, Result: &seam.Result{Status: seam.StatusKilled, State: seam.StateLost, Error: &seam.CellError{Type: "KernelDied", Message: "the kernel died"}}}
	}
	return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeBadRequest, Message: "unexpected op " + req.Op}}
}

// TestExecuteCutWhenTheSandboxIsKilled: a cell whose sandbox is killed
// under it ends with a cut connection after the lines it wrote, as E2B's
// proxy drops a killed sandbox's, never with lines that end well (which
// the SDK would return as the cell's result); a cell that fails in a
// sandbox that still runs ends as usual.
func TestExecuteCutWhenTheSandboxIsKilled(t *testing.T) {
	for _, wireErr := range []bool{false, true} {
		f := &killedCells{wireErr: wireErr}
		d, err := New(f, Options{Secret: make([]byte, 32)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(d)
		req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code": "import time; time.sleep(60)"}`))
		req.Header.Set("E2b-Sandbox-Id", "n1-ab")
		req.Header.Set("E2b-Sandbox-Port", "49999")
		req.Header.Set("X-Access-Token", d.accessToken(1000, "n1-ab"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("wire error %v: reading the stream: %v, want it cut (unexpected EOF)", wireErr, err)
		}
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"started\n"`) || strings.Contains(string(body), "end_of_execution") {
			t.Errorf("wire error %v: %d %s, want the streamed line and no end", wireErr, resp.StatusCode, body)
		}
	}

	// The same failure with the sandbox still there is the cell's own.
	d, err := New(&fakeKernelDied{}, Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/execute", strings.NewReader(`{"code": "1"}`))
	r.Header.Set("E2b-Sandbox-Id", "n1-ab")
	r.Header.Set("E2b-Sandbox-Port", "49999")
	r.Header.Set("X-Access-Token", d.accessToken(1000, "n1-ab"))
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	if !strings.Contains(w.Body.String(), `"name":"KernelDied"`) || !strings.HasSuffix(w.Body.String(), `{"type":"end_of_execution"}`+"\n") {
		t.Errorf("a failed cell in a running sandbox: %s, want its error and the end", w.Body)
	}
}

// fakeKernelDied: a cell whose kernel died, in a sandbox that runs on.
type fakeKernelDied struct{}

func (fakeKernelDied) Handle(_ context.Context, _ int, req *api.Request, _ func(api.Event)) *api.Response {
	if req.Op == api.OpExec {
		return &api.Response{ID: req.ID, OK: true, Result: &seam.Result{Status: seam.StatusKilled, Error: &seam.CellError{Type: "KernelDied", Message: "the kernel died"}}}
	}
	return &api.Response{ID: req.ID, OK: true, Info: &seam.Info{ID: req.Session, State: "ready"}}
}
