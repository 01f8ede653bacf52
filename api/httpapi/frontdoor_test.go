package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/policy"
)

// The front-door attacks, tried as an attacker would: over a real TCP
// listener with bearer tokens, raw HTTP and the Go MCP SDK's client.

var (
	tokA = "tok-" + strings.Repeat("A", 40) // owner 1000
	tokB = "tok-" + strings.Repeat("B", 40) // owner 1001
)

// serveFront serves d on a loopback TCP port with tokens for owners 1000
// (tokA) and 1001 (tokB).
func serveFront(t *testing.T, d *api.Dispatcher, opts HTTPOptions) (*HTTPServer, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = discardLogger()
	opts.Remote = NewRemoteAuth(map[string]uint32{tokA: 1000, tokB: 1001})
	srv := NewHTTPServer(d, opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, l.Addr().String()
}

// bearer adds a token to every request of an http.Client.
type bearer struct {
	tok  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

func tokenClient(tok string) *http.Client {
	return &http.Client{Transport: bearer{tok: tok, base: &http.Transport{}}, Timeout: 60 * time.Second}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`

// rawInitialize sends one MCP initialize as an attacker would, without the
// initialized notification that follows it, and returns the status, the
// session id given and the body.
func rawInitialize(t *testing.T, base, tok string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(initializeBody))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

func mcpConnect(ctx context.Context, base, tok string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "front-test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: tokenClient(tok), MaxRetries: -1}, nil)
}

// TestHostileMCPInitializeFlood (attack: 3,000 initialize requests
// from one uid were all accepted and each held for an hour): an owner's
// MCP sessions are capped, the one over the cap is refused naming the cap
// and its key, another owner is still served up to the node's cap, and
// idle sessions end and give their places back.
func TestHostileMCPInitializeFlood(t *testing.T) {
	srv, addr := serveFront(t, testDispatcher(nil), HTTPOptions{
		MCPMaxSessionsPerOwner: 3, MCPMaxSessions: 5, MCPIdleTimeout: time.Hour})
	base := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A real client of owner A takes one place.
	cs, err := mcpConnect(ctx, base, tokA)
	if err != nil {
		t.Fatalf("MCP client of owner 1000: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	// The flood: 50 bare initializes; 2 more fit under the owner's cap.
	accepted, ids := 0, []string{}
	var refusal string
	for i := 0; i < 50; i++ {
		code, id, body := rawInitialize(t, base, tokA)
		switch code {
		case http.StatusOK:
			accepted++
			ids = append(ids, id)
		case http.StatusTooManyRequests:
			refusal = body
		default:
			t.Fatalf("initialize %d: status %d: %s", i, code, body)
		}
	}
	if accepted != 2 {
		t.Fatalf("%d of 50 initializes accepted beside the client's session, want 2 (mcp.max_sessions_per_owner = 3)", accepted)
	}
	for _, want := range []string{`"code":"limit"`, "at most 3", "mcp.max_sessions_per_owner", "mcp.idle_timeout"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("refusal %s does not say %q", refusal, want)
		}
	}
	if n := srv.mcp.live.count(); n != 3 {
		t.Fatalf("%d MCP sessions live, want 3", n)
	}
	// Another owner is served...
	csB, err := mcpConnect(ctx, base, tokB)
	if err != nil {
		t.Fatalf("owner 1001 refused while owner 1000 floods: %v", err)
	}
	if _, err := csB.ListTools(ctx, nil); err != nil {
		t.Fatalf("owner 1001 tools/list: %v", err)
	}
	if code, _, body := rawInitialize(t, base, tokB); code != http.StatusOK {
		t.Fatalf("owner 1001's second session: %d %s", code, body)
	}
	// ...up to the node's cap, which is named too.
	code, _, body := rawInitialize(t, base, tokB)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "mcp.max_sessions)") || !strings.Contains(body, "at most 5") {
		t.Fatalf("sixth session on a node capped at 5: %d %s", code, body)
	}
	// A DELETE gives a place back at once.
	req, _ := http.NewRequest(http.MethodDelete, base+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", ids[0])
	if resp, err := tokenClient(tokA).Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: %v %v", resp, err)
	}
	waitFor(t, func() bool { return srv.mcp.live.count() == 4 })
	if code, _, body := rawInitialize(t, base, tokA); code != http.StatusOK {
		t.Fatalf("owner 1000 after ending one session: %d %s", code, body)
	}
	cs.Close()
	csB.Close()
}

// TestHostileMCPIdleSessionsExpire (attack: the hour each was
// held): an MCP session unused for mcp.idle_timeout ends and its place
// comes back; one in use stays.
func TestHostileMCPIdleSessionsExpire(t *testing.T) {
	srv, addr := serveFront(t, testDispatcher(nil), HTTPOptions{
		MCPMaxSessionsPerOwner: 2, MCPMaxSessions: 10, MCPIdleTimeout: 300 * time.Millisecond})
	base := "http://" + addr
	for i := 0; i < 2; i++ {
		if code, _, body := rawInitialize(t, base, tokA); code != http.StatusOK {
			t.Fatalf("initialize %d: %d %s", i, code, body)
		}
	}
	if code, _, _ := rawInitialize(t, base, tokA); code != http.StatusTooManyRequests {
		t.Fatalf("third session over a cap of 2: status %d", code)
	}
	// Counts, not times: the two idle ones end, whenever the timer fires.
	deadline := time.Now().Add(60 * time.Second)
	for srv.mcp.live.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle MCP sessions still live a minute after a 300 ms idle timeout", srv.mcp.live.count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 2; i++ {
		if code, _, body := rawInitialize(t, base, tokA); code != http.StatusOK {
			t.Fatalf("initialize %d after the idle ones ended: %d %s", i, code, body)
		}
	}
	// The /metrics gauge says the same.
	_, _, m := call(t, tokenClient(tokA), http.MethodGet, base+"/metrics", "")
	if !strings.Contains(m, "jailcell_mcp_sessions 2") {
		t.Errorf("/metrics lacks jailcell_mcp_sessions 2:\n%s", grepLines(m, "mcp"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// slowBody opens a connection and sends a request whose headers declare
// size bytes of body, then only its first KiB: a slow large body.
func slowBody(t *testing.T, addr, method, path, tok string, size int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", method, path, addr, tok, size)
	if _, err := c.Write([]byte(strings.Repeat(" ", 1024))); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHostileMCPSlowLargeBodies (attack: 12 slow 30 MiB bodies to
// /mcp were all read while /v1/sessions stopped at its budget): /mcp
// bodies are weighed in the same in-flight budget, capped in size and cut
// at the body deadline; a REST call of another caller is answered
// meanwhile.
func TestHostileMCPSlowLargeBodies(t *testing.T) {
	const body = 3 << 20
	srv, addr := serveFront(t, testDispatcher(nil), HTTPOptions{
		MaxBodyBytes: body, MaxInFlightBytes: 8 << 20, MaxInFlightBytesPerOwner: 8 << 20, BodyTimeout: 2 * time.Second})
	// Over the size cap: refused before a byte of it is read.
	big := slowBody(t, addr, http.MethodPost, "/mcp", tokA, body+1)
	if code, msg := readStatus(t, big); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "limit") {
		t.Fatalf("a /mcp body over the cap: %d %s", code, msg)
	}
	// Six slow 3 MiB bodies against an 8 MiB budget: two are admitted,
	// the rest wait without being read.
	var conns []net.Conn
	for i := 0; i < 6; i++ {
		conns = append(conns, slowBody(t, addr, http.MethodPost, "/mcp", tokA, body))
	}
	waitFor(t, func() bool {
		count, used := srv.lim.InFlight()
		return count == 2 && used == 2*body
	})
	time.Sleep(200 * time.Millisecond) // a third admitted late would show now
	count, used := srv.lim.InFlight()
	if count != 2 || used != 2*body {
		t.Fatalf("%d requests holding %d bytes in flight, want 2 holding %d: /mcp bodies are not weighed", count, used, 2*body)
	}
	// Another caller's REST calls are answered meanwhile.
	cB := tokenClient(tokB)
	if code, _, b := call(t, cB, http.MethodGet, "http://"+addr+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("GET /healthz of owner 1001 while /mcp bodies wait: %d %s", code, b)
	}
	if code, _, b := call(t, cB, http.MethodPost, "http://"+addr+"/v1/sessions", ""); code != http.StatusServiceUnavailable || !strings.Contains(b, "no sandbox manager") {
		t.Fatalf("POST /v1/sessions of owner 1001 while /mcp bodies wait: %d %s", code, b)
	}
	// Every slow body is cut at the body deadline, the waiting ones once
	// admitted: each gets its 400 naming the deadline.
	for i, c := range conns {
		code, msg := readStatus(t, c)
		if code != http.StatusBadRequest || !strings.Contains(msg, "not received within 2s") {
			t.Fatalf("slow body %d: %d %s", i, code, msg)
		}
	}
	waitFor(t, func() bool {
		count, used := srv.lim.InFlight()
		return count == 0 && used == 0
	})
}

// TestHostileOneOwnerCannotStallAnother (before the fix: "no front door lets one
// caller ... stall another caller"): one owner's slow large bodies hold
// only its share of the in-flight budget, so another owner's body is read
// and answered at once instead of waiting for the first owner's body
// deadline. Without the share, owner 1000's two 3 MiB bodies filled the
// 8 MiB budget and owner 1001's 3 MiB body waited behind them.
func TestHostileOneOwnerCannotStallAnother(t *testing.T) {
	const body = 3 << 20
	srv, addr := serveFront(t, testDispatcher(nil), HTTPOptions{
		MaxBodyBytes: body, MaxInFlightBytes: 8 << 20, MaxInFlightBytesPerOwner: 4 << 20, BodyTimeout: time.Minute})
	for i := 0; i < 6; i++ {
		slowBody(t, addr, http.MethodPost, "/mcp", tokA, body)
	}
	waitFor(t, func() bool {
		count, used := srv.lim.InFlight()
		return count == 1 && used == body
	})
	time.Sleep(200 * time.Millisecond) // a second admitted late would show now
	count, used := srv.lim.InFlight()
	if count != 1 || used != body {
		t.Fatalf("owner 1000 holds %d places of %d bytes, want 1 of %d: its share (4 MiB) is not enforced", count, used, body)
	}
	// Owner 1001's full 3 MiB body is admitted beside them and answered
	// well before owner 1000's bodies reach their minute-long deadline.
	cB := tokenClient(tokB)
	cB.Timeout = 20 * time.Second
	big := "{" + strings.Repeat(" ", body-2) + "}"
	resp, err := cB.Post("http://"+addr+"/v1/sessions", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatalf("POST /v1/sessions with a 3 MiB body from owner 1001 while owner 1000's bodies stall: %v", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "no sandbox manager") {
		t.Fatalf("POST /v1/sessions with a 3 MiB body from owner 1001 while owner 1000's bodies stall: %d %s", resp.StatusCode, clip(string(b), 300))
	}
}

// readStatus reads one response's status and (small) body from c.
func readStatus(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// decodeResp parses a JSON response body.
func decodeResp(t *testing.T, s string) api.Response {
	t.Helper()
	var r api.Response
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("response %q: %v", clip(s, 300), err)
	}
	return r
}

const frontCgroupRoot = "/jailcell-test-api-fronts"

// stalledStream starts a streamed exec of code in session id on a
// connection whose client never reads (a 4 KiB receive window).
func stalledStream(t *testing.T, addr, id, code string, timeoutS int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body, _ := json.Marshal(map[string]any{"code": code, "timeout_s": timeoutS})
	fmt.Fprintf(c, "POST /v1/sessions/%s/exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", id, addr, tokA, len(body), body)
	// Under load the request may not have reached its session yet; a
	// caller's next exec would then run first. Its cell runs once the
	// session says busy (or, already over, counts it).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, b := doJSON(t, http.MethodGet, "http://"+addr+"/v1/sessions", "")
		if code != http.StatusOK || !strings.Contains(b, id) {
			t.Fatalf("GET /v1/sessions: %d %s", code, clip(b, 500))
		}
		if strings.Contains(b, `"state":"busy"`) || strings.Contains(b, `"cells":1`) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the streamed exec did not start its cell within two minutes: %s", clip(b, 500))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doJSON sends a JSON request as owner 1000 and returns status and body.
func doJSON(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := tokenClient(tokA).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, string(b)
}

// untilIdle waits (a minute at most: counts, not times) until the
// in-flight budget holds nothing: every request, the stalled stream
// included, has been answered or cut.
func untilIdle(t *testing.T, srv *HTTPServer, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, _ := srv.lim.InFlight()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d requests still hold places a minute on", what, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHostileStreamedExecClientStopsReading (attack: a streamed
// exec over TCP whose client stopped reading kept its session busy after
// the cell ended, a DELETE answered 500 after 10 s, and the slot was held
// until the client read again): the cell never waits for the client, so
// the session is free when the cell ends and keeps its state; the stalled
// response is cut at the stream grace after that, freeing its slot; a
// DELETE, even while the cell runs, answers 200.
func TestHostileStreamedExecClientStopsReading(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 512 << 20
	p.OutputBytes = 16 << 20
	m := newTestManager(t, frontCgroupRoot, p)
	srv, addr := serveFront(t, &api.Dispatcher{Manager: m, Version: "test"}, HTTPOptions{StreamGrace: time.Second})
	base := "http://" + addr
	create := func() string {
		code, b := doJSON(t, http.MethodPost, base+"/v1/sessions", "{}")
		if code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, b)
		}
		return decodeResp(t, b).Info.ID
	}
	// 10 MiB of output: more than the loopback socket's buffers hold
	// (tcp_wmem's 4 MiB ceiling and a 4 KiB receive window).
	const flood = "import sys\nchunk = 'x' * 65535 + '\\n'\nfor i in range(160):\n    sys.stdout.write(chunk); sys.stdout.flush()\n"

	t.Run("session free when the cell ends", func(t *testing.T) {
		id := create()
		stalledStream(t, addr, id, flood+"done = 42\n", 60)
		// Another connection's exec: busy while the cell runs, then it
		// runs, and sees the stalled cell's variables.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			code, b := doJSON(t, http.MethodPost, base+"/v1/sessions/"+id+"/exec", `{"code":"print(done)"}`)
			if code == http.StatusOK {
				if r := decodeResp(t, b); r.Result == nil || r.Result.Stdout != "42\n" {
					t.Fatalf("exec after the stalled cell: %s", clip(b, 500))
				}
				break
			}
			if code != http.StatusConflict {
				t.Fatalf("exec while the stalled cell runs: %d %s", code, clip(b, 500))
			}
			if time.Now().After(deadline) {
				t.Fatal("the session stayed busy two minutes behind a client that stopped reading")
			}
			time.Sleep(50 * time.Millisecond)
		}
		untilIdle(t, srv, "the stalled stream after its cell ended")
		if code, b := doJSON(t, http.MethodDelete, base+"/v1/sessions/"+id, ""); code != http.StatusOK {
			t.Fatalf("DELETE after the stalled stream: %d %s", code, b)
		}
	})

	t.Run("DELETE while the stalled cell runs", func(t *testing.T) {
		id := create()
		stalledStream(t, addr, id, flood+"import time\ntime.sleep(120)\n", 300)
		// The whole flood is queued for the stalled client (its place grew
		// by it) and the cell sleeps on.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, used := srv.lim.InFlight()
			if used >= 10<<20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cell's output never reached the stream's queue (%d bytes in flight)", used)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code, b := doJSON(t, http.MethodPost, base+"/v1/sessions/"+id+"/exec", `{"code":"1"}`); code != http.StatusConflict {
			t.Fatalf("exec while the cell sleeps: %d %s, want 409 busy", code, clip(b, 300))
		}
		if code, b := doJSON(t, http.MethodDelete, base+"/v1/sessions/"+id, ""); code != http.StatusOK {
			t.Fatalf("DELETE of a session whose streamed cell's client stopped reading: %d %s", code, b)
		}
		untilIdle(t, srv, "the stalled stream after its session was deleted")
	})
}

// mcpPost sends one JSON-RPC message in MCP session sid (none: "") over a
// fresh connection and returns status, session id and body.
func mcpPost(t *testing.T, base, sid, msg string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(msg))
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST /mcp: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

// TestHostileMCPToolCallClientStopsReading (attack: the MCP
// streaming path): a run_python whose client stops reading its event
// stream (progress, then a large result) does not hold the jailcell
// session, and its request's place is freed within the stream grace once
// a write stalls; the MCP session still serves the next call, with the
// cell's variables.
func TestHostileMCPToolCallClientStopsReading(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 512 << 20
	p.OutputBytes = 16 << 20
	m := newTestManager(t, frontCgroupRoot+"-mcp", p)
	srv, addr := serveFront(t, &api.Dispatcher{Manager: m, Version: "test"}, HTTPOptions{StreamGrace: time.Second})
	base := "http://" + addr
	code, sid, body := mcpPost(t, base, "", initializeBody)
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	if code, _, body := mcpPost(t, base, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	// The stalled client asks for progress and a 10 MiB result, and never
	// reads.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{
		"name": "run_python", "_meta": map[string]any{"progressToken": "p1"},
		"arguments": map[string]any{"timeout_s": 60, "code": "import sys, time\nchunk = 'x' * 65535 + '\\n'\nfor i in range(160):\n    sys.stdout.write(chunk)\ntime.sleep(1.5)\ndone = 42\n"}}})
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Mcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: %d\r\n\r\n%s", addr, tokA, sid, len(call), call)
	// The cell ends, its result stalls in the write, and is cut: every
	// place comes back while the client still reads nothing.
	deadline := time.Now().Add(2 * time.Minute)
	for len(m.List(context.Background(), 1000)) == 0 { // the call was admitted and made its session
		if time.Now().After(deadline) {
			t.Fatal("the stalled tool call made no session in two minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	untilIdle(t, srv, "the stalled MCP tool call")
	code, _, body = mcpPost(t, base, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(done)"}}}`)
	if code != http.StatusOK || !strings.Contains(body, `42\n`) {
		t.Fatalf("the next call in the MCP session: %d %.500s", code, body)
	}
}

// TestMCPProbesHoldNoPlace: a POST without a session that is not an
// initialize (a newer client's server/discover probe, sent before every
// initialize; a ping) is answered and holds no place afterwards. The SDK
// made a session for each, never addressed again, so every client
// connection held a second place for mcp.idle_timeout, and a client's
// initialize was refused at the cap (CI, TestServeHostileMCPInitializeFlood).
func TestMCPProbesHoldNoPlace(t *testing.T) {
	srv, addr := serveFront(t, testDispatcher(nil), HTTPOptions{
		MCPMaxSessionsPerOwner: 3, MCPMaxSessions: 3, MCPIdleTimeout: time.Hour})
	base := "http://" + addr
	for i, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
		`not json`,
	} {
		// 20 at once, over the cap of 3: none may wait for or take a place.
		errs := make(chan error, 20)
		for j := 0; j < 20; j++ {
			go func() {
				req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := tokenClient(tokA).Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusTooManyRequests:
					errs <- fmt.Errorf("refused at the cap: it must hold no place")
				case resp.Header.Get("Mcp-Session-Id") != "":
					errs <- fmt.Errorf("given session %s", resp.Header.Get("Mcp-Session-Id"))
				default:
					errs <- nil
				}
			}()
		}
		for j := 0; j < 20; j++ {
			if err := <-errs; err != nil {
				t.Fatalf("probe %d (%s): %v", i, body, err)
			}
		}
	}
	if n := srv.mcp.live.count(); n != 0 {
		t.Fatalf("%d MCP places held after 80 probes, want 0", n)
	}
	// Three real clients in a row (each probes first) fill the cap of 3
	// exactly, and a fourth is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		cs, err := mcpConnect(ctx, base, tokA)
		if err != nil {
			t.Fatalf("client %d of 3 under a cap of 3: %v", i+1, err)
		}
		defer cs.Close()
		if n := srv.mcp.live.count(); n != i+1 {
			t.Fatalf("%d places held after %d clients connected, want %d", n, i+1, i+1)
		}
	}
	if _, err := mcpConnect(ctx, base, tokA); err == nil {
		t.Fatal("a fourth client connected over a cap of 3")
	}
}
