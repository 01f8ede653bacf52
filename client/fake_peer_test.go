package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// These tests need no jailcell: a fake peer in the test's process speaks
// the wire, so each runs anywhere in well under a second or two.

// fakeJSONL is a JSONL client whose peer is serve, called for each request
// in turn on one goroutine; send writes one line to the client.
func fakeJSONL(t *testing.T, serve func(req map[string]any, send func(v any))) *JSONL {
	t.Helper()
	toPeer, fromClient := io.Pipe()
	toClient, fromPeer := io.Pipe()
	c := NewJSONL(toClient, fromClient)
	send := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		_, _ = fromPeer.Write(append(b, '\n'))
	}
	go func() {
		sc := bufio.NewScanner(toPeer)
		for sc.Scan() {
			var req map[string]any
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				panic(err)
			}
			serve(req, send)
		}
	}()
	t.Cleanup(func() {
		fromClient.Close()
		fromPeer.Close()
	})
	return c
}

// degradedResponse is an exec answered by the degraded stateless run.
const degradedResponse = `{"ok":true,"mode":"degraded","fallback":{"code":"import pandas","error":"ModuleNotFoundError: No module named 'pandas'","reason":"the fixer gave up","tried":["attempt 1","degraded stateless run"]},` +
	`"attempts":[{"attempt":1,"code":"import pandas","status":"error","error":{"type":"ModuleNotFoundError","message":"m","traceback":"t"}}],"result":{"status":"ok"}}`

// checkDegraded: the result says it came from the stateless run, not the
// session, with the fallback and attempts that led there.
func checkDegraded(t *testing.T, via string, res *Result, err error) {
	t.Helper()
	if err != nil || res == nil {
		t.Fatalf("%s: exec: %+v, %v", via, res, err)
	}
	if res.Status != "ok" || res.Mode != "degraded" {
		t.Errorf("%s: result status %q mode %q; want ok, degraded", via, res.Status, res.Mode)
	}
	if res.Fallback == nil || res.Fallback.Reason != "the fixer gave up" || len(res.Fallback.Tried) != 2 {
		t.Errorf("%s: fallback %+v", via, res.Fallback)
	}
	if len(res.Attempts) != 1 || res.Attempts[0].Error == nil || res.Attempts[0].Error.Type != "ModuleNotFoundError" {
		t.Errorf("%s: attempts %+v", via, res.Attempts)
	}
}

// TestExecDegradedMode: an exec answered by the degraded stateless run
// says so on its Result, over JSON lines (plain and streamed) and HTTP.
// A caller that missed it would take the cell's variables for set in its
// session.
func TestExecDegradedMode(t *testing.T) {
	c := fakeJSONL(t, func(req map[string]any, send func(v any)) {
		var resp map[string]any
		if err := json.Unmarshal([]byte(degradedResponse), &resp); err != nil {
			panic(err)
		}
		resp["id"] = req["id"]
		if req["stream"] == true {
			send(map[string]any{"id": req["id"], "event": "stdout", "text": "x\n"})
		}
		send(resp)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, "s1", "import pandas", nil)
	checkDegraded(t, "JSON lines", res, err)
	var out strings.Builder
	res, err = c.Exec(ctx, "s1", "import pandas", &ExecOptions{OnOutput: func(_, text string) { out.WriteString(text) }})
	checkDegraded(t, "JSON lines, streamed", res, err)
	if out.String() != "x\n" {
		t.Errorf("streamed output %q", out.String())
	}

	sock := fakeSocket(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(degradedResponse))
	})
	h := NewHTTP(sock)
	defer h.CloseIdleConnections()
	res, err = h.Exec(ctx, "s1", "import pandas", nil)
	checkDegraded(t, "HTTP", res, err)
}

// TestErrorStateLost: a not_found for a session lost with its kernel
// carries state "lost", from the wire error to *Error, over both
// transports; it is still ErrNotFound.
func TestErrorStateLost(t *testing.T) {
	const lost = `{"ok":false,"error":{"code":"not_found","message":"session s1 was lost with its kernel","state":"lost"}}`
	check := func(via string, err error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.State != "lost" || !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %#v; want a not_found *Error with State lost", via, err)
		}
	}
	var r response
	if err := json.Unmarshal([]byte(lost), &r); err != nil {
		t.Fatal(err)
	}
	check("checkResponse", checkResponse(404, &r))

	c := fakeJSONL(t, func(req map[string]any, send func(v any)) {
		var resp map[string]any
		_ = json.Unmarshal([]byte(lost), &resp)
		resp["id"] = req["id"]
		send(resp)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Exec(ctx, "s1", "x", nil)
	check("JSON lines", err)

	sock := fakeSocket(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(lost))
	})
	h := NewHTTP(sock)
	defer h.CloseIdleConnections()
	_, err = h.Exec(ctx, "s1", "x", nil)
	check("HTTP", err)
}

// TestJSONLCallbackMayCallClient: an OnOutput that interrupts its own
// cell gets the interrupt's answer. Events are delivered off the reader
// goroutine, which keeps reading while the callback waits.
func TestJSONLCallbackMayCallClient(t *testing.T) {
	var execID any
	c := fakeJSONL(t, func(req map[string]any, send func(v any)) {
		switch req["op"] {
		case "exec":
			execID = req["id"]
			send(map[string]any{"id": execID, "event": "stdout", "text": "waiting\n"})
		case "interrupt":
			send(map[string]any{"id": req["id"], "ok": true, "interrupted": true})
			send(map[string]any{"id": execID, "ok": true, "result": map[string]any{
				"status": "error", "state": "kept", "error": map[string]any{"type": "KeyboardInterrupt", "message": "", "traceback": ""}}})
		}
	})
	var interrupted bool
	var ierr error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, "s1", "import time; time.sleep(300)", &ExecOptions{OnOutput: func(string, string) {
		ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer icancel()
		interrupted, ierr = c.Interrupt(ictx, "s1")
	}})
	if ierr != nil || !interrupted {
		t.Errorf("Interrupt from OnOutput: %v, %v; want true, no error", interrupted, ierr)
	}
	if err != nil || res.Error == nil || res.Error.Type != "KeyboardInterrupt" {
		t.Errorf("the interrupted exec: %+v, %v", res, err)
	}
}

// TestJSONLEventsBeforeResult: every event reaches its callback, in
// order, before Exec returns, even when the answer follows at once.
func TestJSONLEventsBeforeResult(t *testing.T) {
	c := fakeJSONL(t, func(req map[string]any, send func(v any)) {
		for _, s := range []string{"a", "b", "c", "d"} {
			send(map[string]any{"id": req["id"], "event": "stdout", "text": s})
		}
		send(map[string]any{"id": req["id"], "ok": true, "result": map[string]any{"status": "ok", "stdout": "abcd"}})
	})
	for range 50 {
		var got strings.Builder
		res, err := c.Exec(context.Background(), "s1", "x", &ExecOptions{OnOutput: func(_, text string) {
			time.Sleep(time.Millisecond / 10)
			got.WriteString(text)
		}})
		if err != nil || got.String() != res.Stdout {
			t.Fatalf("delivered %q before Exec returned %+v, %v", got.String(), res, err)
		}
	}
}

// TestStartJSONCloseBounded: Close of a `jailcell json` that does not exit
// when its stdin closes kills it after closeWait instead of waiting for
// ever, and says so.
func TestStartJSONCloseBounded(t *testing.T) {
	defer func(d time.Duration) { closeWait = d }(closeWait)
	closeWait = 200 * time.Millisecond
	cmd := exec.Command("sleep", "60") // never reads stdin, never exits on its own
	c, err := StartJSONCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("Close: %v; want an error saying it was killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting 10 s after its stdin closed; want it killed after closeWait")
	}
}

// closeRecorder is an API whose CloseSession records its context.
type closeRecorder struct {
	API
	deadline time.Time
	bounded  bool
}

func (r *closeRecorder) CloseSession(ctx context.Context, _ string) error {
	r.deadline, r.bounded = ctx.Deadline()
	return ctx.Err()
}

// TestCreatedCloseBounded: the close of a session created by a server
// that ignored hibernate_on_idle outlives the caller's cancelled context
// but is bounded, so a service that never answers cannot hang Create.
func TestCreatedCloseBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &closeRecorder{}
	start := time.Now()
	if _, err := created(ctx, rec, CreateOptions{HibernateOnIdle: true}, Session{ID: "n-1"}); !IsCode(err, "unavailable") {
		t.Errorf("created: %v; want unavailable", err)
	}
	if !rec.bounded || rec.deadline.After(start.Add(closeWait+time.Second)) {
		t.Errorf("the close's context: deadline %v (bounded %v); want one within %s", rec.deadline, rec.bounded, closeWait)
	}
}
