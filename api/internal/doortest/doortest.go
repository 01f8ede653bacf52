package doortest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// Dispatcher has no manager: ping answers from features (a fixed test
// host if nil), every other op that passes validation answers
// "unavailable". No root, no sandbox.
func Dispatcher(features func() seam.Features) *api.Dispatcher {
	if features == nil {
		features = func() seam.Features { return seam.Features{Kernel: "test", CgroupMode: "v2"} }
	}
	return &api.Dispatcher{Version: "test-1", Features: features}
}

// WaitFor polls cond for up to 5 s, failing t if it never holds.
func WaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ScanLines reads JSON lines from r as they come, each at most max bytes.
func ScanLines(r io.Reader, max int) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), max)
	return sc
}

// DiscardLogger logs nothing.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Line is the part of a JSON-lines answer the doors' tests read.
type Line struct {
	ID        json.RawMessage `json:"id"`
	OK        *bool           `json:"ok"`
	Event     string          `json:"event"`
	Text      string          `json:"text"`
	Error     *api.Error      `json:"error"`
	Version   string          `json:"version"`
	Isolation *seam.Features  `json:"isolation"`
	Result    *seam.Result    `json:"result"`
	Session   string          `json:"session"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// JSONL talks to a live JSON-lines door over pipes, one line at a time.
type JSONL struct {
	t     *testing.T
	w     io.WriteCloser
	lines chan string
	Done  chan error // the door's return, once its input is closed
}

// StartJSONL runs serve (a JSON-lines door) over pipes until the test ends.
func StartJSONL(t *testing.T, serve func(ctx context.Context, r io.Reader, w io.Writer) error) *JSONL {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &JSONL{t: t, w: inW, lines: make(chan string, 64), Done: make(chan error, 1)}
	go func() {
		err := serve(context.Background(), inR, outW)
		outW.Close()
		c.Done <- err
	}()
	go func() {
		sc := ScanLines(outR, 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

// Close closes the door's input.
func (c *JSONL) Close() error { return c.w.Close() }

// Send writes one line.
func (c *JSONL) Send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// Next reads the next line, parsed and raw, waiting up to 2 minutes.
func (c *JSONL) Next() (Line, string) {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("output ended early")
		}
		var v Line
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			c.t.Fatalf("output line is not JSON: %q: %v", l, err)
		}
		return v, l
	case <-time.After(2 * time.Minute):
		c.t.Fatal("no response within 2 minutes")
	}
	panic("unreachable")
}

// Call sends one request and returns its final response, failing on any
// event in between.
func (c *JSONL) Call(line string) (Line, string) {
	c.t.Helper()
	c.Send(line)
	v, raw := c.Next()
	if v.Event != "" {
		c.t.Fatalf("unexpected event %s", raw)
	}
	return v, raw
}

// MustOK is Call, failing unless the answer is ok.
func (c *JSONL) MustOK(line string) Line {
	c.t.Helper()
	v, raw := c.Call(line)
	if v.OK == nil || !*v.OK {
		c.t.Fatalf("%s\n  -> %s", line, raw)
	}
	return v
}

// BigPings is a Dispatcher whose ping answers carry 4 MiB (a stand-in for
// a download or a large result) and counts the pings it served.
func BigPings(calls *atomic.Int32) *api.Dispatcher {
	big := strings.Repeat("k", 4<<20)
	return Dispatcher(func() seam.Features {
		calls.Add(1)
		return seam.Features{Kernel: big}
	})
}
