package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/ndjson"
	"github.com/jailcell/jailcell/session/seam"
)

// The code interpreter's routes on a sandbox's port 49999, as E2B's
// template server (e2b-dev/code-interpreter, template/server) answers
// them: /execute streams a cell's output as JSON lines, /contexts manages
// the namespaces cells run in.

// defaultContext is the id of a sandbox's default context: its session's
// main namespace. E2B's server also takes "default" for its default
// context.
const defaultContext = "default"

// maxContexts bounds the contexts made in one sandbox besides its default
// one: each is a namespace held in the kernel's memory for its life.
const maxContexts = 16

// codeContext is E2B's Context: {id, language, cwd}.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (d *Door) routeInterpreter() {
	m := d.interp
	m.HandleFunc("GET /health", d.interpHealth)
	m.HandleFunc("POST /execute", d.execute)
	m.HandleFunc("GET /contexts", d.listContexts)
	m.HandleFunc("POST /contexts", d.createContext)
	m.HandleFunc("DELETE /contexts/{ctx}", d.removeContext)
	m.HandleFunc("POST /contexts/{ctx}/restart", d.restartContext)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.Method+" "+r.URL.Path+" is not a route of jailcell's code interpreter (docs/e2b.md lists them)")
	})
}

// checkLanguage normalizes a language as E2B's server does and refuses
// all but Python: a jailcell kernel runs Python only.
func checkLanguage(lang string) error {
	switch strings.ToLower(strings.TrimSpace(lang)) {
	case "", "python":
		return nil
	}
	return fmt.Errorf("language %q: jailcell's code interpreter runs only python", lang)
}

// alive answers false, having written the answer, if the request's
// sandbox is not there (see lookup).
func (d *Door) alive(w http.ResponseWriter, r *http.Request) bool {
	_, ok := d.lookup(w, r)
	return ok
}

func (d *Door) interpHealth(w http.ResponseWriter, r *http.Request) {
	if d.running(w, r) {
		writeJSON(w, http.StatusOK, "OK")
	}
}

// contextOf finds context id of sandbox t: nil for the default one.
func (d *Door) contextOf(t target, id string) (*seam.CellContext, bool) {
	if id == "" || id == defaultContext {
		return nil, true
	}
	rec, _ := d.records.get(t.id)
	for _, c := range rec.Contexts {
		if c.ID == id {
			return &seam.CellContext{ID: c.ID, Cwd: c.Cwd}, true
		}
	}
	return nil, false
}

// execute runs one cell and streams E2B's lines: stdout and stderr as the
// cell writes them, a result per display item as the cell shows it, then
// the cell's value, its error, its execution count and the end.
func (d *Door) execute(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var body struct {
		Code      string            `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.ContextID != "" && body.Language != "" {
		writeError(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	if err := checkLanguage(body.Language); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := seam.CheckEnvs("env_vars", body.EnvVars); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cc, ok := d.contextOf(t, body.ContextID)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", body.ContextID))
		return
	}
	if body.Code == "" {
		// The kernel has nothing to run; E2B's answers an empty cell with
		// its count and end alone, as this does.
		body.Code = "\n"
	}
	if !d.alive(w, r) {
		return
	}
	out := newLineWriter(w, t.place)
	req := &api.Request{Op: api.OpExec, Session: t.id, Code: body.Code, Stream: true, Envs: body.EnvVars, Context: cc}
	shown := 0
	emit := func(ev api.Event) {
		switch ev.Event {
		case api.EventStdout, api.EventStderr:
			out.line(streamLine(ev.Event, ev.Text, time.Now()))
		case api.EventDisplay:
			if ev.Display != nil {
				shown++
				if l := displayLine(*ev.Display); l != nil {
					out.line(l)
				}
			}
		}
	}
	resp, e := d.callWhileBusy(r.Context(), t.owner, req, emit)
	if !ranWell(resp, e) && r.Context().Err() == nil && d.ended(r.Context(), t.owner, t.id) != nil {
		// Killed under the cell. E2B's proxy drops a killed sandbox's
		// connections, and the SDKs read a cut stream, find the sandbox
		// not running and raise TimeoutError saying it was killed; lines
		// ending well would be taken for the cell's own outcome, and the
		// SDK would return them as a result.
		// What was streamed goes out, then the cut.
		out.finish()
		panic(http.ErrAbortHandler)
	}
	for _, l := range finalLines(resp, e, shown) {
		out.line(l)
	}
	// The cell is over; the client has the grace to take what is left.
	out.finish()
}

// ranWell: the cell ran and ended as a cell ends by itself.
func ranWell(resp *api.Response, e *api.Error) bool {
	return e == nil && resp != nil && resp.Result != nil && resp.Result.Status == seam.StatusOK
}

// callWhileBusy is call, tried again while the sandbox runs another cell
// (a cell nothing of was streamed yet), until ctx ends: E2B's server
// queues a context's cells, jailcell's sessions refuse a second one, so
// the door waits as long as its caller does (call itself waits between
// tries).
func (d *Door) callWhileBusy(ctx context.Context, owner int, req *api.Request, emit func(api.Event)) (*api.Response, *api.Error) {
	for {
		resp, e := d.call(ctx, owner, req, emit)
		if e == nil || e.Code != api.CodeBusy || ctx.Err() != nil {
			return resp, e
		}
	}
}

// lineWriter writes JSON lines, each flushed at once, from a goroutine of
// its own: a cell's output is queued (counted in the request's place in
// the in-flight budget) and never waits on the client, so a client that
// stops reading does not keep its sandbox busy (before the fix it held
// the cell's output on a full socket, and the sandbox with it, for as long
// as the connection stayed open).
type lineWriter struct {
	out   *ndjson.Writer
	place *api.Place
}

// streamGrace is how long a client has, once its cell is over, to take
// the rest of the stream (http.stream_grace's default on the HTTP door).
const streamGrace = 30 * time.Second

func newLineWriter(w http.ResponseWriter, place *api.Place) *lineWriter {
	return &lineWriter{out: ndjson.Start(w, http.StatusOK, nil), place: place}
}

func (lw *lineWriter) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorLine{Type: "error", Name: "EncodingError", Value: "jailcell could not encode an output line: " + err.Error()})
	}
	if lw.place != nil {
		lw.place.Grow(int64(len(b) + 1))
	}
	lw.out.Push(http.StatusOK, append(b, '\n'))
}

func (lw *lineWriter) finish() { lw.out.Finish(streamGrace) }

// E2B's output lines (template/server/api/models).
type (
	logLine struct {
		Type      string `json:"type"`
		Text      string `json:"text"`
		Timestamp string `json:"timestamp"`
	}
	errorLine struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Value     string `json:"value"`
		Traceback string `json:"traceback"`
	}
	countLine struct {
		Type           string `json:"type"`
		ExecutionCount int    `json:"execution_count"`
	}
	endLine struct {
		Type string `json:"type"`
	}
	resultLine struct {
		Type         string         `json:"type"`
		Text         *string        `json:"text,omitempty"`
		HTML         *string        `json:"html,omitempty"`
		Markdown     *string        `json:"markdown,omitempty"`
		SVG          *string        `json:"svg,omitempty"`
		PNG          *string        `json:"png,omitempty"`
		JPEG         *string        `json:"jpeg,omitempty"`
		PDF          *string        `json:"pdf,omitempty"`
		LaTeX        *string        `json:"latex,omitempty"`
		JSON         any            `json:"json,omitempty"`
		JavaScript   *string        `json:"javascript,omitempty"`
		Data         any            `json:"data,omitempty"`
		Chart        map[string]any `json:"chart,omitempty"`
		Extra        map[string]any `json:"extra,omitempty"`
		IsMainResult bool           `json:"is_main_result"`
	}
)

func streamLine(stream, text string, at time.Time) logLine {
	return logLine{Type: stream, Text: text, Timestamp: at.UTC().Format(time.RFC3339Nano)}
}

// resultOf maps a MIME bundle to E2B's Result as its server does
// (api/models/result.py): each known MIME type to its field, text/plain
// without the quotes of a string's repr, the rest in extra.
func resultOf(bundle map[string]any, chart *seam.Chart, table json.RawMessage, main bool) *resultLine {
	if len(bundle) == 0 && chart == nil {
		return nil
	}
	l := &resultLine{Type: "result", IsMainResult: main, Chart: e2bChart(chart)}
	if table != nil {
		// A DataFrame's columns: what E2B's e2b/data formatter gives.
		l.Data = table
	}
	str := func(v any) *string {
		if s, ok := v.(string); ok {
			return &s
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		s := string(b)
		return &s
	}
	for mime, v := range bundle {
		switch mime {
		case "text/plain":
			s := str(v)
			if s != nil && len(*s) >= 2 {
				if q := (*s)[0]; (q == '\'' || q == '"') && (*s)[len(*s)-1] == q {
					u := (*s)[1 : len(*s)-1]
					s = &u
				}
			}
			l.Text = s
		case "text/html":
			l.HTML = str(v)
		case "text/markdown":
			l.Markdown = str(v)
		case "image/svg+xml":
			l.SVG = str(v)
		case "image/png":
			l.PNG = str(v)
		case "image/jpeg":
			l.JPEG = str(v)
		case "application/pdf":
			l.PDF = str(v)
		case "text/latex":
			l.LaTeX = str(v)
		case "application/json":
			l.JSON = v
		case "application/javascript":
			l.JavaScript = str(v)
		case "e2b/data":
			l.Data = v
		default:
			if l.Extra == nil {
				l.Extra = map[string]any{}
			}
			l.Extra[mime] = v
		}
	}
	return l
}

// displayLine is a display item's result line; nil for text IPython sent
// to its pager, which E2B's server does not pass on either.
func displayLine(it seam.DisplayItem) *resultLine {
	if it.Pager {
		return nil
	}
	bundle := it.Bundle
	if len(bundle) == 0 && it.MIME != "" {
		bundle = map[string]any{it.MIME: it.Data}
	}
	return resultOf(bundle, it.Chart, it.Table, false)
}

// finalLines are the lines after the streamed ones: display items that
// were not streamed (past the first shown, such as a note that items were
// dropped), the cell's value, its error, its count, and the end that E2B's
// server always sends last.
func finalLines(resp *api.Response, e *api.Error, shown int) []any {
	var lines []any
	if e != nil {
		// Nothing ran, or the session failed under the cell: the SDK sees
		// an error it can read rather than a cut stream.
		lines = append(lines, errorLine{Type: "error", Name: "SandboxError", Value: e.Code + ": " + e.Message})
		return append(lines, endLine{Type: "end_of_execution"})
	}
	res := resp.Result
	if res == nil {
		return append(lines, endLine{Type: "end_of_execution"})
	}
	for _, it := range res.Display[min(shown, len(res.Display)):] {
		if l := displayLine(it); l != nil {
			lines = append(lines, l)
		}
	}
	if l := resultOf(res.Value, res.ValueChart, res.ValueTable, true); l != nil {
		lines = append(lines, l)
	}
	if el, ok := cellError(res); ok {
		lines = append(lines, el)
	}
	if res.ExecutionCount > 0 {
		lines = append(lines, countLine{Type: "number_of_executions", ExecutionCount: res.ExecutionCount})
	}
	return append(lines, endLine{Type: "end_of_execution"})
}

// cellError is E2B's error line for a cell that did not end well: the
// Python exception by its class name (E2B's ename), or what the host
// decided. A cell stopped at its time limit is a TimeoutError, whatever
// the interrupt raised in it.
func cellError(res *seam.Result) (errorLine, bool) {
	if res.Status == seam.StatusOK && res.Error == nil {
		return errorLine{}, false
	}
	l := errorLine{Type: "error", Name: "Error", Value: "the cell ended with status " + res.Status}
	if ce := res.Error; ce != nil {
		name := ce.Type
		if i := strings.LastIndexByte(name, '.'); i >= 0 && i < len(name)-1 {
			name = name[i+1:]
		}
		l.Name, l.Value, l.Traceback = name, ce.Message, ce.Traceback
	}
	switch res.Status {
	case seam.StatusTimeout:
		l.Name = "TimeoutError"
	case seam.StatusOOM:
		l.Name = "OutOfMemoryError"
	}
	if res.State == seam.StateLost && res.StateReason != "" {
		l.Value += " (" + res.StateReason + ")"
	}
	return l, true
}

func (d *Door) listContexts(w http.ResponseWriter, r *http.Request) {
	if !d.alive(w, r) {
		return
	}
	rec, _ := d.records.get(targetOf(r.Context()).id)
	out := append([]codeContext{{ID: defaultContext, Language: "python", Cwd: seam.HomeDir}}, rec.Contexts...)
	writeJSON(w, http.StatusOK, out)
}

// createContext makes a context: a new namespace in the sandbox's kernel,
// made now by an empty cell, so that a cwd that is not a directory there
// is refused here rather than by the context's first cell.
func (d *Door) createContext(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var body struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkLanguage(body.Language); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.Cwd == "" {
		body.Cwd = seam.HomeDir
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	c := codeContext{ID: hex.EncodeToString(raw[:]), Language: "python", Cwd: body.Cwd}
	cc := &seam.CellContext{ID: c.ID, Cwd: c.Cwd}
	if err := seam.CheckContext("cwd", cc); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !d.alive(w, r) {
		return
	}
	// Held before the cell runs, so that concurrent creates cannot pass
	// the bound together; given back if the cell fails.
	err := d.records.update(t.id, t.owner, d.templateOf(t.id), func(rec *record) error {
		if len(rec.Contexts) >= maxContexts {
			return fmt.Errorf("sandbox %s has %d contexts besides its default one, the most it may: remove one first", t.id, maxContexts)
		}
		rec.Contexts = append(rec.Contexts, c)
		return nil
	})
	if err != nil {
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	status, msg := d.contextCell(r.Context(), t, &api.Request{Op: api.OpExec, Session: t.id, Code: "pass", Context: cc})
	if status != 0 {
		_ = d.forgetContext(t, c.ID)
		writeError(w, status, "create a context in "+c.Cwd+": "+msg)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// contextCell runs one of the door's own cells on a context and returns
// the status and message of its failure (0 if it ran well).
func (d *Door) contextCell(ctx context.Context, t target, req *api.Request) (int, string) {
	resp, e := d.callWhileBusy(ctx, t.owner, req, nil)
	if e != nil {
		return statusOf(e), e.Code + ": " + e.Message
	}
	if res := resp.Result; res != nil && res.Status != seam.StatusOK {
		l, _ := cellError(res)
		return http.StatusBadRequest, l.Name + ": " + l.Value
	}
	return 0, ""
}

func (d *Door) forgetContext(t target, id string) error {
	return d.records.update(t.id, t.owner, d.templateOf(t.id), func(rec *record) error {
		for i, c := range rec.Contexts {
			if c.ID == id {
				rec.Contexts = append(rec.Contexts[:i], rec.Contexts[i+1:]...)
				return nil
			}
		}
		return errContextNotFound
	})
}

var errContextNotFound = errors.New("no such context")

// namedContext finds the route's context for restart and remove, having
// answered if it cannot be had.
func (d *Door) namedContext(w http.ResponseWriter, r *http.Request, verb string) (target, *seam.CellContext, bool) {
	t, id := targetOf(r.Context()), r.PathValue("ctx")
	if id == defaultContext {
		writeError(w, http.StatusBadRequest, "the default context is the sandbox's main namespace, which jailcell does not "+verb+": make a context with POST /contexts for a namespace that can be")
		return t, nil, false
	}
	cc, ok := d.contextOf(t, id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return t, nil, false
	}
	return t, cc, d.alive(w, r)
}

// restartContext empties a context's namespace; its next cell starts in
// the context's first directory again.
func (d *Door) restartContext(w http.ResponseWriter, r *http.Request) {
	t, cc, ok := d.namedContext(w, r, "restart")
	if !ok {
		return
	}
	cc.Reset = true
	if status, msg := d.contextCell(r.Context(), t, &api.Request{Op: api.OpExec, Session: t.id, Context: cc}); status != 0 {
		writeError(w, status, "restart context "+cc.ID+": "+msg)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

// removeContext drops a context's namespace from the kernel and forgets
// the context.
func (d *Door) removeContext(w http.ResponseWriter, r *http.Request) {
	t, cc, ok := d.namedContext(w, r, "remove")
	if !ok {
		return
	}
	cc.Reset = true
	if status, msg := d.contextCell(r.Context(), t, &api.Request{Op: api.OpExec, Session: t.id, Context: cc}); status != 0 {
		writeError(w, status, "remove context "+cc.ID+": "+msg)
		return
	}
	if err := d.forgetContext(t, cc.ID); err != nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", cc.ID))
		return
	}
	writeJSON(w, http.StatusOK, nil)
}
