package jupyter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// procHex is an address as /proc/net/tcp prints it: 32-bit words in host
// byte order, then the port.
func procHex(ap netip.AddrPort) string {
	b := ap.Addr().AsSlice()
	var s strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&s, "%08X", binary.NativeEndian.Uint32(b[i:]))
	}
	return fmt.Sprintf("%s:%04X", s.String(), ap.Port())
}

// TestFindSocketUID: the uid of the socket whose local and remote
// addresses match, from /proc/net/tcp and tcp6 tables, over v4, v6 and
// v4-mapped addresses; lines that do not parse are passed over.
func TestFindSocketUID(t *testing.T) {
	v4 := netip.MustParseAddrPort("127.0.0.1:40000")
	srv4 := netip.MustParseAddrPort("127.0.0.1:5555")
	v6 := netip.MustParseAddrPort("[::1]:40001")
	srv6 := netip.MustParseAddrPort("[::1]:5556")
	mapped := netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), 40002)
	line := func(l, r netip.AddrPort, uid int) string {
		return fmt.Sprintf("   0: %s %s 01 00000000:00000000 00:00000000 00000000 %5d        0 12345 1 0000000000000000 20 4 30 10 -1", procHex(l), procHex(r), uid)
	}
	table := strings.Join([]string{
		"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
		"garbage line",
		"   1: ZZZZ:1 0:0 01 0 0 0 0 0 0",
		line(srv4, v4, 1000), // the kernel's own end: not the peer
		line(v4, srv4, 4242),
		line(v6, srv6, 4343),
		line(mapped, srv4, 4444),
	}, "\n")
	for _, tc := range []struct {
		local, remote netip.AddrPort
		uid           int
		found         bool
	}{
		{v4, srv4, 4242, true},
		{srv4, v4, 1000, true},
		{v6, srv6, 4343, true},
		{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 40002), srv4, 4444, true},
		{netip.MustParseAddrPort("127.0.0.1:1"), srv4, 0, false},
	} {
		uid, found, err := findSocketUID(strings.NewReader(table), tc.local, tc.remote)
		if err != nil || found != tc.found || uid != tc.uid {
			t.Errorf("%v -> %v: uid %d found %v (%v), want %d %v", tc.local, tc.remote, uid, found, err, tc.uid, tc.found)
		}
	}
}

// logBuffer is a logger whose output the test reads.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKernelTransportRefusesOtherUIDs: a loopback port of the kernel is
// open to every local user; the kernel's transport admits a peer of its
// own uid and refuses, and logs, one of another uid (the attack: a local
// user without the key subscribes to iopub and reads every cell).
func TestKernelTransportRefusesOtherUIDs(t *testing.T) {
	var logs logBuffer
	tr := &kernelTransport{network: "tcp", uid: os.Getuid(), name: "iopub", log: slog.New(slog.NewTextHandler(&logs, nil))}
	l, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case sc := <-accepted:
		sc.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("a peer of the kernel's own uid was not admitted")
	}

	if os.Getuid() != 0 {
		t.Skip("the other-uid half requires root (to run a peer as another uid)")
	}
	// The system's python: one another uid can run (not a home's shim).
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the other-uid half needs %s to run a peer as another uid: not available", py)
	}
	// The peer as uid 65533: connects, then reads until the kernel hangs up.
	cmd := exec.Command(py, "-c", `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
print(repr(s.recv(100)))`, fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "b''" {
		t.Fatalf("peer of uid 65533: %v: %s (want the connection closed unread: b'')", err, out)
	}
	select {
	case <-accepted:
		t.Fatal("a peer of another uid was admitted")
	case <-time.After(200 * time.Millisecond):
	}
	if !strings.Contains(logs.String(), "belongs to uid 65533, not the kernel's uid 0") {
		t.Errorf("the refusal was not logged: %s", logs.String())
	}
}

// TestKernelTransportIPCDir: ipc sockets are made only in a directory of
// the kernel's uid that no one else may enter, and are themselves 0600.
func TestKernelTransportIPCDir(t *testing.T) {
	tr := &kernelTransport{network: "unix", uid: os.Getuid(), name: "iopub", log: slog.Default()}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Listen(context.Background(), filepath.Join(open, "k-ipc-1")); err == nil || !strings.Contains(err.Error(), "is mode 0755") || !strings.Contains(err.Error(), "must be 0700") {
		t.Errorf("a 0755 directory: %v", err)
	}
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(private, "k-ipc-1")
	l, err := tr.Listen(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket %s: %v %v, want a 0600 socket", p, fi.Mode(), err)
	}
}

// TestPubConnDropsSlowSubscriber: an iopub subscriber that never reads is
// dropped, and logged, once its queue passes the high-water mark, or when
// a write to it misses the send deadline; Write never waits for it.
func TestPubConnDropsSlowSubscriber(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hwm      int
		deadline time.Duration
		why      string
	}{
		{"high-water mark", 64 << 10, time.Hour, "over its high-water mark"},
		{"send deadline", 1 << 30, 200 * time.Millisecond, "the send deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			kernel, peer := net.Pipe() // unbuffered: a peer that never reads takes nothing
			defer peer.Close()
			p := newPubConn(&guardedConn{Conn: kernel}, tc.hwm, tc.deadline, slog.New(slog.NewTextHandler(&logs, nil)))
			defer p.Close()
			chunk := make([]byte, 4<<10)
			start := time.Now()
			var err error
			for i := 0; i < 1000 && err == nil; i++ {
				_, err = p.Write(chunk)
				if tc.hwm > 1<<20 && i == 0 {
					time.Sleep(2 * tc.deadline) // let the one write miss its deadline
				}
			}
			if !errors.Is(err, errSlowSubscriber) {
				t.Fatalf("writes to a subscriber that never reads: %v, want %v", err, errSlowSubscriber)
			}
			if d := time.Since(start); d > time.Minute {
				t.Errorf("the writes took %s: Write waited for the subscriber", d)
			}
			if !strings.Contains(logs.String(), "dropped a slow iopub subscriber") || !strings.Contains(logs.String(), tc.why) {
				t.Errorf("log: %s, want the drop and %q", logs.String(), tc.why)
			}
			// The peer sees the connection end.
			_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, peer); err != nil {
				t.Errorf("the dropped subscriber's connection did not end: %v", err)
			}
		})
	}
}

// TestPubConnDelivers: a subscriber that reads gets every byte in order,
// past many times the high-water mark.
func TestPubConnDelivers(t *testing.T) {
	kernel, peer := net.Pipe()
	p := newPubConn(&guardedConn{Conn: kernel}, 64<<10, 10*time.Second, slog.Default())
	var want bytes.Buffer
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	for i := 0; i < 2000; i++ {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%700)
		want.Write(b)
		if _, err := p.Write(b); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		for p.queuedBytes() > 32<<10 {
			time.Sleep(time.Millisecond) // the reader keeps up, as a client does
		}
	}
	for p.queuedBytes() > 0 {
		time.Sleep(time.Millisecond)
	}
	p.Close()
	if b := <-got; !bytes.Equal(b, want.Bytes()) || want.Len() < 10*(64<<10) {
		t.Errorf("the subscriber got %d bytes, want the %d written, in order", len(b), want.Len())
	}
}

func (p *pubConn) queuedBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued
}

// TestKernelTransportHandshakeDeadline: a peer that connects and says
// nothing is cut at the handshake deadline (go-zeromq's accept loop would
// wait on it for good, keeping every later peer out); one that completes
// the handshake may then stay silent.
func TestKernelTransportHandshakeDeadline(t *testing.T) {
	old := jupyterHandshake
	jupyterHandshake = 300 * time.Millisecond
	defer func() { jupyterHandshake = old }()
	tr := &kernelTransport{network: "tcp", uid: os.Getuid(), name: "shell", log: slog.Default()}
	l, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accept := func() net.Conn {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c := accept()
	if _, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a silent peer's handshake: %v, want the deadline", err)
	}
	c.Close()

	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c = accept()
	defer c.Close()
	greeting := make([]byte, 64)
	ready := append([]byte{0x04, 5}, "READY"...) // a command frame
	if _, err := peer.Write(append(greeting, ready...)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(greeting)+len(ready))); err != nil {
		t.Fatalf("read the handshake: %v", err)
	}
	time.Sleep(2 * jupyterHandshake)
	if _, err := peer.Write([]byte{0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 3)); err != nil {
		t.Errorf("after the handshake, a quiet peer was cut: %v", err)
	}
}
