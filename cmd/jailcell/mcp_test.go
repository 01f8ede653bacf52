package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestMCPConnectValueForms runs the real `jailcell mcp` against a test
// service with --connect's value written each way a client's
// configuration may write it: "--connect=PATH", and PATH as the next
// argument, the form an MCP client's args array takes (a path ending in
// .sock, and a socket named otherwise, found by stat). Each must reach
// the service and run a cell there. Privileged tier: root and the rootfs.
func TestMCPConnectValueForms(t *testing.T) {
	svc := startServe(t, "root", "")
	// A socket whose name does not end in .sock: a symlink to the service's.
	plain := filepath.Join(svc.Dir, "service-socket")
	if err := os.Symlink(svc.Sock, plain); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"--connect=PATH", []string{"mcp", "--connect=" + svc.Sock}},
		{"--connect PATH.sock", []string{"mcp", "--connect", svc.Sock}},
		{"--connect SOCKET", []string{"mcp", "--connect", plain}},
	} {
		before := strings.Count(svc.Log.String(), `"route":"session_exec"`)
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = jailcellEnv()
			stderr := &testenv.LockedBuffer{}
			cmd.Stderr = stderr
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "connect-forms", Version: "1"}, nil).
				Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
			if err != nil {
				t.Fatalf("jailcell %s: initialize: %v\n%s", strings.Join(tc.args, " "), err, stderr.String())
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(6 * 7)"}})
			if err != nil || res.IsError || len(res.Content) == 0 {
				t.Fatalf("run_python: %v %+v\n%s", err, res, stderr.String())
			}
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "42\n" {
				t.Fatalf("run_python print(6 * 7): %+v", res.Content[0])
			}
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			// The cell ran in the service, not in this process (the
			// service logs a request once its answer is written).
			execs := func() int { return strings.Count(svc.Log.String(), `"route":"session_exec"`) - before }
			for deadline := time.Now().Add(15 * time.Second); execs() == 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			if n := execs(); n != 1 {
				t.Errorf("the service ran %d cells for this client, want 1", n)
			}
		})
	}
}
