package runner

import (
	"strings"
	"testing"
	"time"
)

// `!cmd` and %pip: a command that exits non-zero ends the cell with
// subprocess.CalledProcessError carrying its exit status (IPython only
// sets _exit_code, and the cell would report success); its output stays
// on stdout, as the program wrote it ("\n", not a pty's "\r\n").
func TestShellEscapeExitCode(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)

	r := k.exec("!echo one; echo two\n")
	requireOK(t, r)
	if r.Stdout != "one\ntwo\n" {
		t.Errorf("!echo stdout %q, want \"one\\ntwo\\n\" (no \\r from the pty)", r.Stdout)
	}

	r = k.exec("print('before')\n!false\nprint('after')")
	e := requireError(t, r, "subprocess.CalledProcessError")
	if e.ExitCode == nil || *e.ExitCode != 1 {
		t.Errorf("!false exit_code %v, want 1", e.ExitCode)
	}
	if !strings.Contains(e.Message, "'false'") || !strings.Contains(e.Message, "exit status 1") {
		t.Errorf("!false message %q, want the command and its status", e.Message)
	}
	if r.Stdout != "before\n" {
		t.Errorf("stdout %q: the cell must stop at the failed command", r.Stdout)
	}
	if len(e.Frames) == 0 || e.Frames[len(e.Frames)-1].Code != "!false" {
		t.Errorf("frames %+v, want the cell's line last (kernel frames hidden)", e.Frames)
	}

	r = k.exec("!echo out; echo err >&2; exit 3")
	e = requireError(t, r, "subprocess.CalledProcessError")
	if e.ExitCode == nil || *e.ExitCode != 3 {
		t.Errorf("!exit 3 exit_code %v, want 3", e.ExitCode)
	}
	if r.Stdout != "out\nerr\n" {
		t.Errorf("!exit 3 stdout %q, want both streams merged, as now", r.Stdout)
	}
	r = k.exec("_exit_code")
	if plain(r) != "3" {
		t.Errorf("_exit_code = %q, want 3 as IPython sets it", plain(r))
	}

	// A program that draws a progress bar keeps its "\r"; one that writes
	// "\r\n" itself keeps it: the host's cleaning, not the kernel, turns
	// them into what a terminal shows.
	r = k.exec(`!printf '10%%\r100%%\n'; printf 'dos\r\n'`)
	requireOK(t, r)
	if r.Stdout != "10%\r100%\ndos\r\n" {
		t.Errorf("progress bar stdout %q, want the bytes as written", r.Stdout)
	}

	// A program sees a terminal, as in Jupyter.
	r = k.exec("!test -t 1 && echo tty")
	requireOK(t, r)
	if r.Stdout != "tty\n" {
		t.Errorf("!test -t 1: %q, want a pty", r.Stdout)
	}

	// subprocess.run(check=True) in plain Python: the same error, the
	// same exit_code.
	r = k.exec("import subprocess\nsubprocess.run(['sh', '-c', 'exit 7'], check=True)")
	e = requireError(t, r, "subprocess.CalledProcessError")
	if e.ExitCode == nil || *e.ExitCode != 7 {
		t.Errorf("check=True exit_code %v, want 7", e.ExitCode)
	}
	// Other errors have none.
	r = k.exec("1/0")
	if e := requireError(t, r, "ZeroDivisionError"); e.ExitCode != nil {
		t.Errorf("ZeroDivisionError has exit_code %d", *e.ExitCode)
	}
}

// An interrupt (the host's timeout) during a shell command stops the
// command, not only the cell: its process group gets the SIGINT.
func TestShellEscapeInterrupt(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	r := k.interruptWhen(t, ExecRequest{ID: "shsleep", Code: "!echo sleeping; sleep 60; echo woke"}, "sleeping", 20*time.Second)
	requireError(t, r, "KeyboardInterrupt")
	if strings.Contains(r.Stdout, "woke") {
		t.Errorf("the command ran on after the interrupt: %q", r.Stdout)
	}
	requireOK(t, k.exec("1"))
}

// exit_code is the kernel's report: taken only as a small integer, an exit
// status (0-255) or minus a signal (-1 to -128); anything else breaks the
// protocol rather than reaching a client as a number it might act on.
func TestDecodeExitCode(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want *int
		bad  bool
	}{
		{`1`, ptr(1), false},
		{`255`, ptr(255), false},
		{`-9`, ptr(-9), false},
		{`-128`, ptr(-128), false},
		{`null`, nil, false},
		{`256`, nil, true},
		{`-129`, nil, true},
		{`1.5`, nil, true},
		{`1e2`, nil, true},
		{`99999999999999999999`, nil, true},
		{`"3"`, nil, true},
		{`true`, nil, true},
	} {
		s := newExecState(ExecRequest{ID: "c"}, nil)
		frame := `{"t":"result","id":"c","status":"error","error":{"type":"subprocess.CalledProcessError","message":"m","traceback":"","frames":[],"exit_code":` + tc.raw + `}}`
		r, err := s.handle([]byte(frame))
		if tc.bad {
			if err == nil {
				t.Errorf("exit_code %s accepted: %+v", tc.raw, r.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("exit_code %s: %v", tc.raw, err)
			continue
		}
		got := r.Error.ExitCode
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("exit_code %s decoded as %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func ptr(n int) *int { return &n }

// A command that ignores SIGINT is killed, and the cell ends with the
// interrupt, its kernel alive.
func TestShellEscapeInterruptIgnored(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	r := k.interruptWhen(t, ExecRequest{ID: "stubborn", Code: "!trap '' INT; echo stubborn; sleep 60"}, "stubborn", 20*time.Second)
	requireError(t, r, "KeyboardInterrupt")
	requireOK(t, k.exec("1"))
}
