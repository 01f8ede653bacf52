package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInterruptAndExecutionCount: Interrupt stops the running cell with a
// KeyboardInterrupt, its state kept; it answers false between cells and
// not-found for another owner. Every result is numbered as Jupyter's
// execution count, and a lost kernel's successor starts again at 1.
func TestInterruptAndExecutionCount(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	run := func(code string, req ExecRequest) *Result {
		t.Helper()
		req.Code = code
		res, err := e.m.Exec(ctx, 1000, id, req)
		if err != nil {
			t.Fatalf("Exec(%q): %v", code, err)
		}
		return res
	}
	if r := run("x = 41", ExecRequest{}); r.ExecutionCount != 1 {
		t.Fatalf("first cell: execution count %d, want 1", r.ExecutionCount)
	}
	if ran, err := e.m.Interrupt(ctx, 1000, id); err != nil || ran {
		t.Errorf("Interrupt between cells = %v, %v; want false, nil", ran, err)
	}

	// The cell says it runs; only then is it interrupted.
	going := make(chan struct{})
	var once sync.Once
	done := make(chan *Result, 1)
	go func() {
		done <- run("import time\nprint('going', flush=True)\ntime.sleep(120)\nx = 0", ExecRequest{
			Timeout:  3 * time.Minute,
			OnOutput: func(_, text string) { once.Do(func() { close(going) }) },
		})
	}()
	select {
	case <-going:
	case <-time.After(time.Minute):
		t.Fatal("the cell did not start")
	}
	if _, err := e.m.Interrupt(ctx, 1001, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Interrupt by another owner: %v, want ErrNotFound", err)
	}
	if ran, err := e.m.Interrupt(ctx, 1000, id); err != nil || !ran {
		t.Fatalf("Interrupt of a running cell = %v, %v; want true, nil", ran, err)
	}
	var r *Result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the interrupted cell did not end")
	}
	if r.Status != StatusError || r.Error == nil || r.Error.Type != "KeyboardInterrupt" || r.State != StateKept || len(r.Limits) != 0 {
		t.Fatalf("interrupted cell: status %q error %+v state %q limits %v; want a KeyboardInterrupt error, state kept", r.Status, r.Error, r.State, r.Limits)
	}
	if r.ExecutionCount != 2 {
		t.Errorf("interrupted cell: execution count %d, want 2", r.ExecutionCount)
	}
	if r := run("print(x + 1)", ExecRequest{}); r.Stdout != "42\n" || r.ExecutionCount != 3 {
		t.Errorf("after the interrupt: stdout %q count %d; want 42 and 3", r.Stdout, r.ExecutionCount)
	}
	if r := run("import os\nos.kill(os.getpid(), 9)", ExecRequest{}); r.State != StateLost || r.ExecutionCount != 4 ||
		!strings.Contains(r.StateReason, "execution_count starts again at 1") {
		t.Errorf("kernel kill: state %q (%s) count %d; want lost, saying the count restarts, and 4", r.State, r.StateReason, r.ExecutionCount)
	}
	if r := run("1", ExecRequest{}); r.ExecutionCount != 1 {
		t.Errorf("first cell of the fresh kernel: execution count %d, want 1", r.ExecutionCount)
	}
	if _, err := e.m.Interrupt(ctx, 1000, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Interrupt of no session: %v", err)
	}
}

// TestDisplayEventsAsShown: two figures with a pause between reach
// OnDisplay as they are shown, interleaved with the output printed between
// them (not all at the end), in order, equal to the result's list.
func TestDisplayEventsAsShown(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	var mu sync.Mutex
	var events []string
	var shown []DisplayItem
	res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{
		Timeout: 2 * time.Minute,
		Code: "import time\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint('between', flush=True)\n" +
			"time.sleep(0.5)\nplt.plot([2, 1])\nplt.show()\nprint('end')",
		OnOutput: func(stream, text string) {
			mu.Lock()
			events = append(events, stream+":"+text)
			mu.Unlock()
		},
		OnDisplay: func(d DisplayItem) {
			mu.Lock()
			shown = append(shown, d)
			events = append(events, "display:"+d.MIME)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusOK)
	mu.Lock()
	defer mu.Unlock()
	want := "display:image/png|stdout:between\n|display:image/png|stdout:end\n"
	if got := strings.Join(events, "|"); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if len(shown) != 2 || len(res.Display) != 2 {
		t.Fatalf("%d display events, %d in the result; want 2 and 2", len(shown), len(res.Display))
	}
	for i := range shown {
		if shown[i].MIME != "image/png" || shown[i].Data != res.Display[i].Data || !strings.HasPrefix(shown[i].Data, "iVBOR") {
			t.Errorf("event %d: %s %.20q, result %.20q", i, shown[i].MIME, shown[i].Data, res.Display[i].Data)
		}
	}
}

// TestExecutionCountSurvivesHibernate: the count lives in the kernel's
// checkpoint, so a restored session goes on numbering where it stopped.
func TestExecutionCountSurvivesHibernate(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, "x = 1")
	defer m.Shutdown(ctx)
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "x"})
	if err != nil || res.State != StateKept || res.ExecutionCount != 2 {
		t.Fatalf("after restore: %v, state %q count %d; want kept and 2", err, res.State, res.ExecutionCount)
	}
}
