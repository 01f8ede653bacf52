package runner

import (
	"context"
	"strings"
	"testing"
	"time"
)

// cmdRun sends one command request through k and fails the test on a
// broken link; the kernel's refusal is returned in the reply.
func cmdRun(t *testing.T, ctx context.Context, k *testKernel, req CommandRequest) *CommandReply {
	t.Helper()
	req.ID = k.nextID()
	if req.MaxOutput == 0 {
		req.MaxOutput = 1 << 20
	}
	r, err := k.conn.Command(ctx, req, nil)
	if err != nil {
		t.Fatalf("command %+v: %v\n%s", req, err, k.logText())
	}
	return r
}

// waitOutput waits until job's stdout contains want (or it ends).
func waitOutput(t *testing.T, ctx context.Context, k *testKernel, job, want string) *CommandReply {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := cmdRun(t, ctx, k, CommandRequest{Action: CommandWait, Job: job, WaitS: 0.2})
		if strings.Contains(r.Stdout, want) || r.Done || time.Now().After(deadline) {
			return r
		}
	}
}

// TestKernelCommandStdin writes to a background job's stdin: input in
// pieces, in order, then eof, which ends a `cat`; a job that never reads
// has its unread input bounded (the kernel's memory, not the job's pace);
// input to a job without stdin, after eof or after its end is refused with
// the reason, and the kernel answers cells throughout.
func TestKernelCommandStdin(t *testing.T) {
	k := startKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*execTimeout)
	defer cancel()
	dir := t.TempDir()

	r := cmdRun(t, ctx, k, CommandRequest{Action: CommandStart, Cmd: "cat", Cwd: dir, Stdin: true})
	if r.Error != "" || r.Done {
		t.Fatalf("start cat with stdin = %+v", r)
	}
	job := r.Job
	for _, in := range []string{"Hello, ", "World!\n", "", "é ✓\n"} {
		if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, Input: in}); r.Error != "" || r.Job != job {
			t.Fatalf("input %q = %+v", in, r)
		}
	}
	if r := waitOutput(t, ctx, k, job, "✓"); r.Stdout != "Hello, World!\né ✓\n" || r.Done {
		t.Errorf("cat echoed %+v, want the input in order, still running", r)
	}
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, Input: "bye\n", EOF: true}); r.Error != "" {
		t.Fatalf("input with eof = %+v", r)
	}
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandWait, Job: job, WaitS: 20})
	if !r.Done || r.ExitCode != 0 || !strings.HasSuffix(r.Stdout, "bye\n") {
		t.Errorf("after eof cat = %+v, want done, exit 0, bye last", r)
	}
	for _, c := range []struct {
		req  CommandRequest
		want string
	}{
		{CommandRequest{Action: CommandInput, Job: job, Input: "x"}, "closed (eof)"},
		{CommandRequest{Action: CommandResize, Job: job, PTY: &PTYSize{Rows: 10, Cols: 10}}, "no terminal"},
	} {
		if r := cmdRun(t, ctx, k, c.req); !strings.Contains(r.Error, c.want) {
			t.Errorf("%s to %s = %+v, want a refusal naming %q", c.req.Action, job, r, c.want)
		}
	}

	// Without stdin: refused, and the job reads /dev/null as before.
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandStart, Cmd: "cat; sleep 30", Cwd: dir})
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: r.Job, Input: "x"}); !strings.Contains(r.Error, "without stdin") {
		t.Errorf("input to a job without stdin = %+v, want refused", r)
	}
	cmdRun(t, ctx, k, CommandRequest{Action: CommandKill, Job: r.Job, WaitS: 10})

	// A job that never reads: what fits the pipe is written, the rest
	// waits up to the bound, past which input is refused (limit).
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandStart, Cmd: "sleep 60", Cwd: dir, Stdin: true})
	stuck := r.Job
	chunk := strings.Repeat("z", MaxCommandInput/4)
	refused := ""
	for i := 0; i < 12 && refused == ""; i++ {
		refused = cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: stuck, Input: chunk}).Error
	}
	if !strings.Contains(refused, "stdin is full") {
		t.Errorf("3 MiB to a job that never reads: last answer %q, want stdin is full", refused)
	}
	requireOK(t, k.exec("1 + 1"))
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandKill, Job: stuck, WaitS: 10})
	if !r.Done {
		t.Errorf("kill of a job blocked on its stdin = %+v, want done", r)
	}
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: stuck, Input: "x"}); !strings.Contains(r.Error, "ended") {
		t.Errorf("input after the job ended = %+v, want refused", r)
	}

	// The host's own bounds, before anything is sent.
	if _, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandInput, Job: job, Input: strings.Repeat("x", MaxCommandInput+1)}, nil); err == nil {
		t.Error("input over MaxCommandInput was sent")
	}
	if _, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandResize, Job: job, PTY: &PTYSize{Rows: 0, Cols: 80}}, nil); err == nil {
		t.Error("a 0-row terminal was sent")
	}
	requireOK(t, k.exec("2 + 2"))
}

// TestKernelCommandPTY runs an interactive bash in a terminal: the size
// it starts with and a resize are what stty reports, the input is echoed
// as a terminal does, envs reach it, the shell has job control (the
// terminal is its controlling one), a kill ends it, and eof is refused.
func TestKernelCommandPTY(t *testing.T) {
	k := startKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*execTimeout)
	defer cancel()
	dir := t.TempDir()

	r := cmdRun(t, ctx, k, CommandRequest{Action: CommandStart, Cmd: "exec /bin/bash --norc -i", Cwd: dir,
		Envs: map[string]string{"ABC": "123"}, PTY: &PTYSize{Rows: 24, Cols: 80}})
	if r.Error != "" {
		t.Fatalf("start in a pty = %+v", r)
	}
	job := r.Job
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, Input: "echo A$ABC; stty size; tty; echo T=$TERM\n"}); r.Error != "" {
		t.Fatalf("input = %+v", r)
	}
	r = waitOutput(t, ctx, k, job, "T=xterm")
	for _, want := range []string{"A123", "24 80", "/dev/pts/", "T=xterm-256color"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("terminal output %q lacks %q", r.Stdout, want)
		}
	}
	if strings.Contains(r.Stdout, "no job control") {
		t.Errorf("the shell has no controlling terminal: %q", r.Stdout)
	}
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandResize, Job: job, PTY: &PTYSize{Rows: 50, Cols: 132}}); r.Error != "" {
		t.Fatalf("resize = %+v", r)
	}
	cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, Input: "stty size\n"})
	if r := waitOutput(t, ctx, k, job, "50 132"); !strings.Contains(r.Stdout, "50 132") {
		t.Errorf("after resize: %q, want 50 132", r.Stdout)
	}
	if r := cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, EOF: true}); !strings.Contains(r.Error, "terminal") {
		t.Errorf("eof to a terminal = %+v, want refused", r)
	}
	cmdRun(t, ctx, k, CommandRequest{Action: CommandInput, Job: job, Input: "exit 7\n"})
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandWait, Job: job, WaitS: 20})
	if !r.Done || r.ExitCode != 7 {
		t.Errorf("after exit 7: %+v", r)
	}

	// A kill reaches the terminal's session.
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandStart, Cmd: "sleep 300", Cwd: dir, PTY: &PTYSize{Rows: 5, Cols: 5}})
	r = cmdRun(t, ctx, k, CommandRequest{Action: CommandKill, Job: r.Job, WaitS: 10})
	if !r.Done || r.ExitCode != -9 {
		t.Errorf("kill of a terminal job = %+v, want -9", r)
	}
	requireOK(t, k.exec("3 + 3"))
}
