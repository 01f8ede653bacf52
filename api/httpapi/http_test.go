package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
)

// These tests serve HTTP on a real Unix socket with a Dispatcher that has
// no manager: everything up to the manager call (routing, peer check,
// decoding, size and time bounds, status mapping) is exercised without
// root or a sandbox. The same routes against a real manager are tested in
// cmd/jailcell with a real `jailcell serve`.

type httpEnv struct {
	srv    *HTTPServer
	sock   string
	client *http.Client
}

func startHTTP(t *testing.T, opts HTTPOptions) *httpEnv {
	t.Helper()
	sock := filepath.Join(testenv.StateDir(t), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := NewHTTPServer(testDispatcher(nil), opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &httpEnv{srv: srv, sock: sock, client: unixClient(sock)}
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// raw sends one request exactly as written (no path cleaning by a client)
// and returns the status and body.
func (e *httpEnv) raw(t *testing.T, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", clip(req, 80), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type httpCase struct {
	name     string
	method   string
	path     string // as sent, not cleaned
	header   map[string]string
	body     string
	status   int
	code     string // "" for a success
	contains string // in the error message or body
}

var httpCases = []httpCase{
	{name: "healthz", method: "GET", path: "/healthz", status: 200, contains: `"version":"test-1"`},
	{name: "openapi document", method: "GET", path: "/v1/openapi.json", status: 200, contains: `"openapi": "3.1.0"`},
	{name: "interrupt: reaches the manager", method: "POST", path: "/v1/sessions/abc/interrupt", status: 503, code: api.CodeUnavailable},
	{name: "complete: reaches the manager", method: "POST", path: "/v1/sessions/abc/complete", body: `{"code":"x"}`, status: 503, code: api.CodeUnavailable},
	{name: "inspect: detail_level out of range", method: "POST", path: "/v1/sessions/abc/inspect", body: `{"code":"x","detail_level":2}`, status: 400, code: api.CodeBadRequest, contains: `"detail_level" = 2: allowed 0`},
	{name: "is_complete: GET not allowed", method: "GET", path: "/v1/sessions/abc/is_complete", status: 405, code: api.CodeBadRequest, contains: "allowed: POST"},
	{name: "interrupt: GET not allowed", method: "GET", path: "/v1/sessions/abc/interrupt", status: 405, code: api.CodeBadRequest, contains: "allowed: POST"},
	{name: "unknown route", method: "GET", path: "/v2/things", status: 404, code: api.CodeNotFound, contains: "no route"},
	{name: "trailing slash is not a route", method: "GET", path: "/v1/sessions/", status: 404, code: api.CodeNotFound},
	{name: "method not allowed", method: "PATCH", path: "/v1/sessions", status: 405, code: api.CodeBadRequest, contains: "allowed: GET, HEAD, POST"},
	{name: "post on a session", method: "POST", path: "/v1/sessions/abc", status: 405, code: api.CodeBadRequest, contains: "allowed: GET, DELETE"},
	// net/http refuses a malformed URL itself, before any handler.
	{name: "bad percent-encoding", method: "GET", path: "/v1/sessions/%zz/files", status: 400},
	{name: "create: body not an object", method: "POST", path: "/v1/sessions", body: `[1,2]`, status: 400, code: api.CodeBadRequest, contains: "must be a JSON object, got array"},
	{name: "create: body not JSON", method: "POST", path: "/v1/sessions", body: `{"ttl_s":`, status: 400, code: api.CodeBadRequest, contains: "not valid JSON"},
	{name: "create: invalid UTF-8", method: "POST", path: "/v1/sessions", body: "{\"policy\":\"\xff\"}", status: 400, code: api.CodeBadRequest, contains: "UTF-8"},
	{name: "create: ttl wrong type", method: "POST", path: "/v1/sessions", body: `{"ttl_s":"60"}`, status: 400, code: api.CodeBadRequest, contains: `"ttl_s" must be a number of seconds, got string`},
	{name: "create: unknown limit", method: "POST", path: "/v1/sessions", body: `{"limits":{"memory":1}}`, status: 400, code: api.CodeBadRequest, contains: `"limits.memory" is not a limit`},
	{name: "create: op in body", method: "POST", path: "/v1/sessions", body: `{"op":"exec"}`, status: 400, code: api.CodeBadRequest, contains: "the URL says it"},
	{name: "create: reaches the manager", method: "POST", path: "/v1/sessions", body: `{"ttl_s":60}`, status: 503, code: api.CodeUnavailable},
	{name: "create: empty body", method: "POST", path: "/v1/sessions", status: 503, code: api.CodeUnavailable},
	{name: "exec: code wrong type", method: "POST", path: "/v1/sessions/abc/exec", body: `{"code":5}`, status: 400, code: api.CodeBadRequest, contains: `"code" must be a string, got number`},
	{name: "exec: no code", method: "POST", path: "/v1/sessions/abc/exec", body: `{}`, status: 400, code: api.CodeBadRequest, contains: `needs field "code"`},
	{name: "exec: session in body", method: "POST", path: "/v1/exec", body: `{"code":"1","session":"abc"}`, status: 400, code: api.CodeBadRequest},
	{name: "exec: policy with a session", method: "POST", path: "/v1/sessions/abc/exec", body: `{"code":"1","policy":"small"}`, status: 400, code: api.CodeBadRequest, contains: `"policy" is not allowed with "session"`},
	{name: "exec: negative timeout", method: "POST", path: "/v1/exec", body: `{"code":"1","timeout_s":-1}`, status: 400, code: api.CodeBadRequest, contains: "timeout_s"},
	{name: "exec: bad files", method: "POST", path: "/v1/exec", body: `{"code":"1","files":[{"path":"a","data":"!!"}]}`, status: 400, code: api.CodeBadRequest, contains: "base64"},
	{name: "exec: oversized body", method: "POST", path: "/v1/exec", body: `{"code":"` + strings.Repeat("x", 5000) + `"}`, status: 413, code: api.CodeLimit, contains: "over the 4096-byte limit"},
	{name: "exec: streamed error before output", method: "POST", path: "/v1/exec", header: map[string]string{"Accept": "application/x-ndjson"}, body: `{"code":"1"}`, status: 503, code: api.CodeUnavailable},
	{name: "upload: oversized", method: "PUT", path: "/v1/sessions/abc/files/a.txt", body: strings.Repeat("x", 2000), status: 413, code: api.CodeLimit},
	{name: "upload: reaches the manager", method: "PUT", path: "/v1/sessions/abc/files/a.txt", body: "hello", status: 503, code: api.CodeUnavailable},
	{name: "download: empty path", method: "GET", path: "/v1/sessions/abc/files/", status: 400, code: api.CodeBadRequest, contains: `needs field "path"`},
	{name: "files", method: "GET", path: "/v1/sessions/abc/files", status: 503, code: api.CodeUnavailable},
	{name: "close", method: "DELETE", path: "/v1/sessions/abc", status: 503, code: api.CodeUnavailable},
	{name: "sessions", method: "GET", path: "/v1/sessions", status: 503, code: api.CodeUnavailable},
}

func TestHTTPBadInput(t *testing.T) {
	e := startHTTP(t, HTTPOptions{MaxBodyBytes: 4096, MaxUploadBytes: 1024})
	for _, tc := range httpCases {
		t.Run(tc.name, func(t *testing.T) {
			var hdr strings.Builder
			for k, v := range tc.header {
				fmt.Fprintf(&hdr, "%s: %s\r\n", k, v)
			}
			req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: jailcell\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				tc.method, tc.path, hdr.String(), len(tc.body), tc.body)
			status, body := e.raw(t, req)
			if status != tc.status {
				t.Fatalf("status %d, want %d; body %s", status, tc.status, body)
			}
			if tc.code != "" {
				var r struct {
					OK    bool       `json:"ok"`
					Error *api.Error `json:"error"`
				}
				// A streamed answer is one JSON line too.
				if err := json.Unmarshal([]byte(body), &r); err != nil {
					t.Fatalf("error body is not JSON: %q", body)
				}
				if r.OK || r.Error == nil || r.Error.Code != tc.code {
					t.Fatalf("body %s, want error code %q", body, tc.code)
				}
			}
			text := body
			var r api.Response
			if json.Unmarshal([]byte(body), &r) == nil && r.Error != nil {
				text = r.Error.Message
			}
			if tc.contains != "" && !strings.Contains(text, tc.contains) {
				t.Fatalf("body %s does not contain %q", body, tc.contains)
			}
		})
	}
	// Bad input never stops the service.
	if status, body := e.raw(t, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); status != 200 {
		t.Fatalf("healthz after bad input: %d %s", status, body)
	}
}

func TestHTTPHeaderAndTimeBounds(t *testing.T) {
	e := startHTTP(t, HTTPOptions{MaxHeaderBytes: 1024, ReadHeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond})

	t.Run("oversized headers", func(t *testing.T) {
		status, _ := e.raw(t, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8<<10)+"\r\n\r\n")
		if status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", status)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		b, _ := io.ReadAll(c) // the server hangs up
		if time.Since(start) > 4*time.Second {
			t.Fatalf("connection with unfinished headers still open after %s", time.Since(start))
		}
		if bytes.Contains(b, []byte("200 OK")) {
			t.Fatalf("answered an unfinished request: %q", b)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"code\":")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "not received within") {
			t.Fatalf("stalled body: %d %s", resp.StatusCode, b)
		}
	})
	if status, _ := e.raw(t, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); status != 200 {
		t.Fatalf("healthz after slow clients: %d", status)
	}
}

func TestHTTPMetricsParse(t *testing.T) {
	e := startHTTP(t, HTTPOptions{})
	e.raw(t, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := e.client.Get("http://jailcell/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	// Without a manager: no manager figures, the rest as always.
	if _, ok := fams["jailcell_cell_duration_seconds"]; ok {
		t.Errorf("manager histograms without a manager")
	}
	found := false
	for _, m := range fams["jailcell_http_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["route"] == api.RouteUnknown && labels["code"] == "404" && m.GetCounter().GetValue() == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("no request counted for the 404")
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "go_goroutines", "go_memstats_alloc_bytes", "jailcell_build_info"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestAccessAllows(t *testing.T) {
	a := Access{UIDs: []uint32{1000}, GIDs: []uint32{50}}
	for _, tc := range []struct {
		p    Peer
		want bool
	}{
		{Peer{UID: 0, GID: 0}, true},
		{Peer{UID: 1000, GID: 1000}, true},
		{Peer{UID: 1001, GID: 50}, true},
		{Peer{UID: 1001, GID: 1001, Groups: []uint32{7, 50}}, true},
		{Peer{UID: 1001, GID: 1001, Groups: []uint32{7}}, false},
		{Peer{UID: 65534, GID: 65534}, false},
	} {
		if got := a.Allows(tc.p); got != tc.want {
			t.Errorf("Allows(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if (&Access{}).Allows(Peer{UID: 1}) {
		t.Error("an empty Access admits a non-root uid")
	}
}

func TestPeerOf(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := PeerOf(a); err == nil {
		t.Fatal("PeerOf a pipe: no error; credentials must come from a Unix socket")
	}
}

var routeCases = []struct {
	path string
	want route
	err  string
}{
	{"/healthz", route{name: api.RouteHealthz}, ""},
	{"/metrics", route{name: api.RouteMetrics}, ""},
	{"/v1/exec", route{name: api.RouteOneShot}, ""},
	{"/v1/sessions", route{name: api.RouteSessions}, ""},
	{"/v1/sessions/ab12", route{name: api.RouteSession, session: "ab12"}, ""},
	{"/v1/sessions/ab12/exec", route{name: api.RouteExec, session: "ab12"}, ""},
	{"/v1/sessions/ab12/files", route{name: api.RouteFiles, session: "ab12"}, ""},
	{"/v1/sessions/ab12/files/a/b.txt", route{name: api.RouteFile, session: "ab12", path: "a/b.txt"}, ""},
	{"/v1/sessions/ab12/files/a%2Fb%20c.txt", route{name: api.RouteFile, session: "ab12", path: "a/b c.txt"}, ""},
	// Traversal is passed on as sent; the manager refuses it (tested live).
	{"/v1/sessions/ab12/files/../../etc/passwd", route{name: api.RouteFile, session: "ab12", path: "../../etc/passwd"}, ""},
	{"/v1/sessions/ab12/files/%2e%2e/x", route{name: api.RouteFile, session: "ab12", path: "../x"}, ""},
	{"/v1/sessions/a%2Fb/exec", route{name: api.RouteExec, session: "a/b"}, ""},
	{"/v1/sessions/ab12/complete", route{name: api.RouteAssist, session: "ab12", op: api.OpComplete}, ""},
	{"/v1/sessions/ab12/inspect", route{name: api.RouteAssist, session: "ab12", op: api.OpInspect}, ""},
	{"/v1/sessions/ab12/is_complete", route{name: api.RouteAssist, session: "ab12", op: api.OpIsComplete}, ""},
	{"/v1/sessions//exec", route{name: api.RouteUnknown}, api.CodeNotFound},
	{"/v1/sessions/x/nope", route{name: api.RouteUnknown}, api.CodeNotFound},
	{"/v1/exec/x", route{name: api.RouteUnknown}, api.CodeNotFound},
	{"/v1/sessions/%zz", route{name: api.RouteUnknown}, api.CodeBadRequest},
	{"healthz", route{name: api.RouteUnknown}, api.CodeNotFound},
	{"", route{name: api.RouteUnknown}, api.CodeNotFound},
}

func TestMatchRoute(t *testing.T) {
	for _, tc := range routeCases {
		got, err := matchRoute(tc.path)
		code := ""
		if err != nil {
			code = err.Code
		}
		if got != tc.want || code != tc.err {
			t.Errorf("matchRoute(%q) = %+v, %q; want %+v, %q", tc.path, got, code, tc.want, tc.err)
		}
	}
}

// FuzzMatchRoute: any path maps to a known route or an error, never a
// panic, and a route with a session always names one.
func FuzzMatchRoute(f *testing.F) {
	for _, tc := range routeCases {
		f.Add(tc.path)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rt, err := matchRoute(path)
		if err != nil {
			if rt.name != api.RouteUnknown {
				t.Fatalf("error %v with route %q", err, rt.name)
			}
			return
		}
		if _, ok := api.RouteMethods[rt.name]; !ok {
			t.Fatalf("route %q has no methods", rt.name)
		}
		if rt.name != api.RouteSessions && rt.name != api.RouteOneShot && rt.name != api.RouteHealthz && rt.name != api.RouteMetrics && rt.session == "" {
			t.Fatalf("route %q without a session", rt.name)
		}
	})
}

// FuzzRoutedRequest: whatever the body, the routed request carries the
// route's op and session (the body cannot redirect it) or is refused.
func FuzzRoutedRequest(f *testing.F) {
	for _, tc := range httpCases {
		f.Add([]byte(tc.body))
	}
	// The request decoder's seed corpus (api's decodeCases table is
	// api's own test data; its corpus files are shared).
	seeds, _ := filepath.Glob("../testdata/fuzz/FuzzDecodeRequest/*")
	for _, path := range seeds {
		line, err := readSeed(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := routedRequest(body, api.OpExec, "s1", json.RawMessage("7"))
		if req == nil {
			t.Fatal("nil request")
		}
		if err != nil {
			if err.Code != api.CodeBadRequest {
				t.Fatalf("code %q, want bad_request", err.Code)
			}
			return
		}
		if req.Op != api.OpExec || req.Session != "s1" {
			t.Fatalf("body %q routed to op %q session %q", body, req.Op, req.Session)
		}
	})
}

func TestRoutedRequest(t *testing.T) {
	req, err := routedRequest([]byte(`{"code":"print(1)","timeout_s":2,"id":"mine"}`), api.OpExec, "s1", json.RawMessage("7"))
	if err != nil {
		t.Fatal(err)
	}
	if req.Op != api.OpExec || req.Session != "s1" || req.Code != "print(1)" || req.TimeoutS != 2 || string(req.ID) != `"mine"` {
		t.Fatalf("routed request %+v", req)
	}
	req, err = routedRequest(nil, api.OpCreate, "", json.RawMessage("8"))
	if err != nil || req.Op != api.OpCreate || string(req.ID) != "8" {
		t.Fatalf("empty body: %+v, %v", req, err)
	}
}

func TestAcceptsNDJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/x-ndjson":                       true,
		"application/json, application/x-ndjson;q=1": true,
		"Application/X-NDJSON":                       true,
		"application/json":                           false,
		"":                                           false,
		"*/*":                                        false,
	} {
		if got := acceptsNDJSON(accept); got != want {
			t.Errorf("acceptsNDJSON(%q) = %v", accept, got)
		}
	}
}

// TestHTTPStatusOfCodes: each wire code answers the HTTP status the
// document names for it (openapi.json's ErrorResponse).
func TestHTTPStatusOfCodes(t *testing.T) {
	for code, want := range map[string]int{
		api.CodeBadRequest: 400, CodeForbidden: 403, api.CodeNotFound: 404, api.CodeExpired: 410,
		api.CodeBusy: 409, api.CodeLimit: 429, api.CodeInternal: 500, api.CodeUnavailable: 503,
	} {
		if got := httpStatus(&api.Response{Error: &api.Error{Code: code}}); got != want {
			t.Errorf("%s answers %d, want %d", code, got, want)
		}
	}
}
