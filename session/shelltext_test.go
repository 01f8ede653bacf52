package session

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// A failed %pip install (the sandbox has no network, so it fails for
// real) and a failed `!cmd` end the cell with status error and the exit
// status, in a real sandbox.
func TestShellFailureIsAnError(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})

	res := e.exec(t, id, "%pip install --retries 0 --timeout 2 nonexistent-package-jailcell", 0)
	wantStatus(t, res, StatusError)
	if res.Error.Type != "subprocess.CalledProcessError" || res.Error.ExitCode == nil || *res.Error.ExitCode != 1 {
		t.Fatalf("%%pip error %+v, want a CalledProcessError with exit_code 1", res.Error)
	}
	if !strings.Contains(res.Error.Message, "-m pip install") {
		t.Errorf("%%pip message %q does not name the command", res.Error.Message)
	}
	if !strings.Contains(res.Stdout, "nonexistent-package-jailcell") {
		t.Errorf("%%pip output not kept on stdout: %q", res.Stdout)
	}
	if strings.ContainsRune(res.Stdout, 0x1b) || strings.Contains(res.Stdout, "\r\n") {
		t.Errorf("%%pip stdout has escapes or \\r\\n: %q", res.Stdout)
	}

	res = e.exec(t, id, "!false", 0)
	wantStatus(t, res, StatusError)
	if res.Error.ExitCode == nil || *res.Error.ExitCode != 1 || !strings.Contains(res.Error.Message, "'false'") {
		t.Errorf("!false error %+v", res.Error)
	}
	res = e.exec(t, id, "!exit 3", 0)
	wantStatus(t, res, StatusError)
	if res.Error.ExitCode == nil || *res.Error.ExitCode != 3 {
		t.Errorf("!exit 3 error %+v", res.Error)
	}
	if res.State != StateKept {
		t.Errorf("state %q after a failed command, want kept", res.State)
	}
	res = e.exec(t, id, "!echo fine", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "fine\n" {
		t.Errorf("!echo stdout %q, want \"fine\\n\"", res.Stdout)
	}
}

// Text from the sandbox comes without ANSI escapes and with "\r\n" as
// "\n" (a lone "\r" kept), streamed and in the result; RawANSI keeps it
// as written.
func TestOutputCleanedUnlessRaw(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	code := `import sys
print("\x1b[31mred\x1b[0m plain")
sys.stdout.write("10%\r100%\r\n")
sys.stdout.flush()
print("\x1b]0;title\x07\x1b[2Kerr", file=sys.stderr)
raise ValueError("\x1b[1mbold\x1b[0m")`

	run := func(raw bool) (*Result, string) {
		var mu sync.Mutex
		var streamed strings.Builder
		res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: code, RawANSI: raw, OnOutput: func(stream, text string) {
			mu.Lock()
			defer mu.Unlock()
			if stream == "stdout" {
				streamed.WriteString(text)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		return res, streamed.String()
	}

	res, streamed := run(false)
	if res.Stdout != "red plain\n10%\r100%\n" || res.Stderr != "err\n" {
		t.Errorf("cleaned stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if streamed != res.Stdout {
		t.Errorf("streamed %q, result %q: the same text cleaned the same way", streamed, res.Stdout)
	}
	if res.Error == nil || res.Error.Message != "bold" || strings.ContainsRune(res.Error.Traceback, 0x1b) || !strings.Contains(res.Error.Traceback, "ValueError: bold") {
		t.Errorf("cleaned error %+v", res.Error)
	}

	res, streamed = run(true)
	if res.Stdout != "\x1b[31mred\x1b[0m plain\n10%\r100%\r\n" || res.Stderr != "\x1b]0;title\x07\x1b[2Kerr\n" {
		t.Errorf("raw stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if streamed != res.Stdout {
		t.Errorf("raw streamed %q, result %q", streamed, res.Stdout)
	}
	if res.Error == nil || res.Error.Message != "\x1b[1mbold\x1b[0m" {
		t.Errorf("raw error %+v", res.Error)
	}
}

// A shell command that outlives the cell's timeout is stopped with the
// cell, within the policy's interrupt grace (1 s here): even one that
// ignores SIGINT. The kernel and its variables are kept.
func TestShellCommandTimeoutKeepsState(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	e.exec(t, id, "kept = 42", 0)
	for _, code := range []string{"!sleep 60", "!trap '' INT; sleep 60"} {
		res := e.exec(t, id, code, time.Second)
		wantStatus(t, res, StatusTimeout)
		if res.State != StateKept {
			t.Errorf("%s: state %q (%s), want kept", code, res.State, res.StateReason)
		}
	}
	if res := e.exec(t, id, "print(kept)", 0); res.Stdout != "42\n" {
		t.Errorf("after the timeouts: %q", res.Stdout)
	}
}
