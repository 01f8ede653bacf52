package pyclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/workflow"
)

// The Python package is tested the way a user gets it: installed with pip,
// offline, from a copy of client/python into a fresh venv, then driven
// against a real `jailcell serve` and real `jailcell json` processes.

// pythonConfig is a test jailcell's configuration with the test fixer
// (fix-and-retry needs one).
func pythonConfig(t *testing.T, dir string) string {
	fixer, err := filepath.Abs(filepath.Join("..", "..", "testdata", "fixer", "fix_name_error.py"))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.ClientServeConfig(t, dir) + "fixer:\n  command: /usr/bin/python3 " + fixer + "\n"
}

// installPython makes a venv that sees Debian's packages, installs the
// package into it with pip from a copy of client/python (no index, no
// build isolation: nothing is fetched) and returns the venv's python.
func installPython(t *testing.T) string {
	t.Helper()
	return installPythonFor(t, false)
}

// installPythonFor is installPython; shared makes the venv readable by
// every user (the non-root tests run it as another uid).
func installPythonFor(t *testing.T, shared bool) string {
	t.Helper()
	for _, probe := range [][]string{{"-m", "venv", "--help"}, {"-m", "pip", "--version"}, {"-c", "import setuptools, wheel"}} {
		if out, err := exec.Command("/usr/bin/python3", probe...).CombinedOutput(); err != nil {
			t.Skipf("host lacks python3-venv, python3-pip or python3-setuptools/python3-wheel (make deps installs them): python3 %s: %v\n%s",
				strings.Join(probe, " "), err, out)
		}
	}
	dir := t.TempDir()
	if shared {
		dir = testenv.StateDir(t) // 0711: others pass through, read only what is theirs to read
	}
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS(pyDir)); err != nil {
		t.Fatalf("copy client/python: %v", err)
	}
	for _, junk := range []string{"build", "jailcell.egg-info"} {
		os.RemoveAll(filepath.Join(src, junk)) // a developer's earlier in-tree build
	}
	venv := filepath.Join(dir, "venv")
	env := pipEnv()
	for _, args := range [][]string{
		{"/usr/bin/python3", "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", src},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = env, dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(venv, "bin", "python")
}

// pipEnv keeps the developer's pip configuration out of the install.
func pipEnv(extra ...string) []string {
	return testenv.ChildEnv(append([]string{"PIP_CONFIG_FILE=" + os.DevNull, "PIP_NO_INPUT=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1"}, extra...)...)
}

// jsonCommand is the command line that starts a test `jailcell json`:
// its own configuration, environment and a fresh state directory under
// dir for each process (one jailcell per state directory).
func jsonCommand(t *testing.T, bin string) string {
	t.Helper()
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(pythonConfig(t, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, err := json.Marshal([]string{"env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "JAILCELL_REVIEW_DIR=" + dir + "/review",
		"sh", "-c", `exec "$0" json --config "$1" --state-dir "$(mktemp -d "$2/s.XXXXXX")"`, bin, cfg, dir})
	if err != nil {
		t.Fatal(err)
	}
	return string(cmd)
}

// TestPythonClient installs the package and runs its unittest suites (the
// Sandbox and AsyncSandbox tests through both transports, and the former
// single-file client's) and the example against a real `jailcell serve`
// and real `jailcell json` subprocesses.
func TestPythonClient(t *testing.T) {
	python := installPython(t)
	bin := testenv.Jailcell(t)
	svc := testenv.StartServe(t, testenv.Serve{
		Bin:       bin,
		CleanExit: true,
		Config:    func(dir string) string { return pythonConfig(t, dir) },
	})
	// The tests run from a directory without the package, so what they
	// import is the installed copy.
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "tests"), os.DirFS(filepath.Join(pyDir, "tests"))); err != nil {
		t.Fatal(err)
	}
	example, err := filepath.Abs(filepath.Join(pyDir, "example.py"))
	if err != nil {
		t.Fatal(err)
	}
	env := pipEnv("JAILCELL_SOCKET="+svc.Sock, "JAILCELL_JSON_COMMAND="+jsonCommand(t, bin),
		"JAILCELL_FIXER=1", "JAILCELL_PY_INSTALLED=1")
	for _, args := range [][]string{
		{"-m", "unittest", "-v", "test_protocol", "test_sandbox", "test_jailcell_client"},
		{example},
	} {
		cmd := exec.Command(python, args...)
		cmd.Dir, cmd.Env = filepath.Join(work, "tests"), env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "-m" && (!strings.Contains(string(out), "\nOK") || strings.Contains(string(out), "skipped")) {
			t.Fatalf("python %s did not run every test:\n%s", strings.Join(args, " "), out)
		}
		t.Logf("python %s:\n%s", strings.Join(args, " "), out)
	}
}

// quickstartDir is examples/quickstarts, from this package's directory.
const quickstartDir = "../../examples/quickstarts"

// fakeModel is a chat server on 127.0.0.1 that replays a scripted
// conversation: it asks to run code twice (the second call reads a
// variable the first one set), checks that each tool result it gets back
// holds the real output, then answers in text. What it found wrong is in
// errs; the quickstart also sees it as an HTTP error.
type fakeModel struct {
	t     *testing.T
	mu    sync.Mutex
	calls int
	errs  []string
	tool  map[string]any // the OpenAI tool the quickstart must send
}

// The script. The hash cannot be guessed without running the code.
var (
	fakeCode   = []string{"import hashlib\nh = hashlib.sha256(b'jailcell quickstart').hexdigest()[:16]\nprint(h)", "print(h.upper())"}
	fakeHash   = func() string { s := sha256.Sum256([]byte("jailcell quickstart")); return hex.EncodeToString(s[:])[:16] }()
	fakeWant   = []string{fakeHash, strings.ToUpper(fakeHash)}
	fakeAnswer = "FINAL: the hash is " + fakeHash
)

func (f *fakeModel) fail(w http.ResponseWriter, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	f.errs = append(f.errs, msg)
	http.Error(w, msg, http.StatusBadRequest)
}

// turn checks the tool result the quickstart sent for the previous turn
// (none on turn 0) and returns the turn's number, or -1 after failing.
func (f *fakeModel) turn(w http.ResponseWriter, got string, ok bool) int {
	n := f.calls
	f.calls++
	if n >= len(fakeCode)+1 {
		f.fail(w, "turn %d: the script has ended", n)
		return -1
	}
	if n > 0 && (!ok || !strings.Contains(got, fakeWant[n-1])) {
		f.fail(w, "turn %d: the tool result %q does not hold the real output %q", n, got, fakeWant[n-1])
		return -1
	}
	return n
}

// openAI answers POST /v1/chat/completions.
func (f *fakeModel) openAI(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var req struct {
		Messages []map[string]any `json:"messages"`
		Tools    []map[string]any `json:"tools"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" {
		f.fail(w, "%s: bad request: %v", r.URL.Path, err)
		return
	}
	if len(req.Tools) != 1 || !reflect.DeepEqual(req.Tools[0], f.tool) {
		f.fail(w, "tools %v, want exactly run_python.json %v", req.Tools, f.tool)
		return
	}
	var got string
	ok := false
	if last := req.Messages[len(req.Messages)-1]; last["role"] == "tool" {
		got, _ = last["content"].(string)
		ok = last["tool_call_id"] == fmt.Sprintf("call_%d", f.calls)
	}
	n := f.turn(w, got, ok)
	if n < 0 {
		return
	}
	msg := map[string]any{"role": "assistant", "content": fakeAnswer}
	if n < len(fakeCode) {
		args, _ := json.Marshal(map[string]string{"code": fakeCode[n]})
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": fmt.Sprintf("call_%d", n+1), "type": "function",
			"function": map[string]any{"name": "run_python", "arguments": string(args)}}}}
	}
	json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": msg}}})
}

// anthropic answers POST /v1/messages.
func (f *fakeModel) anthropic(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []map[string]any `json:"tools"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || r.URL.Path != "/v1/messages" ||
		r.Header.Get("anthropic-version") == "" {
		f.fail(w, "%s: bad request (anthropic-version %q): %v", r.URL.Path, r.Header.Get("anthropic-version"), err)
		return
	}
	fn := f.tool["function"].(map[string]any)
	if len(req.Tools) != 1 || req.Tools[0]["name"] != "run_python" || !reflect.DeepEqual(req.Tools[0]["input_schema"], fn["parameters"]) {
		f.fail(w, "tools %v, want run_python with run_python.json's parameters as input_schema", req.Tools)
		return
	}
	var got string
	ok := false
	if last := req.Messages[len(req.Messages)-1]; last.Role == "user" {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(last.Content, &blocks) == nil && len(blocks) == 1 && blocks[0].Type == "tool_result" {
			var parts []struct{ Text string }
			if json.Unmarshal(blocks[0].Content, &parts) == nil {
				for _, p := range parts {
					got += p.Text
				}
			} else {
				json.Unmarshal(blocks[0].Content, &got)
			}
			ok = blocks[0].ToolUseID == fmt.Sprintf("toolu_%d", f.calls)
		}
	}
	n := f.turn(w, got, ok)
	if n < 0 {
		return
	}
	resp := map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "stop_reason": "end_turn",
		"content": []any{map[string]any{"type": "text", "text": fakeAnswer}}}
	if n < len(fakeCode) {
		resp["stop_reason"] = "tool_use"
		resp["content"] = []any{
			map[string]any{"type": "text", "text": "Let me run that."},
			map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n+1), "name": "run_python",
				"input": map[string]any{"code": fakeCode[n]}},
		}
	}
	json.NewEncoder(w).Encode(resp)
}

// TestPythonQuickstarts runs each chat quickstart, with the installed
// package, against a real `jailcell serve` and a fake model server that
// checks the real output came back in the tool results.
//
// Each runs as a user who is not root but whom the service admits by group,
// as a member of group jailcell would, from a copy of the quickstarts that
// user can read.
func TestPythonQuickstarts(t *testing.T) {
	python := installPythonFor(t, true)
	svc := startNotRootService(t)
	shared := testenv.StateDir(t)
	if err := os.CopyFS(filepath.Join(shared, "quickstarts"), os.DirFS(quickstartDir)); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(filepath.Join(shared, "quickstarts"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(quickstartDir, "run_python.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tool map[string]any
	if err := json.Unmarshal(raw, &tool); err != nil {
		t.Fatalf("run_python.json: %v", err)
	}
	for _, tc := range []struct {
		script string
		api    func(*fakeModel) http.HandlerFunc
	}{
		{"openai_tool_loop.py", func(f *fakeModel) http.HandlerFunc { return f.openAI }},
		{"anthropic_tool_use.py", func(f *fakeModel) http.HandlerFunc { return f.anthropic }},
		{"langchain_tool.py", func(f *fakeModel) http.HandlerFunc { return f.openAI }},
	} {
		t.Run(strings.TrimSuffix(tc.script, ".py"), func(t *testing.T) {
			f := &fakeModel{t: t, tool: tool}
			srv := httptest.NewServer(tc.api(f)) // 127.0.0.1 only
			defer srv.Close()
			script := filepath.Join(shared, "quickstarts", tc.script)
			cmd := exec.Command(python, script, "What is the hash?")
			cmd.Dir = shared
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: notRoot}
			cmd.Env = pipEnv("JAILCELL_SOCKET="+svc.Sock, "OPENAI_BASE_URL="+srv.URL+"/v1", "ANTHROPIC_BASE_URL="+srv.URL,
				"OPENAI_API_KEY=test", "ANTHROPIC_API_KEY=test", "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			f.mu.Lock()
			defer f.mu.Unlock()
			if err != nil || len(f.errs) > 0 {
				t.Fatalf("%s: %v; fake model: %q\nstdout:\n%s\nstderr:\n%s", tc.script, err, f.errs, stdout.String(), stderr.String())
			}
			if f.calls != len(fakeCode)+1 || strings.TrimSpace(stdout.String()) != fakeAnswer {
				t.Fatalf("%s: %d model calls, want %d; stdout %q, want the model's answer %q\nstderr:\n%s",
					tc.script, f.calls, len(fakeCode)+1, stdout.String(), fakeAnswer, stderr.String())
			}
			// The conversation's sandbox ended with it.
			ls := exec.Command(python, "-c", "import jailcell, sys; print(len(jailcell.Client(sys.argv[1]).sessions()))", svc.Sock)
			ls.SysProcAttr = &syscall.SysProcAttr{Credential: notRoot}
			if out, err := ls.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "0" {
				t.Fatalf("sessions left after %s: %s %v", tc.script, out, err)
			}
		})
	}
}

// TestQuickstartMCPConfig starts the MCP server the way the desktop
// configuration says (its command and args, found on PATH, its env), as a
// user who is not root but is in the running service's group, and checks
// that it answers initialize, tools/list and a run_python call.
func TestQuickstartMCPConfig(t *testing.T) {
	testenv.RequiresRoot(t)
	raw, err := os.ReadFile(filepath.Join(quickstartDir, "mcp", "claude_desktop_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatalf("claude_desktop_config.json: %v", err)
	}
	srv, ok := conf.MCPServers["jailcell"]
	if !ok || len(conf.MCPServers) != 1 {
		t.Fatalf("want one server named jailcell: %s", raw)
	}
	if srv.Command == "sudo" || filepath.Base(srv.Command) != "jailcell" {
		t.Fatalf("command %q: the config must start jailcell itself (no sudo: a desktop agent cannot answer its prompt)", srv.Command)
	}
	// As a desktop user would run it: not root, a member of the running
	// service's group, with jailcell installed on PATH (a copy the user
	// can read); jailcell mcp finds the service at the configured socket.
	svc := startNotRootService(t)
	dir, bin := binForNotRoot(t)
	env := testenv.ChildEnv("PATH="+dir+":/usr/sbin:/usr/bin:/sbin:/bin", "HOME="+dir, "JAILCELL_SOCKET="+svc.Sock)
	for k, v := range srv.Env {
		env = append(env, k+"="+v)
	}
	path, err := lookPathIn(srv.Command, filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, srv.Args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: notRoot}
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "desktop-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("initialize: %v\n%s", err, stderr.String())
	}
	closed := false
	defer func() {
		if !closed {
			cs.Close()
		}
	}()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "run_python") {
		t.Fatalf("tools/list: %v, no run_python", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "x = 6 * 7\nprint(x)"}})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("run_python: %+v, %v\n%s", res, err, stderr.String())
	}
	if text, _ := res.Content[0].(*mcp.TextContent); text == nil || !strings.Contains(text.Text, "42") {
		t.Fatalf("run_python answered %+v, want the output 42", res.Content[0])
	}
	closed = true
	if err := cs.Close(); err != nil {
		t.Fatalf("close: %v\n%s", err, stderr.String())
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Fatalf("jailcell mcp did not exit 0 at EOF: %v\n%s", cmd.ProcessState, stderr.String())
	}
}

// lookPathIn finds a config's command as a desktop agent would, on PATH,
// with dir first.
func lookPathIn(command, dir string) (string, error) {
	if strings.Contains(command, "/") {
		return command, nil
	}
	if p := filepath.Join(dir, command); fileExists(p) {
		return p, nil
	}
	return exec.LookPath(command)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestPythonReadsEveryResultField guards the Python models against wire
// drift, as TestWireTypesMatch guards the Go client's copies: every JSON
// field of a cell's result (and of what it holds) must be read somewhere
// in the package, so a field added to the wire is either mapped or
// deliberately left out here.
func TestPythonReadsEveryResultField(t *testing.T) {
	var src strings.Builder
	for _, f := range []string{"models.py", "sandbox.py"} {
		b, err := os.ReadFile(filepath.Join(pyDir, "jailcell", f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[session.Result](), reflect.TypeFor[session.CellError](), reflect.TypeFor[session.DisplayItem](),
		reflect.TypeFor[session.FileChange](), reflect.TypeFor[session.Entry](),
		reflect.TypeFor[workflow.Attempt](),
	} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(src.String(), `"`+name+`"`) {
				t.Errorf("%s field %q is not read by client/python/jailcell (models.py, sandbox.py)", typ, name)
			}
		}
	}
}

// TestPythonTyped checks the package is typed for its users: mypy --strict
// passes on the package, and a program using the installed package is
// checked against its types (py.typed is shipped): a correct use passes, a
// wrong one is caught.
func TestPythonTyped(t *testing.T) {
	if out, err := exec.Command("/usr/bin/python3", "-m", "mypy", "--version").CombinedOutput(); err != nil {
		t.Skipf("host lacks python3-mypy (make deps installs it): %v\n%s", err, out)
	}
	python := installPython(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.py")
	bad := filepath.Join(dir, "bad.py")
	writeFile(t, good, `from typing import List, Optional
from jailcell import AsyncSandbox, Execution, Result, Sandbox


def use(sbx: Sandbox) -> Optional[str]:
    seen: List[Result] = []
    ex: Execution = sbx.run_code("1", on_stdout=print, on_result=seen.append, timeout=5)
    png: Optional[str] = ex.results[0].png if ex.results else None
    return ex.text or png or (ex.error.traceback if ex.error else None)


async def use_async(sbx: AsyncSandbox) -> bytes:
    data = await sbx.files.read("x", format="bytes")
    return data if isinstance(data, bytes) else data.encode()
`)
	writeFile(t, bad, `from jailcell import Sandbox


def use(sbx: Sandbox) -> int:
    return sbx.run_code("1").text
`)
	src, err := filepath.Abs(filepath.Join(pyDir, "jailcell"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "mypy-cache")
	for _, tc := range []struct {
		args []string
		ok   bool
		want string
	}{
		{[]string{"--strict", src}, true, "Success"},
		{[]string{"--strict", good}, true, "Success"},
		{[]string{"--strict", bad}, false, `Incompatible return value type (got "Optional[str]", expected "int")`},
	} {
		cmd := exec.Command(python, append([]string{"-m", "mypy", "--cache-dir", cache}, tc.args...)...)
		cmd.Dir, cmd.Env = dir, pipEnv()
		out, err := cmd.CombinedOutput()
		if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
			t.Errorf("mypy %s: %v, want ok=%v and %q:\n%s", strings.Join(tc.args, " "), err, tc.ok, tc.want, out)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPythonE2B runs the E2B-shaped suite (test_e2b: commands, envs, files,
// watches, info, timeout, metrics, connect) through both transports
// against a real `jailcell serve` and real `jailcell json` processes.
func TestPythonE2B(t *testing.T) {
	python := installPython(t)
	bin := testenv.Jailcell(t)
	// The service also listens on loopback TCP with a bearer token, for
	// the asyncio TCP transport.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	token := strings.Repeat("e2b-test-token-", 3)
	svc := testenv.StartServe(t, testenv.Serve{
		Bin:       bin,
		CleanExit: true,
		Config: func(dir string) string {
			tokens := filepath.Join(dir, "tokens")
			writeFile(t, tokens, token+" 0\n")
			return pythonConfig(t, dir) + "listen: tcp://" + addr + "\nauth:\n  tokens_file: " + tokens + "\n"
		},
	})
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "tests"), os.DirFS(filepath.Join(pyDir, "tests"))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_e2b")
	cmd.Dir, cmd.Env = filepath.Join(work, "tests"), pipEnv("JAILCELL_SOCKET="+svc.Sock, "JAILCELL_JSON_COMMAND="+jsonCommand(t, bin),
		"JAILCELL_TCP_URL=tcp://"+addr, "JAILCELL_TCP_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python -m unittest test_e2b: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\nOK") || strings.Contains(string(out), "skipped") {
		t.Fatalf("test_e2b did not run every test:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestPythonE2BExample takes a program written for E2B's
// e2b_code_interpreter, changes only its import line to jailcell's, runs
// it against a real `jailcell serve` and compares its whole output with
// the output expected of E2B.
func TestPythonE2BExample(t *testing.T) {
	python := installPython(t)
	svc := testenv.StartServe(t, testenv.Serve{
		Bin:       testenv.Jailcell(t),
		CleanExit: true,
		Config:    func(dir string) string { return testenv.ClientServeConfig(t, dir) },
	})
	src, err := os.ReadFile(filepath.Join(pyDir, "tests", "e2b", "example.py"))
	if err != nil {
		t.Fatal(err)
	}
	const e2bImport = "from e2b_code_interpreter import Sandbox, CommandExitException\n"
	if bytes.Count(src, []byte("import")) < 1 || !bytes.Contains(src, []byte(e2bImport)) {
		t.Fatalf("example.py lacks its E2B import line %q", e2bImport)
	}
	ported := bytes.Replace(src, []byte(e2bImport), []byte("from jailcell import Sandbox, CommandExitException\n"), 1)
	if diff := lineDiff(src, ported); diff != 1 {
		t.Fatalf("the port changed %d lines, want only the import", diff)
	}
	prog := filepath.Join(t.TempDir(), "example.py")
	writeFile(t, prog, string(ported))
	want, err := os.ReadFile(filepath.Join(pyDir, "tests", "e2b", "example.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, prog)
	cmd.Dir, cmd.Env = filepath.Dir(prog), pipEnv("JAILCELL_SOCKET="+svc.Sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("the ported E2B example failed: %v\nstdout:\n%s\nstderr:\n%s", err, got, stderr.String())
	}
	if string(got) != string(want) {
		t.Errorf("the ported E2B example printed:\n%s\nwant:\n%s\nstderr:\n%s", got, want, stderr.String())
	}
}

// lineDiff counts the lines that differ between two texts of as many lines.
func lineDiff(a, b []byte) int {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	if len(al) != len(bl) {
		return max(len(al), len(bl))
	}
	n := 0
	for i := range al {
		if al[i] != bl[i] {
			n++
		}
	}
	return n
}

// TestPythonClientHasNoImportCycle: the client's modules import one way
// (commands and watches reach their sandbox through a protocol, not by
// importing it).
func TestPythonClientHasNoImportCycle(t *testing.T) {
	if c := testenv.PythonImportCycles(t, filepath.Join(pyDir, "jailcell")); len(c) > 0 {
		t.Fatalf("import cycles in the Python client:\n%s", strings.Join(c, "\n"))
	}
}
