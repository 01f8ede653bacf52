package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The front-door attacks against the real `jailcell serve`, its TCP
// listener and bearer tokens, with the bounds set by the config keys.

var (
	frontTokA = "tok-" + strings.Repeat("a", 40) // owner 1000
	frontTokB = "tok-" + strings.Repeat("b", 40) // owner 1001
)

// startFrontServe starts serve with a TCP listener for owners 1000 and
// 1001, small MCP caps and a short stream grace; it returns the base URL.
func startFrontServe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(frontTokA+" 1000\n"+frontTokB+" 1001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	startServe(t, "root", `  big:
    memory_bytes: 256MiB
    output_bytes: 16MiB
listen: tcp://`+addr+`
auth:
  tokens_file: `+tokens+`
mcp:
  max_sessions_per_owner: 2
  max_sessions: 3
  idle_timeout: 5s
http:
  stream_grace: 1s
`)
	base := "http://" + addr
	waitUntil(t, "the TCP listener answers", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return base
}

// waitUntil polls cond for up to two minutes: counts, not times.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("two minutes waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type tokenTransport struct{ tok string }

func (b tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// tcpDo sends a request with tok's bearer token and returns status and body.
func tcpDo(t *testing.T, tok, method, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, resp.Header, string(b)
}

func initialize(t *testing.T, base, tok string) (int, string) {
	t.Helper()
	code, _, body := tcpDo(t, tok, http.MethodPost, base+"/mcp",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`,
		"Accept", "application/json, text/event-stream")
	return code, body
}

// sessionsOf lists owner tok's live jailcell sessions.
func sessionsOf(t *testing.T, base, tok string) int {
	t.Helper()
	code, _, body := tcpDo(t, tok, http.MethodGet, base+"/v1/sessions", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/sessions: %d %s", code, body)
	}
	var w struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatalf("GET /v1/sessions: %v: %s", err, body)
	}
	return len(w.Sessions)
}

// TestServeHostileMCPInitializeFlood against serve:
// mcp.max_sessions_per_owner refuses one owner's flood naming the key,
// another owner is served (a real MCP client whose run_python makes a
// jailcell session) up to mcp.max_sessions, and mcp.idle_timeout ends
// the idle sessions, their jailcell sessions with them, freeing places.
func TestServeHostileMCPInitializeFlood(t *testing.T) {
	base := startFrontServe(t)
	for i := 0; i < 2; i++ {
		if code, body := initialize(t, base, frontTokA); code != http.StatusOK {
			t.Fatalf("initialize %d of owner 1000: %d %s", i, code, body)
		}
	}
	for i := 0; i < 20; i++ {
		code, body := initialize(t, base, frontTokA)
		if code != http.StatusTooManyRequests || !strings.Contains(body, "mcp.max_sessions_per_owner") {
			t.Fatalf("initialize %d over owner 1000's cap of 2: %d %s", i+3, code, body)
		}
	}
	// Owner 1001 is served: a real client runs a cell.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "owner-1001", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport{frontTokB}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("owner 1001's MCP client while owner 1000 floods: %v", err)
	}
	defer cs.Close()
	// The node's cap of 3 is reached (well within the idle timeout: the
	// cell below may take longer, and its call keeps its session alive).
	if code, body := initialize(t, base, frontTokB); code != http.StatusTooManyRequests || !strings.Contains(body, "mcp.max_sessions)") {
		t.Fatalf("a fourth MCP session on a node capped at 3: %d %s", code, body)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(6 * 7)"}})
	if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "42\n" {
		t.Fatalf("run_python of owner 1001: %v %+v", err, res)
	}
	if n := sessionsOf(t, base, frontTokB); n != 1 {
		t.Fatalf("owner 1001 has %d jailcell sessions after run_python, want 1", n)
	}
	// Idle for mcp.idle_timeout: every MCP session ends, the jailcell
	// session run_python made with it, and the places come back.
	waitUntil(t, "the idle MCP sessions to end", func() bool {
		_, _, m := tcpDo(t, frontTokA, http.MethodGet, base+"/metrics", "")
		return strings.Contains(m, "\njailcell_mcp_sessions 0\n")
	})
	waitUntil(t, "owner 1001's jailcell session to end with its MCP session", func() bool { return sessionsOf(t, base, frontTokB) == 0 })
	for i := 0; i < 2; i++ {
		if code, body := initialize(t, base, frontTokA); code != http.StatusOK {
			t.Fatalf("initialize %d of owner 1000 after the idle ones ended: %d %s", i, code, body)
		}
	}
}

// TestServeHostileStreamedExecClientStopsReading
// against serve: a streamed exec whose client stops reading leaves the
// session free when its cell ends, with its state, and DELETE answers 200.
func TestServeHostileStreamedExecClientStopsReading(t *testing.T) {
	base := startFrontServe(t)
	code, _, body := tcpDo(t, frontTokA, http.MethodPost, base+"/v1/sessions", `{"policy":"big"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var created struct {
		ID string `json:"session"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.ID == "" {
		t.Fatalf("create: %v %s", err, body)
	}
	id := created.ID
	// The stalled client: a 4 KiB receive window, never read; 10 MiB of
	// output is more than the loopback socket's buffers hold.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	addr := strings.TrimPrefix(base, "http://")
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exec, _ := json.Marshal(map[string]any{"timeout_s": 60,
		"code": "import sys\nchunk = 'x' * 65535 + '\\n'\nfor i in range(160):\n    sys.stdout.write(chunk); sys.stdout.flush()\ndone = 42\n"})
	fmt.Fprintf(c, "POST /v1/sessions/%s/exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/x-ndjson\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", id, addr, frontTokA, len(exec), exec)
	// Under load the stalled exec may not have reached its session yet: a
	// probe now would run first and find no `done`. Its cell is running
	// once the session says busy (or, already over, has left done behind).
	waitUntil(t, "the stalled exec to start its cell", func() bool {
		code, _, body := tcpDo(t, frontTokA, http.MethodGet, base+"/v1/sessions", "")
		if code != http.StatusOK || !strings.Contains(body, id) {
			t.Fatalf("GET /v1/sessions: %d %s", code, body)
		}
		return strings.Contains(body, `"state":"busy"`) || strings.Contains(body, `"cells":1`)
	})
	waitUntil(t, "the session to be free behind its stalled client", func() bool {
		code, _, body := tcpDo(t, frontTokA, http.MethodPost, base+"/v1/sessions/"+id+"/exec", `{"code":"print(done)"}`)
		switch {
		case code == http.StatusConflict:
			return false
		case code != http.StatusOK || !strings.Contains(body, `"stdout":"42\n"`):
			t.Fatalf("exec after the stalled cell: %d %.500s", code, body)
		}
		return true
	})
	if code, _, body := tcpDo(t, frontTokA, http.MethodDelete, base+"/v1/sessions/"+id, ""); code != http.StatusOK {
		t.Fatalf("DELETE of the session behind a stalled stream: %d %s", code, body)
	}
	// The stalled response is cut stream_grace after its cell ended: its
	// handler returns (the request is counted, freeing its place) while
	// the client still reads nothing; then the connection has ended.
	waitUntil(t, "the stalled exec to be cut and counted", func() bool {
		_, _, m := tcpDo(t, frontTokB, http.MethodGet, base+"/metrics", "")
		return strings.Contains(m, "\njailcell_http_requests_total{code=\"200\",route=\"session_exec\"} 2\n")
	})
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	n, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the stalled stream's connection still open two minutes on (%d bytes read)", n)
	}
	if n >= 20<<20 {
		t.Fatalf("the stalled client got the whole %d-byte stream after it was to be cut", n)
	}
}
