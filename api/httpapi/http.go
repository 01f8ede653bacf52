package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/ndjson"
	"github.com/jailcell/jailcell/session/seam"
)

// CodeForbidden is the HTTP transport's one code of its own: the caller's
// uid and groups are not on the service's allow list. (JSON-lines runs as
// its parent's uid and has no such check.)
const CodeForbidden = "forbidden"

// HTTPOptions tune the HTTP transport. Zero fields take the documented
// defaults.
type HTTPOptions struct {
	// Access lists who may call besides root; see SetAccess to change it
	// on a running server. Default: root only.
	Access Access
	// MaxBodyBytes bounds a JSON request body; a longer one is answered
	// 413 with code "limit". Default 32 MiB, the JSON-lines line limit.
	MaxBodyBytes int64
	// MaxUploadBytes bounds a raw file upload (PUT); a longer one is
	// answered 413. Default and ceiling seam.MaxFileBytes.
	MaxUploadBytes int64
	// MaxHeaderBytes bounds the request line and headers. Default 16 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout is how long a client has to send its headers.
	// Default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout is how long a client has to send a request body, and to
	// take a response that is not streamed (it holds a place in the
	// in-flight budget until then). Default 5 min.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for
	// this long. Default 2 min.
	IdleTimeout time.Duration
	// MaxInFlight bounds the requests handled at once, /metrics aside;
	// more wait for a place. Default 256.
	MaxInFlight int
	// MaxInFlightBytes bounds the summed declared size of the bodies of
	// the requests handled at once and of their responses until written
	// (one request always fits). Default 256 MiB.
	MaxInFlightBytes int64
	// MaxInFlightPerOwner and MaxInFlightBytesPerOwner bound one owner's
	// share of those (one request of an owner holding nothing always
	// fits). Default a quarter of each.
	MaxInFlightPerOwner      int
	MaxInFlightBytesPerOwner int64
	// Logger receives transport problems and, at debug level, one line
	// per request. Default slog.Default().
	Logger *slog.Logger
	// Remote authenticates requests on connections that are not Unix
	// sockets (a TCP listener); nil refuses every such request.
	Remote *RemoteAuth
	// Node is this daemon's node name, sent to admitted callers as the
	// X-Jailcell-Node header (which node of a fleet answered). "" sends
	// none.
	Node string
	// Ready reports whether the daemon can take work (nil when it can);
	// /readyz answers 503 while it cannot, and while draining. Default:
	// always ready.
	Ready func() error
	// StreamGrace is how long a streamed response (an exec answered as
	// JSON lines, an MCP event stream) may wait for its client to read:
	// a streamed exec is cut this long after its cell ends, and every
	// write to /mcp must complete within it. The cell never waits for the
	// client. Default 30 s.
	StreamGrace time.Duration
	// MCPMaxSessionsPerOwner caps the live MCP sessions at /mcp of one
	// owner (each may hold one jailcell session); one more initialize is
	// answered 429 with code "limit". Default 16.
	MCPMaxSessionsPerOwner int
	// MCPMaxSessions caps the live MCP sessions at /mcp of all owners
	// together. Default 256.
	MCPMaxSessions int
	// MCPIdleTimeout ends an MCP session with no request for this long,
	// with the jailcell session it used. Default 30 min.
	MCPIdleTimeout time.Duration
}

const (
	defaultMaxBodyBytes      = api.DefaultMaxLineBytes
	defaultMaxHeaderBytes    = 16 << 10
	defaultReadHeaderTimeout = 10 * time.Second
	defaultBodyTimeout       = 5 * time.Minute
	defaultIdleTimeout       = 2 * time.Minute
	// DefaultMCPMaxSessionsPerOwner, DefaultMCPMaxSessions and
	// DefaultMCPIdleTimeout are the MCP session bounds when HTTPOptions
	// leaves them zero (the config keys' defaults too).
	DefaultMCPMaxSessionsPerOwner = 16
	DefaultMCPMaxSessions         = 256
	DefaultMCPIdleTimeout         = 30 * time.Minute
	// DefaultStreamGrace is HTTPOptions.StreamGrace's default.
	DefaultStreamGrace = 30 * time.Second
	// DefaultBodyTimeout is HTTPOptions.BodyTimeout's default (the
	// http.body_timeout key's too).
	DefaultBodyTimeout = defaultBodyTimeout
)

// HTTPServer is the HTTP/1.1 transport: it maps routes to wire requests,
// runs them through the same Dispatcher as JSON-lines, and maps responses
// back. Every connection must be a Unix socket: the caller is whoever the
// kernel says is at the other end, and a session belongs to that uid.
type HTTPServer struct {
	d       *api.Dispatcher
	opts    HTTPOptions
	log     *slog.Logger
	access  atomic.Pointer[Access]
	metrics *serviceMetrics
	lim     *api.Budget
	// draining: readyz answers 503 and creates are refused (SetDraining).
	draining atomic.Bool
	seq      atomic.Int64
	srv      *http.Server
	mcp      mcpMount // /mcp, built on first use (mcp.go)
}

// NewHTTPServer makes the transport over d.
func NewHTTPServer(d *api.Dispatcher, opts HTTPOptions) *HTTPServer {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.MaxUploadBytes <= 0 || opts.MaxUploadBytes > seam.MaxFileBytes {
		opts.MaxUploadBytes = seam.MaxFileBytes
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = defaultBodyTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.StreamGrace <= 0 {
		opts.StreamGrace = DefaultStreamGrace
	}
	if opts.MCPMaxSessionsPerOwner <= 0 {
		opts.MCPMaxSessionsPerOwner = DefaultMCPMaxSessionsPerOwner
	}
	if opts.MCPMaxSessions <= 0 {
		opts.MCPMaxSessions = DefaultMCPMaxSessions
	}
	if opts.MCPIdleTimeout <= 0 {
		opts.MCPIdleTimeout = DefaultMCPIdleTimeout
	}
	lim, log := api.NewBudget(opts.MaxInFlight, opts.MaxInFlightBytes, opts.Logger)
	if opts.MaxInFlightPerOwner <= 0 {
		opts.MaxInFlightPerOwner = max(1, lim.MaxCount()/4)
	}
	if opts.MaxInFlightBytesPerOwner <= 0 {
		opts.MaxInFlightBytesPerOwner = lim.MaxWeight() / 4
	}
	lim.Share(opts.MaxInFlightPerOwner, opts.MaxInFlightBytesPerOwner)
	s := &HTTPServer{d: d, opts: opts, log: log, metrics: newServiceMetrics(d), lim: lim}
	s.SetAccess(opts.Access)
	s.metrics.gauge("jailcell_mcp_sessions", "MCP sessions live at /mcp, of all owners (capped by mcp.max_sessions).",
		func() float64 { return float64(s.mcp.live.count()) })
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		// No ReadTimeout or WriteTimeout: a streamed cell may run for
		// minutes. Bodies get their own deadline in readBody.
		ConnContext: connContext,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s
}

// SetAccess replaces the allow list; requests already admitted go on.
func (s *HTTPServer) SetAccess(a Access) {
	a.UIDs = append([]uint32(nil), a.UIDs...)
	a.GIDs = append([]uint32(nil), a.GIDs...)
	s.access.Store(&a)
}

// SetDraining turns the node's drain on: /readyz answers 503, so a
// proxy in front sends new work elsewhere, and creates and forks are
// refused with unavailable; the sessions it holds still answer.
func (s *HTTPServer) SetDraining() { s.draining.Store(true) }

// Serve answers connections on l until Shutdown or Close; it returns nil
// then. On a listener that is not a Unix socket every request must
// authenticate (HTTPOptions.Remote).
func (s *HTTPServer) Serve(l net.Listener) error {
	if err := s.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, then waits until every request being handled
// (a running cell included) has been answered, or ctx is done.
func (s *HTTPServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes every listener and connection at once.
func (s *HTTPServer) Close() error { return s.srv.Close() }

type route struct {
	name    string
	session string
	path    string // routeFile only
	op      string // routeLife and routeAssist only
}

// matchRoute maps an escaped URL path to a route.
func matchRoute(escaped string) (route, *api.Error) {
	if !strings.HasPrefix(escaped, "/") {
		return route{name: api.RouteUnknown}, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no route %q", escaped)}
	}
	raw := strings.Split(escaped[1:], "/")
	segs := make([]string, len(raw))
	for i, r := range raw {
		u, err := url.PathUnescape(r)
		if err != nil {
			return route{name: api.RouteUnknown}, api.BadRequest("URL path segment %d is not valid percent-encoding: %v", i+1, err)
		}
		segs[i] = u
	}
	n := len(segs)
	switch {
	case n == 1 && segs[0] == "healthz":
		return route{name: api.RouteHealthz}, nil
	case n == 1 && segs[0] == "readyz":
		return route{name: api.RouteReadyz}, nil
	case n == 1 && segs[0] == "metrics":
		return route{name: api.RouteMetrics}, nil
	case n >= 2 && segs[0] == "v1" && segs[1] == "exec" && n == 2:
		return route{name: api.RouteOneShot}, nil
	case n == 2 && segs[0] == "v1" && segs[1] == "openapi.json":
		return route{name: api.RouteOpenAPI}, nil
	case n >= 2 && segs[0] == "v1" && segs[1] == "sessions":
		if n == 2 {
			return route{name: api.RouteSessions}, nil
		}
		id := segs[2]
		if id == "" {
			break
		}
		switch {
		case n == 3:
			return route{name: api.RouteSession, session: id}, nil
		case n == 4 && segs[3] == "exec":
			return route{name: api.RouteExec, session: id}, nil
		case n == 4 && segs[3] == "files":
			return route{name: api.RouteFiles, session: id}, nil
		case n == 4 && segs[3] == "commands":
			return route{name: api.RouteCommand, session: id}, nil
		case n == 4 && segs[3] == "timeout":
			return route{name: api.RouteTimeout, session: id}, nil
		case n == 4 && segs[3] == "metrics":
			return route{name: api.RouteMetricsS, session: id}, nil
		case n == 4 && segs[3] == "watch":
			return route{name: api.RouteWatch, session: id}, nil
		case n == 4 && segs[3] == "rename":
			return route{name: api.RouteRename, session: id}, nil
		case n >= 5 && segs[3] == "stat":
			return route{name: api.RouteStat, session: id, path: strings.Join(segs[4:], "/")}, nil
		case n >= 5 && segs[3] == "dirs":
			return route{name: api.RouteDir, session: id, path: strings.Join(segs[4:], "/")}, nil
		case n == 4 && api.LifeOps[segs[3]] != "":
			return route{name: api.RouteLife, session: id, op: api.LifeOps[segs[3]]}, nil
		case n == 4 && api.AssistOps[segs[3]] != "":
			return route{name: api.RouteAssist, session: id, op: api.AssistOps[segs[3]]}, nil
		case n >= 5 && segs[3] == "files":
			return route{name: api.RouteFile, session: id, path: strings.Join(segs[4:], "/")}, nil
		}
	}
	return route{name: api.RouteUnknown}, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no route %s; routes: /healthz, /readyz, /metrics, /v1/sessions[/{id}[/exec|/files[/{path}]|/hibernate|/restore|/fork|/snapshot|/rollback|/interrupt|/complete|/inspect|/is_complete|/commands|/timeout|/metrics|/watch|/rename|/stat/{path}|/dirs/{path}]], /v1/exec, /v1/openapi.json", clip(escaped, 200))}
}

// statusWriter remembers the status code for the request log and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and the deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP admits the caller, routes, and answers.
func (s *HTTPServer) ServeHTTP(hw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w := &statusWriter{ResponseWriter: hw}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rt := route{name: api.RouteUnknown}
	r, peer, remote, perr := s.authenticate(r)
	defer func() {
		s.metrics.request(rt.name, w.status)
		s.log.Debug("http request", "method", r.Method, "route", rt.name, "status", w.status,
			"uid", peer.UID, "pid", peer.PID, "remote", remote, "duration_ms", time.Since(start).Milliseconds())
	}()
	// Readiness answers anyone, a proxy's health check included, and says
	// nothing beyond yes or no; so does liveness on TCP without
	// credentials. /healthz tells an admitted caller more; on the Unix
	// socket a caller not admitted still gets forbidden there, which is
	// how the front doors' probe (Remote.Reachable) learns it early.
	if p := r.URL.Path; p == "/readyz" || (p == "/healthz" && perr != nil && remote) {
		rt.name = strings.TrimPrefix(p, "/")
		s.health(w, r, p == "/readyz")
		return
	}
	switch {
	case perr != nil && remote:
		// RFC 6750: a request without valid credentials is 401 and says
		// which scheme to use.
		w.Header().Set("WWW-Authenticate", `Bearer realm="jailcell"`)
		s.respondStatus(w, http.StatusUnauthorized, api.Fail(api.NullID, &api.Error{Code: CodeForbidden, Message: perr.Error()}))
		return
	case perr != nil:
		if errors.Is(perr, errNoPeer) {
			s.log.Warn("refused a connection without peer credentials", "err", perr)
			perr = fmt.Errorf("the caller's credentials could not be read: %w", perr)
		}
		s.writeError(w, &api.Error{Code: CodeForbidden, Message: perr.Error()})
		return
	}
	if s.opts.Node != "" {
		w.Header().Set("X-Jailcell-Node", s.opts.Node)
	}
	if r.URL.Path == api.MCPPath {
		rt.name = "mcp"
		s.serveMCP(w, r, peer)
		return
	}
	rt, rerr := matchRoute(r.URL.EscapedPath())
	if rerr != nil {
		s.writeError(w, rerr)
		return
	}
	if methods := api.RouteMethods[rt.name]; !contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		w.WriteHeader(http.StatusMethodNotAllowed)
		s.writeBody(w, api.Fail(api.NullID, api.BadRequest("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(methods, ", "))))
		return
	}
	// A peer's uid is its owner id: root (0) sees every session.
	owner := int(peer.UID)
	// Each answer holds a place in the in-flight budget until written
	// (handle); the routes with a body take theirs in readBody.
	if s.draining.Load() && (rt.name == api.RouteSessions && r.Method == http.MethodPost || rt.name == api.RouteLife && rt.op == api.OpFork) {
		s.writeError(w, &api.Error{Code: api.CodeUnavailable, Message: "this node is draining: it takes no new sessions; create on another node"})
		return
	}
	switch rt.name {
	case api.RouteHealthz:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpPing}, owner)
	case api.RouteOpenAPI:
		w.Header().Set("Content-Type", "application/json")
		s.writeWithin(w, http.StatusOK, api.OpenAPI())
	case api.RouteMetrics:
		w.Header().Set("Content-Type", metricsContentType)
		if err := s.writeMetrics(w); err != nil {
			s.log.Debug("write metrics", "err", err)
		}
	case api.RouteSessions:
		if r.Method == http.MethodPost {
			s.jsonOp(w, r, api.OpCreate, "", owner)
			return
		}
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpSessions}, owner)
	case api.RouteSession:
		op := api.OpClose
		if r.Method == http.MethodGet {
			op = api.OpInfo
		}
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: op, Session: rt.session}, owner)
	case api.RouteExec:
		s.jsonOp(w, r, api.OpExec, rt.session, owner)
	case api.RouteOneShot:
		s.jsonOp(w, r, api.OpExec, "", owner)
	case api.RouteFiles:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpFiles, Session: rt.session}, owner)
	case api.RouteLife:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: rt.op, Session: rt.session}, owner)
	case api.RouteAssist:
		s.jsonOp(w, r, rt.op, rt.session, owner)
	case api.RouteCommand:
		s.jsonOp(w, r, api.OpCommand, rt.session, owner)
	case api.RouteTimeout:
		s.jsonOp(w, r, api.OpSetTimeout, rt.session, owner)
	case api.RouteWatch:
		s.jsonOp(w, r, api.OpWatch, rt.session, owner)
	case api.RouteRename:
		s.jsonOp(w, r, api.OpRename, rt.session, owner)
	case api.RouteMetricsS:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpMetrics, Session: rt.session}, owner)
	case api.RouteStat:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpStat, Session: rt.session, Path: rt.path}, owner)
	case api.RouteDir:
		s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpMkdir, Session: rt.session, Path: rt.path}, owner)
	case api.RouteFile:
		if r.Method == http.MethodPut {
			s.upload(w, r, rt, owner)
			return
		}
		if r.Method == http.MethodDelete {
			s.handle(w, r, &api.Request{ID: s.nextID(), Op: api.OpRemove, Session: rt.session, Path: rt.path}, owner)
			return
		}
		s.download(w, r, rt, owner)
	}
}

// health answers /healthz for a caller not admitted, and /readyz for
// anyone: {"ok":true} or 503 {"ok":false}, nothing else.
func (s *HTTPServer) health(w http.ResponseWriter, r *http.Request, ready bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	ok := true
	if ready {
		ok = !s.draining.Load() && (s.opts.Ready == nil || s.opts.Ready() == nil)
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		_, _ = fmt.Fprintf(w, "{\"ok\":%t}\n", ok)
	}
}

// admit takes a place without a body in owner's share of the in-flight
// budget. A refusal has been written when p is nil.
func (s *HTTPServer) admit(w http.ResponseWriter, r *http.Request, owner int) *api.Place {
	p, err := s.lim.TakeFor(r.Context(), owner, 0)
	if err != nil {
		s.writeError(w, &api.Error{Code: api.CodeUnavailable, Message: "request abandoned while waiting for a place: " + err.Error()})
		return nil
	}
	return p
}

// handle answers a request without a body.
func (s *HTTPServer) handle(w http.ResponseWriter, r *http.Request, req *api.Request, owner int) {
	p := s.admit(w, r, owner)
	if p == nil {
		return
	}
	defer p.Release()
	s.respondIn(w, p, s.d.Handle(r.Context(), owner, req, nil))
}

func (s *HTTPServer) nextID() json.RawMessage {
	return json.RawMessage(strconv.FormatInt(s.seq.Add(1), 10))
}

// readBody reads a body of at most max bytes within the body timeout, and
// takes its place in owner's share of the in-flight budget; the caller
// must release it. A refusal has been written when ok is false.
func (s *HTTPServer) readBody(w http.ResponseWriter, r *http.Request, owner int, max int64) (body []byte, pl *api.Place, ok bool) {
	if r.ContentLength > max {
		s.respondStatus(w, http.StatusRequestEntityTooLarge, api.Fail(api.NullID, tooLarge(r.ContentLength, max)))
		return nil, nil, false
	}
	weight := r.ContentLength
	if weight < 0 { // chunked: reserve the most it may be
		weight = max
	}
	// Taken at most at the owner's share, and grown by what is read past
	// it: a body declared near the upload bound (the node's whole byte
	// budget by default) was admitted alone at its full weight, and one
	// that never came held every other owner's bodies waiting until the
	// body timeout.
	if sw := s.lim.ShareWeight(); sw > 0 && weight > sw {
		weight = sw
	}
	var err error
	if pl, err = s.lim.TakeFor(r.Context(), owner, weight); err != nil {
		s.writeError(w, &api.Error{Code: api.CodeUnavailable, Message: "request abandoned while waiting for a place: " + err.Error()})
		return nil, nil, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	body, err = io.ReadAll(pl.Reader(http.MaxBytesReader(w, r.Body, max), weight))
	// The deadline is for the body only: a long cell must not trip it.
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		pl.Release()
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.respondStatus(w, http.StatusRequestEntityTooLarge, api.Fail(api.NullID, tooLarge(-1, max)))
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			w.Header().Set("Connection", "close")
			s.writeError(w, api.BadRequest("request body not received within %s", s.opts.BodyTimeout))
		default:
			s.writeError(w, api.BadRequest("read request body: %v", err))
		}
		return nil, nil, false
	}
	return body, pl, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func tooLarge(n, max int64) *api.Error {
	e := &api.Error{Code: api.CodeLimit, Message: fmt.Sprintf("request body is over the %d-byte limit", max)}
	if n > 0 {
		e.Message = fmt.Sprintf("request body of %d bytes is over the %d-byte limit", n, max)
	}
	return e
}

// routedRequest is the wire request an HTTP call stands for: the JSON
// body's fields with op and session taken from the route, decoded and
// validated by the same DecodeRequest as a JSON-lines line, so the two
// transports cannot disagree on what a field means or allows. An empty
// body is an empty object.
func routedRequest(body []byte, op, sessionID string, id json.RawMessage) (*api.Request, *api.Error) {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if !utf8.Valid(body) || json.Unmarshal(body, &fields) != nil || fields == nil {
		// DecodeRequest names what is wrong with it.
		req, derr := api.DecodeRequest(body)
		if derr == nil {
			derr = api.BadRequest("request body must be a JSON object")
		}
		if derr.Message != "" && strings.HasPrefix(derr.Message, "request ") {
			derr.Message = "request body " + strings.TrimPrefix(derr.Message, "request ")
		}
		return req, derr
	}
	for _, k := range []string{"op", "session"} {
		if _, ok := fields[k]; ok {
			return &api.Request{ID: api.NullID}, api.BadRequest("field %q is not allowed in an HTTP body: the URL says it", k)
		}
	}
	fields["op"], _ = json.Marshal(op)
	if sessionID != "" {
		fields["session"], _ = json.Marshal(sessionID)
	}
	if _, ok := fields["id"]; !ok {
		fields["id"] = id
	}
	merged, err := json.Marshal(fields)
	if err != nil {
		return &api.Request{ID: api.NullID}, api.BadRequest("request body: %v", err)
	}
	return api.DecodeRequest(merged)
}

// jsonOp handles the routes whose body is a JSON request: create and exec.
func (s *HTTPServer) jsonOp(w http.ResponseWriter, r *http.Request, op, sessionID string, owner int) {
	body, pl, ok := s.readBody(w, r, owner, s.opts.MaxBodyBytes)
	if !ok {
		return
	}
	defer pl.Release()
	req, derr := routedRequest(body, op, sessionID, s.nextID())
	body = nil
	if derr != nil {
		s.respond(w, api.Fail(req.ID, derr))
		return
	}
	// Only an exec has output to stream: asked by the Accept header, or
	// by "stream" as in a JSON-lines request.
	req.Stream = (op == api.OpExec || op == api.OpCommand) && (req.Stream || acceptsNDJSON(r.Header.Get("Accept")))
	if req.Stream {
		s.stream(w, r.Context(), owner, req, pl)
	} else {
		s.respondIn(w, pl, s.d.Handle(r.Context(), owner, req, nil))
	}
}

// stream answers an exec as JSON lines: the cell's output events as they
// happen, then the response, exactly as JSON-lines mode writes them. The
// status is 200 once an event has gone out; a request that fails before
// any output gets its error's status instead.
//
// A client that stops reading must not hold the session (before the fix: a
// streamed exec whose client stopped reading kept its session busy after
// the cell ended, a DELETE of it answered 500, and its slot was held until
// the client read again). So the cell never writes to the client: its
// events queue here (bounded by the cell's own output caps, and counted in
// the request's place in the in-flight budget) and a writer sends them.
// The session is free when the cell ends; the writer then has the
// stream grace to hand over the rest, after which the response is cut.
func (s *HTTPServer) stream(w http.ResponseWriter, ctx context.Context, owner int, req *api.Request, pl *api.Place) *api.Response {
	out := ndjson.Start(w, 0, func() { s.log.Debug("streamed response cut: the client did not take it") })
	emit := func(ev api.Event) {
		b, err := api.EncodeLine(ev)
		if err != nil {
			s.log.Error("encode event", "err", err)
			return
		}
		pl.Grow(int64(len(b)))
		out.Push(http.StatusOK, b)
	}
	resp := s.d.Handle(ctx, owner, req, emit)
	b, err := api.EncodeLine(resp)
	if err != nil {
		s.log.Error("encode response", "err", err)
		resp = api.Fail(resp.ID, &api.Error{Code: api.CodeInternal, Message: "encode response: " + err.Error()})
		b, _ = api.EncodeLine(resp)
	}
	pl.Grow(int64(len(b)))
	// The cell is over; the client has the grace to take what is left.
	out.Push(httpStatus(resp), b)
	out.Finish(s.opts.StreamGrace)
	return resp
}

// upload writes the body to the file as it comes: its place weighs one
// copy buffer, not the file (read whole first, a few large uploads at
// once passed the node's byte bound), and the body must come within the
// body timeout. A broken or too large body leaves no file.
func (s *HTTPServer) upload(w http.ResponseWriter, r *http.Request, rt route, owner int) {
	max := s.opts.MaxUploadBytes
	if r.ContentLength > max {
		s.respondStatus(w, http.StatusRequestEntityTooLarge, api.Fail(api.NullID, tooLarge(r.ContentLength, max)))
		return
	}
	meta, e := api.MetadataFromHeader(r.Header)
	if e != nil {
		s.writeError(w, e)
		return
	}
	pl := s.admit(w, r, owner)
	if pl == nil {
		return
	}
	defer pl.Release()
	pl.Grow(copyBuffer)
	id := s.nextID()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	src := &api.BodyReader{R: http.MaxBytesReader(w, r.Body, max)}
	resp, e := s.d.Put(r.Context(), owner, rt.session, rt.path, src, meta)
	if e != nil && src.Err == nil {
		// Refused before or while the bytes came (a busy or missing
		// session, a full disk): the rest is read and dropped, so a client
		// still sending gets the answer rather than a reset connection, as
		// when uploads were read first.
		_, _ = io.Copy(io.Discard, src)
	}
	_ = rc.SetReadDeadline(time.Time{})
	var mbe *http.MaxBytesError
	switch {
	case errors.As(src.Err, &mbe):
		s.respondStatus(w, http.StatusRequestEntityTooLarge, api.Fail(api.NullID, tooLarge(-1, max)))
	case src.Err != nil && (errors.Is(src.Err, context.DeadlineExceeded) || isTimeout(src.Err)):
		w.Header().Set("Connection", "close")
		s.writeError(w, api.BadRequest("request body not received within %s", s.opts.BodyTimeout))
	case src.Err != nil:
		s.writeError(w, api.BadRequest("read request body: %v", src.Err))
	case e != nil:
		s.respondIn(w, pl, api.Fail(id, e))
	default:
		resp.ID = id
		s.respondIn(w, pl, resp)
	}
}

// download answers the file's raw bytes; errors are JSON like every other
// route's. The file is streamed from its descriptor: its place weighs a
// copy buffer, not the file (read whole, one owner's downloads of a sparse
// 256 MiB file passed the node's byte bound and held other owners'
// requests), and the write must end within the body timeout, so a client
// that stops reading lets the descriptor go.
func (s *HTTPServer) download(w http.ResponseWriter, r *http.Request, rt route, owner int) {
	pl := s.admit(w, r, owner)
	if pl == nil {
		return
	}
	defer pl.Release()
	id := s.nextID()
	f, e := s.d.Open(r.Context(), owner, rt.session, rt.path)
	if e != nil {
		s.respondIn(w, pl, api.Fail(id, e))
		return
	}
	defer f.Content.Close()
	pl.Grow(copyBuffer)
	buf := make([]byte, copyBuffer)
	// The digest goes in a header, before the bytes: one pass to hash,
	// one to send, each through the one buffer. A file the cell changes
	// between them is sent as it is then, cut at the size first read.
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.LimitReader(f.Content, f.Size), buf); err != nil {
		s.respondIn(w, pl, api.Fail(id, &api.Error{Code: api.CodeInternal, Message: "read " + f.Path + ": " + err.Error()}))
		return
	}
	if _, err := f.Content.Seek(0, io.SeekStart); err != nil {
		s.respondIn(w, pl, api.Fail(id, &api.Error{Code: api.CodeInternal, Message: "read " + f.Path + ": " + err.Error()}))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	hd.Set("X-Jailcell-Sha256", hex.EncodeToString(h.Sum(nil)))
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.BodyTimeout))
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyBuffer(onlyWriter{w}, io.LimitReader(f.Content, f.Size), buf); err == nil {
		_ = rc.Flush()
	}
	_ = rc.SetWriteDeadline(time.Time{})
}

// copyBuffer is what a streamed download holds in memory.
const copyBuffer = 64 << 10

// onlyWriter hides a ResponseWriter's ReadFrom, so a copy goes through the
// buffer given (and its weight) rather than one of the server's own.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// respondIn is respond for a request holding place pl: the response's bytes
// count in the budget until written, within the body timeout, so a client
// that does not read cannot hold them (and its place) forever.
func (s *HTTPServer) respondIn(w http.ResponseWriter, pl *api.Place, resp *api.Response) {
	status := httpStatus(resp)
	b, err := api.EncodeLine(resp)
	if err != nil {
		s.log.Error("encode response", "err", err)
		b, _ = api.EncodeLine(api.Fail(resp.ID, &api.Error{Code: api.CodeInternal, Message: "encode response: " + err.Error()}))
		status = http.StatusInternalServerError
	}
	pl.Grow(int64(len(b)))
	w.Header().Set("Content-Type", "application/json")
	s.writeWithin(w, status, b)
}

// writeWithin writes a response that is not streamed within the body
// timeout, flushed before the handler returns (and its place with it).
// The deadline is cleared afterwards: the connection may carry a long
// streamed cell next.
func (s *HTTPServer) writeWithin(w http.ResponseWriter, status int, b []byte) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.BodyTimeout))
	w.WriteHeader(status)
	if _, err := w.Write(b); err == nil {
		_ = rc.Flush()
	}
	_ = rc.SetWriteDeadline(time.Time{})
}

// respond writes a Response as JSON with the status its error code maps to.
func (s *HTTPServer) respond(w http.ResponseWriter, resp *api.Response) {
	s.respondStatus(w, httpStatus(resp), resp)
}

func (s *HTTPServer) respondStatus(w http.ResponseWriter, status int, resp *api.Response) {
	b, err := api.EncodeLine(resp)
	if err != nil {
		s.log.Error("encode response", "err", err)
		resp = api.Fail(resp.ID, &api.Error{Code: api.CodeInternal, Message: "encode response: " + err.Error()})
		b, _ = api.EncodeLine(resp)
	}
	if err != nil {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *HTTPServer) writeError(w http.ResponseWriter, e *api.Error) {
	s.respond(w, api.Fail(api.NullID, e))
}

// writeBody writes a response after the status has been set.
func (s *HTTPServer) writeBody(w http.ResponseWriter, resp *api.Response) {
	b, _ := api.EncodeLine(resp)
	_, _ = w.Write(b)
}

// httpStatus maps a response to its status code. "limit" is 429; a body
// over the transport's size limit is 413, set where it is refused.
func httpStatus(resp *api.Response) int {
	if resp.OK {
		if resp.Info != nil && resp.Result == nil && !resp.PlainOK() {
			return http.StatusCreated
		}
		return http.StatusOK
	}
	if resp.Error == nil {
		return http.StatusInternalServerError
	}
	switch resp.Error.Code {
	case api.CodeBadRequest:
		return http.StatusBadRequest
	case CodeForbidden:
		return http.StatusForbidden
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeExpired:
		return http.StatusGone
	case api.CodeLimit:
		return http.StatusTooManyRequests
	case api.CodeBusy:
		return http.StatusConflict
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// acceptsNDJSON reports whether an Accept header asks for JSON lines.
func acceptsNDJSON(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(part, ";")
		if strings.EqualFold(strings.TrimSpace(mt), "application/x-ndjson") {
			return true
		}
	}
	return false
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
