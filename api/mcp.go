package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPOptions shape an MCP server.
type MCPOptions struct {
	// Owner is the uid every request runs as.
	Owner int
	// Policy names the policy of the connection's session ("" = default).
	Policy string
	// Version is reported to the client.
	Version string
	// Logger receives transport problems (default slog.Default()).
	Logger *slog.Logger
}

// mcpConn is one MCP connection's state: its session, created on first use.
// Every tool goes through the Dispatcher, like any other transport.
type mcpConn struct {
	d    *Dispatcher
	opts MCPOptions

	mu      sync.Mutex
	session string
}

// ServeMCP speaks the Model Context Protocol on t for one client, until it
// goes or ctx ends; then the connection's session is closed.
func ServeMCP(ctx context.Context, d *Dispatcher, t mcp.Transport, opts MCPOptions) error {
	s, c := NewMCPServer(d, opts)
	defer c.closeSession()
	return s.Run(ctx, t)
}

// NewMCPServer builds the server for one connection. The caller must call
// the returned closer when the client is gone (ServeMCP does).
func NewMCPServer(d *Dispatcher, opts MCPOptions) (*mcp.Server, interface{ closeSession() }) {
	if opts.Version == "" {
		opts.Version = d.Version
	}
	c := &mcpConn{d: d, opts: opts}
	s := mcp.NewServer(&mcp.Implementation{Name: "jailcell", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Run Python in an isolated sandbox with no network. Variables, imports and files persist " +
			"across run_python calls in this connection's session until reset_session. Files live in " + "/work" + ".",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "run_python", Description: "Run Python code in the session (created on first use; variables persist across calls). " +
		"Returns stdout, stderr, the value of the last expression, and plots as PNG images."}, c.runPython)
	mcp.AddTool(s, &mcp.Tool{Name: "upload_file", Description: "Write a file into the session's working directory."}, c.upload)
	mcp.AddTool(s, &mcp.Tool{Name: "download_file", Description: "Read a file from the session's working directory."}, c.download)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Description: "List the files in the session's working directory."}, c.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "reset_session", Description: "Close the session: variables and files are gone; the next call starts a fresh one."}, c.reset)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_session", Description: "Save the session's whole state (variables, imports, open files, working directory) " +
		"as the point rollback_session returns to; replaces an earlier snapshot. Take one before code that may break the session."}, c.snapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "rollback_session", Description: "Return the session to its last snapshot: variables, imports and files exactly as they were then. " +
		"The snapshot stays, so it can be rolled back to again."}, c.rollback)
	return s, c
}

type runPythonIn struct {
	Code     string  `json:"code" jsonschema:"the Python source to run"`
	TimeoutS float64 `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds (default: the policy's)"`
}

type uploadIn struct {
	Path    string `json:"path" jsonschema:"path relative to the working directory"`
	Content string `json:"content" jsonschema:"the file's content: text, or base64 when base64 is true"`
	Base64  bool   `json:"base64,omitempty" jsonschema:"content is base64-encoded binary"`
}

type pathIn struct {
	Path string `json:"path" jsonschema:"path relative to the working directory"`
}

type noIn struct{}

func (c *mcpConn) handle(ctx context.Context, req *Request) *Response {
	req.ID = json.RawMessage(`"mcp"`)
	return c.d.Handle(ctx, c.opts.Owner, req, nil)
}

// ensureSession returns the connection's session, creating it if needed.
func (c *mcpConn) ensureSession(ctx context.Context) (string, *Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != "" {
		return c.session, nil
	}
	resp := c.handle(ctx, &Request{Op: OpCreate, Policy: c.opts.Policy})
	if resp.Error != nil {
		return "", resp.Error
	}
	c.session = resp.Info.ID
	return c.session, nil
}

// forget drops id if it is still the connection's session.
func (c *mcpConn) forget(id string) {
	c.mu.Lock()
	if c.session == id {
		c.session = ""
	}
	c.mu.Unlock()
}

func (c *mcpConn) closeSession() {
	c.mu.Lock()
	id := c.session
	c.session = ""
	c.mu.Unlock()
	if id != "" {
		c.handle(context.Background(), &Request{Op: OpClose, Session: id})
	}
}

func toolError(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

func errorResult(e *Error, fb any) *mcp.CallToolResult {
	msg := e.Code + ": " + e.Message
	if fb != nil {
		if b, err := json.MarshalIndent(fb, "", "  "); err == nil {
			msg += "\nfallback: " + string(b)
		}
	}
	return toolError("%s", msg)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (c *mcpConn) runPython(ctx context.Context, _ *mcp.CallToolRequest, in runPythonIn) (*mcp.CallToolResult, any, error) {
	var note string
	for try := 0; ; try++ {
		id, e := c.ensureSession(ctx)
		if e != nil {
			return errorResult(e, nil), nil, nil
		}
		resp := c.handle(ctx, &Request{Op: OpExec, Session: id, Code: in.Code, TimeoutS: in.TimeoutS})
		if resp.Error != nil && resp.Error.Code == CodeNotFound && try == 0 {
			// The session expired: start a new one, and say so.
			c.forget(id)
			note = "note: the previous session had ended (" + resp.Error.Message + "); this ran in a new session, earlier variables and files are gone\n"
			continue
		}
		if resp.Error != nil {
			var fb any
			if resp.Fallback != nil {
				fb = resp.Fallback
			}
			return errorResult(resp.Error, fb), nil, nil
		}
		return cellResult(resp, note), nil, nil
	}
}

// cellResult turns an exec response into MCP content: text for output and
// errors, image content for PNG plots.
func cellResult(resp *Response, note string) *mcp.CallToolResult {
	res := resp.Result
	var b strings.Builder
	b.WriteString(note)
	if resp.Mode != "" {
		fmt.Fprintf(&b, "mode: %s\n", resp.Mode)
	}
	if res.Stdout != "" {
		b.WriteString(res.Stdout)
		if !strings.HasSuffix(res.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if res.Stderr != "" {
		fmt.Fprintf(&b, "[stderr]\n%s", res.Stderr)
		if !strings.HasSuffix(res.Stderr, "\n") {
			b.WriteString("\n")
		}
	}
	if v, ok := res.Value["text/plain"].(string); ok {
		fmt.Fprintf(&b, "%s\n", v)
	}
	if res.Error != nil {
		if res.Error.Traceback != "" {
			b.WriteString(res.Error.Traceback)
		} else {
			fmt.Fprintf(&b, "%s: %s\n", res.Error.Type, res.Error.Message)
		}
	}
	if res.Status != "ok" {
		fmt.Fprintf(&b, "\nstatus: %s", res.Status)
		if res.StateReason != "" {
			fmt.Fprintf(&b, " (variables lost: %s)", res.StateReason)
		}
		b.WriteString("\n")
	}
	if resp.Fallback != nil {
		fmt.Fprintf(&b, "fallback: %s\n", resp.Fallback.Reason)
	}
	out := &mcp.CallToolResult{IsError: res.Status != "ok"}
	for _, d := range res.Display {
		switch {
		case strings.HasPrefix(d.MIME, "image/png"):
			data, err := base64.StdEncoding.DecodeString(d.Data)
			if err != nil {
				continue
			}
			out.Content = append(out.Content, &mcp.ImageContent{MIMEType: "image/png", Data: data})
		case strings.HasPrefix(d.MIME, "text/plain"):
			fmt.Fprintf(&b, "%s\n", d.Data)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}
	out.Content = append([]mcp.Content{&mcp.TextContent{Text: b.String()}}, out.Content...)
	return out
}

func (c *mcpConn) upload(ctx context.Context, _ *mcp.CallToolRequest, in uploadIn) (*mcp.CallToolResult, any, error) {
	data := []byte(in.Content)
	if in.Base64 {
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return toolError("content is not valid base64: %v", err), nil, nil
		}
	}
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), nil, nil
	}
	resp := c.handle(ctx, &Request{Op: OpUpload, Session: id, Path: in.Path, Data: data})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), nil, nil
	}
	return text(fmt.Sprintf("wrote %s (%d bytes)", resp.Path, *resp.Size)), nil, nil
}

func (c *mcpConn) download(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), nil, nil
	}
	resp := c.handle(ctx, &Request{Op: OpDownload, Session: id, Path: in.Path})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), nil, nil
	}
	switch {
	case strings.HasSuffix(strings.ToLower(resp.Path), ".png"):
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: resp.Data}}}, nil, nil
	case utf8.Valid(resp.Data):
		return text(string(resp.Data)), nil, nil
	}
	return text("base64:" + base64.StdEncoding.EncodeToString(resp.Data)), nil, nil
}

func (c *mcpConn) listFiles(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), nil, nil
	}
	resp := c.handle(ctx, &Request{Op: OpFiles, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), nil, nil
	}
	var b strings.Builder
	for _, f := range resp.Files {
		if f.Dir {
			fmt.Fprintf(&b, "%s/\n", f.Path)
		} else {
			fmt.Fprintf(&b, "%s\t%d\n", f.Path, f.Size)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no files)")
	}
	return text(b.String()), nil, nil
}

func (c *mcpConn) snapshot(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), nil, nil
	}
	resp := c.handle(ctx, &Request{Op: OpSnapshot, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), nil, nil
	}
	return text("snapshot saved; rollback_session returns here"), nil, nil
}

func (c *mcpConn) rollback(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id == "" {
		return toolError("not_found: no session yet, so no snapshot to roll back to"), nil, nil
	}
	resp := c.handle(ctx, &Request{Op: OpRollback, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), nil, nil
	}
	if resp.Info != nil && resp.Info.State == "lost" {
		return toolError("rolled back the files, but the variables could not be restored: %s", resp.Info.StateReason), nil, nil
	}
	return text("rolled back to the snapshot: variables, imports and files are as they were then"), nil, nil
}

func (c *mcpConn) reset(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
	c.closeSession()
	return text("session closed; the next call starts a fresh one"), nil, nil
}
