package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAssist: complete, inspect and is_complete answered by a real
// session's kernel on the cells' live objects, owner-checked, busy while a
// cell runs, refused with a clear error for a bad cursor, and no cell
// counted.
func TestAssist(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "def my_helper(a):\n    'Doubles a.'\n    return 2 * a"}); err != nil {
		t.Fatal(err)
	}
	a, err := e.m.Assist(ctx, 1000, id, AssistRequest{Kind: AssistComplete, Code: "my_hel"})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Completion; c == nil || !slices.Contains(c.Matches, "my_helper") || c.CursorStart != 0 || c.CursorEnd != 6 {
		t.Errorf("complete my_hel = %+v, want my_helper over [0, 6)", a.Completion)
	}
	pos := 3
	a, err = e.m.Assist(ctx, 1000, id, AssistRequest{Kind: AssistInspect, Code: "my_helper(1)", CursorPos: &pos})
	if err != nil {
		t.Fatal(err)
	}
	if i := a.Inspection; i == nil || !i.Found || !strings.Contains(i.Data["text/plain"], "Doubles a.") {
		t.Errorf("inspect my_helper = %+v, want its docstring", a.Inspection)
	}
	a, err = e.m.Assist(ctx, 1000, id, AssistRequest{Kind: AssistIsComplete, Code: "if True:"})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Completeness; c == nil || c.Status != "incomplete" || c.Indent != "    " {
		t.Errorf("is_complete 'if True:' = %+v, want incomplete with four spaces", a.Completeness)
	}

	if _, err := e.m.Assist(ctx, 1001, id, AssistRequest{Kind: AssistComplete, Code: "x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner: %v, want ErrNotFound", err)
	}
	bad := 7
	if _, err := e.m.Assist(ctx, 1000, id, AssistRequest{Kind: AssistComplete, Code: "éé", CursorPos: &bad}); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "cursor_pos") {
		t.Errorf("cursor past the code: %v, want ErrBadRequest naming cursor_pos", err)
	}
	if _, err := e.m.Assist(ctx, 1000, id, AssistRequest{Kind: "run", Code: "x"}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("unknown kind: %v, want ErrBadRequest", err)
	}

	going := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(3)", Timeout: time.Minute,
			OnOutput: func(_, _ string) {
				select {
				case <-going:
				default:
					close(going)
				}
			}})
		done <- err
	}()
	select {
	case <-going:
	case <-time.After(time.Minute):
		t.Fatal("the cell did not start")
	}
	if _, err := e.m.Assist(ctx, 1000, id, AssistRequest{Kind: AssistComplete, Code: "x"}); !errors.Is(err, ErrBusy) {
		t.Errorf("while a cell runs: %v, want ErrBusy", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "my_helper(21)"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExecutionCount != 3 || r.Value["text/plain"] != "42" {
		t.Errorf("after assists: count %d value %v, want 3 and 42 (assists are not cells)", r.ExecutionCount, r.Value)
	}
}
