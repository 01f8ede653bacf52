package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// TestKernelContexts: a named context is a namespace of its own in the
// same kernel, with its own working directory kept around its cells;
// reset gives it a fresh namespace, and reset with empty code removes it.
func TestKernelContexts(t *testing.T) {
	k := startKernel(t)
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(ctx, cwd, code string, reset bool) *Result {
		t.Helper()
		r, err := k.execReq(ExecRequest{ID: k.nextID(), Code: code, MaxOutput: 1 << 20, Context: ctx, Cwd: cwd, Reset: reset}, nil)
		if err != nil {
			t.Fatalf("exec %q in %q: %v\n%s", code, ctx, err, k.logText())
		}
		return r
	}
	requireOK(t, k.exec("x = 'main'\nimport os\nmain_cwd = os.getcwd()"))
	requireOK(t, run("a", dir, "x = 'a'", false))
	if got := plain(run("a", "", "x", false)); got != "'a'" {
		t.Errorf("x in context a = %s, want 'a'", got)
	}
	if got := plain(k.exec("x")); got != "'main'" {
		t.Errorf("x in main = %s, want 'main'", got)
	}
	requireError(t, run("b", "", "x", false), "NameError")
	if got := plain(run("a", "", "import os\nos.getcwd()", false)); got != "'"+dir+"'" {
		t.Errorf("context a's cwd = %s, want %q", got, dir)
	}
	requireOK(t, run("a", "", "os.chdir('sub')", false))
	if got := plain(run("a", "/ignored", "os.getcwd()", false)); got != "'"+sub+"'" {
		t.Errorf("context a's cwd after its chdir = %s, want %q", got, sub)
	}
	if got := plain(k.exec("os.getcwd() == main_cwd")); got != "True" {
		t.Errorf("main's cwd moved with the context's: %s", got)
	}
	if got := plain(run("a", "", "[_ for _ in ['x']][0] + str(len(Out))", false)); got == "" {
		t.Errorf("context a has no Out of its own")
	}
	requireError(t, run("a", "", "x", true), "NameError")
	requireOK(t, run("a", "", "x = 2", false))
	requireOK(t, run("a", "", "", true))
	requireError(t, run("a", "", "x", false), "NameError")
	requireError(t, run("c", filepath.Join(dir, "nope"), "1", false), "FileNotFoundError")
}
