package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/api"
)

// Options shape an MCP server.
type Options struct {
	// Owner is the uid every request runs as.
	Owner int
	// Policy names the policy of the connection's session ("" = default).
	Policy string
	// Version is reported to the client.
	Version string
	// Logger receives transport problems (default slog.Default()).
	Logger *slog.Logger
}

// Conn is one MCP connection's state: its session, created on first use.
// Every tool goes through the Dispatcher, like any other transport.
type Conn struct {
	d    api.Handler
	opts Options

	mu      sync.Mutex
	session string
}

// Serve speaks the Model Context Protocol on t for one client, until it
// goes or ctx ends; then the connection's session is closed.
func Serve(ctx context.Context, d api.Handler, t mcp.Transport, opts Options) error {
	s, c := NewServer(d, opts, nil)
	defer c.CloseSession()
	return s.Run(ctx, t)
}

// NewServer builds the server for one connection, on sopts when not nil
// (the HTTP door's /mcp sets the session ids). The caller must call the
// Conn's CloseSession when the client is gone (Serve does); the
// connection's session is also closed when the MCP session ends.
func NewServer(d api.Handler, opts Options, sopts *mcp.ServerOptions) (*mcp.Server, *Conn) {
	if dd, ok := d.(*api.Dispatcher); ok && opts.Version == "" {
		opts.Version = dd.Version
	}
	c := &Conn{d: d, opts: opts}
	so := mcp.ServerOptions{}
	if sopts != nil {
		so = *sopts
	}
	so.Instructions = "Run Python in an isolated sandbox with no network. Variables, imports and files persist " +
		"across run_python calls in this connection's session until reset_session. Files live in /work."
	so.InitializedHandler = func(_ context.Context, req *mcp.InitializedRequest) {
		// The MCP session's end (EOF, DELETE, idle timeout, shutdown)
		// closes the jailcell session it used.
		go func() {
			_ = req.Session.Wait()
			c.CloseSession()
		}()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "jailcell", Version: opts.Version}, &so)
	// No tool reaches beyond the sandbox: it has no network.
	closed := new(bool)
	yes := func() *bool { b := true; return &b }
	ann := func(readOnly, destructive, idempotent bool) *mcp.ToolAnnotations {
		a := &mcp.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: closed}
		if !readOnly {
			a.DestructiveHint = closed
			if destructive {
				a.DestructiveHint = yes()
			}
		}
		return a
	}
	mcp.AddTool(s, &mcp.Tool{Name: "run_python", Annotations: ann(false, false, false),
		Description: "Run Python code in the session (created on first use; variables persist across calls). " +
			"Returns stdout, stderr, the value of the last expression, and plots as PNG images. " +
			"Cells that run over a second report progress (elapsed time and output) when the call carries a progress token."}, c.runPython)
	mcp.AddTool(s, &mcp.Tool{Name: "upload_file", Annotations: ann(false, true, true),
		Description: "Write a file into the session's working directory (replacing one of the same name)."}, c.upload)
	mcp.AddTool(s, &mcp.Tool{Name: "download_file", Annotations: ann(true, false, true),
		Description: "Read a file from the session's working directory (at most 8 MiB)."}, c.download)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Annotations: ann(true, false, true),
		Description: "List the files in the session's working directory."}, c.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "reset_session", Annotations: ann(false, true, true),
		Description: "Close the session: variables and files are gone; the next call starts a fresh one."}, c.reset)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_session", Annotations: ann(false, true, false),
		Description: "Save the session's whole state (variables, imports, open files, working directory) " +
			"as the point rollback_session returns to; replaces an earlier snapshot. Take one before code that may break the session."}, c.snapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "rollback_session", Annotations: ann(false, true, true),
		Description: "Return the session to its last snapshot: variables, imports and files exactly as they were then. " +
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

// Typed tool outputs: each tool's structuredContent, beside its text (and
// image) content; the SDK derives the output schemas from these.

type runPythonOut struct {
	Session    string        `json:"session" jsonschema:"the jailcell session the cell ran in (empty when it could not run)"`
	Status     string        `json:"status" jsonschema:"how the cell ended: ok, error, timeout, oom or killed (empty when it could not run)"`
	Stdout     string        `json:"stdout" jsonschema:"what the cell printed"`
	Stderr     string        `json:"stderr" jsonschema:"what the cell wrote to stderr"`
	Value      string        `json:"value,omitempty" jsonschema:"the text of the last expression's value, as a notebook shows it"`
	Error      *cellErrorOut `json:"error,omitempty" jsonschema:"the exception the cell raised"`
	Images     int           `json:"images" jsonschema:"how many PNG images follow the text content"`
	NewSession bool          `json:"new_session,omitempty" jsonschema:"the previous session had ended: this ran in a new one, earlier variables are gone"`
	Mode       string        `json:"mode,omitempty" jsonschema:"degraded when the cell ran in a stateless fallback"`
}

type cellErrorOut struct {
	Type    string `json:"type" jsonschema:"the exception's class"`
	Message string `json:"message" jsonschema:"the exception's message"`
}

type fileOut struct {
	Path   string `json:"path" jsonschema:"the file's path relative to the working directory"`
	Size   int64  `json:"size" jsonschema:"its size in bytes"`
	SHA256 string `json:"sha256,omitempty" jsonschema:"its SHA-256, hex (downloads)"`
}

type filesOut struct {
	Files []fileEntryOut `json:"files" jsonschema:"the working directory's entries"`
}

type fileEntryOut struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Dir  bool   `json:"dir,omitempty"`
}

type sessionOut struct {
	Session string `json:"session" jsonschema:"the jailcell session (empty when there is none)"`
	State   string `json:"state,omitempty" jsonschema:"the session's state after the call"`
}

func (c *Conn) handle(ctx context.Context, req *api.Request) *api.Response {
	return c.handleStream(ctx, req, nil)
}

func (c *Conn) handleStream(ctx context.Context, req *api.Request, emit func(api.Event)) *api.Response {
	req.ID = json.RawMessage(`"mcp"`)
	req.Stream = emit != nil
	return c.d.Handle(ctx, c.opts.Owner, req, emit)
}

// ensureSession returns the connection's session, creating it if needed.
func (c *Conn) ensureSession(ctx context.Context) (string, *api.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != "" {
		return c.session, nil
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpCreate, Policy: c.opts.Policy})
	if resp.Error != nil {
		return "", resp.Error
	}
	c.session = resp.Info.ID
	return c.session, nil
}

// forget drops id if it is still the connection's session.
func (c *Conn) forget(id string) {
	c.mu.Lock()
	if c.session == id {
		c.session = ""
	}
	c.mu.Unlock()
}

func (c *Conn) CloseSession() {
	c.mu.Lock()
	id := c.session
	c.session = ""
	c.mu.Unlock()
	if id != "" {
		c.handle(context.Background(), &api.Request{Op: api.OpClose, Session: id})
	}
}

func toolError(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

func errorResult(e *api.Error, fb any) *mcp.CallToolResult {
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

// progressEvery is how often a running cell reports progress, and so the
// shortest cell that reports any.
const progressEvery = time.Second

// maxProgressText bounds the output carried by one progress notification;
// the whole output is in the tool's result.
const maxProgressText = 8 << 10

// progress sends notifications/progress for one running cell: every
// progressEvery its elapsed seconds (the progress value, which only grows)
// and the stdout printed since the last one.
type progress struct {
	ss    *mcp.ServerSession
	token any
	start time.Time

	mu      sync.Mutex
	pending strings.Builder
	dropped int

	stopOnce sync.Once
	done     chan struct{}
	exited   chan struct{}
}

func startProgress(ctx context.Context, ss *mcp.ServerSession, token any) *progress {
	p := &progress{ss: ss, token: token, start: time.Now(), done: make(chan struct{}), exited: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *progress) run(ctx context.Context) {
	defer close(p.exited)
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-t.C:
		case <-p.done:
			return
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		msg := fmt.Sprintf("running for %s", time.Since(p.start).Round(time.Second))
		if p.pending.Len() > 0 {
			msg += "\n" + p.pending.String()
		}
		if p.dropped > 0 {
			msg += fmt.Sprintf("\n(%d more bytes of output, in the result)", p.dropped)
		}
		p.pending.Reset()
		p.dropped = 0
		p.mu.Unlock()
		// A client gone or slow loses a notification, never the cell.
		_ = p.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: float64(n), Message: msg})
	}
}

// output collects a streamed chunk for the next notification.
func (p *progress) output(ev api.Event) {
	if ev.Event != "stdout" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	room := maxProgressText - p.pending.Len()
	t := ev.Text
	if len(t) > room {
		p.dropped += len(t) - room
		t = t[:room]
	}
	p.pending.WriteString(t)
}

func (p *progress) stop() {
	p.stopOnce.Do(func() { close(p.done) })
	<-p.exited
}

func (c *Conn) runPython(ctx context.Context, req *mcp.CallToolRequest, in runPythonIn) (*mcp.CallToolResult, runPythonOut, error) {
	var emit func(api.Event)
	if req != nil && req.Session != nil && req.Params != nil {
		if tok := req.Params.GetProgressToken(); tok != nil {
			p := startProgress(ctx, req.Session, tok)
			defer p.stop()
			emit = p.output
		}
	}
	var note string
	for try := 0; ; try++ {
		id, e := c.ensureSession(ctx)
		if e != nil {
			return errorResult(e, nil), runPythonOut{}, nil
		}
		resp := c.handleStream(ctx, &api.Request{Op: api.OpExec, Session: id, Code: in.Code, TimeoutS: in.TimeoutS}, emit)
		if resp.Error != nil && (resp.Error.Code == api.CodeNotFound || resp.Error.Code == api.CodeExpired) && try == 0 {
			// The session ended (its idle TTL or its max lifetime): start
			// a new one, and say so.
			c.forget(id)
			note = "note: the previous session had ended (" + resp.Error.Message + "); this ran in a new session, earlier variables and files are gone\n"
			continue
		}
		if resp.Error != nil {
			var fb any
			if resp.Fallback != nil {
				fb = resp.Fallback
			}
			return errorResult(resp.Error, fb), runPythonOut{Session: id}, nil
		}
		res, out := cellResult(resp, note)
		out.Session = id
		return res, out, nil
	}
}

// cellResult turns an exec response into MCP content: text for output and
// errors, image content for PNG plots; and the structured output.
func cellResult(resp *api.Response, note string) (*mcp.CallToolResult, runPythonOut) {
	res := resp.Result
	so := runPythonOut{Status: res.Status, Stdout: res.Stdout, Stderr: res.Stderr, NewSession: note != "", Mode: resp.Mode}
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
		so.Value = v
	}
	if res.Error != nil {
		so.Error = &cellErrorOut{Type: res.Error.Type, Message: res.Error.Message}
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
		case d.Pager:
			// Help and profiles a magic sent to IPython's pager: marked
			// as stderr is, so that it is not read as the program's output.
			fmt.Fprintf(&b, "[pager]\n%s\n", d.Data)
		case strings.HasPrefix(d.MIME, "image/png"):
			data, err := base64.StdEncoding.DecodeString(d.Data)
			if err != nil {
				continue
			}
			out.Content = append(out.Content, &mcp.ImageContent{MIMEType: "image/png", Data: data})
			so.Images++
		case strings.HasPrefix(d.MIME, "text/plain"):
			fmt.Fprintf(&b, "%s\n", d.Data)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}
	out.Content = append([]mcp.Content{&mcp.TextContent{Text: b.String()}}, out.Content...)
	return out, so
}

func (c *Conn) upload(ctx context.Context, _ *mcp.CallToolRequest, in uploadIn) (*mcp.CallToolResult, fileOut, error) {
	data := []byte(in.Content)
	if in.Base64 {
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return toolError("content is not valid base64: %v", err), fileOut{}, nil
		}
	}
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), fileOut{}, nil
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpUpload, Session: id, Path: in.Path, Data: data})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), fileOut{}, nil
	}
	return text(fmt.Sprintf("wrote %s (%d bytes)", resp.Path, *resp.Size)), fileOut{Path: resp.Path, Size: *resp.Size}, nil
}

// maxToolDownload bounds what download_file hands a model: the file's
// bytes are held in the daemon and grow up to six times as JSON text
// (a 256 MiB file was about 1.5 GiB per call, weighed nowhere). A larger
// file is refused by its size before it is read, and refused again if it
// grew past the bound in between.
const maxToolDownload = 8 << 20

func (c *Conn) download(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, fileOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), fileOut{}, nil
	}
	tooLarge := func(n int64) (*mcp.CallToolResult, fileOut, error) {
		return toolError("%s is %d bytes: download_file returns at most %d (8 MiB); read it in parts with run_python, or take it over jailcell's HTTP API", in.Path, n, maxToolDownload), fileOut{}, nil
	}
	if st := c.handle(ctx, &api.Request{Op: api.OpStat, Session: id, Path: in.Path}); st.Error == nil && st.Entry != nil && st.Entry.Size > maxToolDownload {
		return tooLarge(st.Entry.Size)
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpDownload, Session: id, Path: in.Path})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), fileOut{}, nil
	}
	if len(resp.Data) > maxToolDownload {
		return tooLarge(int64(len(resp.Data)))
	}
	out := fileOut{Path: resp.Path, Size: int64(len(resp.Data)), SHA256: resp.SHA256}
	switch {
	case strings.HasSuffix(strings.ToLower(resp.Path), ".png"):
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: resp.Data}}}, out, nil
	case utf8.Valid(resp.Data):
		return text(string(resp.Data)), out, nil
	}
	return text("base64:" + base64.StdEncoding.EncodeToString(resp.Data)), out, nil
}

func (c *Conn) listFiles(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, filesOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), filesOut{Files: []fileEntryOut{}}, nil
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpFiles, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), filesOut{Files: []fileEntryOut{}}, nil
	}
	out := filesOut{Files: []fileEntryOut{}}
	var b strings.Builder
	for _, f := range resp.Files {
		out.Files = append(out.Files, fileEntryOut{Path: f.Path, Size: f.Size, Dir: f.Dir})
		if f.Dir {
			fmt.Fprintf(&b, "%s/\n", f.Path)
		} else {
			fmt.Fprintf(&b, "%s\t%d\n", f.Path, f.Size)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no files)")
	}
	return text(b.String()), out, nil
}

func (c *Conn) snapshot(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), sessionOut{}, nil
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpSnapshot, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), sessionOut{Session: id}, nil
	}
	return text("snapshot saved; rollback_session returns here"), sessionOut{Session: id, State: stateOf(resp)}, nil
}

func stateOf(resp *api.Response) string {
	if resp.Info != nil {
		return resp.Info.State
	}
	return ""
}

func (c *Conn) rollback(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id == "" {
		return toolError("not_found: no session yet, so no snapshot to roll back to"), sessionOut{}, nil
	}
	resp := c.handle(ctx, &api.Request{Op: api.OpRollback, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), sessionOut{Session: id}, nil
	}
	out := sessionOut{Session: id, State: stateOf(resp)}
	if resp.Info != nil && resp.Info.State == "lost" {
		return toolError("rolled back the files, but the variables could not be restored: %s", resp.Info.StateReason), out, nil
	}
	return text("rolled back to the snapshot: variables, imports and files are as they were then"), out, nil
}

func (c *Conn) reset(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	c.CloseSession()
	return text("session closed; the next call starts a fresh one"), sessionOut{}, nil
}
