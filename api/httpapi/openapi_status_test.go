package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
)

// docOp is one documented operation with a request that reaches it.
type docOp struct {
	tmpl, method string
	path         string // the template filled in
	body         []byte // a valid body for ops that take one, else nil
	op           map[string]any
}

func (o docOp) String() string { return o.method + " " + o.tmpl }

// documents reports whether o documents status.
func (o docOp) documents(status int) bool {
	_, ok := o.op["responses"].(map[string]any)[strconv.Itoa(status)]
	return ok
}

func (o docOp) requestBody() (map[string]any, bool) {
	rb, ok := o.op["requestBody"].(map[string]any)
	return rb, ok
}

// sampleBodies: a valid body for each operation that takes one.
var sampleBodies = map[string]string{
	"POST /v1/sessions":                  `{"ttl_s":60}`,
	"POST /v1/exec":                      `{"code":"1"}`,
	"POST /v1/sessions/{id}/exec":        `{"code":"1"}`,
	"PUT /v1/sessions/{id}/files/{path}": "hello",
	"POST /v1/sessions/{id}/complete":    `{"code":"x"}`,
	"POST /v1/sessions/{id}/inspect":     `{"code":"x"}`,
	"POST /v1/sessions/{id}/is_complete": `{"code":"x"}`,
	"POST " + api.MCPPath:                `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
	"POST /v1/sessions/{id}/commands":    `{"cmd":"true"}`,
	"POST /v1/sessions/{id}/timeout":     `{"timeout_s":60}`,
	"POST /v1/sessions/{id}/watch":       `{"path":"."}`,
	"POST /v1/sessions/{id}/rename":      `{"path":"a","to":"b"}`,
}

// docOps lists every documented operation, with or without /mcp.
func docOps(t *testing.T, s *spec, withMCP bool) []docOp {
	t.Helper()
	var out []docOp
	for tmpl, item := range s.paths() {
		if tmpl == api.MCPPath && !withMCP {
			continue
		}
		for method, op := range item.(map[string]any) {
			m, ok := op.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			o := docOp{tmpl: tmpl, method: strings.ToUpper(method), op: m,
				path: strings.NewReplacer("{id}", "s1", "{path}", "dir/a.txt").Replace(tmpl)}
			if b, ok := sampleBodies[o.String()]; ok {
				o.body = []byte(b)
			}
			if _, ok := o.requestBody(); ok && o.body == nil {
				t.Fatalf("%s documents a request body: add a sample to sampleBodies", o)
			}
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// send sends one request for o; it returns the status, content type and
// body.
func send(t *testing.T, c *http.Client, base string, o docOp, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(o.method, base+o.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil && o.method != http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	if o.tmpl == api.MCPPath {
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", o, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// serveOn serves d's HTTP transport on l until the test ends.
func serveOn(t *testing.T, l net.Listener, opts HTTPOptions) {
	t.Helper()
	opts.Logger = discardLogger()
	srv := NewHTTPServer(testDispatcher(nil), opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// abstractSocket listens on a Unix socket in the abstract namespace,
// which any uid may connect to (no directory or file permission to pass).
func abstractSocket(t *testing.T) (net.Listener, string) {
	t.Helper()
	name := "@jailcell-openapi-test-" + rand.Text()
	l, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	return l, name
}

// dialAs connects to a Unix socket with uid and gid as the peer
// credentials the server reads (SO_PEERCRED, SO_PEERGROUPS: taken at
// connect). Linux credentials are per thread: a locked thread drops its
// own with raw syscalls (syscall.Setresuid would change every thread of
// the test) and is never unlocked, so the runtime ends it with its
// goroutine and no other code runs with those credentials.
func dialAs(sock string, uid, gid int) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		for _, call := range [][4]uintptr{
			{syscall.SYS_SETGROUPS, 0, 0, 0},
			{syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)},
			{syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)},
		} {
			if _, _, e := syscall.RawSyscall(call[0], call[1], call[2], call[3]); e != 0 {
				ch <- result{err: fmt.Errorf("drop this thread's credentials to uid %d: syscall %d: %w", uid, call[0], e)}
				return
			}
		}
		c, err := net.Dial("unix", sock)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// TestOpenAPIStatuses: the statuses, media types and request bodies the
// document gives each operation are the ones the server answers, both
// ways, on a real HTTP server (no sandbox manager: each call goes up to
// the manager's door):
//   - on the Unix socket, every operation's answer has a documented
//     status and media type, and its body validates;
//   - 401: documented exactly where a TCP request without credentials
//     gets it (every route but /readyz and /healthz);
//   - 403: documented exactly where a Unix-socket caller who is not
//     admitted gets it (every route but /readyz);
//   - 413: documented exactly where a body over the limit gets it, which
//     is exactly the operations that document a request body;
//   - a request body is required exactly where an empty one is refused 400;
//   - /readyz answers no 4xx, whoever asks.
func TestOpenAPIStatuses(t *testing.T) {
	s := loadSpec(t)
	ops := docOps(t, s, true)

	t.Run("unix socket", func(t *testing.T) {
		sock, name := abstractSocket(t)
		serveOn(t, sock, HTTPOptions{})
		h := &httpContract{t: t, s: s, client: unixClient(name)}
		for _, o := range ops {
			if o.tmpl == api.MCPPath {
				continue // MCP's own protocol: test/mcpclient
			}
			var hdr map[string]string
			if o.body != nil && o.method != http.MethodPut {
				hdr = map[string]string{"Content-Type": "application/json"}
			}
			status, _ := h.call(o.method, o.tmpl, o.path, o.body, hdr)
			if status >= 400 && status < 500 {
				t.Errorf("%s with a valid request: %d", o, status)
			}
		}
	})

	t.Run("401 on TCP", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serveOn(t, l, HTTPOptions{Remote: NewRemoteAuth(map[string]uint32{"tok-" + strings.Repeat("a", 40): 1000})})
		c := &http.Client{Timeout: time.Minute}
		for _, o := range ops {
			status, ctype, body := send(t, c, "http://"+l.Addr().String(), o, o.body)
			checkStatus(t, s, o, status, ctype, body, 401)
		}
	})

	t.Run("403 on the Unix socket", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("requires root: a caller that is not admitted is another uid")
		}
		sock, name := abstractSocket(t)
		serveOn(t, sock, HTTPOptions{}) // root only
		c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) { return dialAs(name, 65534, 65534) },
		}}
		for _, o := range ops {
			status, ctype, body := send(t, c, "http://jailcell", o, o.body)
			checkStatus(t, s, o, status, ctype, body, 403)
		}
	})

	t.Run("413 and required bodies", func(t *testing.T) {
		sock, name := abstractSocket(t)
		serveOn(t, sock, HTTPOptions{MaxBodyBytes: 16, MaxUploadBytes: 16})
		c := unixClient(name)
		big := bytes.Repeat([]byte(" "), 64) // JSON whitespace: a body only its size refuses
		for _, o := range ops {
			status, ctype, body := send(t, c, "http://jailcell", o, append(big, o.body...))
			rb, hasBody := o.requestBody()
			if (status == 413) != hasBody || o.documents(413) != hasBody {
				t.Errorf("%s: a body over the limit answered %d; documents 413: %v, a request body: %v", o, status, o.documents(413), hasBody)
			}
			if status == 413 {
				s.validate(t, "#/components/schemas/ErrorResponse", body, o.String()+" 413 ("+ctype+")")
			}
			if !hasBody || o.tmpl == api.MCPPath {
				continue // MCP's body is its protocol's: the SDK refuses an empty one
			}
			status, _, body = send(t, c, "http://jailcell", o, nil)
			required, _ := rb["required"].(bool)
			if refused := status == 400; refused != required {
				t.Errorf("%s: an empty body answered %d (%.200s); the document says required: %v", o, status, body, required)
			}
		}
	})
}

// checkStatus: op o answered status; o documents want exactly when that
// is the answer, and /readyz never answers a 4xx.
func checkStatus(t *testing.T, s *spec, o docOp, status int, ctype string, body []byte, want int) {
	t.Helper()
	if o.tmpl == "/readyz" && status >= 400 && status < 500 {
		t.Errorf("%s answered %d: /readyz answers anyone, with 200 or 503", o, status)
	}
	if (status == want) != o.documents(want) {
		t.Errorf("%s answered %d (%.200s); documents %d: %v", o, status, body, want, o.documents(want))
	}
	if !o.documents(status) {
		t.Errorf("%s answered %d, which openapi.json does not document", o, status)
	}
	if status == want && o.method != http.MethodHead {
		s.validate(t, "#/components/schemas/ErrorResponse", body, fmt.Sprintf("%s %d (%s)", o, status, ctype))
	}
}

// TestOpenAPIExecMediaTypes: exec answers application/json unless asked
// to stream (Accept: application/x-ndjson, or "stream": true), then
// application/x-ndjson, as the document's 200 and error responses say;
// nothing else documents or answers NDJSON.
func TestOpenAPIExecMediaTypes(t *testing.T) {
	s := loadSpec(t)
	sock, name := abstractSocket(t)
	serveOn(t, sock, HTTPOptions{})
	c := unixClient(name)
	for _, o := range docOps(t, s, false) {
		// Exec and commands stream (commands: a command's output as it
		// comes, like a cell's).
		streams := strings.HasSuffix(o.tmpl, "exec") || strings.HasSuffix(o.tmpl, "/commands")
		for code, r := range o.op["responses"].(map[string]any) {
			r = s.resolve(r)
			content, _ := r.(map[string]any)["content"].(map[string]any)
			_, nd := content["application/x-ndjson"]
			// An exec's error before its stream is JSON: auth and body size
			// are refused before the body is read.
			wantND := streams && (code == "200" || !slices.Contains([]string{"401", "403", "413"}, code))
			if nd != wantND {
				t.Errorf("%s %s: documents application/x-ndjson: %v, want %v", o, code, nd, wantND)
			}
		}
		if !streams {
			continue
		}
		for _, tc := range []struct {
			body, accept, want string
		}{
			{`{"code":"1"}`, "", "application/json"},
			{`{"code":"1"}`, "application/json", "application/json"},
			{`{"code":"1"}`, "application/x-ndjson", "application/x-ndjson"},
			{`{"code":"1","stream":true}`, "", "application/x-ndjson"},
		} {
			if strings.HasSuffix(o.tmpl, "/commands") {
				tc.body = strings.Replace(tc.body, `"code":"1"`, `"cmd":"true"`, 1)
			}
			req, _ := http.NewRequest(o.method, "http://jailcell"+o.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ctype := resp.Header.Get("Content-Type")
			if ctype != tc.want {
				t.Errorf("%s %s (Accept %q): %s, want %s", o, tc.body, tc.accept, ctype, tc.want)
			}
			// Answered (503: no manager) with the documented schema of that
			// status and media type.
			s.checkBody(t, s.responseSchema(t, o.method, o.tmpl, resp.StatusCode, ctype), ctype, b, o.String())
		}
	}
}

// resolve follows a $ref within the document.
func (s *spec) resolve(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	ref, ok := m["$ref"].(string)
	if !ok {
		return v
	}
	var cur any = s.doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		cur = cur.(map[string]any)[strings.NewReplacer("~1", "/", "~0", "~").Replace(part)]
	}
	return cur
}
