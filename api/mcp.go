package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
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
	d    Handler
	opts MCPOptions

	mu      sync.Mutex
	session string
}

// ServeMCP speaks the Model Context Protocol on t for one client, until it
// goes or ctx ends; then the connection's session is closed.
func ServeMCP(ctx context.Context, d Handler, t mcp.Transport, opts MCPOptions) error {
	s, c := NewMCPServer(d, opts)
	defer c.closeSession()
	return s.Run(ctx, t)
}

// NewMCPServer builds the server for one connection. The caller must call
// the returned closer when the client is gone (ServeMCP does); the
// connection's session is also closed when the MCP session ends.
func NewMCPServer(d Handler, opts MCPOptions) (*mcp.Server, interface{ closeSession() }) {
	return newMCPServer(d, opts, nil)
}

func newMCPServer(d Handler, opts MCPOptions, sopts *mcp.ServerOptions) (*mcp.Server, *mcpConn) {
	if dd, ok := d.(*Dispatcher); ok && opts.Version == "" {
		opts.Version = dd.Version
	}
	c := &mcpConn{d: d, opts: opts}
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
			c.closeSession()
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
		Description: "Read a file from the session's working directory."}, c.download)
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

func (c *mcpConn) handle(ctx context.Context, req *Request) *Response {
	return c.handleStream(ctx, req, nil)
}

func (c *mcpConn) handleStream(ctx context.Context, req *Request, emit func(Event)) *Response {
	req.ID = json.RawMessage(`"mcp"`)
	req.Stream = emit != nil
	return c.d.Handle(ctx, c.opts.Owner, req, emit)
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
func (p *progress) output(ev Event) {
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

func (c *mcpConn) runPython(ctx context.Context, req *mcp.CallToolRequest, in runPythonIn) (*mcp.CallToolResult, runPythonOut, error) {
	var emit func(Event)
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
		resp := c.handleStream(ctx, &Request{Op: OpExec, Session: id, Code: in.Code, TimeoutS: in.TimeoutS}, emit)
		if resp.Error != nil && (resp.Error.Code == CodeNotFound || resp.Error.Code == CodeExpired) && try == 0 {
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
func cellResult(resp *Response, note string) (*mcp.CallToolResult, runPythonOut) {
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

func (c *mcpConn) upload(ctx context.Context, _ *mcp.CallToolRequest, in uploadIn) (*mcp.CallToolResult, fileOut, error) {
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
	resp := c.handle(ctx, &Request{Op: OpUpload, Session: id, Path: in.Path, Data: data})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), fileOut{}, nil
	}
	return text(fmt.Sprintf("wrote %s (%d bytes)", resp.Path, *resp.Size)), fileOut{Path: resp.Path, Size: *resp.Size}, nil
}

func (c *mcpConn) download(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, fileOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), fileOut{}, nil
	}
	resp := c.handle(ctx, &Request{Op: OpDownload, Session: id, Path: in.Path})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), fileOut{}, nil
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

func (c *mcpConn) listFiles(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, filesOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), filesOut{Files: []fileEntryOut{}}, nil
	}
	resp := c.handle(ctx, &Request{Op: OpFiles, Session: id})
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

func (c *mcpConn) snapshot(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	id, e := c.ensureSession(ctx)
	if e != nil {
		return errorResult(e, nil), sessionOut{}, nil
	}
	resp := c.handle(ctx, &Request{Op: OpSnapshot, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), sessionOut{Session: id}, nil
	}
	return text("snapshot saved; rollback_session returns here"), sessionOut{Session: id, State: stateOf(resp)}, nil
}

func stateOf(resp *Response) string {
	if resp.Info != nil {
		return resp.Info.State
	}
	return ""
}

func (c *mcpConn) rollback(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id == "" {
		return toolError("not_found: no session yet, so no snapshot to roll back to"), sessionOut{}, nil
	}
	resp := c.handle(ctx, &Request{Op: OpRollback, Session: id})
	if resp.Error != nil {
		return errorResult(resp.Error, nil), sessionOut{Session: id}, nil
	}
	out := sessionOut{Session: id, State: stateOf(resp)}
	if resp.Info != nil && resp.Info.State == "lost" {
		return toolError("rolled back the files, but the variables could not be restored: %s", resp.Info.StateReason), out, nil
	}
	return text("rolled back to the snapshot: variables, imports and files are as they were then"), out, nil
}

func (c *mcpConn) reset(ctx context.Context, _ *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, sessionOut, error) {
	c.closeSession()
	return text("session closed; the next call starts a fresh one"), sessionOut{}, nil
}

// mcpMount is MCP over Streamable HTTP at /mcp on the service socket. Each
// MCP session is one connection's worth of state: one jailcell session,
// owned by the uid of the peer that initialized it.
type mcpMount struct {
	once sync.Once
	h    http.Handler
	// quit ends the long-lived GET streams when the server shuts down, so
	// a drain waits for running cells, not for idle listeners.
	quit context.Context
	live mcpLive
}

// mcpLive counts the live MCP sessions, per owner and in all. Before it:
// 3,000 initialize requests from one uid were all accepted and each held
// for an hour (+591 MiB in the daemon); now an owner's sessions and all
// sessions are capped, and an idle one ends (HTTPOptions.MCP*).
type mcpLive struct {
	mu     sync.Mutex
	owners map[uint32]int
	total  int
}

func (l *mcpLive) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// reserve takes a place for one new MCP session of uid, or says which cap
// refuses it.
func (s *HTTPServer) mcpReserve(uid uint32) (*mcpReservation, *Error) {
	l := &s.mcp.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owners == nil {
		l.owners = map[uint32]int{}
	}
	idle := s.opts.MCPIdleTimeout
	if n, max := l.owners[uid], s.opts.MCPMaxSessionsPerOwner; n >= max {
		return nil, &Error{Code: CodeLimit, Message: fmt.Sprintf("owner %d has %d live MCP sessions, at most %d (mcp.max_sessions_per_owner): "+
			"end one (DELETE /mcp with its Mcp-Session-Id header) or wait until one has been idle for %s (mcp.idle_timeout)", uid, n, max, idle)}
	}
	if max := s.opts.MCPMaxSessions; l.total >= max {
		return nil, &Error{Code: CodeLimit, Message: fmt.Sprintf("this node has %d live MCP sessions, at most %d (mcp.max_sessions); "+
			"try again when one ends (after %s idle, mcp.idle_timeout)", l.total, max, idle)}
	}
	l.owners[uid]++
	l.total++
	return &mcpReservation{l: l, uid: uid}, nil
}

// mcpReservation is the place of one MCP session, from the initialize
// that asks for it until the session ends (or at once when the request
// creates none).
type mcpReservation struct {
	l   *mcpLive
	uid uint32

	mu   sync.Mutex
	id   string // the session id the SDK asked for
	srv  *mcp.Server
	conn *mcpConn
	once sync.Once
}

func (r *mcpReservation) bind(id string, srv *mcp.Server, c *mcpConn) {
	r.mu.Lock()
	r.id, r.srv, r.conn = id, srv, c
	r.mu.Unlock()
}

// mcpMethod is the method of a JSON-RPC request body, or "" when the body
// is not one (the SDK then answers the parse error).
func mcpMethod(body []byte) string {
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	return m.Method
}

func (r *mcpReservation) release() {
	if r.l == nil {
		return // a request that held no place
	}
	r.once.Do(func() {
		r.l.mu.Lock()
		r.l.total--
		if r.l.owners[r.uid]--; r.l.owners[r.uid] <= 0 {
			delete(r.l.owners, r.uid)
		}
		r.l.mu.Unlock()
	})
}

// settle runs after a POST without a session was answered: the place stays
// with the session it created until that session ends (a DELETE, the idle
// timeout, shutdown), which also closes its jailcell session; a request
// that created no session gives it back now.
func (r *mcpReservation) settle() {
	r.mu.Lock()
	id, srv, c := r.id, r.srv, r.conn
	r.mu.Unlock()
	if srv != nil && id != "" {
		for ss := range srv.Sessions() {
			if ss.ID() == id {
				go func() {
					_ = ss.Wait()
					c.closeSession()
					r.release()
				}()
				return
			}
		}
	}
	if c != nil {
		c.closeSession()
	}
	r.release()
}

type mcpReservationKey struct{}

// stallWriter bounds each write of an MCP response by the stream grace:
// the SDK writes a tool's progress and result from the goroutines that
// make them, so a client that stops reading would otherwise hold them,
// and the request's place, until it reads again.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	grace time.Duration
}

func (w *stallWriter) Write(b []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.grace))
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush, which the SDK uses,
// calls first.
func (w *stallWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.grace))
	return w.rc.Flush()
}

func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpSessionPrefix starts every MCP session id the service hands to uid: a
// request naming a session of another uid is refused before the SDK sees
// it, so knowing an id is not enough to use someone else's sandbox.
func mcpSessionPrefix(uid uint32) string { return "u" + strconv.FormatUint(uint64(uid), 10) + "-" }

// mcpPath is where the service speaks MCP over Streamable HTTP, with the
// methods that transport uses (api/openapi.json lists them).
const mcpPath = "/mcp"

var mcpMethods = []string{http.MethodPost, http.MethodGet, http.MethodDelete}

// serveMCP answers /mcp for an admitted peer.
func (s *HTTPServer) serveMCP(w http.ResponseWriter, r *http.Request, peer Peer) {
	m := &s.mcp
	m.once.Do(func() {
		var stop context.CancelFunc
		m.quit, stop = context.WithCancel(context.Background())
		s.srv.RegisterOnShutdown(stop)
		m.h = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
			p, err := PeerFromContext(r.Context())
			if err != nil {
				return nil // answered 400; ServeHTTP admitted nobody without credentials anyway
			}
			res, _ := r.Context().Value(mcpReservationKey{}).(*mcpReservation)
			var srv *mcp.Server
			var c *mcpConn
			srv, c = newMCPServer(s.d, MCPOptions{Owner: int(p.UID), Logger: s.log}, &mcp.ServerOptions{
				// Asked once, of the server a new session connects to.
				// A request that holds no place (anything but initialize)
				// gets "": the SDK then closes its session with the
				// request, and settle closes its jailcell session.
				GetSessionID: func() string {
					id := ""
					if res != nil && res.l != nil {
						id = mcpSessionPrefix(p.UID) + rand.Text()
					}
					if res != nil {
						res.bind(id, srv, c)
					}
					return id
				},
			})
			return srv
		}, &mcp.StreamableHTTPOptions{
			SessionTimeout:      s.opts.MCPIdleTimeout,
			MaxRequestBodyBytes: s.opts.MaxBodyBytes,
			Logger:              s.log,
		})
	})
	if !contains(mcpMethods, r.Method) {
		w.Header().Set("Allow", strings.Join(mcpMethods, ", "))
		w.WriteHeader(http.StatusMethodNotAllowed)
		s.writeBody(w, fail(nullID, badRequest("method %s is not allowed on %s; allowed: %s", r.Method, mcpPath, strings.Join(mcpMethods, ", "))))
		return
	}
	id := r.Header.Get("Mcp-Session-Id")
	if id != "" && !strings.HasPrefix(id, mcpSessionPrefix(peer.UID)) {
		s.writeError(w, &Error{Code: CodeForbidden, Message: fmt.Sprintf("MCP session %q is not one of uid %d's", clip(id, 80), peer.UID)})
		return
	}
	if r.Method == http.MethodPost {
		// Before the fix MCP bodies were admitted with weight 0 and no deadline,
		// so slow large ones were all read while REST bodies waited at the
		// budget. A body here is read as a REST body is: its size in the
		// in-flight budget, at most MaxBodyBytes, within BodyTimeout; the
		// place is held until the call is answered.
		body, pl, ok := s.readBody(w, r, int(peer.UID), s.opts.MaxBodyBytes)
		if !ok {
			return
		}
		defer pl.release()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		if id == "" {
			// A POST without a session: an initialize takes a place and
			// creates a session that lives on; anything else (a newer
			// client's server/discover probe first of all) is answered
			// by a session that ends with the request. The SDK creates a
			// session for every such POST, and a probe's was never
			// addressed again, so each client connection used to hold a
			// second place for mcp.idle_timeout (found when a client's
			// initialize was refused at mcp.max_sessions).
			res := &mcpReservation{uid: peer.UID}
			if mcpMethod(body) == "initialize" {
				var e *Error
				if res, e = s.mcpReserve(peer.UID); e != nil {
					s.writeError(w, e)
					return
				}
			}
			defer res.settle()
			r = r.WithContext(context.WithValue(r.Context(), mcpReservationKey{}, res))
		}
	}
	if r.Method == http.MethodGet {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(m.quit, cancel)()
		r = r.WithContext(ctx)
	}
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), grace: s.opts.StreamGrace}
	defer func() { _ = sw.rc.SetWriteDeadline(time.Time{}) }()
	m.h.ServeHTTP(sw, r)
}
