package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jailcell/jailcell/session/seam"
)

// Test helpers shared by api's tests (the JSON-lines door keeps its own
// copies in api/jsonl).

// testDispatcher has no manager: ping answers from features, every other
// op that passes validation answers "unavailable". No root, no sandbox.
func testDispatcher(features func() seam.Features) *Dispatcher {
	if features == nil {
		features = func() seam.Features { return seam.Features{Kernel: "test", CgroupMode: "v2"} }
	}
	return &Dispatcher{Version: "test-1", Features: features}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scanLines reads JSON lines from r as they come (integration tests).
func scanLines(r io.Reader, max int) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), max)
	return sc
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ServeJSONLForTest is api/jsonl's Serve with default options, set by
// jsonl_hook_test.go: api's own tests cannot import a door (the door
// imports api), the external test package can.
var ServeJSONLForTest func(ctx context.Context, r io.Reader, w io.Writer, h Handler) error

// A cgroup root of its own: starting a manager sweeps its root, and the
// session package's tests may run at the same time.
const integrationCgroupRoot = "/jailcell-test-api"

// jsonlClient talks to a live api/jsonl door over pipes, one line at a time.
type jsonlClient struct {
	t     *testing.T
	w     io.WriteCloser
	lines chan string
	done  chan error
}

type liveLine struct {
	ID        json.RawMessage `json:"id"`
	OK        *bool           `json:"ok"`
	Event     string          `json:"event"`
	Text      string          `json:"text"`
	Error     *Error          `json:"error"`
	Version   string          `json:"version"`
	Isolation *seam.Features  `json:"isolation"`
	Result    *seam.Result    `json:"result"`
	Session   string          `json:"session"`
	ExpiresAt time.Time       `json:"expires_at"`
}

func startJSONL(t *testing.T, d *Dispatcher) *jsonlClient {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &jsonlClient{t: t, w: inW, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		err := ServeJSONLForTest(context.Background(), inR, outW, d)
		outW.Close()
		c.done <- err
	}()
	go func() {
		sc := scanLines(outR, 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

func (c *jsonlClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *jsonlClient) next() (liveLine, string) {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("output ended early")
		}
		var v liveLine
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			c.t.Fatalf("output line is not JSON: %q: %v", l, err)
		}
		return v, l
	case <-time.After(2 * time.Minute):
		c.t.Fatal("no response within 2 minutes")
	}
	panic("unreachable")
}

// call sends one request and returns its final response, failing on any
// event in between.
func (c *jsonlClient) call(line string) (liveLine, string) {
	c.t.Helper()
	c.send(line)
	v, raw := c.next()
	if v.Event != "" {
		c.t.Fatalf("unexpected event %s", raw)
	}
	return v, raw
}

func (c *jsonlClient) mustOK(line string) liveLine {
	c.t.Helper()
	v, raw := c.call(line)
	if v.OK == nil || !*v.OK {
		c.t.Fatalf("%s\n  -> %s", line, raw)
	}
	return v
}
