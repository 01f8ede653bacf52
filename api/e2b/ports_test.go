package e2b

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/api"
)

// portSessions is fakeSessions that can reach a sandbox's port: every
// dial goes to srv, a real server on the host's loopback standing in for
// the sandbox's (session/TestDialPortReachesACellsServer and the stock
// SDK's ports test reach a real sandbox's).
type portSessions struct {
	*fakeSessions
	srv   string
	dials []string
}

func (p *portSessions) DialPort(ctx context.Context, owner int, session string, port int) (net.Conn, *api.Error) {
	p.mu.Lock()
	p.dials = append(p.dials, session)
	p.mu.Unlock()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.srv)
	if err != nil {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
	}
	return c, nil
}

// echoServer answers each request with its headers as JSON; a request for
// /huge answers a header block over the door's bound.
func echoServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/huge" {
			w.Header().Set("X-Huge", strings.Repeat("h", maxPortHeaderBytes+1))
		}
		n, _ := io.Copy(io.Discard, r.Body)
		h := map[string]string{"host": r.Host, "body": strconv.Itoa(int(n))}
		for k := range r.Header {
			h[strings.ToLower(k)] = r.Header.Get(k)
		}
		_ = json.NewEncoder(w).Encode(h)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestPortTraffic: who reaches a sandbox's port. Without e2b.public_ports
// every port needs the sandbox's token; with it, a sandbox made through
// the door without allowPublicTraffic false is reached without one, a
// wrong token is refused rather than taken for public traffic, and an
// unknown sandbox is refused in the same words. The door's credentials
// and routing headers never reach the server; an oversized header block
// from it is a 502.
func TestPortTraffic(t *testing.T) {
	srv := echoServer(t)
	for _, public := range []bool{false, true} {
		var ps *portSessions
		d, _ := newTestDoorOver(t, Options{PublicPorts: public, Domain: "sb.test"}, func(f *fakeSessions) api.Handler {
			ps = &portSessions{fakeSessions: f, srv: srv.Listener.Addr().String()}
			return ps
		})
		open := makeSandbox(t, d)
		w := do(d, "POST", "/v2/sandboxes", `{"templateID":"base","network":{"allowPublicTraffic":false}}`, map[string]string{"X-API-KEY": testKey})
		var private sandbox
		if err := json.Unmarshal(w.Body.Bytes(), &private); err != nil || w.Code != http.StatusCreated {
			t.Fatalf("create a private sandbox: %d %s", w.Code, w.Body)
		}
		host := func(s sandbox) string { return "8000-" + s.SandboxID + ".sb.test" }
		get := func(s sandbox, path string, hdr map[string]string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("GET", path, nil)
			r.Host = host(s)
			for k, v := range hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			d.ServeHTTP(w, r)
			return w
		}
		withToken := func(s sandbox) map[string]string {
			return map[string]string{"E2B-Traffic-Access-Token": s.TrafficAccessToken, "X-Access-Token": s.TrafficAccessToken, "X-API-KEY": testKey, "E2b-Sandbox-Port": "8000"}
		}
		// With its token, any sandbox's port answers, the credentials kept.
		for _, s := range []sandbox{open, private} {
			w := get(s, "/x", withToken(s))
			if w.Code != http.StatusOK {
				t.Fatalf("public=%v: with the token: %d %s", public, w.Code, w.Body)
			}
			var seen map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &seen); err != nil {
				t.Fatal(err)
			}
			if seen["host"] != host(s) || seen["x-forwarded-for"] == "" {
				t.Fatalf("public=%v: the server saw %v", public, seen)
			}
			for _, h := range []string{"e2b-traffic-access-token", "x-access-token", "x-api-key", "e2b-sandbox-id", "e2b-sandbox-port"} {
				if _, ok := seen[h]; ok {
					t.Fatalf("public=%v: %s reached the sandbox's server: %v", public, h, seen)
				}
			}
		}
		// Without it: only an open sandbox, only with public ports.
		if w := get(open, "/", nil); (w.Code == http.StatusOK) != public {
			t.Fatalf("public=%v: an open sandbox without the token: %d %s", public, w.Code, w.Body)
		}
		refused := get(private, "/", nil)
		if refused.Code != http.StatusUnauthorized || !strings.Contains(refused.Body.String(), "e2b-traffic-access-token") {
			t.Fatalf("public=%v: a private sandbox without the token: %d %s", public, refused.Code, refused.Body)
		}
		if w := get(open, "/", map[string]string{"E2B-Traffic-Access-Token": private.TrafficAccessToken}); w.Code != http.StatusUnauthorized {
			t.Fatalf("public=%v: another sandbox's token: %d %s", public, w.Code, w.Body)
		}
		unknown := get(sandbox{SandboxID: "n1-" + strings.Repeat("f", 32)}, "/", nil)
		if unknown.Code != http.StatusUnauthorized || strings.Replace(unknown.Body.String(), "n1-"+strings.Repeat("f", 32), private.SandboxID, 1) != refused.Body.String() {
			t.Fatalf("public=%v: an unknown sandbox: %d %s, want the private one's refusal %s", public, unknown.Code, unknown.Body, refused.Body)
		}
		// A body over the JSON routes' bound is streamed through whole.
		post := httptest.NewRequest("POST", "/upload", strings.NewReader(strings.Repeat("b", 4<<20)))
		post.Host = host(open)
		for k, v := range withToken(open) {
			post.Header.Set(k, v)
		}
		pw := httptest.NewRecorder()
		d.ServeHTTP(pw, post)
		var seen map[string]string
		if pw.Code != http.StatusOK || json.Unmarshal(pw.Body.Bytes(), &seen) != nil || seen["body"] != strconv.Itoa(4<<20) {
			t.Fatalf("public=%v: a 4 MiB body: %d %.300s", public, pw.Code, pw.Body)
		}
		if w := get(open, "/huge", withToken(open)); w.Code != http.StatusBadGateway {
			t.Fatalf("public=%v: a header block over the bound: %d", public, w.Code)
		}
	}

	// A handler that cannot reach ports (a door over a remote service).
	d, _ := newTestDoor(t, Options{Domain: "sb.test"})
	s := makeSandbox(t, d)
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = "8000-" + s.SandboxID + ".sb.test"
	r.Header.Set("E2B-Traffic-Access-Token", s.TrafficAccessToken)
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "port 8000") {
		t.Fatalf("a door without ports: %d %s", w.Code, w.Body)
	}
}
