package client

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/workflow"
)

// conformance drives every API call against a live jailcell; both
// transports must behave the same.
func conformance(t *testing.T, c API) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	s, err := c.Create(ctx, CreateOptions{TTL: 10 * time.Minute, Limits: &Limits{Pids: ptr[int64](32)}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !regexp.MustCompile(`^[a-z0-9]{1,16}-[0-9a-f]{32}$`).MatchString(s.ID) || s.State != "ready" || s.Policy != "default" || s.ExpiresAt.IsZero() {
		t.Fatalf("Create: %+v", s)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID {
		t.Fatalf("Sessions: %+v, %v", list, err)
	}

	res, err := c.Exec(ctx, s.ID, "x = 6 * 7\nx", nil)
	if err != nil || res.Status != "ok" || res.Value == nil {
		t.Fatalf("Exec: %+v, %v", res, err)
	}
	// Streaming: output arrives in order before the result.
	var mu sync.Mutex
	var streamed strings.Builder
	res, err = c.Exec(ctx, s.ID, "import time\nfor i in range(3):\n    print(x + i, flush=True)\n    time.sleep(0.05)", &ExecOptions{
		Timeout: 30 * time.Second,
		OnOutput: func(stream, text string) {
			mu.Lock()
			defer mu.Unlock()
			if stream == "stdout" {
				streamed.WriteString(text)
			}
		},
	})
	if err != nil || res.Status != "ok" || res.Stdout != "42\n43\n44\n" {
		t.Fatalf("streamed Exec: %+v, %v", res, err)
	}
	if streamed.String() != res.Stdout {
		t.Fatalf("streamed %q, result %q", streamed.String(), res.Stdout)
	}
	res, err = c.Exec(ctx, s.ID, "1/0", nil)
	if err != nil || res.Status != "error" || res.Error == nil || res.Error.Type != "ZeroDivisionError" {
		t.Fatalf("failing Exec: %+v, %v", res, err)
	}
	if res.ExecutionCount != 3 {
		t.Errorf("third cell: execution count %d, want 3", res.ExecutionCount)
	}
	// Display items arrive as the cell shows them, equal to its result's.
	var shown []DisplayItem
	res, err = c.Exec(ctx, s.ID, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nplt.plot([2, 1])\nplt.show()", &ExecOptions{
		Timeout:   time.Minute,
		OnDisplay: func(d DisplayItem) { shown = append(shown, d) },
	})
	if err != nil || res.Status != "ok" || len(shown) != 2 || !reflect.DeepEqual(shown, res.Display) || res.ExecutionCount != 4 {
		t.Fatalf("Exec with OnDisplay: %d items shown, result %d items, count %d, %v", len(shown), len(res.Display), res.ExecutionCount, err)
	}
	// Each figure's chart data comes beside its PNG.
	for i, want := range [][2]float64{{1, 2}, {2, 1}} {
		c := res.Display[i].Chart
		if c == nil || c.Type != "line" || len(c.Elements) != 1 || !reflect.DeepEqual(c.Elements[0].Points, [][2]float64{{0, want[0]}, {1, want[1]}}) {
			t.Fatalf("display[%d] chart: %+v", i, c)
		}
	}
	// Interrupt: nothing to stop between cells; a running cell ends with a
	// KeyboardInterrupt and keeps its state.
	if ran, err := c.Interrupt(ctx, s.ID); err != nil || ran {
		t.Fatalf("Interrupt between cells: %v, %v", ran, err)
	}
	started := make(chan struct{})
	var once sync.Once
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := c.Exec(ctx, s.ID, "import time\nprint('waiting', flush=True)\ntime.sleep(300)", &ExecOptions{
			Timeout:  10 * time.Minute,
			OnOutput: func(string, string) { once.Do(func() { close(started) }) },
		})
		done <- outcome{r, err}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the cell to interrupt never printed")
	}
	if ran, err := c.Interrupt(ctx, s.ID); err != nil || !ran {
		t.Fatalf("Interrupt of a running cell: %v, %v", ran, err)
	}
	o := <-done
	if o.err != nil || o.res.Status != "error" || o.res.Error == nil || o.res.Error.Type != "KeyboardInterrupt" || o.res.State != "kept" {
		t.Fatalf("interrupted Exec: %+v, %v", o.res, o.err)
	}
	if _, err := c.Interrupt(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Interrupt of an unknown session: %v", err)
	}

	if err := c.Upload(ctx, s.ID, "in dir/data.bin", []byte{0, 1, 2, 255}); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	res, err = c.Exec(ctx, s.ID, "open('out.txt','wb').write(bytes(reversed(open('in dir/data.bin','rb').read())))", nil)
	if err != nil || res.Status != "ok" {
		t.Fatalf("Exec on upload: %+v, %v", res, err)
	}
	got, err := c.Download(ctx, s.ID, "out.txt")
	if err != nil || string(got) != "\xff\x02\x01\x00" {
		t.Fatalf("Download: %q, %v", got, err)
	}
	files, err := c.Files(ctx, s.ID)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if !strings.Contains(strings.Join(paths, "|"), "in dir/data.bin") || !strings.Contains(strings.Join(paths, "|"), "out.txt") {
		t.Fatalf("Files: %v", paths)
	}

	t.Run("hibernate and fork", func(t *testing.T) {
		if err := isolate.ProbeCriu(isolate.DefaultCriu); err != nil {
			t.Skipf("requires a working criu (make criu): %v", err)
		}
		hibernateAndFork(ctx, t, c, s.ID)
	})

	// One-shot: files in, files back with their content.
	res, err = c.Exec(ctx, "", "open('r.txt','w').write(open('a.txt').read()*2)", &ExecOptions{Files: []File{{Path: "a.txt", Data: []byte("ab")}}})
	if err != nil || res.Status != "ok" {
		t.Fatalf("one-shot Exec: %+v, %v", res, err)
	}
	var back string
	for _, f := range res.Files {
		if f.Path == "r.txt" {
			back = string(f.Data)
		}
	}
	if back != "abab" {
		t.Fatalf("one-shot files: %+v", res.Files)
	}

	// Errors carry their wire codes.
	if _, err := c.Exec(ctx, "0123456789abcdef0123456789abcdef", "1", nil); !IsCode(err, "not_found") {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := c.Download(ctx, s.ID, "../../etc/passwd"); !IsCode(err, "bad_request") {
		t.Fatalf("traversal: %v", err)
	}
	if _, err := c.Create(ctx, CreateOptions{Policy: "nope"}); !IsCode(err, "bad_request") {
		t.Fatalf("unknown policy: %v", err)
	}
	if err := c.CloseSession(ctx, s.ID); err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	if _, err := c.Exec(ctx, s.ID, "1", nil); !IsCode(err, "not_found") {
		t.Fatalf("closed session: %v", err)
	}
}

// hibernateAndFork: session id (x = 42) hibernates, comes back on its next
// cell, forks into a copy that diverges from it, and rolls back a cell
// to its snapshot.
func hibernateAndFork(ctx context.Context, t *testing.T, c API, id string) {
	t.Helper()
	h, err := c.Hibernate(ctx, id)
	if err != nil || h.State != "hibernated" {
		t.Fatalf("Hibernate: %+v, %v", h, err)
	}
	r, err := c.Restore(ctx, id)
	if err != nil || r.State != "ready" {
		t.Fatalf("Restore: %+v, %v", r, err)
	}
	f, err := c.Fork(ctx, id)
	if err != nil || f.ForkedFrom != id || f.ID == id || f.State != "ready" {
		t.Fatalf("Fork: %+v, %v", f, err)
	}
	res, err := c.Exec(ctx, f.ID, "x += 1\nx", nil)
	if err != nil || res.Status != "ok" || fmt.Sprint(res.Value["text/plain"]) != "43" {
		t.Fatalf("Exec in fork: %+v, %v", res, err)
	}
	if _, err := c.Hibernate(ctx, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	res, err = c.Exec(ctx, id, "x", nil)
	if err != nil || res.Status != "ok" || fmt.Sprint(res.Value["text/plain"]) != "42" {
		t.Fatalf("Exec in parent after the fork's cell and a hibernation: %+v, %v", res, err)
	}
	if err := c.CloseSession(ctx, f.ID); err != nil {
		t.Fatalf("CloseSession(fork): %v", err)
	}
	if _, err := c.Rollback(ctx, id); !IsCode(err, "not_found") {
		t.Fatalf("rollback without a snapshot: %v", err)
	}
	if res, err = c.Exec(ctx, id, "x = 0", &ExecOptions{Snapshot: true}); err != nil || res.Status != "ok" {
		t.Fatalf("Exec with snapshot: %+v, %v", res, err)
	}
	if rb, err := c.Rollback(ctx, id); err != nil || rb.State != "ready" || rb.SnapshotAt == nil {
		t.Fatalf("Rollback: %+v, %v", rb, err)
	}
	if res, err = c.Exec(ctx, id, "x", nil); err != nil || fmt.Sprint(res.Value["text/plain"]) != "42" {
		t.Fatalf("Exec after rollback: %+v, %v", res, err)
	}
	if _, err := c.Snapshot(ctx, id); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if _, err := c.Fork(ctx, "0123456789abcdef0123456789abcdef"); !IsCode(err, "not_found") {
		t.Fatalf("fork of an unknown session: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestHTTPClient(t *testing.T) {
	svc := startService(t)
	c := NewHTTP(svc.Sock)
	defer c.CloseIdleConnections()
	h, err := c.Health(context.Background())
	if err != nil || h.Version == "" || h.Isolation["seccomp"] != true {
		t.Fatalf("Health: %+v, %v", h, err)
	}
	conformance(t, c)
	m, err := c.Metrics(context.Background())
	if err != nil || !strings.Contains(m, `jailcell_cells_total{status="ok"}`) {
		t.Fatalf("Metrics: %v\n%s", err, m)
	}
	if _, err := NewHTTP(svc.Dir + "/nothing.sock").Sessions(context.Background()); err == nil {
		t.Fatal("no error from a missing socket")
	}
}

func TestJSONLClient(t *testing.T) {
	testenv.RequiresRoot(t)
	bin := testenv.Jailcell(t)
	dir := testenv.StateDir(t)
	stderr := &testenv.LockedBuffer{}
	cmd := exec.Command(bin, "json", "--config", testConfig(t, dir))
	cmd.Env, cmd.Stderr = testenv.ChildEnv("JAILCELL_REVIEW_DIR="+dir+"/review"), stderr
	c, err := StartJSONCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("jailcell json log:\n%s", stderr.String())
		}
	}()
	h, err := c.Ping(context.Background())
	if err != nil || h.Version == "" {
		t.Fatalf("Ping: %+v, %v", h, err)
	}
	conformance(t, c)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Sessions(context.Background()); err == nil {
		t.Fatal("a request after Close succeeded")
	}
}

// The client's wire types are copies (it must not import the sandbox
// code); they must keep every JSON field of the originals.
func TestWireTypesMatch(t *testing.T) {
	for _, tc := range []struct {
		mine, theirs any
	}{
		{Result{}, session.Result{}},
		{CellError{}, session.CellError{}},
		{Frame{}, session.Frame{}},
		{DisplayItem{}, session.DisplayItem{}},
		{Chart{}, session.Chart{}},
		{ChartElement{}, session.ChartElement{}},
		{FileChange{}, session.FileChange{}},
		{Usage{}, session.Usage{}},
		{NetworkUsage{}, session.NetworkUsage{}},
		{RefusedAttempt{}, session.RefusedAttempt{}},
		{Session{}, session.Info{}},
		{Entry{}, session.Entry{}},
		{File{}, session.File{}},
		{Limits{}, policy.Override{}},
		{Attempt{}, workflow.Attempt{}},
		{Fallback{}, workflow.Fallback{}},
		{Known{}, workflow.Known{}},
		{wireError{}, api.Error{}},
	} {
		mine, theirs := jsonFields(reflect.TypeOf(tc.mine)), jsonFields(reflect.TypeOf(tc.theirs))
		for name, typ := range theirs {
			if mt, ok := mine[name]; !ok {
				t.Errorf("%T lacks field %q of %T", tc.mine, name, tc.theirs)
			} else if mt != typ {
				t.Errorf("%T.%s is %s, %T's is %s", tc.mine, name, mt, tc.theirs, typ)
			}
		}
		for name := range mine {
			if _, ok := theirs[name]; !ok {
				t.Errorf("%T has field %q that %T does not", tc.mine, name, tc.theirs)
			}
		}
	}
}

// TestExecResponseFieldsRead: every field the server puts beside an
// exec's result is read by the client, with the server's type.
func TestExecResponseFieldsRead(t *testing.T) {
	mine, theirs := jsonFields(reflect.TypeOf(response{})), jsonFields(reflect.TypeOf(api.Response{}))
	for _, name := range []string{"result", "attempts", "fallback", "mode", "known", "error"} {
		if _, ok := theirs[name]; !ok {
			t.Errorf("api.Response has no %q: update this list", name)
		}
		kind := func(s string) string { _, k, _ := strings.Cut(s, ") "); return k }
		if m, ok := mine[name]; !ok || kind(m) != kind(theirs[name]) {
			t.Errorf("response.%s is %q, api.Response's %q", name, m, theirs[name])
		}
	}
}

// jsonFields maps JSON names to a coarse kind (struct types by kind only)
// and the tag's options, so that "code" drifting to "code,omitempty" on
// one side fails too.
func jsonFields(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = "(" + opts + ") " + f.Type.Kind().String()
		if f.Type.Kind() == reflect.Slice || f.Type.Kind() == reflect.Pointer {
			out[name] += " of " + f.Type.Elem().Kind().String()
		}
	}
	return out
}
