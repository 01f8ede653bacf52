package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestKernelAssist drives complete, inspect and is_complete against a real
// kernel with the host's IPython (the rootfs has the same Debian
// package), between cells, on live objects of the namespace.
func TestKernelAssist(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	requireOK(t, k.exec("import os\nmy_variable = 41\ndef helper(a, b=2):\n    'Adds b to a.'\n    return a + b"))
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	assist := func(kind, code string, cursor int) *AssistReply {
		t.Helper()
		r, err := k.conn.Assist(ctx, AssistRequest{ID: k.nextID(), Kind: kind, Code: code, CursorPos: cursor})
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", kind, code, err, k.logText())
		}
		return r
	}

	code := "x = my_var"
	r := assist(AssistComplete, code, len(code))
	if !slices.Contains(r.Matches, "my_variable") || r.CursorStart != len("x = ") || r.CursorEnd != len(code) {
		t.Errorf("complete %q = %+v, want my_variable replacing [4, %d)", code, r, len(code))
	}
	code = "os.pa"
	if r := assist(AssistComplete, code, len(code)); !slices.Contains(r.Matches, "path") || r.CursorStart != 3 {
		t.Errorf("complete %q = %+v, want path replacing [3, 5)", code, r)
	}
	// The cursor in the middle, in code points: "é" is one.
	code = "é = 1; my_vari + 1"
	if r := assist(AssistComplete, code, len([]rune("é = 1; my_vari"))); !slices.Contains(r.Matches, "my_variable") {
		t.Errorf("complete mid-line %q = %+v", code, r)
	}

	r = assist(AssistInspect, "helper(", len("helper"))
	if !r.Found || !strings.Contains(r.Data["text/plain"], "Adds b to a.") {
		t.Errorf("inspect helper = %+v, want its docstring", r)
	}
	if r := assist(AssistInspect, "no_such_name", 3); r.Found || len(r.Data) != 0 {
		t.Errorf("inspect of an unknown name = %+v, want not found", r)
	}

	for code, want := range map[string]string{
		"x = 1":              "complete",
		"for i in range(3):": "incomplete",
		"x = (1,":            "incomplete",
		"1 +* 2":             "invalid",
	} {
		r := assist(AssistIsComplete, code, 0)
		if r.Status != want {
			t.Errorf("is_complete %q = %q, want %q", code, r.Status, want)
		}
		if code == "for i in range(3):" && r.Indent != "    " {
			t.Errorf("is_complete %q indent %q, want four spaces", code, r.Indent)
		}
	}
	// The kernel still runs cells, with its state, afterwards.
	if got := plain(k.exec("my_variable + 1")); got != "42" {
		t.Errorf("after assists: %q, want 42", got)
	}
}

// TestAssistRefusesBadRequests: bad kinds and cursors never reach the
// kernel and leave the Conn usable.
func TestAssistRefusesBadRequests(t *testing.T) {
	k := startKernel(t)
	ctx := context.Background()
	for _, req := range []AssistRequest{
		{ID: "a", Kind: "run", Code: "x"},
		{ID: "a", Kind: AssistComplete, Code: "é", CursorPos: 2},
		{ID: "a", Kind: AssistComplete, Code: "x", CursorPos: -1},
		{ID: "", Kind: AssistComplete, Code: "x"},
	} {
		if _, err := k.conn.Assist(ctx, req); err == nil {
			t.Errorf("Assist(%+v) succeeded, want an error", req)
		}
	}
	requireOK(t, k.exec("1"))
}

// TestDecodeAssistBounds: a forged reply is held to the bounds, and
// cursors outside the code are a protocol error.
func TestDecodeAssistBounds(t *testing.T) {
	many := `{"t":"assist","id":"a","cursor_start":0,"cursor_end":1,"matches":[` + strings.Repeat(`"m",`, 3000) + `"` + strings.Repeat("x", maxMatchBytes+1) + `",1,null]}`
	r, err := decodeAssist([]byte(many), AssistComplete, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Matches) != MaxMatches {
		t.Errorf("kept %d matches, want %d", len(r.Matches), MaxMatches)
	}
	for _, bad := range []string{
		`{"cursor_start":5,"cursor_end":1}`,
		`{"cursor_start":0,"cursor_end":2}`,
		`{"cursor_start":-1,"cursor_end":1}`,
		`{"cursor_start":"0","cursor_end":1}`,
		`{"cursor_start":1,"cursor_end":0}`,
	} {
		if _, err := decodeAssist([]byte(bad), AssistComplete, 1); !errors.Is(err, ErrProtocol) {
			t.Errorf("decode %s: %v, want ErrProtocol", bad, err)
		}
	}
	r, err = decodeAssist([]byte(`{"status":"incomplete","indent":"  x"}`), AssistIsComplete, 0)
	if err != nil || r.Status != "incomplete" || r.Indent != "" {
		t.Errorf("non-blank indent: %+v %v, want it dropped", r, err)
	}
	r, err = decodeAssist([]byte(`{"status":"maybe"}`), AssistIsComplete, 0)
	if err != nil || r.Status != "unknown" {
		t.Errorf("unknown status: %+v %v, want unknown", r, err)
	}
	r, err = decodeAssist([]byte(`{"found":true,"data":{"text/html":"<b>","text/plain":"doc"}}`), AssistInspect, 0)
	if err != nil || !r.Found || len(r.Data) != 1 || r.Data["text/plain"] != "doc" {
		t.Errorf("inspect: %+v %v, want text/plain only", r, err)
	}
}
