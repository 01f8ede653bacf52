package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCommand: shell commands run inside a real session's sandbox (its
// pid namespace, its workspace, its user), streamed, with exit codes, the
// session's and the command's envs, a confined cwd, a background job
// waited for and killed, a timeout on the host's clock, and the kernel's
// variables kept throughout.
func TestCommand(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, Envs: map[string]string{"FROM_SANDBOX": "sb"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "import os\nos.makedirs('sub', exist_ok=True)\nkept = 5"}); err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	r, err := e.m.Command(ctx, 1000, id, CommandRequest{
		Cmd:      `echo "$FROM_SANDBOX $FROM_CMD $(id -u) $$"; pwd; ls /proc | grep -c '^[0-9]'; echo err >&2; exit 4`,
		Envs:     map[string]string{"FROM_CMD": "cmd"},
		Cwd:      "sub",
		OnOutput: func(stream, text string) { streamed.WriteString(stream + ":" + text) },
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(r.Stdout, "\n")
	if !r.Done || r.ExitCode != 4 || len(lines) < 3 || !strings.HasPrefix(lines[0], "sb cmd 0 ") || lines[1] != "/work/sub" || r.Stderr != "err\n" {
		t.Fatalf("command = %+v, want exit 4, both envs, root in its userns, cwd /work/sub", r)
	}
	// The sandbox's pid namespace: init, kernel, bash, ls, grep and little else.
	if n := strings.TrimSpace(lines[2]); len(n) > 1 {
		t.Errorf("%s processes visible: not the sandbox's pid namespace", n)
	}
	if !strings.Contains(streamed.String(), "stdout:sb cmd") || !strings.Contains(streamed.String(), "stderr:err") {
		t.Errorf("streamed %q, want both streams", streamed.String())
	}

	// The cell sees the session's envs, and its own only for itself.
	res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "os.environ.get('FROM_SANDBOX'), os.environ.get('ONLY_CELL')", Envs: map[string]string{"ONLY_CELL": "c"}})
	if err != nil || res.Value == nil || res.Value["text/plain"] != "('sb', 'c')" {
		t.Fatalf("cell envs: %+v, %v; want ('sb', 'c')", res, err)
	}
	res, err = e.m.Exec(ctx, 1000, id, ExecRequest{Code: "os.environ.get('ONLY_CELL', 'unset'), kept"})
	if err != nil || res.Value == nil || res.Value["text/plain"] != "('unset', 5)" {
		t.Fatalf("after the cell with envs: %+v, %v; want ('unset', 5)", res, err)
	}

	// Background: answered at once, waited for, killed.
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "sleep 0.3; echo bg > bg.txt; echo done", Background: true})
	if err != nil || r.Done || r.Job == "" {
		t.Fatalf("background start = %+v, %v", r, err)
	}
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Action: CommandWait, Job: r.Job, Timeout: 30 * time.Second})
	if err != nil || !r.Done || r.ExitCode != 0 || r.Stdout != "done\n" {
		t.Fatalf("wait = %+v, %v", r, err)
	}
	if dl, err := e.m.Workspace().Download(ctx, 1000, id, "bg.txt"); err != nil || string(dl.Data) != "bg\n" {
		t.Errorf("the background command's file: %v, %v", dl, err)
	}
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "sleep 600", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Action: CommandKill, Job: r.Job})
	if err != nil || !r.Done || r.ExitCode != -9 {
		t.Fatalf("kill = %+v, %v; want done, -9", r, err)
	}

	// A foreground timeout: interrupted then killed, on the host's clock.
	start := time.Now()
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "trap '' INT; sleep 600", Timeout: time.Second})
	if err != nil || !r.TimedOut || !r.Done || time.Since(start) > 30*time.Second {
		t.Fatalf("timeout = %+v, %v (after %s); want timed out and killed", r, err, time.Since(start))
	}

	// A flood is kept to the policy's output bytes, and said to be cut.
	r, err = e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "head -c 10000000 /dev/zero | tr '\\0' x; echo done >&2"})
	if err != nil || int64(len(r.Stdout)) != e.m.cfg.Policies["default"].OutputBytes || !r.StdoutTruncated || r.Stderr != "done\n" || r.ExitCode != 0 {
		t.Errorf("flood: %d bytes, truncated %v, stderr %q, %v; want the policy's %d bytes", len(r.Stdout), r.StdoutTruncated, r.Stderr, err, e.m.cfg.Policies["default"].OutputBytes)
	}

	// Refusals name the field.
	for _, c := range []struct {
		req  CommandRequest
		want string
	}{
		{CommandRequest{Cmd: "true", Cwd: "../etc"}, "cwd"},
		{CommandRequest{Cmd: "true", Cwd: "/etc"}, "cwd"},
		{CommandRequest{Cmd: "true", Envs: map[string]string{"A=B": "x"}}, "envs name"},
		{CommandRequest{Cmd: "true", Envs: map[string]string{"A": "x\x00y"}}, "NUL"},
		{CommandRequest{Cmd: ""}, "cmd"},
		{CommandRequest{Action: CommandWait}, "job"},
		{CommandRequest{Action: "exec", Cmd: "true"}, "action"},
	} {
		if _, err := e.m.Command(ctx, 1000, id, c.req); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrBadRequest naming %s", c.req, err, c.want)
		}
	}
	if _, err := e.m.Command(ctx, 1000, id, CommandRequest{Action: CommandWait, Job: "job-999"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("wait for an unknown job: %v, want ErrNotFound", err)
	}
	if _, err := e.m.Command(ctx, 1001, id, CommandRequest{Cmd: "true"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner: %v, want ErrNotFound", err)
	}
	res, err = e.m.Exec(ctx, 1000, id, ExecRequest{Code: "kept"})
	if err != nil || res.Value["text/plain"] != "5" || res.ExecutionCount != 4 {
		t.Errorf("after the commands: %+v, %v; want kept = 5 at cell 4 (commands are not cells)", res, err)
	}
}

// TestCheckEnvs: the bounds of a client's environment.
func TestCheckEnvs(t *testing.T) {
	many := map[string]string{}
	for i := range MaxEnvVars + 1 {
		many["V"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+strings.Repeat("_", i/26)] = "1"
	}
	for name, c := range map[string]struct {
		envs map[string]string
		ok   bool
	}{
		"fine":       {map[string]string{"A": "1", "_B2": "", "LD_PRELOAD": "/x.so"}, true},
		"digit":      {map[string]string{"1A": "x"}, false},
		"empty":      {map[string]string{"": "x"}, false},
		"equals":     {map[string]string{"A=B": "x"}, false},
		"nul":        {map[string]string{"A": "\x00"}, false},
		"long value": {map[string]string{"A": strings.Repeat("v", MaxEnvValueBytes+1)}, false},
		"long name":  {map[string]string{strings.Repeat("N", MaxEnvNameBytes+1): "x"}, false},
		"too many":   {many, len(many) <= MaxEnvVars},
	} {
		err := CheckEnvs("envs", c.envs)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("%s: %v, want ok=%v", name, err, c.ok)
		}
	}
}

// TestCommandCallerGone: a caller that goes away mid-command costs the
// session nothing: the command runs to its end, the kernel and its
// variables stay.
func TestCommandCallerGone(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "kept = 'yes'"}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := e.m.Command(cctx, 1000, info.ID, CommandRequest{Cmd: "sleep 1; echo done > done.txt"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("command whose caller left: %v, want the caller's deadline", err)
	}
	res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "kept, open('done.txt').read()"})
	if err != nil || res.Value["text/plain"] != `('yes', 'done\n')` || res.State != StateKept {
		t.Errorf("after the caller left: %+v, %v; want the variables kept and the command run to its end", res, err)
	}
}

// TestCommandInterrupt: the interrupt op reaches a foreground command
// (SIGINT to its group, which its trap sees), not the kernel: the command
// ends, the variables stay.
func TestCommandInterrupt(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "kept = 3"}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	done := make(chan *CommandResult, 1)
	go func() {
		r, err := e.m.Command(ctx, 1000, info.ID, CommandRequest{
			Cmd:     "trap 'echo got-int; exit 9' INT; echo ready; while :; do sleep 0.1; done",
			Timeout: 60 * time.Second,
			OnOutput: func(stream, text string) {
				select {
				case started <- struct{}{}:
				default:
				}
			},
		})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command never started")
	}
	if ran, err := e.m.Interrupt(ctx, 1000, info.ID); err != nil || !ran {
		t.Fatalf("interrupt = %v, %v; want a running command interrupted", ran, err)
	}
	select {
	case r := <-done:
		if r == nil || !r.Done || r.ExitCode != 9 || !strings.Contains(r.Stdout, "got-int") || r.TimedOut {
			t.Errorf("interrupted command = %+v, want its trap's exit 9", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupted command did not end")
	}
	res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "kept"})
	if err != nil || res.Value["text/plain"] != "3" || res.State != StateKept {
		t.Errorf("after the interrupt: %+v, %v; want the kernel and kept = 3", res, err)
	}
}

// TestCommandSurvivesHibernate: a background command is a child of the
// kernel, so a checkpoint takes it along: after hibernate and restore it
// is still running, its output kept, and kill and wait reach it.
func TestCommandSurvivesHibernate(t *testing.T) {
	requiresCriu(t)
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, "x = 42")
	defer m.Shutdown(ctx)
	bg, err := m.Command(ctx, 1000, id, CommandRequest{Cmd: "echo before; sleep 600", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("Hibernate with a background command: %v", err)
	}
	if _, err := m.Durability().Restore(ctx, 1000, id); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r2, err := m.Command(ctx, 1000, id, CommandRequest{Action: CommandWait, Job: bg.Job, Timeout: 200 * time.Millisecond})
	if err != nil || r2.Done || r2.Stdout != "before\n" {
		t.Fatalf("after restore: %+v, %v; want the job running with its output", r2, err)
	}
	r2, err = m.Command(ctx, 1000, id, CommandRequest{Action: CommandKill, Job: bg.Job})
	if err != nil || !r2.Done || r2.ExitCode != -9 {
		t.Errorf("kill after restore: %+v, %v", r2, err)
	}
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "x"})
	if err != nil || res.Value["text/plain"] != "42" {
		t.Errorf("variables after restore: %+v, %v", res, err)
	}
}

// TestStartInHome: every sandbox has its workspace at /work and at
// /home/user, the same directory; a session created with cwd /home/user
// starts its cells and commands there (getcwd and a shell's pwd say so),
// and a relative cwd is under it. A session of the default start stays in
// /work. A start elsewhere is refused, naming the two allowed.
func TestStartInHome(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.m.Create(ctx, CreateOptions{Owner: 1000, Cwd: "/tmp"}); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "/work (the default) or /home/user") {
		t.Fatalf("create in /tmp: %v, want ErrBadRequest naming /work and /home/user", err)
	}
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, Cwd: HomeDir})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if info.Cwd != HomeDir {
		t.Errorf("info.cwd = %q, want %s", info.Cwd, HomeDir)
	}
	value := func(code string) string {
		t.Helper()
		res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: code})
		if err != nil || res.Value == nil {
			t.Fatalf("%s: %+v, %v", code, res, err)
		}
		s, _ := res.Value["text/plain"].(string)
		return s
	}
	if got := value("import os\nopen('/home/user/h.txt', 'w').write('via home')\nos.getcwd(), open('/work/h.txt').read()"); got != "('/home/user', 'via home')" {
		t.Errorf("first cell: %s, want ('/home/user', 'via home'): the start directory and one workspace under two names", got)
	}
	if dl, err := e.m.Workspace().Download(ctx, 1000, id, "h.txt"); err != nil || string(dl.Data) != "via home" {
		t.Errorf("the workspace has h.txt: %v, %v", dl, err)
	}
	// The file ops take either name too.
	if _, err := e.m.Workspace().Upload(ctx, 1000, id, "/home/user/up.txt", []byte("up"), nil); err != nil {
		t.Fatal(err)
	}
	if dl, err := e.m.Workspace().Download(ctx, 1000, id, "/home/user/h.txt"); err != nil || string(dl.Data) != "via home" {
		t.Errorf("download /home/user/h.txt: %v, %v", dl, err)
	}
	if got := value("open('/work/up.txt').read()"); got != "'up'" {
		t.Errorf("a file uploaded as /home/user/up.txt, read at /work: %s", got)
	}
	for _, c := range []struct{ cwd, want string }{{"", "/home/user"}, {"sub", "/home/user/sub"}, {"/work/sub", "/work/sub"}, {"/home/user/sub", "/home/user/sub"}} {
		if _, err := e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "mkdir -p /work/sub"}); err != nil {
			t.Fatal(err)
		}
		r, err := e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "pwd; /bin/pwd", Cwd: c.cwd})
		if err != nil || r.Stdout != c.want+"\n"+c.want+"\n" {
			t.Errorf("command with cwd %q: %+v, %v; want %s from the shell and from getcwd", c.cwd, r, err, c.want)
		}
	}
	if _, err := e.m.Command(ctx, 1000, id, CommandRequest{Cmd: "true", Cwd: "/home/user/../../etc"}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a cwd out of the home: %v, want ErrBadRequest", err)
	}
	plain, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.m.Exec(ctx, 1000, plain.ID, ExecRequest{Code: "import os; os.getcwd(), os.path.isdir('/home/user')"})
	if err != nil || res.Value["text/plain"] != "('/work', True)" || plain.Cwd != "" {
		t.Errorf("a default session: %+v, %v, cwd %q; want /work, with /home/user there too", res, err, plain.Cwd)
	}
}

// TestStartInHomeKeepsTheCellsChdir: the start directory is given once in
// a kernel's life, so a cell's own chdir survives a hibernate and a fork,
// whose kernels are restored from images; the fork starts where its
// parent does.
func TestStartInHomeKeepsTheCellsChdir(t *testing.T) {
	requiresCriu(t)
	r := newRestartable(t)
	ctx := context.Background()
	m := r.startWith(func(*Config) {})
	defer m.Shutdown(ctx)
	info, err := m.Create(ctx, CreateOptions{Owner: 1000, Cwd: HomeDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"import os; os.getcwd()", "os.chdir('/tmp')"} {
		if res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: code}); err != nil || res.Status != StatusOK {
			t.Fatalf("%s: %+v, %v", code, res, err)
		}
	}
	if _, err := m.Durability().Hibernate(ctx, 1000, info.ID); err != nil {
		t.Fatal(err)
	}
	res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "os.getcwd()"})
	if err != nil || res.Value["text/plain"] != "'/tmp'" {
		t.Errorf("after a hibernate and restore: %+v, %v; want the cell's own chdir, '/tmp'", res, err)
	}
	child, err := m.Durability().Fork(ctx, 1000, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err = m.Exec(ctx, 1000, child.ID, ExecRequest{Code: "os.getcwd()"})
	if err != nil || res.Value["text/plain"] != "'/tmp'" || child.Cwd != HomeDir {
		t.Errorf("fork: %+v, %v, cwd %q; want the parent's chdir and its start directory", res, err, child.Cwd)
	}
}

// TestCommandStdinAndTerminal: a command's stdin and terminal in a real
// sandbox: input to a background cat, then eof; an interactive bash in a
// terminal of the asked size, resized, whose /dev/pts is the sandbox's
// own; a foreground start with stdin is refused (nothing could write to
// it while it holds the session), as are bad sizes and oversized input.
func TestCommandStdinAndTerminal(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	cmd := func(req CommandRequest) *CommandResult {
		t.Helper()
		r, err := e.m.Command(ctx, 1000, id, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Action, err)
		}
		return r
	}
	bg := cmd(CommandRequest{Cmd: "cat", Background: true, Stdin: true})
	cmd(CommandRequest{Action: CommandInput, Job: bg.Job, Input: "line one\n"})
	cmd(CommandRequest{Action: CommandInput, Job: bg.Job, Input: "line two\n", EOF: true})
	if r := cmd(CommandRequest{Action: CommandWait, Job: bg.Job, Timeout: 20 * time.Second}); !r.Done || r.ExitCode != 0 || r.Stdout != "line one\nline two\n" {
		t.Errorf("cat after eof = %+v", r)
	}

	term := cmd(CommandRequest{Cmd: "exec /bin/bash --norc -i", Background: true, PTY: &PTYSize{Rows: 30, Cols: 100}})
	cmd(CommandRequest{Action: CommandInput, Job: term.Job, Input: "stty size; ls /dev/pts | wc -l\n"})
	// The resize only after the shell answered with the first size.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if r := cmd(CommandRequest{Action: CommandWait, Job: term.Job, Timeout: 200 * time.Millisecond}); strings.Contains(r.Stdout, "30 100") {
			break
		}
	}
	cmd(CommandRequest{Action: CommandResize, Job: term.Job, PTY: &PTYSize{Rows: 40, Cols: 120}})
	cmd(CommandRequest{Action: CommandInput, Job: term.Job, Input: "stty size; exit 3\n"})
	r := cmd(CommandRequest{Action: CommandWait, Job: term.Job, Timeout: 20 * time.Second})
	if !r.Done || r.ExitCode != 3 || !strings.Contains(r.Stdout, "30 100") || !strings.Contains(r.Stdout, "40 120") || r.Stderr != "" {
		t.Errorf("terminal = %+v, want exit 3, both sizes, all output as stdout", r)
	}
	// The sandbox's own devpts instance: /dev/pts holds ptmx and this
	// terminal, never the host's terminals.
	if !strings.Contains(r.Stdout, "\r\n2\r\n") {
		t.Errorf("entries in the sandbox's /dev/pts: output %q, want 2 (ptmx and this one)", r.Stdout)
	}

	for _, c := range []struct {
		req  CommandRequest
		want error
	}{
		{CommandRequest{Cmd: "cat", Stdin: true}, ErrBadRequest},
		{CommandRequest{Cmd: "bash", PTY: &PTYSize{Rows: 24, Cols: 80}}, ErrBadRequest},
		{CommandRequest{Cmd: "bash", Background: true, PTY: &PTYSize{Rows: 0, Cols: 80}}, ErrBadRequest},
		{CommandRequest{Action: CommandResize, Job: term.Job}, ErrBadRequest},
		{CommandRequest{Action: CommandInput, Job: bg.Job, Input: strings.Repeat("x", MaxCommandInput+1)}, ErrLimit},
		{CommandRequest{Action: CommandInput, Job: "job-999", Input: "x"}, ErrNotFound},
		{CommandRequest{Action: CommandInput, Job: bg.Job, Input: "x"}, ErrBadRequest},
	} {
		if _, err := e.m.Command(ctx, 1000, id, c.req); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.req, err, c.want)
		}
	}
}

// TestEntryDetails: stat and the listing tell permission bits, owner and
// group as the sandbox sees them, and a symlink's target as written,
// never followed (one to /etc/passwd shows its text, not the host's
// file).
func TestEntryDetails(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	// Every file is the sandbox root's: with no capability it can chown
	// nothing, so the ids below are 0.
	if res, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: `import os
open('f.txt', 'w').write('hello')
os.chmod('f.txt', 0o640)
os.mkdir('d', 0o750)
open('d/in', 'w').close()
os.symlink('f.txt', 'ln')
os.symlink('/etc/passwd', 'abs')`}); err != nil || res.Error != nil {
		t.Fatalf("cell: %+v, %v", res, err)
	}
	want := map[string]Entry{
		"f.txt": {Path: "f.txt", Size: 5, Mode: 0o640},
		"d":     {Path: "d", Dir: true, Mode: 0o750},
		"d/in":  {Path: "d/in", Mode: 0o644},
		"ln":    {Path: "ln", Size: 5, Symlink: true, Link: "f.txt", Mode: 0o777},
		"abs":   {Path: "abs", Size: 11, Symlink: true, Link: "/etc/passwd", Mode: 0o777},
	}
	same := func(got, w Entry) bool {
		return got.Path == w.Path && got.Dir == w.Dir && got.Symlink == w.Symlink && got.Link == w.Link &&
			got.Mode == w.Mode && got.UID == w.UID && got.GID == w.GID && (w.Dir || got.Size == w.Size)
	}
	for p, w := range want {
		got, err := e.m.Workspace().Stat(ctx, 1000, id, p)
		if err != nil || !same(*got, w) {
			t.Errorf("stat %s = %+v, %v; want %+v", p, got, err, w)
		}
	}
	files, err := e.m.Workspace().Files(ctx, 1000, id)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if w, ok := want[f.Path]; ok {
			seen++
			if !same(f, w) {
				t.Errorf("listed %+v, want %+v", f, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("listing %+v: %d of the %d entries", files, seen, len(want))
	}
}
