package session

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/isolate"
)

// portServer starts, inside the kernel, a threaded HTTP server on the
// sandbox's loopback port 8000 that answers "hello from the sandbox", and a
// client of it kept connected: a connection inside the sandbox that a
// hibernation must carry (closed) rather than refuse.
const portServer = `import http.server, threading, socket
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"hello from the sandbox"
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
inner = socket.create_connection(("127.0.0.1", 8000))
`

// get sends one HTTP/1.0 GET over c and returns the whole answer.
func get(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: sandbox\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDialPortReachesACellsServer: the host reaches a server a cell
// started on the sandbox's loopback, and only that session's: another
// owner is told the session does not exist, another session's loopback has
// nothing there, the bound on open connections holds, a hibernation closes
// the host's connections (and one inside the sandbox) instead of failing,
// and the restored server answers again.
func TestDialPortReachesACellsServer(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m, id := criuDaemon(t, r, nil, portServer)
	ws := m.Workspace()

	c, err := ws.DialPort(ctx, 1000, id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, c); !strings.HasPrefix(got, "HTTP/1.0 200") || !strings.HasSuffix(got, "hello from the sandbox") {
		t.Fatalf("answer through the dialed port: %q", got)
	}
	c.Close()

	// Another owner: the session is not there for them.
	if _, err := ws.DialPort(ctx, 1001, id, 8000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's dial: %v, want ErrNotFound", err)
	}
	// Nothing listens on another port; ports out of range are bad input.
	if _, err := ws.DialPort(ctx, 1000, id, 8001); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "8001") {
		t.Fatalf("dial of a closed port: %v, want ErrUnavailable naming 8001", err)
	}
	for _, p := range []int{0, 65536} {
		if _, err := ws.DialPort(ctx, 1000, id, p); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("port %d: %v, want ErrBadRequest", p, err)
		}
	}
	// Another session of the same owner has its own loopback: the first
	// one's server is not on it.
	other, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ws.DialPort(ctx, 1000, other.ID, 8000); err == nil {
		c.Close()
		t.Fatal("a second session's port 8000 answered: the sessions share a loopback")
	}

	// The bound: MaxDialed open at once, the next refused, a closed one
	// giving its place back.
	var open []net.Conn
	for range isolate.MaxDialed {
		c, err := ws.DialPort(ctx, 1000, id, 8000)
		if err != nil {
			t.Fatalf("dial %d of %d: %v", len(open)+1, isolate.MaxDialed, err)
		}
		open = append(open, c)
	}
	if c, err := ws.DialPort(ctx, 1000, id, 8000); err == nil || !errors.Is(err, ErrUnavailable) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial past the bound: %v, want ErrUnavailable", err)
	}
	open[0].Close()
	if c, err := ws.DialPort(ctx, 1000, id, 8000); err != nil {
		t.Fatalf("dial after one closed: %v", err)
	} else {
		open[0] = c
	}

	// A hibernation closes the host's connections (criu cannot carry their
	// peers) and the one inside; the session is then reached only after a
	// restore, where the server answers again.
	if _, err := m.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("hibernate with %d host connections and one inside open: %v", len(open), err)
	}
	_ = open[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := open[1].Read(make([]byte, 1)); err == nil {
		t.Fatalf("a host connection still open after the hibernation (read %d bytes)", n)
	}
	for _, c := range open {
		c.Close()
	}
	if _, err := ws.DialPort(ctx, 1000, id, 8000); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "hibernated") {
		t.Fatalf("dial of a hibernated session: %v, want ErrUnavailable saying it is hibernated", err)
	}
	if _, err := m.Durability().Restore(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	c, err = ws.DialPort(ctx, 1000, id, 8000)
	if err != nil {
		t.Fatalf("dial after the restore: %v", err)
	}
	if got := get(t, c); !strings.HasSuffix(got, "hello from the sandbox") {
		t.Fatalf("answer after the restore: %q", got)
	}
	c.Close()
	// The connection inside came back closed, the kernel alive.
	res, err := m.Exec(ctx, 1000, id, ExecRequest{Code: "inner.settimeout(5)\ntry:\n    print(repr(inner.recv(1)))\nexcept OSError as e:\n    print(type(e).__name__)"})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("cell after the restore: %v %+v", err, res)
	}
	t.Logf("the connection inside after the restore: %s", strings.TrimSpace(res.Stdout))

	if err := m.Close(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.DialPort(ctx, 1000, id, 8000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dial of a closed session: %v, want ErrNotFound", err)
	}
}
