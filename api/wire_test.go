package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	// session registers isolate's sentinels with seam at init: errorFor
	// classes an isolate error only then, as in the daemon, which links
	// session.
	_ "github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/session/seam"
)

// decodeCase is one wire line and what DecodeRequest must make of it. The
// same lines seed FuzzDecodeRequest.
type decodeCase struct {
	name string
	line string
	// wantErr: substrings the bad_request message must contain ("" = ok).
	wantErr []string
	// wantID is the id the answer must carry ("null" when unreadable).
	wantID string
	check  func(t *testing.T, r *Request)
}

var decodeCases = []decodeCase{
	// Good requests.
	{name: "ping", line: `{"id":"1","op":"ping"}`, wantID: `"1"`},
	{name: "numeric id kept verbatim", line: `{"id":12345678901234567890,"op":"ping"}`, wantID: `12345678901234567890`},
	{name: "float id kept verbatim", line: `{"id":1.50,"op":"ping"}`, wantID: `1.50`},
	{name: "escaped id kept verbatim", line: `{"id":"a\u0041\"b","op":"ping"}`, wantID: `"a\u0041\"b"`},
	{name: "exec one-shot", line: `{"id":2,"op":"exec","code":"print(1+1)","timeout_s":60}`, wantID: `2`,
		check: func(t *testing.T, r *Request) {
			if r.Code != "print(1+1)" || r.TimeoutS != 60 || r.Session != "" {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "exec with files and stream", line: `{"id":"x","op":"exec","code":"1","stream":true,"files":[{"path":"sales.xlsx","data":"aGVsbG8="},{"path":"empty","data":""}]}`, wantID: `"x"`,
		check: func(t *testing.T, r *Request) {
			if !r.Stream || len(r.Files) != 2 || string(r.Files[0].Data) != "hello" || r.Files[1].Data == nil || len(r.Files[1].Data) != 0 {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "exec in session", line: `{"id":3,"op":"exec","session":"s1","code":"x"}`, wantID: `3`},
	{name: "interrupt", line: `{"id":3,"op":"interrupt","session":"s1"}`, wantID: `3`,
		check: func(t *testing.T, r *Request) {
			if r.Op != OpInterrupt || r.Session != "s1" {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "unknown fields ignored", line: `{"id":4,"op":"ping","frobnicate":{"a":[1,2]},"Code":5}`, wantID: `4`},
	{name: "null means absent", line: `{"id":5,"op":"exec","code":"1","timeout_s":null,"session":null}`, wantID: `5`},
	{name: "zero timeout is the default", line: `{"id":6,"op":"exec","code":"1","timeout_s":0}`, wantID: `6`},
	{name: "create with everything", line: `{"id":7,"op":"create","ttl_s":600,"policy":"default","limits":{"memory_bytes":268435456,"cpus":0.5,"timeout_s":30},"persist":"proj","requirements":["tabulate==0.9"]}`, wantID: `7`,
		check: func(t *testing.T, r *Request) {
			if r.Limits == nil || r.Limits.MemoryBytes == nil || *r.Limits.MemoryBytes != 256<<20 || *r.Limits.CPUs != 0.5 || r.Limits.Pids != nil {
				t.Errorf("limits %+v", r.Limits)
			}
			if r.TTLS != 600 || r.Persist != "proj" || len(r.Requirements) != 1 {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "upload", line: `{"id":8,"op":"upload","session":"s","path":"a.txt","data":"aGk="}`, wantID: `8`},
	{name: "upload empty file", line: `{"id":9,"op":"upload","session":"s","path":"a.txt","data":""}`, wantID: `9`,
		check: func(t *testing.T, r *Request) {
			if r.Data == nil || len(r.Data) != 0 {
				t.Errorf("data %#v, want empty non-nil", r.Data)
			}
		}},
	{name: "download", line: `{"id":10,"op":"download","session":"s","path":"a.txt"}`, wantID: `10`},
	{name: "files", line: `{"id":11,"op":"files","session":"s"}`, wantID: `11`},
	{name: "close", line: `{"id":12,"op":"close","session":"s"}`, wantID: `12`},
	{name: "sessions", line: `{"id":13,"op":"sessions"}`, wantID: `13`},
	{name: "whitespace around", line: " \t{\"id\":14,\"op\":\"ping\"}  ", wantID: `14`},

	// Lines that are not requests at all: id null.
	{name: "invalid UTF-8", line: "{\"id\":1,\"op\":\"exec\",\"code\":\"\xff\xfe\"}", wantErr: []string{"not valid UTF-8", "offset 28"}, wantID: "null"},
	{name: "invalid JSON", line: `{"id":1,"op":`, wantErr: []string{"not valid JSON"}, wantID: "null"},
	{name: "garbage", line: `hello`, wantErr: []string{"not valid JSON", "at byte"}, wantID: "null"},
	{name: "trailing garbage", line: `{"id":1,"op":"ping"} x`, wantErr: []string{"not valid JSON"}, wantID: "null"},
	{name: "array", line: `[1,2]`, wantErr: []string{"must be a JSON object, got array"}, wantID: "null"},
	{name: "string", line: `"ping"`, wantErr: []string{"must be a JSON object, got string"}, wantID: "null"},
	{name: "number", line: `42`, wantErr: []string{"must be a JSON object, got number"}, wantID: "null"},
	{name: "null", line: `null`, wantErr: []string{"must be a JSON object, got null"}, wantID: "null"},
	{name: "empty", line: ``, wantErr: []string{"not valid JSON"}, wantID: "null"},
	{name: "missing id", line: `{"op":"ping"}`, wantErr: []string{`field "id" is required`}, wantID: "null"},
	{name: "null id", line: `{"id":null,"op":"ping"}`, wantErr: []string{`field "id" is required`}, wantID: "null"},
	{name: "object id", line: `{"id":{"a":1},"op":"ping"}`, wantErr: []string{`field "id" must be a string or number, got object`}, wantID: "null"},
	{name: "bool id", line: `{"id":true,"op":"ping"}`, wantErr: []string{`field "id" must be a string or number, got boolean`}, wantID: "null"},

	// Requests with an id but something wrong: the id comes back.
	{name: "missing op", line: `{"id":1}`, wantErr: []string{`field "op" is required`, "ping, exec, create, upload, download, files, close, sessions"}, wantID: `1`},
	{name: "unknown op", line: `{"id":1,"op":"eval"}`, wantErr: []string{`unknown op "eval"`, "allowed: ping, exec, create, upload, download, files, close, sessions"}, wantID: `1`},
	{name: "op not a string", line: `{"id":1,"op":7}`, wantErr: []string{`field "op" must be a string, got number`}, wantID: `1`},
	{name: "code not a string", line: `{"id":1,"op":"exec","code":5}`, wantErr: []string{`field "code" must be a string, got number`}, wantID: `1`},
	{name: "code an array", line: `{"id":1,"op":"exec","code":["print(1)"]}`, wantErr: []string{`field "code" must be a string, got array`}, wantID: `1`},
	{name: "missing code", line: `{"id":1,"op":"exec"}`, wantErr: []string{`needs field "code"`}, wantID: `1`},
	{name: "empty code", line: `{"id":1,"op":"exec","code":""}`, wantErr: []string{`needs field "code"`}, wantID: `1`},
	{name: "negative timeout", line: `{"id":1,"op":"exec","code":"1","timeout_s":-1}`, wantErr: []string{`field "timeout_s" = -1`, ">= 0"}, wantID: `1`},
	{name: "string timeout", line: `{"id":1,"op":"exec","code":"1","timeout_s":"60"}`, wantErr: []string{`field "timeout_s" must be a number of seconds, got string`}, wantID: `1`},
	{name: "huge timeout", line: `{"id":1,"op":"exec","code":"1","timeout_s":1e999}`, wantErr: []string{`field "timeout_s" = 1e999 is out of range`}, wantID: `1`},
	{name: "stream not bool", line: `{"id":1,"op":"exec","code":"1","stream":"yes"}`, wantErr: []string{`field "stream" must be a boolean, got string`}, wantID: `1`},
	{name: "files not array", line: `{"id":1,"op":"exec","code":"1","files":{"path":"a"}}`, wantErr: []string{`field "files" must be an array`}, wantID: `1`},
	{name: "file not object", line: `{"id":1,"op":"exec","code":"1","files":["a"]}`, wantErr: []string{`field "files[0]" must be an object`}, wantID: `1`},
	{name: "file bad base64", line: `{"id":1,"op":"exec","code":"1","files":[{"path":"a","data":"aGk="},{"path":"b","data":"!!!"}]}`, wantErr: []string{`field "files[1].data" is not valid base64`}, wantID: `1`},
	{name: "file path not string", line: `{"id":1,"op":"exec","code":"1","files":[{"path":3,"data":""}]}`, wantErr: []string{`field "files[0].path" must be a string`}, wantID: `1`},
	{name: "file missing path", line: `{"id":1,"op":"exec","code":"1","files":[{"data":""}]}`, wantErr: []string{`field "files[0].path" is required`}, wantID: `1`},
	{name: "file missing data", line: `{"id":1,"op":"exec","code":"1","files":[{"path":"a"}]}`, wantErr: []string{`field "files[0].data" is required`}, wantID: `1`},
	{name: "policy with session", line: `{"id":1,"op":"exec","code":"1","session":"s","policy":"small"}`, wantErr: []string{`field "policy" is not allowed with "session"`}, wantID: `1`},
	{name: "limits on exec", line: `{"id":1,"op":"exec","code":"1","limits":{"pids":8}}`, wantErr: []string{`field "limits" is only allowed with op "create"`}, wantID: `1`},
	{name: "max lifetime negative", line: `{"id":1,"op":"create","max_lifetime_s":-1}`, wantErr: []string{`field "max_lifetime_s" = -1`}, wantID: `1`},
	{name: "max lifetime on exec", line: `{"id":1,"op":"exec","code":"1","max_lifetime_s":5}`, wantErr: []string{`field "max_lifetime_s" is only allowed with op "create"`}, wantID: `1`},
	{name: "hibernate_on_idle on create", line: `{"id":1,"op":"create","hibernate_on_idle":true}`, wantID: `1`,
		check: func(t *testing.T, r *Request) {
			if !r.HibernateOnIdle {
				t.Errorf("hibernate_on_idle not decoded: %+v", r)
			}
		}},
	{name: "hibernate_on_idle on exec", line: `{"id":1,"op":"exec","code":"1","hibernate_on_idle":true}`, wantErr: []string{`field "hibernate_on_idle" is only allowed with op "create"`}, wantID: `1`},
	{name: "metadata on upload", line: `{"id":1,"op":"upload","session":"s","path":"a","data":"","metadata":{"k":"v"}}`, wantID: `1`,
		check: func(t *testing.T, r *Request) {
			if r.Metadata["k"] != "v" {
				t.Errorf("metadata not decoded: %+v", r)
			}
		}},
	{name: "metadata not strings", line: `{"id":1,"op":"upload","session":"s","path":"a","data":"","metadata":{"k":1}}`, wantErr: []string{`field "metadata" must map names to strings`}, wantID: `1`},
	{name: "metadata on download", line: `{"id":1,"op":"download","session":"s","path":"a","metadata":{"k":"v"}}`, wantErr: []string{`field "metadata" is only allowed with op "upload"`}, wantID: `1`},
	{name: "snapshot on a one-shot exec", line: `{"id":1,"op":"exec","code":"1","snapshot":true}`, wantErr: []string{`field "snapshot" needs "session"`}, wantID: `1`},
	{name: "snapshot not a bool", line: `{"id":1,"op":"exec","code":"1","session":"s","snapshot":"yes"}`, wantErr: []string{`"snapshot"`}, wantID: `1`},
	{name: "raw_ansi on exec", line: `{"id":1,"op":"exec","code":"1","raw_ansi":true}`, wantID: `1`,
		check: func(t *testing.T, r *Request) {
			if !r.RawANSI {
				t.Errorf("raw_ansi not decoded: %+v", r)
			}
		}},
	{name: "raw_ansi false is the default", line: `{"id":1,"op":"exec","code":"1","raw_ansi":false}`, wantID: `1`,
		check: func(t *testing.T, r *Request) {
			if r.RawANSI {
				t.Errorf("raw_ansi false decoded as true")
			}
		}},
	{name: "raw_ansi not a bool", line: `{"id":1,"op":"exec","code":"1","raw_ansi":"yes"}`, wantErr: []string{`field "raw_ansi" must be a boolean, got string`}, wantID: `1`},
	{name: "raw_ansi on download", line: `{"id":1,"op":"download","session":"s","path":"a","raw_ansi":true}`, wantErr: []string{`field "raw_ansi" is only allowed with op "exec"`}, wantID: `1`},
	{name: "rollback without session", line: `{"id":1,"op":"rollback"}`, wantErr: []string{`op "rollback" needs field "session"`}, wantID: `1`},
	{name: "complete", line: `{"id":4,"op":"complete","session":"s1","code":"é.x","cursor_pos":2}`, wantID: `4`,
		check: func(t *testing.T, r *Request) {
			if r.Op != OpComplete || r.CursorPos == nil || *r.CursorPos != 2 {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "inspect with detail", line: `{"id":4,"op":"inspect","session":"s1","code":"len","detail_level":1}`, wantID: `4`,
		check: func(t *testing.T, r *Request) {
			if r.DetailLevel != 1 || r.CursorPos != nil {
				t.Errorf("got %+v", r)
			}
		}},
	{name: "is_complete with empty code", line: `{"id":4,"op":"is_complete","session":"s1","code":""}`, wantID: `4`},
	{name: "complete without session", line: `{"id":1,"op":"complete","code":"x"}`, wantErr: []string{`op "complete" needs field "session"`}, wantID: `1`},
	{name: "cursor_pos a string", line: `{"id":1,"op":"complete","session":"s1","code":"x","cursor_pos":"1"}`, wantErr: []string{`field "cursor_pos" must be an integer, got string`}, wantID: `1`},
	{name: "cursor_pos negative", line: `{"id":1,"op":"complete","session":"s1","code":"x","cursor_pos":-1}`, wantErr: []string{`field "cursor_pos" = -1: must be >= 0`}, wantID: `1`},
	{name: "cursor_pos a fraction", line: `{"id":1,"op":"complete","session":"s1","code":"x","cursor_pos":1.5}`, wantErr: []string{`field "cursor_pos" must be an integer`}, wantID: `1`},
	{name: "detail_level out of range", line: `{"id":1,"op":"inspect","session":"s1","code":"x","detail_level":3}`, wantErr: []string{`field "detail_level" = 3: allowed 0 (default) or 1`}, wantID: `1`},
	{name: "interrupt without session", line: `{"id":1,"op":"interrupt"}`, wantErr: []string{`op "interrupt" needs field "session"`}, wantID: `1`},
	{name: "upload missing session", line: `{"id":1,"op":"upload","path":"a","data":""}`, wantErr: []string{`op "upload" needs field "session"`}, wantID: `1`},
	{name: "upload missing path", line: `{"id":1,"op":"upload","session":"s","data":""}`, wantErr: []string{`op "upload" needs field "path"`}, wantID: `1`},
	{name: "upload missing data", line: `{"id":1,"op":"upload","session":"s","path":"a"}`, wantErr: []string{`op "upload" needs field "data"`}, wantID: `1`},
	{name: "upload bad base64", line: `{"id":1,"op":"upload","session":"s","path":"a","data":"a b"}`, wantErr: []string{`field "data" is not valid base64`}, wantID: `1`},
	{name: "upload data not string", line: `{"id":1,"op":"upload","session":"s","path":"a","data":[1]}`, wantErr: []string{`field "data" must be a base64 string, got array`}, wantID: `1`},
	{name: "download missing session", line: `{"id":1,"op":"download","path":"a"}`, wantErr: []string{`op "download" needs field "session"`}, wantID: `1`},
	{name: "download missing path", line: `{"id":1,"op":"download","session":"s"}`, wantErr: []string{`op "download" needs field "path"`}, wantID: `1`},
	{name: "files missing session", line: `{"id":1,"op":"files"}`, wantErr: []string{`op "files" needs field "session"`}, wantID: `1`},
	{name: "close missing session", line: `{"id":1,"op":"close"}`, wantErr: []string{`op "close" needs field "session"`}, wantID: `1`},
	{name: "session not string", line: `{"id":1,"op":"close","session":1}`, wantErr: []string{`field "session" must be a string, got number`}, wantID: `1`},
	{name: "negative ttl", line: `{"id":1,"op":"create","ttl_s":-5}`, wantErr: []string{`field "ttl_s" = -5`}, wantID: `1`},
	{name: "ttl not number", line: `{"id":1,"op":"create","ttl_s":true}`, wantErr: []string{`field "ttl_s" must be a number of seconds, got boolean`}, wantID: `1`},
	{name: "limits not object", line: `{"id":1,"op":"create","limits":"small"}`, wantErr: []string{`field "limits" must be an object`, "memory_bytes"}, wantID: `1`},
	{name: "unknown limit", line: `{"id":1,"op":"create","limits":{"memory":1}}`, wantErr: []string{`field "limits.memory" is not a limit`, "allowed: memory_bytes, pids, cpus"}, wantID: `1`},
	{name: "fractional integer limit", line: `{"id":1,"op":"create","limits":{"pids":1.5}}`, wantErr: []string{`field "limits.pids" must be an integer, got 1.5`}, wantID: `1`},
	{name: "string limit", line: `{"id":1,"op":"create","limits":{"cpus":"1"}}`, wantErr: []string{`field "limits.cpus" must be a number, got string`}, wantID: `1`},
	{name: "requirements not array", line: `{"id":1,"op":"create","requirements":"numpy"}`, wantErr: []string{`field "requirements" must be an array of strings, got string`}, wantID: `1`},
	{name: "requirement not string", line: `{"id":1,"op":"create","requirements":["a",2]}`, wantErr: []string{`field "requirements" must be an array of strings, element 1 is number`}, wantID: `1`},
	{name: "policy not string", line: `{"id":1,"op":"create","policy":{}}`, wantErr: []string{`field "policy" must be a string, got object`}, wantID: `1`},
}

func TestDecodeRequest(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(tc.line))
			checkDecodeInvariants(t, []byte(tc.line), req, err)
			if got := string(req.ID); got != tc.wantID {
				t.Errorf("id = %s, want %s", got, tc.wantID)
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tc.check != nil {
					tc.check(t, req)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Message, w) {
					t.Errorf("message %q does not contain %q", err.Message, w)
				}
			}
		})
	}
}

// checkDecodeInvariants holds for every input whatsoever; the unit tests
// and the fuzz target share it.
func checkDecodeInvariants(t *testing.T, line []byte, req *Request, err *Error) {
	t.Helper()
	if req == nil {
		t.Fatal("DecodeRequest returned a nil request")
	}
	switch k := jsonKind(req.ID); {
	case string(req.ID) == "null":
	case (k == "string" || k == "number") && json.Valid(req.ID):
	default:
		t.Fatalf("id %q is not null, a string or a number", req.ID)
	}
	// Whatever happened, the answer must be one valid JSON line.
	resp := &Response{ID: req.ID, OK: err == nil}
	if err != nil {
		resp = fail(req.ID, err)
	}
	b, encErr := encodeLine(resp)
	if encErr != nil {
		t.Fatalf("encode answer: %v", encErr)
	}
	if bytes.IndexByte(b, '\n') != len(b)-1 || !json.Valid(b) {
		t.Fatalf("answer is not one JSON line: %q", b)
	}
	if err != nil {
		if err.Code != CodeBadRequest || err.Message == "" {
			t.Fatalf("error %+v: want bad_request with a message", err)
		}
		return
	}
	if verr := req.Validate(); verr != nil {
		t.Fatalf("decoded request fails Validate: %v", verr)
	}
	// A good request survives a round trip through its own marshalling.
	again, err2 := json.Marshal(req)
	if err2 != nil {
		t.Fatalf("marshal request: %v", err2)
	}
	req2, derr := DecodeRequest(again)
	if derr != nil {
		t.Fatalf("re-decode %s: %v", again, derr)
	}
	if !reflect.DeepEqual(normalize(req), normalize(req2)) {
		t.Fatalf("round trip changed the request:\n%+v\n%+v", req, req2)
	}
}

func normalize(r *Request) Request {
	c := *r
	var v any
	_ = json.Unmarshal(c.ID, &v)
	c.ID, _ = json.Marshal(v)
	return c
}

// TestDecodeRequestSeeds runs every file of the fuzz corpus, so a crash
// the fuzzer once found stays a plain unit test.
func TestDecodeRequestSeeds(t *testing.T) {
	seeds, err := filepath.Glob("testdata/fuzz/FuzzDecodeRequest/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(seeds) == 0 {
		t.Fatal("no seeds in testdata/fuzz/FuzzDecodeRequest")
	}
	for _, p := range seeds {
		t.Run(filepath.Base(p), func(t *testing.T) {
			line, err := readSeed(p)
			if err != nil {
				t.Fatal(err)
			}
			req, derr := DecodeRequest(line)
			checkDecodeInvariants(t, line, req, derr)
		})
	}
}

// readSeed parses the "go test fuzz v1" format with a single []byte.
func readSeed(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("%s: not a go test fuzz v1 file", path)
	}
	lit := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(lit, "[]byte(") || !strings.HasSuffix(lit, ")") {
		return nil, fmt.Errorf("%s: want one []byte value", path)
	}
	s, err := strconv.Unquote(lit[len("[]byte(") : len(lit)-1])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return []byte(s), nil
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		want time.Duration
	}{
		{0, 0},
		{-1, 0},
		{1, time.Second},
		{0.25, 250 * time.Millisecond},
		{1e-12, 1},         // positive stays positive: 0 would mean "default"
		{1e300, 1<<63 - 1}, // saturates instead of wrapping negative
	} {
		if got := duration(tc.s); got != tc.want {
			t.Errorf("duration(%g) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestErrorFor(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("exec: %w: path escapes", seam.ErrBadRequest), CodeBadRequest},
		{fmt.Errorf("create: %w", fmt.Errorf("%w: pids = 1", policy.ErrInvalid)), CodeBadRequest},
		{fmt.Errorf("%w: abc expired at 12:00", seam.ErrNotFound), CodeNotFound},
		{fmt.Errorf("exec: session abc %w: max_lifetime 14s reached at 12:00", seam.ErrExpired), CodeExpired},
		{seam.ErrLimit, CodeLimit},
		{isolate.ErrExhausted, CodeLimit},
		{fmt.Errorf("checkpoint of session x: %w: 64 MiB more would pass state_quota_bytes = 1024 MiB", seam.ErrStateQuota), CodeLimit},
		{fmt.Errorf("%w: 1 MiB more would pass store_quota_bytes = 1024 MiB", seam.ErrStoreQuota), CodeLimit},
		{fmt.Errorf("copy a: %w", isolate.ErrCopyBudget), CodeLimit},
		{seam.ErrBusy, CodeBusy},
		{seam.ErrUnavailable, CodeUnavailable},
		{fmt.Errorf("build: %w: no overlay", isolate.ErrUnsupported), CodeUnavailable},
		{fmt.Errorf("hibernate: %w: criu passed its bound", isolate.ErrTimeout), CodeUnavailable},
		{seam.ErrShutdown, CodeUnavailable},
		{errors.New("disk on fire"), CodeInternal},
		{&Error{Code: CodeBusy, Message: "x"}, CodeBusy},
	} {
		got := errorFor(tc.err)
		if got.Code != tc.code {
			t.Errorf("errorFor(%v) = %s, want %s", tc.err, got.Code, tc.code)
		}
		if !strings.Contains(got.Message, strings.TrimPrefix(tc.err.Error(), "busy: ")) {
			t.Errorf("errorFor(%v) message %q lost the detail", tc.err, got.Message)
		}
	}
}

// TestResponseShape pins the wire names the contract promises.
func TestResponseShape(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	size := int64(0)
	for _, tc := range []struct {
		name string
		resp *Response
		want string
	}{
		{"error", fail(nil, badRequest("x")), `{"id":null,"ok":false,"error":{"code":"bad_request","message":"x"}}`},
		{"close", &Response{ID: json.RawMessage(`"c"`), OK: true}, `{"id":"c","ok":true}`},
		{"create flattens info", &Response{ID: json.RawMessage(`1`), OK: true, Info: &seam.Info{ID: "abc", State: "ready", Policy: "default", CreatedAt: exp, ExpiresAt: exp}},
			`{"id":1,"ok":true,"session":"abc","state":"ready","policy":"default","created_at":"2030-01-02T03:04:05Z","expires_at":"2030-01-02T03:04:05Z","cells":0}`},
		{"empty download keeps data and size", &Response{ID: json.RawMessage(`1`), OK: true, Path: "e", Data: []byte{}, Size: &size, SHA256: "e3b0"},
			`{"id":1,"ok":true,"path":"e","size":0,"data":"","sha256":"e3b0"}`},
		{"empty lists are lists", &Response{ID: json.RawMessage(`1`), OK: true, Files: []seam.Entry{}, Sessions: []seam.Info{}},
			`{"id":1,"ok":true,"files":[],"sessions":[]}`},
		{"event", nil, `{"id":"s","event":"stdout","text":"<b>&\n"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v any = tc.resp
			if tc.resp == nil {
				v = Event{ID: json.RawMessage(`"s"`), Event: "stdout", Text: "<b>&\n"}
			}
			b, err := encodeLine(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(string(b), "\n"); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
