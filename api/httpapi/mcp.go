package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/api"
	mcpdoor "github.com/jailcell/jailcell/api/mcp"
)

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
func (s *HTTPServer) mcpReserve(uid uint32) (*mcpReservation, *api.Error) {
	l := &s.mcp.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owners == nil {
		l.owners = map[uint32]int{}
	}
	idle := s.opts.MCPIdleTimeout
	if n, max := l.owners[uid], s.opts.MCPMaxSessionsPerOwner; n >= max {
		return nil, &api.Error{Code: api.CodeLimit, Message: fmt.Sprintf("owner %d has %d live MCP sessions, at most %d (mcp.max_sessions_per_owner): "+
			"end one (DELETE /mcp with its Mcp-Session-Id header) or wait until one has been idle for %s (mcp.idle_timeout)", uid, n, max, idle)}
	}
	if max := s.opts.MCPMaxSessions; l.total >= max {
		return nil, &api.Error{Code: api.CodeLimit, Message: fmt.Sprintf("this node has %d live MCP sessions, at most %d (mcp.max_sessions); "+
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
	conn *mcpdoor.Conn
	once sync.Once
}

func (r *mcpReservation) bind(id string, srv *mcp.Server, c *mcpdoor.Conn) {
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
					c.CloseSession()
					r.release()
				}()
				return
			}
		}
	}
	if c != nil {
		c.CloseSession()
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
			var c *mcpdoor.Conn
			srv, c = mcpdoor.NewServer(s.d, mcpdoor.Options{Owner: int(p.UID), Logger: s.log}, &mcp.ServerOptions{
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
	if !contains(api.MCPMethods, r.Method) {
		w.Header().Set("Allow", strings.Join(api.MCPMethods, ", "))
		w.WriteHeader(http.StatusMethodNotAllowed)
		s.writeBody(w, api.Fail(api.NullID, api.BadRequest("method %s is not allowed on %s; allowed: %s", r.Method, api.MCPPath, strings.Join(api.MCPMethods, ", "))))
		return
	}
	id := r.Header.Get("Mcp-Session-Id")
	if id != "" && !strings.HasPrefix(id, mcpSessionPrefix(peer.UID)) {
		s.writeError(w, &api.Error{Code: CodeForbidden, Message: fmt.Sprintf("MCP session %q is not one of uid %d's", clip(id, 80), peer.UID)})
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
		defer pl.Release()
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
				var e *api.Error
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
