package e2b

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// rawRequest writes head (request line and headers, CRLF-ended, no blank
// line) and then part of a body on a new connection to srv, and returns
// the connection for the answer.
func rawRequest(t *testing.T, srv *httptest.Server, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%s\r\n%s", head, body); err != nil {
		t.Fatal(err)
	}
	return c
}

// readStatus reads the answer's status code within limit (0 if the
// connection ended or nothing came).
func readStatus(c net.Conn, limit time.Duration) int {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestBodiesAreBoundedBeforeTheyAreAdmitted: a declared body over the
// route's bound is refused at once (it was admitted alone into the empty
// budget at its declared 2^62 bytes and held every other owner's request
// waiting for a body that never came), and a sender that stops mid-body
// is cut off at the body timeout, its place given back; meanwhile
// another owner is served.
func TestBodiesAreBoundedBeforeTheyAreAdmitted(t *testing.T) {
	d, _ := newTestDoor(t, Options{BodyTimeout: 500 * time.Millisecond,
		Keys: NewKeys(map[string]uint32{testKey: 1000, testKey + "2": 1001}).Owner})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close) // after the raw connections close
	s := makeSandbox(t, d)
	upload := "POST /files?path=a.txt HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n" +
		"E2b-Sandbox-Id: " + s.SandboxID + "\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: " + s.EnvdAccessToken + "\r\n"

	huge := rawRequest(t, srv, upload+"Content-Length: 4611686018427387904\r\n", "")
	if code := readStatus(huge, 5*time.Second); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared 2^62-byte upload: status %d, want 413 at once", code)
	}

	// A large declared upload that stalls holds an eighth of the budget,
	// not its declared length (admitted alone at that, it held it all).
	large := rawRequest(t, srv, upload+"Content-Length: 209715200\r\n", strings.Repeat("x", 10))
	waitFor := func(what string, ok func(n int, used int64) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, used := d.budget.InFlight()
			if ok(n, used) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the budget holds %d requests, %d bytes", what, n, used)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("a stalled 200 MiB upload", func(n int, used int64) bool { return n == 1 })
	if _, used := d.budget.InFlight(); used > d.budget.MaxWeight()/8 {
		t.Errorf("a stalled upload declared at 200 MiB holds %d bytes, more than an eighth of the budget", used)
	}
	large.Close()
	waitFor("after the stalled upload's client left", func(n int, used int64) bool { return n == 0 })

	slow := rawRequest(t, srv, upload+"Content-Length: 1000\r\n", strings.Repeat("x", 10))
	other := srv.Client()
	other.Timeout = 5 * time.Second
	req, _ := http.NewRequest("GET", srv.URL+"/sandboxes", nil)
	req.Header.Set("X-API-KEY", testKey+"2")
	resp, err := other.Do(req)
	if err != nil {
		t.Fatalf("another owner's request while an upload stalls: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another owner's list: %d", resp.StatusCode)
	}
	start := time.Now()
	code := readStatus(slow, 10*time.Second)
	if time.Since(start) > 5*time.Second {
		t.Errorf("a stalled upload was cut off after %s, want about the body timeout (500ms)", time.Since(start))
	}
	t.Logf("a stalled upload ended with status %d after %s", code, time.Since(start))
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, used := d.budget.InFlight()
		if n == 0 && used == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget still holds %d requests, %d bytes after the stalled upload ended", n, used)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChunkedAndCompressedBodiesWeighTheirBound: a body whose size the
// request does not state, or states compressed, takes the route's bound
// or an eighth of the budget's bytes (the less; here the eighth) from the
// budget, not one byte.
func TestChunkedAndCompressedBodiesWeighTheirBound(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(r *http.Request)
	}{
		{"chunked", func(r *http.Request) { r.ContentLength = -1 }},
		{"gzip", func(r *http.Request) { r.Header.Set("Content-Encoding", "gzip") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/files?path=a.txt", strings.NewReader("x"))
			c.edit(r)
			if got := max(r.ContentLength, 1); got >= maxUploadBody {
				t.Fatalf("test request already weighs %d", got)
			}
			const budget = 1 << 30
			d, _ := newTestDoor(t, Options{MaxInFlightBytes: budget})
			s := makeSandbox(t, d)
			// Hold all but an eighth of the budget, less a byte: the
			// request weighed an eighth must wait, one weighed a byte
			// would pass.
			held, err := d.budget.TakeFor(t.Context(), 2000, budget-budget/8+1)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			for k, v := range map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": s.EnvdAccessToken,
				"Content-Type": "application/octet-stream"} {
				r.Header.Set(k, v)
			}
			ctx, cancel := context.WithTimeout(r.Context(), 300*time.Millisecond)
			defer cancel()
			rec := httptest.NewRecorder()
			d.ServeHTTP(rec, r.WithContext(ctx))
			if rec.Code != http.StatusServiceUnavailable {
				t.Errorf("status %d %s, want 503: weighed an eighth of the budget, it waits for the held place", rec.Code, rec.Body)
			}
		})
	}
}

// TestSignedURLRefusalIsTheSameForAnyID: a caller with no credentials gets
// the same answer for a sandbox the door made and for an id it never
// made: no oracle of which ids exist.
func TestSignedURLRefusalIsTheSameForAnyID(t *testing.T) {
	d, _ := newTestDoor(t, Options{})
	s := makeSandbox(t, d)
	answer := func(id string) (int, string) {
		w := do(d, "GET", "/files?path=a.txt&signature=v1_x", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"})
		return w.Code, w.Body.String()
	}
	c1, b1 := answer(s.SandboxID)
	c2, b2 := answer("n1-" + strings.Repeat("b", 32))
	if c1 != http.StatusUnauthorized || c1 != c2 || b1 != b2 {
		t.Errorf("made: %d %s; never made: %d %s; want the same 401", c1, b1, c2, b2)
	}
}

// TestExecuteFreesTheSandboxForAClientThatStopsReading: a cell's output
// is queued, never written under the cell, so a client that sends
// /execute and stops reading (its connection open) does not keep the
// sandbox busy: the cell's call returns with 64 MiB of output unread.
func TestExecuteFreesTheSandboxForAClientThatStopsReading(t *testing.T) {
	d, f := newTestDoor(t, Options{MaxInFlightBytes: 1 << 30})
	f.execOut, f.execDone = 64<<20, make(chan struct{})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close) // after the raw connection closes
	s := makeSandbox(t, d)
	body := `{"code":"print('x' * 2**26)"}`
	c := rawRequest(t, srv, fmt.Sprintf("POST /execute HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\nX-Access-Token: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n", s.SandboxID, InterpreterPort, s.EnvdAccessToken, len(body)), body)
	_ = c // never read
	select {
	case <-f.execDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the cell's call has not returned 15 s after its client stopped reading: the sandbox stays busy")
	}
	if _, used := d.budget.InFlight(); used < 64<<20 {
		t.Errorf("the budget holds %d bytes while 64 MiB of output is queued, want them counted", used)
	}
}

// TestDownloadsAreWeighed: a download's bytes, in memory until written,
// are counted in its request's place while a client does not read them,
// and given back when the client leaves.
func TestDownloadsAreWeighed(t *testing.T) {
	d, f := newTestDoor(t, Options{MaxInFlightBytes: 1 << 30})
	f.download = bytes.Repeat([]byte("z"), 64<<20)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	s := makeSandbox(t, d)
	c := rawRequest(t, srv, fmt.Sprintf("GET /files?path=big.bin HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\nX-Access-Token: %s\r\n",
		s.SandboxID, EnvdPort, s.EnvdAccessToken), "")
	waitBudget := func(what string, ok func(used int64) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, used := d.budget.InFlight()
			if ok(used) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the budget holds %d bytes", what, used)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitBudget("an unread 64 MiB download", func(used int64) bool { return used >= 64<<20 })
	c.Close()
	waitBudget("after the client left", func(used int64) bool { return used == 0 })
}

// openingSessions is fakeSessions that can also open a file to stream,
// as the daemon's dispatcher can: every open is of file.
type openingSessions struct {
	*fakeSessions
	file string
}

// Handle answers a download with the whole file, as the dispatcher's
// download op does.
func (o openingSessions) Handle(ctx context.Context, owner int, req *api.Request, emit func(api.Event)) *api.Response {
	if req.Op == api.OpDownload {
		b, err := os.ReadFile(o.file)
		if err != nil {
			return api.Fail(req.ID, &api.Error{Code: api.CodeInternal, Message: err.Error()})
		}
		return &api.Response{ID: req.ID, OK: true, Data: b}
	}
	return o.fakeSessions.Handle(ctx, owner, req, emit)
}

func (o openingSessions) Open(_ context.Context, _ int, _, rel string) (*seam.OpenFile, *api.Error) {
	f, err := os.Open(o.file)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	fi, _ := f.Stat()
	return &seam.OpenFile{Path: rel, Size: fi.Size(), Content: f}, nil
}

// TestHostileDownloadsAreStreamed: a download is streamed from the file,
// so the daemon holds a copy buffer per request, not the file. Read whole,
// four unread downloads of a sparse 256 MiB file held 1 GiB (within a
// budget that counted them, but far past what a node should hold for one
// owner's reads). Ranges are served from the file too.
func TestHostileDownloadsAreStreamed(t *testing.T) {
	big := filepath.Join(t.TempDir(), "sparse.bin")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 256<<20); err != nil {
		t.Fatal(err)
	}
	d, _ := newTestDoorOver(t, Options{MaxInFlightBytes: 1 << 30}, func(f *fakeSessions) api.Handler { return openingSessions{f, big} })
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	s := makeSandbox(t, d)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	for range 4 {
		conns = append(conns, rawRequest(t, srv, fmt.Sprintf("GET /files?path=big.bin HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\nX-Access-Token: %s\r\n",
			s.SandboxID, EnvdPort, s.EnvdAccessToken), ""))
	}
	// Each answer has begun: its status line is readable.
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			t.Fatalf("download answer: %q %v", line, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, used := d.budget.InFlight(); used > 1<<20 {
		t.Errorf("four unread 256 MiB downloads hold %d bytes of the budget, want copy buffers only", used)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("the heap grew by %d MiB with four downloads of 256 MiB in flight, want buffers only", grew>>20)
	}
	for _, c := range conns {
		c.Close()
	}
	// A range is answered from the file.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/files?path=big.bin", nil)
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	req.Header.Set("X-Access-Token", s.EnvdAccessToken)
	req.Header.Set("Range", "bytes=100-199")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || len(b) != 100 {
		t.Errorf("range of a streamed file: %s, %d bytes; want 206 and 100", resp.Status, len(b))
	}
}

// puttingSessions takes streamed uploads (api.Putter) into nothing,
// counting their bytes, as the session's workspace part writes them.
type puttingSessions struct {
	*fakeSessions
	got *atomic.Int64
}

func (p puttingSessions) Put(_ context.Context, _ int, _, rel string, r io.Reader, meta map[string]string) (*api.Response, *api.Error) {
	n, err := io.CopyBuffer(io.Discard, io.LimitReader(r, seam.MaxFileBytes+1), make([]byte, 64<<10))
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	p.got.Add(n)
	return &api.Response{OK: true, Path: rel, Size: &n, Metadata: meta}, nil
}

// TestHostileUploadsAreStreamed: /files writes an upload as its bytes
// come, raw or in a form: the daemon holds copy buffers, not the file,
// and the body's place keeps its first weight. Read whole first, four
// uploads 48 MiB into their bodies held 192 MiB of heap, their places
// grown by every byte past their first weight.
func TestHostileUploadsAreStreamed(t *testing.T) {
	var got atomic.Int64
	d, _ := newTestDoorOver(t, Options{MaxInFlightBytes: 256 << 20, BodyTimeout: 3 * time.Second},
		func(f *fakeSessions) api.Handler { return puttingSessions{f, &got} })
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	s := makeSandbox(t, d)
	head := func(ct string, n int) string {
		return fmt.Sprintf("POST /files?path=big.bin HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\nX-Access-Token: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n",
			s.SandboxID, EnvdPort, s.EnvdAccessToken, ct, n)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	chunk := strings.Repeat("x", 1<<20)
	var conns []net.Conn
	for i := range 4 {
		ct, pre := "application/octet-stream", ""
		if i%2 == 1 {
			ct, pre = "multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\r\n"
		}
		c := rawRequest(t, srv, head(ct, 200<<20), pre)
		for range 48 {
			if _, err := io.WriteString(c, chunk); err != nil {
				t.Fatal(err)
			}
		}
		conns = append(conns, c)
	}
	weight := d.budget.MaxWeight() / 8
	if _, used := d.budget.InFlight(); used > 4*weight {
		t.Errorf("four uploads 48 MiB into their bodies hold %d bytes of the budget, want their first weights (%d each)", used, weight)
	}
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB with four uploads 48 MiB in, want buffers only", grew>>20)
	}
	// Stalled, each ends at the body timeout.
	for _, c := range conns {
		if st := readStatus(c, 20*time.Second); st != http.StatusBadRequest {
			t.Errorf("a stalled upload: %d, want 400", st)
		}
	}
	// Whole, raw and in a form: answered with the entry, every byte put.
	got.Store(0)
	for _, ct := range []string{"application/octet-stream", "multipart/form-data; boundary=B"} {
		body := strings.Repeat("y", 3<<20)
		if strings.HasPrefix(ct, "multipart") {
			body = "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"whole.bin\"\r\n\r\n" + body + "\r\n--B--\r\n"
		}
		c := rawRequest(t, srv, head(ct, len(body)), body)
		if st := readStatus(c, 20*time.Second); st != http.StatusOK {
			t.Errorf("a whole %s upload: %d, want 200", ct, st)
		}
	}
	if got.Load() != 2*(3<<20) {
		t.Errorf("two whole uploads of 3 MiB put %d bytes", got.Load())
	}
}
