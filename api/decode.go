package api

// Decoding and validating a wire request: one decoder for every front
// door, which names the field that was wrong and what it allows.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

// DecodeRequest parses and validates one wire request. On failure the
// returned Request is still non-nil and carries the id if one could be read
// (else a JSON null), so the caller can answer it. Unknown fields are
// ignored; a known field of the wrong type is refused by name.
func DecodeRequest(line []byte) (*Request, *Error) {
	req := &Request{ID: nullID}
	if !utf8.Valid(line) {
		return req, badRequest("request is not valid UTF-8 (first bad byte at offset %d)", invalidUTF8At(line))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		if k := jsonKind(line); k != "" && k != "object" && json.Valid(line) {
			return req, badRequest("request must be a JSON object, got %s", k)
		}
		if se, ok := err.(*json.SyntaxError); ok {
			return req, badRequest("request is not valid JSON: %v (at byte %d)", se, se.Offset)
		}
		return req, badRequest("request is not valid JSON: %v", err)
	}
	if fields == nil { // the line was "null"
		return req, badRequest("request must be a JSON object, got null")
	}

	d := decoder{fields: fields}
	if raw, ok := d.present("id"); !ok {
		return req, badRequest(`field "id" is required: a string or number, echoed in the response`)
	} else if k := jsonKind(raw); k != "string" && k != "number" {
		return req, badRequest(`field "id" must be a string or number, got %s`, k)
	} else {
		req.ID = raw
	}

	d.str("op", &req.Op)
	d.str("code", &req.Code)
	d.str("session", &req.Session)
	d.seconds("timeout_s", &req.TimeoutS)
	d.boolean("stream", &req.Stream)
	d.boolean("snapshot", &req.Snapshot)
	d.boolean("raw_ansi", &req.RawANSI)
	d.files(&req.Files)
	d.context(&req.Context)
	d.str("path", &req.Path)
	d.str("to", &req.To)
	d.base64("data", &req.Data)
	d.stringMap("metadata", "file metadata", &req.Metadata)
	d.seconds("ttl_s", &req.TTLS)
	d.seconds("max_lifetime_s", &req.MaxLifetimeS)
	d.str("policy", &req.Policy)
	d.limits(&req.Limits)
	d.str("persist", &req.Persist)
	d.strings("requirements", &req.Requirements)
	d.boolean("hibernate_on_idle", &req.HibernateOnIdle)
	d.fix(&req.Fix)
	d.boolean("memory", &req.Memory)
	d.boolean("force", &req.Force)
	d.str("action", &req.Action)
	d.count("cursor_pos", &req.CursorPos)
	var detail *int
	d.count("detail_level", &detail)
	if detail != nil {
		req.DetailLevel = *detail
	}
	d.str("cmd", &req.Cmd)
	d.stringMap("envs", "environment variables", &req.Envs)
	d.str("cwd", &req.Cwd)
	d.boolean("background", &req.Background)
	d.str("job", &req.Job)
	d.boolean("stdin", &req.Stdin)
	d.pty(&req.PTY)
	d.str("input", &req.Input)
	d.boolean("eof", &req.EOF)
	d.str("watch", &req.Watch)
	d.boolean("recursive", &req.Recursive)
	if d.err != nil {
		return req, d.err
	}
	if _, ok := d.present("data"); ok && req.Data == nil {
		req.Data = []byte{} // present but empty: an empty file, not a missing field
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	return req, nil
}

// Validate checks what an op needs, whichever transport built the request.
func (r *Request) Validate() *Error {
	need := func(field, what string, have bool) *Error {
		if have {
			return nil
		}
		return badRequest("op %q needs field %q (%s)", r.Op, field, what)
	}
	if r.Op == "" {
		return badRequest(`field "op" is required; allowed: %s`, allowedOps)
	}
	if r.TimeoutS < 0 || math.IsNaN(r.TimeoutS) {
		return badRequest(`field "timeout_s" = %g: must be a number of seconds >= 0 (0 or absent: the policy's default)`, r.TimeoutS)
	}
	if r.TTLS < 0 || math.IsNaN(r.TTLS) {
		return badRequest(`field "ttl_s" = %g: must be a number of seconds >= 0 (0 or absent: the default)`, r.TTLS)
	}
	if r.MaxLifetimeS < 0 || math.IsNaN(r.MaxLifetimeS) {
		return badRequest(`field "max_lifetime_s" = %g: must be a number of seconds >= 0 (0 or absent: the configured max_lifetime)`, r.MaxLifetimeS)
	}
	if r.MaxLifetimeS != 0 && r.Op != OpCreate {
		return badRequest(`field "max_lifetime_s" is only allowed with op "create"`)
	}
	if r.HibernateOnIdle && r.Op != OpCreate {
		return badRequest(`field "hibernate_on_idle" is only allowed with op "create": it says what a session's idle TTL does to it`)
	}
	if r.RawANSI && r.Op != OpExec {
		return badRequest(`field "raw_ansi" is only allowed with op "exec": it keeps a cell's output as written`)
	}
	if (r.Stdin || r.PTY != nil || r.Input != "" || r.EOF) && r.Op != OpCommand {
		return badRequest(`fields "stdin", "pty", "input" and "eof" are only allowed with op "command": they are a command's input and terminal`)
	}
	if r.To != "" && r.Op != OpRename {
		return badRequest(`field "to" is only allowed with op "rename": it is the new path`)
	}
	if r.Metadata != nil && r.Op != OpUpload {
		return badRequest(`field "metadata" is only allowed with op "upload": it is the uploaded file's metadata`)
	}
	if r.Context != nil && r.Op != OpExec {
		return badRequest(`field "context" is only allowed with op "exec": it names the namespace a cell runs in`)
	}
	switch r.Op {
	case OpPing, OpSessions:
		return nil
	case OpExec:
		// Empty code with a context's reset removes the context.
		if err := need("code", "the cell's Python source, a non-empty string", r.Code != "" || (r.Context != nil && r.Context.Reset)); err != nil {
			return err
		}
		for i, f := range r.Files {
			if f.Path == "" {
				return badRequest(`field "files[%d].path" is required: a path relative to the working directory`, i)
			}
		}
		if r.Session != "" && r.Policy != "" {
			// Ignoring it would let a client believe a stricter policy applied.
			return badRequest(`field "policy" is not allowed with "session": a session runs under the policy it was created with`)
		}
		if r.Limits != nil {
			return badRequest(`field "limits" is only allowed with op "create"; a one-shot exec runs under a named "policy"`)
		}
		if r.Snapshot && r.Session == "" {
			return badRequest(`field "snapshot" needs "session": a one-shot cell has nothing to roll back to`)
		}
		if r.Fix != nil && r.Fix.MaxAttempts < 1 {
			return badRequest(`field "fix.max_attempts" = %d: must be at least 1 (the first run counts)`, r.Fix.MaxAttempts)
		}
		return nil
	case OpCreate:
		return nil
	case OpUpload:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		if err := need("path", "a path relative to the working directory", r.Path != ""); err != nil {
			return err
		}
		return need("data", "the content, base64", r.Data != nil)
	case OpDownload:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("path", "a path relative to the working directory", r.Path != "")
	case OpFiles, OpClose, OpHibernate, OpRestore, OpFork, OpSnapshot, OpRollback, OpInterrupt:
		return need("session", "a session id", r.Session != "")
	case OpComplete, OpInspect, OpIsComplete:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		if r.CursorPos != nil && *r.CursorPos < 0 {
			return badRequest(`field "cursor_pos" = %d: must be an offset in "code" in characters, >= 0 (absent: the end of the code)`, *r.CursorPos)
		}
		if r.DetailLevel != 0 && r.DetailLevel != 1 {
			return badRequest(`field "detail_level" = %d: allowed 0 (default) or 1`, r.DetailLevel)
		}
		return nil
	case OpCommand:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		switch r.Action {
		case "", seam.CommandStart:
			return need("cmd", "a bash command line, a non-empty string", r.Cmd != "")
		case seam.CommandWait, seam.CommandKill, seam.CommandInput:
			return need("job", "the job a background start answered", r.Job != "")
		case seam.CommandResize:
			if err := need("job", "the job a background start answered", r.Job != ""); err != nil {
				return err
			}
			return need("pty", `the terminal's new size, {"rows": R, "cols": C}`, r.PTY != nil)
		}
		return badRequest(`field "action" = %q: allowed for op "command": "start" (default), "wait", "kill", "input" or "resize"`, r.Action)
	case OpInfo, OpMetrics:
		return need("session", "a session id", r.Session != "")
	case OpSetTimeout:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("timeout_s", "seconds from now, > 0", r.TimeoutS > 0)
	case OpStat, OpRemove, OpMkdir:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		return need("path", "a path relative to the working directory", r.Path != "")
	case OpRename:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		if err := need("path", "the path to move, relative to the working directory", r.Path != ""); err != nil {
			return err
		}
		return need("to", "the new path, relative to the working directory", r.To != "")
	case OpWatch:
		if err := need("session", "a session id", r.Session != ""); err != nil {
			return err
		}
		switch r.Action {
		case "", seam.WatchStart:
			return nil
		case seam.WatchPoll, seam.WatchStop:
			return need("watch", "the id a watch start answered", r.Watch != "")
		}
		return badRequest(`field "action" = %q: allowed for op "watch": "start" (default), "poll" or "stop"`, r.Action)
	case OpFailures:
		if r.Action != "" && r.Action != "list" && r.Action != "clear" {
			return badRequest(`field "action" = %q: allowed "list" (default) or "clear"`, r.Action)
		}
		return nil
	}
	return badRequest(`unknown op %q; allowed: %s`, r.Op, allowedOps)
}

// decoder reads known fields out of a request object, keeping the first
// error. JSON null counts as absent, the way most clients spell "unset".
type decoder struct {
	fields map[string]json.RawMessage
	err    *Error
}

func (d *decoder) present(name string) (json.RawMessage, bool) {
	raw, ok := d.fields[name]
	if !ok || jsonKind(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// get returns the raw value if it is present and no error came before.
func (d *decoder) get(name string) (json.RawMessage, bool) {
	if d.err != nil {
		return nil, false
	}
	return d.present(name)
}

func (d *decoder) wrongType(name, want string, raw json.RawMessage) {
	d.err = badRequest("field %q must be %s, got %s", name, want, jsonKind(raw))
}

func (d *decoder) str(name string, dst *string) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "string" || json.Unmarshal(raw, dst) != nil {
		d.wrongType(name, "a string", raw)
	}
}

func (d *decoder) boolean(name string, dst *bool) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "boolean" || json.Unmarshal(raw, dst) != nil {
		d.wrongType(name, "a boolean", raw)
	}
}

func (d *decoder) seconds(name string, dst *float64) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	if jsonKind(raw) != "number" {
		d.wrongType(name, "a number of seconds", raw)
		return
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		d.err = badRequest("field %q = %s is out of range: must be a number of seconds >= 0", name, raw)
		return
	}
	if *dst < 0 {
		d.err = badRequest("field %q = %s: must be a number of seconds >= 0 (0 or absent: the default)", name, raw)
	}
}

func (d *decoder) base64(name string, dst *[]byte) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var s string
	if jsonKind(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		d.wrongType(name, "a base64 string", raw)
		return
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		d.err = badRequest("field %q is not valid base64 (standard alphabet, padded): %v", name, err)
		return
	}
	*dst = b
}

func (d *decoder) strings(name string, dst *[]string) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var items []json.RawMessage
	if jsonKind(raw) != "array" || json.Unmarshal(raw, &items) != nil {
		d.wrongType(name, "an array of strings", raw)
		return
	}
	if len(items) == 0 {
		return // [] means what absent means; nil keeps a round trip exact
	}
	out := make([]string, len(items))
	for i, it := range items {
		if jsonKind(it) != "string" || json.Unmarshal(it, &out[i]) != nil {
			d.err = badRequest("field %q must be an array of strings, element %d is %s", name, i, jsonKind(it))
			return
		}
	}
	*dst = out
}

// stringMap decodes field name, an object of string values (what says
// what it maps); seam.CheckEnvs and the session's metadata check bound it.
func (d *decoder) stringMap(name, what string, dst *map[string]string) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType(name, "an object of "+what+", name to string value", raw)
		return
	}
	if len(obj) == 0 {
		return
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		var s string
		if jsonKind(v) != "string" || json.Unmarshal(v, &s) != nil {
			d.err = badRequest("field %q must map names to strings, %.64q is %s", name, k, jsonKind(v))
			return
		}
		out[k] = s
	}
	*dst = out
}

// count decodes a non-negative integer (a JSON number without fraction).
func (d *decoder) count(name string, dst **int) {
	raw, ok := d.get(name)
	if !ok {
		return
	}
	var n int
	if jsonKind(raw) != "number" || json.Unmarshal(raw, &n) != nil {
		d.wrongType(name, "an integer", raw)
		return
	}
	if n < 0 {
		d.err = badRequest("field %q = %d: must be >= 0", name, n)
		return
	}
	*dst = &n
}

// fix decodes {"max_attempts": integer}; an unknown key is refused, like
// limits, so a misspelt option is not silently ignored.
func (d *decoder) fix(dst **Fix) {
	raw, ok := d.get("fix")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("fix", `an object {"max_attempts": integer}`, raw)
		return
	}
	f := &Fix{}
	for key, val := range obj {
		if key != "max_attempts" {
			d.err = badRequest(`field "fix.%s" is not a fix option; allowed: max_attempts`, key)
			return
		}
		if jsonKind(val) != "number" || json.Unmarshal(val, &f.MaxAttempts) != nil {
			d.err = badRequest(`field "fix.max_attempts" must be an integer, got %s`, jsonValueDesc(val))
			return
		}
	}
	if _, ok := obj["max_attempts"]; !ok {
		d.err = badRequest(`field "fix.max_attempts" is required: the number of runs, 1 to the configured ceiling`)
		return
	}
	*dst = f
}

// pty decodes {"rows": integer, "cols": integer}, each 1 to
// seam.MaxPTYSide; an unknown key is refused, like fix's.
func (d *decoder) pty(dst **seam.PTYSize) {
	raw, ok := d.get("pty")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("pty", `an object {"rows": integer, "cols": integer}`, raw)
		return
	}
	p := &seam.PTYSize{}
	for key, val := range obj {
		var n *int
		switch key {
		case "rows":
			n = &p.Rows
		case "cols":
			n = &p.Cols
		default:
			d.err = badRequest(`field "pty.%s" is not a terminal size; allowed: rows, cols`, key)
			return
		}
		if jsonKind(val) != "number" || json.Unmarshal(val, n) != nil {
			d.err = badRequest(`field "pty.%s" must be an integer, got %s`, key, jsonValueDesc(val))
			return
		}
	}
	if err := p.Check(`field "pty"`); err != nil {
		d.err = badRequest("%v", err)
		return
	}
	*dst = p
}

// context decodes {"id": string, "cwd": string, "reset": boolean}; an
// unknown key is refused, like fix's.
func (d *decoder) context(dst **seam.CellContext) {
	raw, ok := d.get("context")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("context", `an object {"id": string, "cwd": string, "reset": boolean}`, raw)
		return
	}
	c := &seam.CellContext{}
	for key, val := range obj {
		var err error
		switch key {
		case "id", "cwd":
			dst := &c.ID
			if key == "cwd" {
				dst = &c.Cwd
			}
			if jsonKind(val) != "string" {
				err = fmt.Errorf("a string")
			} else {
				err = json.Unmarshal(val, dst)
			}
		case "reset":
			if jsonKind(val) != "boolean" {
				err = fmt.Errorf("a boolean")
			} else {
				err = json.Unmarshal(val, &c.Reset)
			}
		default:
			d.err = badRequest(`field "context.%s" is not a context option; allowed: id, cwd, reset`, key)
			return
		}
		if err != nil {
			d.err = badRequest(`field "context.%s" must be %v, got %s`, key, err, jsonValueDesc(val))
			return
		}
	}
	*dst = c
}

func (d *decoder) files(dst *[]seam.File) {
	raw, ok := d.get("files")
	if !ok {
		return
	}
	var items []json.RawMessage
	if jsonKind(raw) != "array" || json.Unmarshal(raw, &items) != nil {
		d.wrongType("files", `an array of {"path": string, "data": base64 string}`, raw)
		return
	}
	if len(items) == 0 {
		return // [] means what absent means; nil keeps a round trip exact
	}
	out := make([]seam.File, len(items))
	for i, it := range items {
		var obj map[string]json.RawMessage
		if jsonKind(it) != "object" || json.Unmarshal(it, &obj) != nil {
			d.err = badRequest(`field "files[%d]" must be an object {"path": string, "data": base64 string}, got %s`, i, jsonKind(it))
			return
		}
		sub := decoder{fields: obj}
		sub.str("path", &out[i].Path)
		sub.base64("data", &out[i].Data)
		if sub.err != nil {
			sub.err.Message = strings.Replace(sub.err.Message, `field "`, fmt.Sprintf(`field "files[%d].`, i), 1)
			d.err = sub.err
			return
		}
		if out[i].Data == nil {
			if _, ok := sub.present("data"); !ok {
				d.err = badRequest(`field "files[%d].data" is required: the content, base64 (empty string for an empty file)`, i)
				return
			}
			out[i].Data = []byte{}
		}
	}
	*dst = out
}

// overrideFields maps each policy.Override JSON name to its field, so a
// field added there is accepted here without an edit.
var overrideFields = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeFor[policy.Override]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && t.Field(i).Type.Kind() == reflect.Pointer {
			m[name] = i
		}
	}
	return m
}()

func overrideNames() string {
	var names []string
	t := reflect.TypeFor[policy.Override]()
	for i := range t.NumField() {
		for n, j := range overrideFields {
			if j == i {
				names = append(names, n)
			}
		}
	}
	return strings.Join(names, ", ")
}

// limits decodes a policy.Override. Unlike the request itself, an unknown
// key is refused: a misspelt limit silently not applied would leave the
// session looser than its caller believes.
func (d *decoder) limits(dst **policy.Override) {
	raw, ok := d.get("limits")
	if !ok {
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		d.wrongType("limits", "an object of limits ("+overrideNames()+")", raw)
		return
	}
	o := &policy.Override{}
	v := reflect.ValueOf(o).Elem()
	for key, val := range obj {
		i, ok := overrideFields[key]
		if !ok {
			d.err = badRequest(`field "limits.%s" is not a limit; allowed: %s`, key, overrideNames())
			return
		}
		if jsonKind(val) == "null" {
			continue
		}
		ft := v.Field(i).Type()
		p := reflect.New(ft.Elem())
		if err := json.Unmarshal(val, p.Interface()); err != nil {
			want := "a number"
			switch ft.Elem().Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				want = "an integer"
			case reflect.String:
				want = "a string"
			case reflect.Bool:
				want = "a boolean"
			}
			d.err = badRequest(`field "limits.%s" must be %s, got %s`, key, want, jsonValueDesc(val))
			return
		}
		v.Field(i).Set(p)
	}
	*dst = o
}

// jsonKind names the JSON type of a value by its first byte; "" if empty.
func jsonKind(raw []byte) string {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			return "string"
		case '{':
			return "object"
		case '[':
			return "array"
		case 't', 'f':
			return "boolean"
		case 'n':
			return "null"
		default:
			return "number"
		}
	}
	return ""
}

// jsonValueDesc is a short description of a value for an error message.
func jsonValueDesc(raw json.RawMessage) string {
	if k := jsonKind(raw); k != "number" {
		return k
	}
	if len(raw) > 32 {
		return "a number"
	}
	return string(raw)
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// duration turns seconds into a Duration, saturating instead of
// overflowing, and keeping any positive value positive (0 means "default"
// downstream, which a tiny timeout must not become).
func duration(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	if seconds >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	if d := time.Duration(seconds * float64(time.Second)); d > 0 {
		return d
	}
	return 1
}
