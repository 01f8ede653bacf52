package isolate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/jailcell/jailcell/isolate/network"
)

// A sandbox's servers, reached from the host: a door (E2B's proxy for a
// sandbox's ports) connects to a port a process of the sandbox listens on,
// over the sandbox's own loopback, in its network namespace. Nothing in
// the sandbox changes: it gets no route, interface or address, and a
// sandbox with no network stays without one; the connection is the host's,
// made from the inside.

// MaxDialed bounds the connections into one sandbox the host holds open at
// once: each is a descriptor of the daemon's, and a client opening them
// without end (or a sandbox's server that never closes) would otherwise
// spend the daemon's descriptors for every session.
const MaxDialed = 64

// dialed is the connections the host opened into a sandbox, closed before
// a checkpoint (criu refuses a socket whose peer is outside the dumped
// tree, as a hibernation or fork would meet) and when it is destroyed.
type dialed struct {
	mu     sync.Mutex
	conns  map[*dialedConn]struct{}
	closed bool
}

type dialedConn struct {
	net.Conn
	d    *dialed
	once sync.Once
}

func (c *dialedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return err
}

// closeAll closes every open connection; with final, none is opened after.
func (d *dialed) closeAll(final bool) {
	d.mu.Lock()
	conns := make([]*dialedConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	if final {
		d.closed = true
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// DialPort connects to TCP port (1-65535) on the sandbox's loopback, as a
// client inside the sandbox would reach a server a cell started. ErrBusy:
// MaxDialed are open; ErrNotFound: the sandbox has ended. The connection
// is closed by the host when the sandbox is checkpointed or destroyed.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1-65535", port)
	}
	select {
	case <-s.done:
		return nil, fmt.Errorf("%w: sandbox %s has ended", ErrNotFound, s.ID)
	default:
	}
	s.dial.mu.Lock()
	switch {
	case s.dial.closed:
		s.dial.mu.Unlock()
		return nil, fmt.Errorf("%w: sandbox %s is being destroyed", ErrNotFound, s.ID)
	case len(s.dial.conns) >= MaxDialed:
		s.dial.mu.Unlock()
		return nil, fmt.Errorf("%w: sandbox %s has %d connections from the host open, the most it may", ErrBusy, s.ID, MaxDialed)
	}
	if s.dial.conns == nil {
		s.dial.conns = map[*dialedConn]struct{}{}
	}
	// The place is taken before the dial, so concurrent dials cannot pass
	// the bound together; a failed dial gives it back.
	slot := &dialedConn{d: &s.dial}
	s.dial.conns[slot] = struct{}{}
	s.dial.mu.Unlock()
	c, err := s.dialIn(ctx, port)
	s.dial.mu.Lock()
	defer s.dial.mu.Unlock()
	if err != nil || s.dial.closed {
		delete(s.dial.conns, slot)
		if err == nil {
			_ = c.Close()
			err = fmt.Errorf("%w: sandbox %s is being destroyed", ErrNotFound, s.ID)
		}
		return nil, err
	}
	slot.Conn = c
	return slot, nil
}

func (s *Sandbox) dialIn(ctx context.Context, port int) (net.Conn, error) {
	ns, err := network.SandboxNetns(s.pid)
	if err != nil {
		return nil, fmt.Errorf("%w: sandbox %s: %v", ErrNotFound, s.ID, err)
	}
	defer ns.Close()
	// Pid reuse: the namespace was opened by the init's pid, which the
	// kernel hands out again once the init is reaped. A pid still in this
	// sandbox's cgroup after the open is this sandbox's (another sandbox's
	// process in its place would connect one session to another's server).
	if !s.holdsPid(s.pid) {
		return nil, fmt.Errorf("%w: sandbox %s has ended", ErrNotFound, s.ID)
	}
	c, err := network.DialIn(ctx, ns, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: nothing answers on port %d: %w", s.ID, port, err)
	}
	return c, nil
}

// holdsPid says whether pid is a process of the sandbox's cgroup.
func (s *Sandbox) holdsPid(pid int) bool {
	b, err := os.ReadFile(filepath.Join(s.cg.dir("pids"), "cgroup.procs"))
	if err != nil {
		return false
	}
	want := []byte(strconv.Itoa(pid))
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if bytes.Equal(line, want) {
			return true
		}
	}
	return false
}
