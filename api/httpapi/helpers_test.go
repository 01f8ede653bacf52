package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/jsonl"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/session/seam"
)

// Test helpers of the HTTP door's tests: copies of api's own (a test file
// cannot import another package's), with the JSON-lines door the
// contract test also drives imported directly.

// testDispatcher has no manager: ping answers from features, every other
// op that passes validation answers "unavailable". No root, no sandbox.
func testDispatcher(features func() seam.Features) *api.Dispatcher {
	if features == nil {
		features = func() seam.Features { return seam.Features{Kernel: "test", CgroupMode: "v2"} }
	}
	return &api.Dispatcher{Version: "test-1", Features: features}
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

// A cgroup root of its own: starting a manager sweeps its root, and the
// session package's tests may run at the same time.
const integrationCgroupRoot = "/jailcell-test-api-http"

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
	Error     *api.Error      `json:"error"`
	Version   string          `json:"version"`
	Isolation *seam.Features  `json:"isolation"`
	Result    *seam.Result    `json:"result"`
	Session   string          `json:"session"`
	ExpiresAt time.Time       `json:"expires_at"`
}

func startJSONL(t *testing.T, d *api.Dispatcher) *jsonlClient {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &jsonlClient{t: t, w: inW, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		err := jsonl.Serve(context.Background(), inR, outW, d, jsonl.Options{})
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

func newTestManager(t *testing.T, cgroupRoot string, p policy.Policy) *session.Manager {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	host, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: cgroupRoot})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	m, err := session.New(session.Config{StateDir: filepath.Join(state, "sessions"), Policies: map[string]policy.Policy{"default": p}}, host)
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := host.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return m
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
