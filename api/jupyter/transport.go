package jupyter

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	zmqtransport "github.com/go-zeromq/zmq4/transport"
)

// The kernel's ZMQ transports. go-zeromq takes a transport by name, so
// each kernel registers its own (tcp or ipc; iopub apart from the other
// ports) carrying its bounds and its logger. What they add under the
// library:
//
//   - every read goes through a zmtpGuard (frame and message size);
//   - TCP peers whose socket belongs to another uid are refused at accept
//     (any local user can connect to a loopback port);
//   - ipc sockets are made only in a directory no other uid can enter;
//   - each port holds at most jupyterMaxConns connections;
//   - on iopub each subscriber gets its own bounded queue and send
//     deadline, and is dropped when it falls behind (pubConn), because
//     go-zeromq's PUB socket writes to its peers one after another from
//     one unbounded queue, without a deadline.
const (
	// jupyterMaxConns caps the live connections of one port. A Jupyter
	// server or client opens one per channel.
	jupyterMaxConns = 32
	// IOPubHWM is one iopub subscriber's high-water mark: the bytes queued
	// for it and not yet taken by its socket. A subscriber over it is
	// dropped; others keep getting everything.
	IOPubHWM = 8 << 20
	// IOPubSendDeadline is how long one write to an iopub subscriber may
	// wait for the subscriber to read before it is dropped.
	IOPubSendDeadline = 10 * time.Second
	// iopubBatch is what one write to a subscriber carries at most, so
	// the deadline bounds the time without progress, not the whole queue.
	iopubBatch = 256 << 10
	// iopubLinger is how long a closing subscriber's queue may take to
	// drain (the last status of a shutdown).
	iopubLinger = 500 * time.Millisecond
)

// jupyterHandshake bounds a peer's ZMTP greeting and READY: go-zeromq
// runs each handshake inside its one accept loop, so a peer that connects
// and says nothing would otherwise keep every later peer of that port
// out. A variable for the tests.
var jupyterHandshake = 10 * time.Second

// errSlowSubscriber drops an iopub subscriber that does not keep up.
var errSlowSubscriber = errors.New("jupyter: slow iopub subscriber dropped")

// kernelTransports are one kernel's registered transports.
type kernelTransports struct {
	ports, iopub string // registered names
}

var transportSeq atomic.Int64

// registerTransports registers the transports of one kernel speaking
// conn's transport ("tcp" or "ipc").
func registerTransports(conn *Connection, log *slog.Logger) (kernelTransports, error) {
	network := "tcp"
	if conn.Transport == "ipc" {
		network = "unix"
	}
	n := transportSeq.Add(1)
	kt := kernelTransports{ports: fmt.Sprintf("jailcell-%d-%s", n, conn.Transport), iopub: fmt.Sprintf("jailcell-%d-iopub-%s", n, conn.Transport)}
	uid := os.Getuid()
	if err := zmq4.RegisterTransport(kt.ports, &kernelTransport{network: network, uid: uid, log: log, name: "ports"}); err != nil {
		return kt, err
	}
	if err := zmq4.RegisterTransport(kt.iopub, &kernelTransport{network: network, uid: uid, log: log, name: "iopub", pub: true}); err != nil {
		return kt, err
	}
	return kt, nil
}

// kernelTransport is TCP or a Unix socket (ZMQ's ipc) with the bounds
// above; it only listens.
type kernelTransport struct {
	network string // "tcp" or "unix"
	uid     int    // the only uid admitted
	pub     bool   // iopub: per-subscriber bounded queues
	name    string
	log     *slog.Logger
}

func (t *kernelTransport) Dial(context.Context, zmqtransport.Dialer, string) (net.Conn, error) {
	return nil, errors.New("jupyter: the kernel's transport only listens")
}

func (t *kernelTransport) Addr(ep string) (string, error) {
	return zmqtransport.New(t.network).Addr(ep)
}

func (t *kernelTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	if t.network == "unix" {
		// Unauthenticated iopub (anyone who connects reads every cell's
		// code and output): the socket is made only where no other uid can
		// reach it.
		if err := checkPrivateDir(filepath.Dir(addr), t.uid); err != nil {
			return nil, err
		}
	}
	l, err := zmqtransport.New(t.network).Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	if t.network == "unix" {
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("restrict the ipc socket %s: %w", addr, err)
		}
	}
	return &kernelListener{Listener: l, t: t}, nil
}

// checkPrivateDir fails unless dir is a directory owned by uid with no
// access for group or others.
func checkPrivateDir(dir string, uid int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("check the ipc directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() {
		return fmt.Errorf("ipc directory %s: not a directory", dir)
	}
	if int(st.Uid) != uid || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("ipc directory %s is mode %04o, owner uid %d: it must be 0700 and owned by uid %d, or other users could read every cell from iopub (Jupyter's runtime directory is)",
			dir, fi.Mode().Perm(), st.Uid, uid)
	}
	return nil
}

// kernelListener admits peers of the kernel's own uid, up to
// jupyterMaxConns at a time.
type kernelListener struct {
	net.Listener
	t       *kernelTransport
	live    atomic.Int64
	refused atomic.Int64
	lastLog atomic.Int64 // unix nanoseconds of the last refusal logged
}

func (l *kernelListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := l.admit(c); err != nil {
			c.Close()
			l.refuse(c, err)
			continue
		}
		l.live.Add(1)
		_ = c.SetDeadline(time.Now().Add(jupyterHandshake))
		gc := &guardedConn{Conn: c, g: zmtpGuard{greeting: 64, maxMessage: JupyterMaxMessage, maxFrames: jupyterMaxFrames}, release: func() { l.live.Add(-1) }, ownWriteDeadlines: l.t.pub}
		if !l.t.pub {
			return gc, nil
		}
		return newPubConn(gc, IOPubHWM, IOPubSendDeadline, l.t.log), nil
	}
}

func (l *kernelListener) admit(c net.Conn) error {
	if n := l.live.Load(); n >= jupyterMaxConns {
		return fmt.Errorf("%d connections already open on the %s port (the limit)", n, l.t.name)
	}
	if l.t.network != "tcp" {
		return nil // ipc: the directory's mode admits only this uid
	}
	uid, err := tcpPeerUID(c.RemoteAddr(), c.LocalAddr())
	if err != nil {
		return err
	}
	if uid != l.t.uid {
		// A loopback port is open to every local user: without this, any
		// of them could subscribe to iopub and read every cell's code and
		// output (the key signs messages, it does not hide them).
		return fmt.Errorf("peer %s belongs to uid %d, not the kernel's uid %d", c.RemoteAddr(), uid, l.t.uid)
	}
	return nil
}

// refuse logs a refused peer, at most once every 10 s per port: a ZMQ
// client reconnects ten times a second.
func (l *kernelListener) refuse(c net.Conn, err error) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(10*time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.t.log.Warn("jupyter: refused a connection", "port", l.t.name, "peer", c.RemoteAddr().String(), "err", err, "refused_so_far", n)
}

// tcpPeerUID is the uid owning the socket at the other end of a loopback
// connection, from the kernel's socket tables (/proc/net/tcp and tcp6 of
// this network namespace): the entry whose local address is the peer's
// and whose remote address is ours.
func tcpPeerUID(peer, local net.Addr) (int, error) {
	pa, err := netip.ParseAddrPort(peer.String())
	if err != nil {
		return 0, fmt.Errorf("peer address %s: %w", peer, err)
	}
	la, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return 0, fmt.Errorf("local address %s: %w", local, err)
	}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		uid, found, err := findSocketUID(f, pa, la)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", file, err)
		}
		if found {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("no socket of peer %s in /proc/net/tcp{,6} (not a local peer, or gone)", peer)
}

// findSocketUID scans one /proc/net/tcp table (one bounded line at a
// time) for the socket whose local address is local and remote address
// is remote.
func findSocketUID(r io.Reader, local, remote netip.AddrPort) (int, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), 4096)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		l, err1 := parseProcAddr(f[1])
		rm, err2 := parseProcAddr(f[2])
		if err1 != nil || err2 != nil || !sameAddrPort(l, local) || !sameAddrPort(rm, remote) {
			continue
		}
		uid, err := strconv.Atoi(f[7])
		if err != nil {
			return 0, false, fmt.Errorf("uid field %q: %w", f[7], err)
		}
		return uid, true, nil
	}
	return 0, false, sc.Err()
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseProcAddr decodes "0100007F:1F90" (IPv4) or 32 hex digits and a
// port (IPv6): the address is printed as 32-bit words in host byte order,
// the port in plain hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok || (len(host) != 8 && len(host) != 32) || len(port) != 4 {
		return netip.AddrPort{}, fmt.Errorf("address %q: want HEX:PORT", s)
	}
	raw, err := hex.DecodeString(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", s, err)
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// guardedConn reads through a zmtpGuard and frees its listener's slot
// once closed.
type guardedConn struct {
	net.Conn
	g         zmtpGuard
	release   func()
	closeOnce sync.Once
	ready     bool // the handshake's deadline is lifted
	// ownWriteDeadlines: a pubConn sets one per write; lifting the
	// handshake's must not lift it.
	ownWriteDeadlines bool
}

func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if gerr := c.g.scan(p[:n]); gerr != nil {
			// The library then drops the connection; nothing was allocated.
			c.Close()
			return 0, gerr
		}
		if !c.ready && c.g.commands > 0 {
			// The peer's READY is in: the handshake is over, and a
			// subscriber may stay silent for good.
			c.ready = true
			_ = c.Conn.SetReadDeadline(time.Time{})
			if !c.ownWriteDeadlines {
				_ = c.Conn.SetWriteDeadline(time.Time{})
			}
		}
	}
	return n, err
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// pubConn is one iopub subscriber: what the PUB socket writes is queued
// here, up to hwm bytes, and one goroutine per subscriber writes it out,
// each write with a deadline. A subscriber that falls hwm behind, or
// takes nothing for the deadline, is dropped and logged; the socket's
// writer never waits on it, so neither does a cell nor another
// subscriber. (The attack: a local user subscribes to iopub and never
// reads; the PUB socket then blocked every publish and queued the
// notebook's output without bound.)
type pubConn struct {
	*guardedConn
	hwm      int
	deadline time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	q       [][]byte
	queued  int
	err     error // set once: the subscriber is dropped or closed
	closing bool
	done    chan struct{}
}

func newPubConn(c *guardedConn, hwm int, deadline time.Duration, log *slog.Logger) *pubConn {
	p := &pubConn{guardedConn: c, hwm: hwm, deadline: deadline, log: log, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	go p.writer()
	return p
}

// Write queues b; it never waits for the subscriber.
func (p *pubConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, p.err
	}
	// One frame larger than the mark still goes out on its own.
	if p.queued > 0 && p.queued+len(b) > p.hwm {
		p.dropLocked(fmt.Sprintf("%d bytes queued, over its high-water mark of %d", p.queued, p.hwm))
		return 0, p.err
	}
	p.q = append(p.q, append([]byte(nil), b...))
	p.queued += len(b)
	p.cond.Signal()
	return len(b), nil
}

// dropLocked ends the subscriber; p.mu is held.
func (p *pubConn) dropLocked(why string) {
	if p.err != nil {
		return
	}
	p.err = errSlowSubscriber
	p.q, p.queued = nil, 0
	p.log.Warn("jupyter: dropped a slow iopub subscriber", "peer", p.RemoteAddr().String(), "why", why)
	p.cond.Signal()
	// Unblocks a write in progress and the library's reader, which then
	// forgets the connection.
	p.guardedConn.Close()
}

func (p *pubConn) writer() {
	defer close(p.done)
	for {
		p.mu.Lock()
		for len(p.q) == 0 && p.err == nil && !p.closing {
			p.cond.Wait()
		}
		if p.err != nil || len(p.q) == 0 {
			p.mu.Unlock()
			return
		}
		var batch net.Buffers
		n := 0
		for len(p.q) > 0 && (n == 0 || n+len(p.q[0]) <= iopubBatch) {
			batch = append(batch, p.q[0])
			n += len(p.q[0])
			p.q[0] = nil
			p.q = p.q[1:]
		}
		p.mu.Unlock()

		_ = p.Conn.SetWriteDeadline(time.Now().Add(p.deadline))
		_, err := batch.WriteTo(p.Conn)

		p.mu.Lock()
		p.queued -= n
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.dropLocked(fmt.Sprintf("it took nothing for %s (the send deadline)", p.deadline))
			} else if p.err == nil {
				p.err = err
				p.guardedConn.Close()
			}
		}
		p.mu.Unlock()
	}
}

// Close lets the queue drain for a moment (a shutdown's last status),
// then closes.
func (p *pubConn) Close() error {
	p.mu.Lock()
	p.closing = true
	p.cond.Signal()
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(iopubLinger):
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = net.ErrClosed
	}
	p.cond.Signal()
	p.mu.Unlock()
	return p.guardedConn.Close()
}
