package mcp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
)

const mcpCgroupRoot = "/jailcell-test-api-mcp"

// TestMCP drives the MCP server with the official Go SDK's client over an
// in-memory transport, against a real Manager.
func TestMCP(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 768 << 20
	p.Timeout = 60 * time.Second
	m := newTestManager(t, mcpCgroupRoot, p)
	d := &api.Dispatcher{Manager: m, Version: "test"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	st, ct := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, d, st, Options{Owner: 0}) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if got := cs.InitializeResult().ServerInfo.Name; got != "jailcell" {
		t.Errorf("server name %q", got)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "download_file,list_files,reset_session,rollback_session,run_python,snapshot_session,upload_file" {
		t.Errorf("tools %s", got)
	}

	callT := func(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		return callT(t, name, args)
	}
	textOf := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	// A variable survives across calls: one session per connection.
	if res := call("run_python", map[string]any{"code": "x = 20"}); res.IsError {
		t.Fatalf("x = 20: %s", textOf(res))
	}
	if res := call("run_python", map[string]any{"code": "print(x + 22)"}); res.IsError || textOf(res) != "42\n" {
		t.Fatalf("print(x + 22): %q error %v", textOf(res), res.IsError)
	}
	// A plot comes back as PNG image content.
	res := call("run_python", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", "timeout_s": 60})
	var png []byte
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok && ic.MIMEType == "image/png" {
			png = ic.Data
		}
	}
	if res.IsError || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("plot: error %v, text %q, png %d bytes", res.IsError, textOf(res), len(png))
	}
	// An exception is a tool error carrying the traceback.
	res = call("run_python", map[string]any{"code": "def f():\n    raise ValueError('bad value')\nf()"})
	if !res.IsError || !strings.Contains(textOf(res), "Traceback") || !strings.Contains(textOf(res), "ValueError: bad value") {
		t.Fatalf("error: %v %q", res.IsError, textOf(res))
	}
	// Files.
	if res := call("upload_file", map[string]any{"path": "in.txt", "content": "hello"}); res.IsError {
		t.Fatalf("upload: %s", textOf(res))
	}
	if res := call("run_python", map[string]any{"code": "open('out.txt','w').write(open('in.txt').read().upper())"}); res.IsError {
		t.Fatalf("transform: %s", textOf(res))
	}
	if res := call("download_file", map[string]any{"path": "out.txt"}); res.IsError || textOf(res) != "HELLO" {
		t.Fatalf("download: %q", textOf(res))
	}
	if res := call("list_files", map[string]any{}); !strings.Contains(textOf(res), "in.txt\t5") || !strings.Contains(textOf(res), "out.txt\t5") {
		t.Fatalf("list_files: %q", textOf(res))
	}
	if res := call("download_file", map[string]any{"path": "../etc/passwd"}); !res.IsError {
		t.Fatalf("escape not refused: %q", textOf(res))
	}
	// A file past download_file's bound (a sparse one costs the session
	// nothing) is refused by its size, naming it.
	if res := call("run_python", map[string]any{"code": "open('big.bin','wb').truncate(256 << 20)"}); res.IsError {
		t.Fatalf("sparse file: %s", textOf(res))
	}
	if res := call("download_file", map[string]any{"path": "big.bin"}); !res.IsError || !strings.Contains(textOf(res), "268435456 bytes") {
		t.Fatalf("a 256 MiB download_file: %v %q, want refused naming its size", res.IsError, textOf(res))
	}
	// snapshot_session and rollback_session: a subtest, skipped by name
	// without a working criu.
	t.Run("snapshot and rollback", func(t *testing.T) {
		if err := m.Durability().HibernationAvailable(); err != nil {
			t.Skipf("requires a working criu (make criu): %v", err)
		}
		if res := callT(t, "snapshot_session", map[string]any{}); res.IsError {
			t.Fatalf("snapshot_session: %s", textOf(res))
		}
		callT(t, "run_python", map[string]any{"code": "x = 0\nimport os; os.remove('in.txt')"})
		if res := callT(t, "rollback_session", map[string]any{}); res.IsError {
			t.Fatalf("rollback_session: %s", textOf(res))
		}
		if res := callT(t, "run_python", map[string]any{"code": "print(x, open('in.txt').read())"}); res.IsError || textOf(res) != "20 hello\n" {
			t.Fatalf("after rollback: %q", textOf(res))
		}
	})
	// reset_session: variables gone.
	call("reset_session", map[string]any{})
	if res := call("run_python", map[string]any{"code": "print(x)"}); !res.IsError || !strings.Contains(textOf(res), "NameError") {
		t.Fatalf("after reset: %q", textOf(res))
	}
	if n := len(m.List(context.Background(), 0)); n != 1 {
		t.Errorf("%d live sessions, want 1 (the old one closed)", n)
	}
	// The client goes: the session is closed.
	cs.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not end when the client went")
	}
	if n := len(m.List(context.Background(), 0)); n != 0 {
		t.Errorf("%d live sessions after the client went, want 0", n)
	}
}

// TestMCPCommand drives a built binary's `jailcell mcp` over stdio with the
// Go SDK's CommandTransport. It needs the binary: JAILCELL_BIN=path (the
// in-memory TestMCP covers the same server without it).
func TestMCPCommand(t *testing.T) {
	bin := os.Getenv("JAILCELL_BIN")
	if bin == "" {
		t.Skip("requires JAILCELL_BIN, a built jailcell (make test sets it), to run `jailcell mcp` itself")
	}
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--state-dir", state, "--rootfs", r.Root)
	cmd.Env = append(os.Environ(), "JAILCELL_REVIEW_DIR="+filepath.Join(state, "review"))
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 7 {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	for _, code := range []string{"y = 6", "print(y * 7)"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %+v %v", code, res, err)
		}
		if code == "print(y * 7)" {
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "42\n" {
				t.Fatalf("print(y * 7): %+v", res.Content[0])
			}
		}
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "Wait was already called") {
		t.Errorf("jailcell mcp exit: %v", err)
	}
}
