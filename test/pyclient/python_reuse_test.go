package pyclient

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// countingProxy accepts on its own Unix socket and relays each connection
// to the service's, counting the connections it accepted: what the
// client opened, seen from the server's side. When either end closes, the
// other is closed too, so a service that stops closes its clients' kept
// connections as it would without the proxy.
type countingProxy struct {
	ln       net.Listener
	backend  string
	mu       sync.Mutex
	accepted int
	live     int
}

func startCountingProxy(t *testing.T, sock, backend string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen on %s: %v", sock, err)
	}
	p := &countingProxy{ln: ln, backend: backend}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *countingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		p.live++
		p.mu.Unlock()
		go p.relay(c)
	}
}

func (p *countingProxy) relay(c net.Conn) {
	defer func() {
		c.Close()
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
	}()
	b, err := net.Dial("unix", p.backend)
	if err != nil {
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done // either side gone: close both
}

func (p *countingProxy) counts() (accepted, live int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.live
}

// TestPythonSocketReuse runs tests/socket_reuse.py: SocketTransport and
// AsyncSocketTransport keep their connections alive. Through a proxy that counts connections it
// proves that sequential calls (streamed execs included) share one
// connection, that threads sharing a transport get their own answers on
// at most one connection each, and that after a service restart a stale
// connection is either noticed before sending or, for a POST, refused
// with an error rather than sent again (the cell runs once), while a GET
// is sent again on a new connection. Six real restarts, three for each.
func TestPythonSocketReuse(t *testing.T) {
	python := installPython(t)
	bin := testenv.Jailcell(t)
	svc := testenv.StartServe(t, testenv.Serve{
		Bin:       bin,
		CleanExit: true,
		Env:       []string{"JAILCELL_SESSIONS_SURVIVE_RESTART=true"}, // a session's variables outlive the restarts
		Config:    func(dir string) string { return pythonConfig(t, dir) },
	})
	proxy := startCountingProxy(t, filepath.Join(t.TempDir(), "proxy.sock"), svc.Sock)

	script, err := filepath.Abs(filepath.Join(pyDir, "tests", "socket_reuse.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, proxy.ln.Addr().String())
	cmd.Dir, cmd.Env = t.TempDir(), pipEnv() // not client/python: the installed package is imported
	var stderr testenv.LockedBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var log strings.Builder
	done := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(&log, line)
		var answer string
		switch line {
		case "@@count":
			n, _ := proxy.counts()
			answer = fmt.Sprint(n)
		case "@@restart":
			if err := svc.Stop(); err != nil {
				t.Fatalf("serve exited with %v on SIGTERM, want 0\n%s", err, log.String())
			}
			// The stopped service closed every connection; wait until the
			// proxy has closed the client's side of each, as a service
			// without a proxy would have.
			if err := waitNoLive(proxy, 15*time.Second); err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			svc = svc.Restart(t)
			answer = "ok"
		case "@@done":
			done = true
			continue
		default:
			continue
		}
		if _, err := io.WriteString(stdin, answer+"\n"); err != nil {
			t.Fatalf("answer the script: %v\n%s%s", err, log.String(), stderr.String())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("socket_reuse.py: %v\n%s%s", err, log.String(), stderr.String())
	}
	if !done {
		t.Fatalf("socket_reuse.py ended without running every step:\n%s%s", log.String(), stderr.String())
	}
	// The sessions outlive a stop with survive_restart on: the last service
	// adopts them with it off, and its stop at the test's end closes them
	// (they were left running on the host before).
	if err := svc.Stop(); err != nil {
		t.Fatalf("serve exited with %v on SIGTERM, want 0", err)
	}
	svc.Restart(t, "JAILCELL_SESSIONS_SURVIVE_RESTART=false")
	t.Logf("socket_reuse.py:\n%s", log.String())
}

func waitNoLive(p *countingProxy, within time.Duration) error {
	for deadline := time.Now().Add(within); ; {
		if _, live := p.counts(); live == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			_, live := p.counts()
			return fmt.Errorf("%d proxied connections still open %s after the service stopped", live, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
