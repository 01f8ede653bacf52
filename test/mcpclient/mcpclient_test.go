package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/client"
	"github.com/jailcell/jailcell/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Numeric groups of the test service, chosen for it; no group or user is
// created on the host. The socket belongs to socketGID (who may connect);
// allowedGID is who may call.
const (
	socketGID  = 64123
	allowedGID = 64124
)

var (
	// user is admitted: the socket's group as a supplementary group, an
	// allowed primary group.
	user = &syscall.Credential{Uid: 65534, Gid: allowedGID, Groups: []uint32{socketGID}}
	// neighbour is admitted too, as another uid: it must not see user's
	// sessions.
	neighbour = &syscall.Credential{Uid: 65532, Gid: allowedGID, Groups: []uint32{socketGID}}
	// stranger can reach the socket (its group) but is not allowed.
	stranger = &syscall.Credential{Uid: 65533, Gid: socketGID, Groups: []uint32{}}
)

// fixture is what every test here shares: a jailcell binary and the node
// client in a directory the test users can reach, and the installed SDK.
type fixture struct {
	dir     string // 0711, root's
	bin     string
	script  string
	modules string // the directory holding node_modules
}

func setup(t *testing.T) *fixture {
	t.Helper()
	testenv.RequiresRoot(t)
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed (apt-get install nodejs npm, or make deps): %v", err)
	}
	out, err := exec.Command("../../scripts/fetch-mcpclient.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("install the MCP TypeScript client: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := &fixture{dir: testenv.StateDir(t), modules: lines[len(lines)-1]}
	// The built binary's directory is root's alone: the test users run a
	// copy.
	f.bin = filepath.Join(f.dir, "jailcell")
	f.script = filepath.Join(f.dir, "client.mjs")
	copyFile(t, testenv.Jailcell(t), f.bin, 0o755)
	copyFile(t, "client.mjs", f.script, 0o644)
	return f
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}

// env is a test user's environment: nothing of the developer's, the
// service's socket as the configured one.
func (f *fixture) env(sock string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.dir, "JAILCELL_SOCKET=" + sock, "MCPCLIENT_DIR=" + f.modules}, testenv.HermeticEnv()...)
}

// command is name with args run as cred in f's directory.
func (f *fixture) command(ctx context.Context, cred *syscall.Credential, sock, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = f.dir
	cmd.Env = f.env(sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs a command to its end: exit code, stdout, stderr.
func run(t *testing.T, cmd *exec.Cmd, stdin string) (int, string, string) {
	t.Helper()
	return testenv.Run(t, cmd, stdin)
}

// report is what client.mjs saw.
type report struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	Tools []struct {
		Name         string          `json:"name"`
		Annotations  map[string]any  `json:"annotations"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	} `json:"tools"`
	Calls map[string]toolCall `json:"calls"`
	// SchemaErrors has, per call, null when its structuredContent is
	// valid against its tool's output schema (ajv, draft 2020-12).
	SchemaErrors map[string]*string `json:"schemaErrors"`
	Progress     []struct {
		Progress float64 `json:"progress"`
		Message  string  `json:"message"`
	} `json:"progress"`
	A *toolCall `json:"a,omitempty"`
	B *toolCall `json:"b,omitempty"`
}

type toolCall struct {
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
	Images  []struct {
		MIMEType string `json:"mimeType"`
		Bytes    int    `json:"bytes"`
	} `json:"images"`
	StructuredContent map[string]any `json:"structuredContent"`
}

// node runs client.mjs as cred with opts; it returns the report and the
// client's stderr.
func (f *fixture) node(t *testing.T, cred *syscall.Credential, sock string, opts map[string]any) (report, string) {
	t.Helper()
	r, stderr, err := f.nodeErr(cred, sock, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, stderr
}

// nodeErr is node for any goroutine.
func (f *fixture) nodeErr(cred *syscall.Credential, sock string, opts map[string]any) (report, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	arg, _ := json.Marshal(opts)
	cmd := f.command(ctx, cred, sock, "node", f.script, string(arg))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r report
	if jerr := json.Unmarshal([]byte(lastLine(stdout.String())), &r); jerr != nil {
		return r, stderr.String(), fmt.Errorf("client.mjs printed no report (%v, exit: %v): stdout %q\nstderr %s", jerr, err, stdout.String(), stderr.String())
	}
	return r, stderr.String(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// sessionsOf lists the sessions the service shows cred (nil: root) with
// curl, a client of no jailcell code.
func (f *fixture) sessionsOf(t *testing.T, cred *syscall.Credential, sock string) []string {
	t.Helper()
	cmd := exec.Command("curl", "-sS", "--max-time", "60", "--unix-socket", sock, "http://jailcell/v1/sessions")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl sessions: %v", err)
	}
	var resp struct {
		OK       bool `json:"ok"`
		Sessions []struct {
			ID string `json:"session"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(out, &resp); err != nil || !resp.OK {
		t.Fatalf("sessions: %v %s", err, out)
	}
	var ids []string
	for _, s := range resp.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

// closedSoon reports whether session id is gone from root's list within
// 30 s.
func (f *fixture) closedSoon(t *testing.T, sock, id string) bool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if !slices.Contains(f.sessionsOf(t, nil, sock), id) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestFrontDoorsThroughServiceNotRoot: one service, started by the test on
// a temporary socket and state directory; every front door driven by a
// uid that is not root and that the service admits by its group.
func TestFrontDoorsThroughServiceNotRoot(t *testing.T) {
	f := setup(t)
	srv := testenv.StartServe(t, testenv.Serve{
		Bin: f.bin,
		Config: func(dir string) string {
			return testenv.ServeConfig(dir, fmt.Sprintf("%q", fmt.Sprint(socketGID)), testenv.Rootfs(t).Root) +
				fmt.Sprintf("allowed_gids: [%d]\nsessions:\n  max: 8\n", allowedGID)
		},
	})
	sock := srv.Sock

	t.Run("json", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := f.command(ctx, user, sock, f.bin, "json")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		c, err := client.StartJSONCmd(cmd)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Create(ctx, client.CreateOptions{})
		if err != nil {
			c.Close()
			t.Fatalf("create through the service: %v\n%s", err, stderr.String())
		}
		if _, err := c.Exec(ctx, s.ID, "x = 20", nil); err != nil {
			t.Fatal(err)
		}
		var streamed strings.Builder
		res, err := c.Exec(ctx, s.ID, "print(x * 2 + 2)", &client.ExecOptions{OnOutput: func(_, text string) { streamed.WriteString(text) }})
		if err != nil || res.Stdout != "42\n" || streamed.String() != "42\n" {
			t.Fatalf("x persisted and streamed: %+v %v, streamed %q", res, err, streamed.String())
		}
		// The session is this uid's, as with any HTTP client of the
		// service: another admitted uid does not see it, this one does.
		if ids := f.sessionsOf(t, user, sock); !slices.Contains(ids, s.ID) {
			t.Errorf("uid %d does not see its own session %s: %v", user.Uid, s.ID, ids)
		}
		if ids := f.sessionsOf(t, neighbour, sock); slices.Contains(ids, s.ID) {
			t.Errorf("uid %d sees uid %d's session %s", neighbour.Uid, user.Uid, s.ID)
		}
		// EOF closes the sessions this client created, as embedded.
		if err := c.Close(); err != nil {
			t.Fatalf("jailcell json at EOF: %v\n%s", err, stderr.String())
		}
		if ids := f.sessionsOf(t, nil, sock); slices.Contains(ids, s.ID) {
			t.Errorf("session %s still open after its jailcell json ended", s.ID)
		}
		if strings.Contains(stderr.String(), "state directory") {
			t.Errorf("the connected jailcell json touched a state directory: %s", stderr.String())
		}
	})

	t.Run("run", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		code, stdout, stderr := run(t, f.command(ctx, user, sock, f.bin, "run", "--connect", "--out", "/nonexistent-out", "-"),
			"import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n6 * 7\n")
		if code != 0 || stdout != "to stdout\n42\n" || !strings.Contains(stderr, "to stderr") {
			t.Fatalf("jailcell run --connect: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		code, _, stderr = run(t, f.command(ctx, user, sock, f.bin, "run", "-"), "raise ValueError('boom')\n")
		if code != 1 || !strings.Contains(stderr, "ValueError: boom") {
			t.Fatalf("a failing cell through the service: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("mcp over stdio", func(t *testing.T) {
		r, stderr := f.node(t, user, sock, map[string]any{
			"transport": "stdio", "command": f.bin, "args": []string{"mcp"}, "env": envMap(f.env(sock)), "scenario": "full",
		})
		checkFull(t, r, stderr)
		// The client went (EOF): jailcell mcp closes its session, perhaps
		// just after node has exited.
		if id, _ := r.Calls["get"].StructuredContent["session"].(string); id == "" || !f.closedSoon(t, sock, id) {
			t.Errorf("the MCP client's jailcell session %q is still open after the client went", id)
		}
	})

	t.Run("mcp over streamable HTTP", func(t *testing.T) {
		r, stderr := f.node(t, user, sock, map[string]any{"transport": "http", "socket": sock, "scenario": "full"})
		checkFull(t, r, stderr)
		// The client ended its MCP session: its jailcell session is gone.
		if id, _ := r.Calls["get"].StructuredContent["session"].(string); id == "" || !f.closedSoon(t, sock, id) {
			t.Errorf("the MCP session's jailcell session %q is still open after the client ended it", id)
		}
	})

	t.Run("two MCP clients at once", func(t *testing.T) {
		done := make(chan report, 1)
		go func() {
			r, stderr, err := f.nodeErr(user, sock, map[string]any{"transport": "stdio", "command": f.bin, "args": []string{"mcp"}, "env": envMap(f.env(sock)), "scenario": "pair"})
			if err != nil {
				r.Error = err.Error()
			}
			r.Error += stderr
			done <- r
		}()
		r, stderr := f.node(t, user, sock, map[string]any{"transport": "http", "socket": sock, "scenario": "pair"})
		for name, r := range map[string]report{"http": r, "stdio": <-done} {
			if !r.OK || r.A == nil || r.B == nil {
				t.Fatalf("%s pair: %+v\n%s", name, r, stderr)
			}
			if r.A.Text != "'a'\n" || r.B.Text != "'b'\n" {
				t.Errorf("%s: each client keeps its own variables: a %q, b %q", name, r.A.Text, r.B.Text)
			}
			if r.A.StructuredContent["session"] == r.B.StructuredContent["session"] {
				t.Errorf("%s: two MCP clients share session %v", name, r.A.StructuredContent["session"])
			}
		}
	})

	t.Run("refused uid", func(t *testing.T) {
		r, _ := f.node(t, stranger, sock, map[string]any{"transport": "http", "socket": sock, "scenario": "connect"})
		if r.OK || !strings.Contains(r.Error, `"code":"forbidden"`) || !strings.Contains(r.Error, fmt.Sprintf("uid %d", stranger.Uid)) {
			t.Errorf("a uid the service does not admit connected over HTTP: %+v", r)
		}
		// An admitted uid naming another uid's MCP session is refused
		// before the MCP server sees the request.
		cmd := exec.Command("curl", "-sS", "--max-time", "60", "--unix-socket", sock, "-w", "\n%{http_code}",
			"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
			"-H", fmt.Sprintf("Mcp-Session-Id: u%d-SOMEONEELSESSESSION", user.Uid),
			"-d", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "http://jailcell/mcp")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: neighbour}
		out, err := cmd.Output()
		if err != nil || !strings.HasSuffix(string(out), "\n403") || !strings.Contains(string(out), "forbidden") {
			t.Errorf("uid %d using uid %d's MCP session: %v %s", neighbour.Uid, user.Uid, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		code, _, stderr := run(t, f.command(ctx, stranger, sock, f.bin, "mcp"), "")
		if code == 0 || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, fmt.Sprintf("uid %d", stranger.Uid)) {
			t.Errorf("jailcell mcp as a refused uid: exit %d, stderr %q", code, stderr)
		}
	})
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// checkFull asserts the "full" scenario: annotations listed, a variable
// kept across calls, a plot as an image, structuredContent valid against
// each tool's output schema, progress for a 2.5-second cell.
func checkFull(t *testing.T, r report, stderr string) {
	t.Helper()
	if !r.OK {
		t.Fatalf("client.mjs: %s\nstderr: %s", r.Error, stderr)
	}
	for _, tl := range r.Tools {
		a := tl.Annotations
		if a == nil || a["openWorldHint"] != false {
			t.Errorf("tool %s: annotations %v, want openWorldHint false", tl.Name, a)
			continue
		}
		readOnly := tl.Name == "list_files" || tl.Name == "download_file"
		if a["readOnlyHint"] != readOnly {
			t.Errorf("tool %s: readOnlyHint %v, want %v", tl.Name, a["readOnlyHint"], readOnly)
		}
		if (tl.Name == "reset_session" || tl.Name == "rollback_session") && a["destructiveHint"] != true {
			t.Errorf("tool %s: destructiveHint %v, want true", tl.Name, a["destructiveHint"])
		}
		var schema struct {
			Type       string         `json:"type"`
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(tl.OutputSchema, &schema); err != nil || schema.Type != "object" || len(schema.Properties) == 0 {
			t.Errorf("tool %s: output schema %s, want an object with properties", tl.Name, tl.OutputSchema)
		}
	}
	if len(r.Tools) != 7 {
		t.Errorf("%d tools listed, want 7", len(r.Tools))
	}
	for name, c := range r.Calls {
		if c.IsError {
			t.Errorf("call %s failed: %s", name, c.Text)
		}
		e, checked := r.SchemaErrors[name]
		switch {
		case c.StructuredContent == nil:
			t.Errorf("call %s: no structuredContent", name)
		case !checked:
			t.Errorf("call %s: structuredContent not checked against its output schema", name)
		case e != nil:
			t.Errorf("call %s: structuredContent %v does not match its tool's output schema: %s", name, c.StructuredContent, *e)
		}
	}
	get := r.Calls["get"]
	if !strings.Contains(get.Text, "42") || get.StructuredContent["value"] != "42" || get.StructuredContent["session"] != r.Calls["set"].StructuredContent["session"] {
		t.Errorf("x did not persist across run_python calls: %q %v", get.Text, get.StructuredContent)
	}
	plot := r.Calls["plot"]
	if len(plot.Images) != 1 || plot.Images[0].MIMEType != "image/png" || plot.Images[0].Bytes < 1000 || plot.StructuredContent["images"] != float64(1) {
		t.Errorf("plot: images %+v, structured %v", plot.Images, plot.StructuredContent)
	}
	if r.Calls["slow"].StructuredContent["stdout"] != "started\ndone\n" {
		t.Errorf("slow cell: %v", r.Calls["slow"].StructuredContent)
	}
	if len(r.Progress) < 1 || r.Progress[0].Progress <= 0 || !strings.Contains(r.Progress[0].Message, "started") {
		t.Errorf("progress of a 2.5 s cell: %+v, want notifications with its output", r.Progress)
	}
	for i := 1; i < len(r.Progress); i++ {
		if r.Progress[i].Progress <= r.Progress[i-1].Progress {
			t.Errorf("progress went from %v to %v", r.Progress[i-1].Progress, r.Progress[i].Progress)
		}
	}
}

// TestMCPWithoutServiceNotRoot: with no service to talk to, a user that
// is not root is told so, and what to do; never a state-directory lock
// error.
func TestMCPWithoutServiceNotRoot(t *testing.T) {
	f := setup(t)
	missing := filepath.Join(f.dir, "no-service.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"configured socket", []string{"mcp"}, []string{"no jailcell service answers on " + missing, "needs root", "systemctl start jailcell"}},
		{"--connect", []string{"mcp", "--connect=" + missing}, []string{"--connect: no jailcell service answers on " + missing}},
		{"--embedded", []string{"mcp", "--embedded"}, []string{"--embedded", "needs root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, f.command(ctx, user, missing, f.bin, tc.args...), "")
			if code == 0 || stdout != "" {
				t.Fatalf("jailcell %v as uid %d with no service: exit %d, stdout %q", tc.args, user.Uid, code, stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "state dir") || strings.Contains(stderr, "lock") {
				t.Errorf("stderr is about the state directory's lock: %q", stderr)
			}
		})
	}
}
