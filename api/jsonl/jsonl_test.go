package jsonl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/doortest"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/session/seam"
)

// The doors' shared test helpers, under the names these tests use.
var (
	testDispatcher = doortest.Dispatcher
	waitFor        = doortest.WaitFor
	scanLines      = doortest.ScanLines
	discardLogger  = doortest.DiscardLogger
)

// These tests drive the transport with a Dispatcher that has no manager:
// ping answers from an injected features func, every other op that passes
// validation answers "unavailable". No root, no sandbox.

type wireLine struct {
	ID    json.RawMessage `json:"id"`
	OK    *bool           `json:"ok"`
	Event string          `json:"event"`
	Text  string          `json:"text"`
	Error *api.Error      `json:"error"`

	Version   string         `json:"version"`
	Isolation *seam.Features `json:"isolation"`
	raw       string
}

// serve runs Serve over in and returns every output line, parsed.
func serve(t *testing.T, d *api.Dispatcher, opts Options, in string) []wireLine {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Serve(ctx, strings.NewReader(in), &out, d, opts); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return parseLines(t, out.String())
}

func parseLines(t *testing.T, s string) []wireLine {
	t.Helper()
	var got []wireLine
	for _, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			continue
		}
		if !strings.HasSuffix(l, "\n") {
			t.Fatalf("output line not terminated: %q", l)
		}
		var w wireLine
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("output line is not JSON: %q: %v", l, err)
		}
		w.raw = l
		got = append(got, w)
	}
	return got
}

func TestServeJSONLPing(t *testing.T) {
	got := serve(t, testDispatcher(nil), Options{}, `{"id":"1","op":"ping"}`+"\n")
	if len(got) != 1 {
		t.Fatalf("got %d lines, want 1", len(got))
	}
	r := got[0]
	if string(r.ID) != `"1"` || r.OK == nil || !*r.OK || r.Version != "test-1" || r.Isolation == nil || r.Isolation.CgroupMode != "v2" {
		t.Errorf("ping response %s", r.raw)
	}
	if !strings.Contains(r.raw, `"isolation":{"kernel":"test","cgroup_mode":"v2"`) {
		t.Errorf("isolation not in the wire shape: %s", r.raw)
	}
}

// TestServeJSONLBadLines: each bad line gets one precise bad_request, in
// order, and the next request still works.
func TestServeJSONLBadLines(t *testing.T) {
	in := strings.Join([]string{
		"\xff\xfe{}",
		`{"id":1,"op":`,
		`[1]`,
		`{"id":2,"op":"frobnicate"}`,
		`{"id":3,"op":"exec","code":5}`,
		`{"id":4,"op":"exec","code":"1","timeout_s":-1}`,
		`{"id":5,"op":"exec","code":"1","timeout_s":"soon"}`,
		`{"id":6,"op":"upload","session":"s","path":"a","data":"%%%"}`,
		`{"id":7,"op":"files"}`,
		`{"id":8,"op":"ping"}`,
	}, "\n") + "\n"
	got := serve(t, testDispatcher(nil), Options{}, in)
	want := []struct{ id, msg string }{
		{"null", "not valid UTF-8"},
		{"null", "not valid JSON"},
		{"null", "must be a JSON object, got array"},
		{"2", `unknown op "frobnicate"; allowed: ping, exec`},
		{"3", `field "code" must be a string`},
		{"4", `field "timeout_s" = -1`},
		{"5", `field "timeout_s" must be a number`},
		{"6", `field "data" is not valid base64`},
		{"7", `op "files" needs field "session"`},
		{"8", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if string(g.ID) != w.id {
			t.Errorf("line %d: id %s, want %s (%s)", i, g.ID, w.id, g.raw)
		}
		if w.msg == "" {
			if g.OK == nil || !*g.OK {
				t.Errorf("line %d: want ok, got %s", i, g.raw)
			}
			continue
		}
		if g.OK == nil || *g.OK || g.Error == nil || g.Error.Code != api.CodeBadRequest || !strings.Contains(g.Error.Message, w.msg) {
			t.Errorf("line %d: want bad_request containing %q, got %s", i, w.msg, g.raw)
		}
	}
}

// TestServeJSONLOversized: an oversized line is answered with id null and
// skipped without being buffered; the ping after it is answered after it.
func TestServeJSONLOversized(t *testing.T) {
	for _, size := range []int{101, 200 << 10, 3 << 20} { // below, at, far above bufio's buffer
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			big := `{"id":"big","op":"exec","code":"` + strings.Repeat("x", size) + `"}`
			in := big + "\n" + `{"id":"after","op":"ping"}` + "\n"
			got := serve(t, testDispatcher(nil), Options{MaxLineBytes: 100}, in)
			if len(got) != 2 {
				t.Fatalf("got %d lines, want 2", len(got))
			}
			if string(got[0].ID) != "null" || got[0].Error == nil || got[0].Error.Code != api.CodeBadRequest ||
				!strings.Contains(got[0].Error.Message, "over the 100-byte limit") ||
				!strings.Contains(got[0].Error.Message, fmt.Sprintf("line of %d bytes", len(big))) {
				t.Errorf("oversized answer: %s", got[0].raw)
			}
			if string(got[1].ID) != `"after"` || got[1].OK == nil || !*got[1].OK {
				t.Errorf("ping after oversized: %s", got[1].raw)
			}
		})
	}
}

func TestServeJSONLLineLimitExact(t *testing.T) {
	line := `{"id":1,"op":"ping"}`
	got := serve(t, testDispatcher(nil), Options{MaxLineBytes: len(line)}, line+"\r\n"+line+" \n")
	// The bad line is answered at once, the ping in its goroutine: either
	// order is right.
	var ok, bad int
	for _, g := range got {
		switch {
		case string(g.ID) == "1" && g.OK != nil && *g.OK:
			ok++
		case string(g.ID) == "null" && g.Error != nil && strings.Contains(g.Error.Message, "21 bytes is over the 20-byte limit"):
			bad++
		}
	}
	if len(got) != 2 || ok != 1 || bad != 1 {
		t.Fatalf("a line of exactly the limit (CRLF allowed) must pass and one byte more fail: %v", got)
	}
}

// TestServeJSONLEOF: the last line needs no newline, blank lines are not
// requests, and EOF returns nil once everything is answered.
func TestServeJSONLEOF(t *testing.T) {
	got := serve(t, testDispatcher(nil), Options{}, "\n  \n\r\n"+`{"id":1,"op":"ping"}`)
	if len(got) != 1 || string(got[0].ID) != "1" {
		t.Fatalf("got %v", got)
	}
	if got := serve(t, testDispatcher(nil), Options{}, ""); len(got) != 0 {
		t.Fatalf("empty input gave %v", got)
	}
}

// TestServeJSONLConcurrent: requests run at once (the barrier in ping
// only opens when all of them are inside), duplicate ids are fine, and
// every response is one whole line.
func TestServeJSONLConcurrent(t *testing.T) {
	const n = 32
	var wg sync.WaitGroup
	wg.Add(n)
	big := strings.Repeat("problem ", 4096) // long lines invite interleaving
	d := testDispatcher(func() seam.Features {
		wg.Done()
		wg.Wait()
		return seam.Features{Problems: []isolate.Problem{{ID: isolate.ProblemOverlay, Text: big}}}
	})
	var in strings.Builder
	for range n {
		in.WriteString(`{"id":"same","op":"ping"}` + "\n")
	}
	got := serve(t, d, Options{}, in.String())
	if len(got) != n {
		t.Fatalf("got %d responses, want %d", len(got), n)
	}
	for _, g := range got {
		if string(g.ID) != `"same"` || g.OK == nil || !*g.OK || g.Isolation == nil || g.Isolation.Problems[0].Text != big {
			t.Fatalf("bad response %.200s", g.raw)
		}
	}
}

// TestServeJSONLMaxInFlight: with one slot, a second request waits for
// the first rather than running beside it.
func TestServeJSONLMaxInFlight(t *testing.T) {
	var mu sync.Mutex
	running, peak := 0, 0
	d := testDispatcher(func() seam.Features {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return seam.Features{}
	})
	got := serve(t, d, Options{MaxInFlight: 1}, strings.Repeat(`{"id":1,"op":"ping"}`+"\n", 4))
	if len(got) != 4 || peak != 1 {
		t.Fatalf("got %d responses, peak concurrency %d; want 4 and 1", len(got), peak)
	}
}

// TestServeJSONLPanic: a handler panic is an internal error for that
// request, and the process keeps serving.
func TestServeJSONLPanic(t *testing.T) {
	calls := 0
	var mu sync.Mutex
	d := testDispatcher(func() seam.Features {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			panic("boom")
		}
		return seam.Features{}
	})
	d.Logger = discardLogger()
	got := serve(t, d, Options{MaxInFlight: 1}, `{"id":1,"op":"ping"}`+"\n"+`{"id":2,"op":"ping"}`+"\n")
	if len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	if got[0].Error == nil || got[0].Error.Code != api.CodeInternal || !strings.Contains(got[0].Error.Message, "boom") {
		t.Errorf("panic answer: %s", got[0].raw)
	}
	if got[1].OK == nil || !*got[1].OK {
		t.Errorf("after panic: %s", got[1].raw)
	}
}

// TestServeJSONLNoManager: ops that need sandboxes say so.
func TestServeJSONLNoManager(t *testing.T) {
	got := serve(t, testDispatcher(nil), Options{}, `{"id":1,"op":"exec","code":"1"}`+"\n"+`{"id":2,"op":"sessions"}`+"\n")
	for _, g := range got {
		if g.Error == nil || g.Error.Code != api.CodeUnavailable {
			t.Errorf("want unavailable, got %s", g.raw)
		}
	}
}

// TestServeJSONLCancel: cancelling ctx returns even while a read blocks.
func TestServeJSONLCancel(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var out testenv.LockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, pr, &out, testDispatcher(nil), Options{}) }()
	if _, err := io.WriteString(pw, `{"id":1,"op":"ping"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(out.String(), `"ok":true`) })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// TestServeJSONLWriteError: with nobody reading, Serve stops and says
// why rather than spinning.
func TestServeJSONLWriteError(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		for range 100 {
			if _, err := io.WriteString(pw, `{"id":1,"op":"ping"}`+"\n"); err != nil {
				return
			}
		}
		pw.Close()
	}()
	w := failWriter{}
	d := testDispatcher(nil)
	err := Serve(context.Background(), pr, w, d, Options{Logger: discardLogger()})
	pr.Close()
	if err == nil || !strings.Contains(err.Error(), "write response") {
		t.Fatalf("Serve = %v, want a write error", err)
	}
}

// TestReadLinesBounded: the reader never hands out more than the limit
// and resynchronises at the next newline.
func TestReadLinesBounded(t *testing.T) {
	in := strings.Repeat("a", 10) + "\n" + strings.Repeat("b", 1<<20) + "\n" + "c\r\n" + "d"
	lines := make(chan readLine)
	go readLines(context.Background(), strings.NewReader(in), 16, lines)
	var got []string
	for l := range lines {
		switch {
		case l.err != nil:
			if !errors.Is(l.err, io.EOF) {
				t.Fatal(l.err)
			}
			want := []string{"aaaaaaaaaa", "oversized 1048576", "c", "d"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("got %q, want %q", got, want)
			}
			return
		case l.oversized:
			if l.data != nil {
				t.Fatal("oversized line carried data")
			}
			got = append(got, fmt.Sprint("oversized ", l.n))
		default:
			got = append(got, string(l.data))
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
