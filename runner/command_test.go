package runner

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKernelCommand runs shell commands through a real kernel: exit
// codes, streamed output, envs and cwd, a job in the background waited for
// and killed, a timeout that interrupts then kills, and the output bound;
// the kernel's namespace survives them all.
func TestKernelCommand(t *testing.T) {
	k := startKernel(t)
	requireOK(t, k.exec("kept = 7"))
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	run := func(req CommandRequest, on func(name, text string)) *CommandReply {
		t.Helper()
		req.ID = k.nextID()
		if req.MaxOutput == 0 {
			req.MaxOutput = 1 << 20
		}
		r, err := k.conn.Command(ctx, req, on)
		if err != nil {
			t.Fatalf("command %+v: %v\n%s", req, err, k.logText())
		}
		if r.Error != "" {
			t.Fatalf("command %+v refused: %s", req, r.Error)
		}
		return r
	}
	dir := t.TempDir()

	// Foreground: output, exit code, envs, cwd, streamed pieces in order.
	var mu sync.Mutex
	var streamed []string
	r := run(CommandRequest{Action: CommandStart, Cmd: `echo "hi $GREETING"; pwd; echo oops >&2; exit 3`,
		Envs: map[string]string{"GREETING": "there"}, Cwd: dir, WaitS: 30, Stream: true},
		func(name, text string) { mu.Lock(); streamed = append(streamed, name+":"+text); mu.Unlock() })
	if !r.Done || r.ExitCode != 3 || r.Stdout != "hi there\n"+dir+"\n" || r.Stderr != "oops\n" {
		t.Errorf("foreground = %+v, want exit 3, stdout hi there and the cwd, stderr oops", r)
	}
	if s := strings.Join(streamed, ""); !strings.Contains(s, "stdout:hi there") || !strings.Contains(s, "stderr:oops") {
		t.Errorf("streamed %q, want both streams", streamed)
	}

	// Background: the start answers at once; a wait sees it finish.
	r = run(CommandRequest{Action: CommandStart, Cmd: "sleep 0.5; echo late", Cwd: dir}, nil)
	if r.Done || r.Job == "" {
		t.Fatalf("background start = %+v, want a running job", r)
	}
	job := r.Job
	r = run(CommandRequest{Action: CommandWait, Job: job, WaitS: 30}, nil)
	if !r.Done || r.ExitCode != 0 || r.Stdout != "late\n" {
		t.Errorf("wait = %+v, want done with late", r)
	}

	// Kill: the whole group, children included.
	r = run(CommandRequest{Action: CommandStart, Cmd: "sleep 300 & sleep 300; echo never", Cwd: dir}, nil)
	start := time.Now()
	r = run(CommandRequest{Action: CommandKill, Job: r.Job, WaitS: 10}, nil)
	if !r.Done || r.ExitCode != -9 || strings.Contains(r.Stdout, "never") || time.Since(start) > 10*time.Second {
		t.Errorf("kill = %+v, want done by SIGKILL (-9)", r)
	}

	// Timeout: SIGINT first (a trap sees it), the kill after the grace.
	r = run(CommandRequest{Action: CommandStart, Cmd: `trap 'echo got-int' INT; while :; do sleep 0.1; done`, Cwd: dir,
		TimeoutS: 0.5, GraceS: 0.5, WaitS: 30}, nil)
	if !r.Done || !r.TimedOut || r.ExitCode != -9 || !strings.Contains(r.Stdout, "got-int") {
		t.Errorf("timeout = %+v, want timed out, interrupted (got-int) then killed (-9)", r)
	}

	// Output bound: kept to MaxOutput by the kernel and marked cut.
	r = run(CommandRequest{Action: CommandStart, Cmd: "head -c 100000 /dev/zero | tr '\\0' x", Cwd: dir, MaxOutput: 1000, WaitS: 30}, nil)
	if len(r.Stdout) != 1000 || !r.StdoutTruncated {
		t.Errorf("bounded output: %d bytes, truncated %v; want 1000, true", len(r.Stdout), r.StdoutTruncated)
	}

	// Errors are the kernel's answer, and the Conn stays usable.
	res, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandWait, Job: "job-999"}, nil)
	if err != nil || !strings.Contains(res.Error, "no job") {
		t.Errorf("wait for an unknown job = %+v, %v; want the kernel's refusal", res, err)
	}

	// SetEnv changes what cells and later commands inherit.
	if err := k.conn.SetEnv(ctx, k.nextID(), map[string]string{"SANDBOX_WIDE": "yes"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := plain(k.exec("import os; os.environ.get('SANDBOX_WIDE')")); got != "'yes'" {
		t.Errorf("cell sees SANDBOX_WIDE = %s, want 'yes'", got)
	}
	if r := run(CommandRequest{Action: CommandStart, Cmd: "echo $SANDBOX_WIDE", Cwd: dir, WaitS: 30}, nil); r.Stdout != "yes\n" {
		t.Errorf("command sees %q, want yes", r.Stdout)
	}
	if err := k.conn.SetEnv(ctx, k.nextID(), nil, []string{"SANDBOX_WIDE"}); err != nil {
		t.Fatal(err)
	}
	if got := plain(k.exec("os.environ.get('SANDBOX_WIDE', 'gone')")); got != "'gone'" {
		t.Errorf("after unset: %s, want 'gone'", got)
	}
	if got := plain(k.exec("kept")); got != "7" {
		t.Errorf("namespace after commands: %s, want 7", got)
	}

	// SetStartDir moves the main namespace, PWD with it, once: a refused
	// one does not count, a later one is ignored. A command's PWD is its
	// own cwd, whatever the kernel's says.
	if err := k.conn.SetStartDir(ctx, k.nextID(), dir+"/no-such-dir"); err == nil || !strings.Contains(err.Error(), "the kernel refused: cwd "+dir+"/no-such-dir") {
		t.Errorf("SetStartDir to a missing directory: %v, want the kernel's refusal", err)
	}
	if err := k.conn.SetStartDir(ctx, k.nextID(), dir); err != nil {
		t.Fatal(err)
	}
	if got := plain(k.exec("os.getcwd() + '|' + os.environ['PWD']")); got != "'"+dir+"|"+dir+"'" {
		t.Errorf("after SetStartDir(%s): %s", dir, got)
	}
	if err := k.conn.SetStartDir(ctx, k.nextID(), "/"); err != nil {
		t.Fatal(err)
	}
	if got := plain(k.exec("os.getcwd()")); got != "'"+dir+"'" {
		t.Errorf("after a second SetStartDir: %s, want %s kept", got, dir)
	}
	if r := run(CommandRequest{Action: CommandStart, Cmd: "echo $PWD; pwd", Cwd: "/", WaitS: 30}, nil); r.Stdout != "/\n/\n" {
		t.Errorf("a command in / says %q, want / twice", r.Stdout)
	}
}

// TestDecodeCommandBounds: a forged reply cannot make the host keep more
// than MaxOutput a stream, nor pass without a job or exit code.
func TestDecodeCommandBounds(t *testing.T) {
	big := strings.Repeat("x", 5000)
	r, err := decodeCommand([]byte(`{"t":"command","id":"a","job":"job-1","done":true,"exit_code":-9,"stdout":"`+big+`","stderr":"é`+big+`"}`), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != 100 || !r.StdoutTruncated || len(r.Stderr) > 100 || !r.StderrTruncated || r.ExitCode != -9 {
		t.Errorf("decoded %d/%v %d/%v exit %d; want both cut at 100 bytes, exit -9", len(r.Stdout), r.StdoutTruncated, len(r.Stderr), r.StderrTruncated, r.ExitCode)
	}
	for _, bad := range forgedCommandReplies {
		if _, err := decodeCommand([]byte(bad), 100); err == nil {
			t.Errorf("decodeCommand(%s) accepted a forged reply", bad)
		}
	}
}

// forgedCommandReplies are refused by decodeCommand; with a valid reply
// they seed FuzzDecodeCommand.
var forgedCommandReplies = []string{
	`{"t":"command","id":"a","done":false}`,
	`{"t":"command","id":"a","job":"j","done":true}`,
	`{"t":"command","id":"a","job":"j","exit_code":"1"}`,
	`{"t":"command","id":"a","job":"j","stdout":1}`,
	`{"t":"command","id":"a","job":"j","done":"yes"}`,
}

// FuzzDecodeCommand: whatever a kernel sends as a command reply, the host
// keeps at most max bytes a stream and never panics.
func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"t":"command","id":"a","job":"job-1","pid":3,"done":true,"exit_code":-9,"stdout":"x\u00e9","stderr":"","timed_out":true}`), int64(4))
	for _, b := range forgedCommandReplies {
		f.Add([]byte(b), int64(100))
	}
	f.Fuzz(func(t *testing.T, b []byte, max int64) {
		if max < 0 || max > 1<<20 {
			return
		}
		r, err := decodeCommand(b, max)
		if err != nil {
			return
		}
		if int64(len(r.Stdout)) > max || int64(len(r.Stderr)) > max || len(r.Job) > maxJobName {
			t.Fatalf("decoded past the bounds: %d/%d bytes of %d, job %d bytes", len(r.Stdout), len(r.Stderr), max, len(r.Job))
		}
	})
}

// TestCommandForgedStream: a forged kernel floods a command's request with
// stream frames; the host passes on at most MaxOutput bytes a stream over
// the whole request, ignores frames of other ids, and still takes the reply.
func TestCommandForgedStream(t *testing.T) {
	chunk := strings.Repeat("x", 1000)
	c := socketConn(t, func(n int) [][]byte {
		var out [][]byte
		for range 50 {
			out = append(out, rawFrame([]byte(`{"t":"stream","id":"c1","name":"stdout","text":"`+chunk+`"}`)))
			out = append(out, rawFrame([]byte(`{"t":"stream","id":"other","name":"stdout","text":"`+chunk+`"}`)))
		}
		out = append(out, rawFrame([]byte(`{"t":"command","id":"c1","job":"job-1","done":true,"exit_code":0,"stdout":"`+strings.Repeat("y", 5000)+`"}`)))
		return out
	})
	got := 0
	r, err := c.Command(context.Background(), CommandRequest{ID: "c1", Action: CommandWait, Job: "job-1", MaxOutput: 2500, WaitS: 1},
		func(name, text string) { got += len(text) })
	if err != nil {
		t.Fatal(err)
	}
	if got != 2500 || len(r.Stdout) != 2500 || !r.StdoutTruncated || !r.Done {
		t.Errorf("streamed %d bytes, reply %d (truncated %v); want 2500 of each, cut", got, len(r.Stdout), r.StdoutTruncated)
	}
}

// TestKernelCommandInterruptOffTheMainThread: the host's SIGINT while the
// kernel waits for a command goes to the command's group. When its C-level
// handler runs off the main thread (here a cell left SIGINT blocked there,
// so every one does; under load it happened just before the wait blocked),
// the Python-level handler that forwards it stays pending until the wait
// ends: the command ran on, uninterrupted. The kernel must still forward
// it, well before the command's own end. (The job starts before the block:
// a job inherits the mask it was started with.)
func TestKernelCommandInterruptOffTheMainThread(t *testing.T) {
	k := startKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	start, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandStart,
		Cmd: "for i in $(seq 300); do echo tick; sleep 0.1; done", Cwd: t.TempDir(), MaxOutput: 1 << 20}, nil)
	if err != nil || start.Error != "" || start.Job == "" {
		t.Fatalf("start = %+v, %v", start, err)
	}
	requireOK(t, k.exec("import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})"))
	waiting := make(chan struct{})
	var once sync.Once
	type reply struct {
		r   *CommandReply
		err error
	}
	done := make(chan reply, 1)
	go func() {
		r, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandWait, Job: start.Job,
			WaitS: 60, Stream: true, MaxOutput: 1 << 20}, func(_, text string) { once.Do(func() { close(waiting) }) })
		done <- reply{r, err}
	}()
	select {
	case <-waiting:
	case got := <-done:
		t.Fatalf("the wait ended before any output: %+v, %v\n%s", got.r, got.err, k.logText())
	case <-time.After(execTimeout):
		t.Fatalf("no output while waiting\n%s", k.logText())
	}
	begin := time.Now()
	if err := k.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got.err != nil || !got.r.Done || got.r.ExitCode == 0 {
			t.Fatalf("interrupted command = %+v, %v; want it ended by the SIGINT", got.r, got.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("SIGINT did not reach the command within 15s\n%s", k.logText())
	}
	t.Logf("ended %s after the SIGINT", time.Since(begin))
	requireOK(t, k.exec("signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})"))
}

// TestKernelJobsStartWithSIGINT: a job started after a cell blocked and
// ignored SIGINT on the kernel's main thread gets neither (a job inherits
// both across fork and exec), so an interrupt or a timeout's SIGINT still
// reaches it.
func TestKernelJobsStartWithSIGINT(t *testing.T) {
	k := startKernel(t)
	requireOK(t, k.exec("import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\nsignal.signal(signal.SIGINT, signal.SIG_IGN)"))
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	r, err := k.conn.Command(ctx, CommandRequest{ID: k.nextID(), Action: CommandStart, Cmd: "grep -E '^Sig(Blk|Ign):' /proc/self/status",
		Cwd: t.TempDir(), WaitS: 30, MaxOutput: 1 << 20}, nil)
	if err != nil || r.Error != "" || !r.Done || r.ExitCode != 0 {
		t.Fatalf("command = %+v, %v", r, err)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("status lines %q", r.Stdout)
	}
	for _, l := range lines {
		name, hex, _ := strings.Cut(l, ":")
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if mask&(1<<(int(syscall.SIGINT)-1)) != 0 {
			t.Errorf("the job's %s %s has SIGINT", name, strings.TrimSpace(hex))
		}
	}
}
