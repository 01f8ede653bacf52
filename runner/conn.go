package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxPythonLen bounds the version string a hello may carry.
const maxPythonLen = 64

// aLongTimeAgo is a deadline in the past: it wakes a blocked Accept or Read.
var aLongTimeAgo = time.Unix(1, 0)

// watchDeadline applies ctx's deadline and cancellation to a socket through
// set, and returns a function that clears it again. The lock keeps a late
// cancellation from poisoning the deadline of a later call.
func watchDeadline(ctx context.Context, set func(time.Time) error) (stop func()) {
	d, _ := ctx.Deadline()
	set(d)
	var mu sync.Mutex
	done := false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			set(aLongTimeAgo)
		}
	})
	return func() {
		stopAfter()
		mu.Lock()
		done = true
		mu.Unlock()
		set(time.Time{})
	}
}

// Conn is one connection to one kernel. Exec and Ping run one at a time (a
// second call waits); Close may be called at any time, also to abort a
// running Exec. Once any call fails, the Conn is broken: every later call
// returns that first error, and the caller should Accept the kernel's
// reconnect or kill the sandbox.
type Conn struct {
	nc       *net.UnixConn
	r        *bufio.Reader
	maxFrame int
	hello    Hello
	sem      chan struct{} // held by the running Exec or Ping
	pings    uint64
	// cells counts the cells this kernel started: the hello's count, then
	// one per cell the host saw start. Guarded by mu.
	cells int

	mu        sync.Mutex
	err       error
	closeOnce sync.Once
}

// UIDs is the host uids a kernel's peer may have: [First, End).
type UIDs struct{ First, End int }

// AnyUID admits every peer: for tests whose kernel runs unsandboxed.
var AnyUID = UIDs{0, 1 << 32}

// Accept waits for the kernel to connect and say hello, until ctx is done.
// maxFrame bounds every frame read from the kernel (<= 0: DefaultMaxFrame).
// The socket must be connectable by the sandbox's unprivileged host uid,
// so any local user who finds it can connect too (a daemon outside
// systemd has its sandboxes' mounts in the host's namespace): a peer whose
// uid (SO_PEERCRED, from the kernel) is outside uids, the sandbox's, is
// closed unread, as is one whose first frame is not a valid hello, and
// Accept keeps waiting. A stranger who won the race took the session's
// envs and every cell's code, and answered with forged results.
func Accept(ctx context.Context, l *net.UnixListener, maxFrame int, uids UIDs) (*Conn, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	stop := watchDeadline(ctx, l.SetDeadline)
	defer stop()
	var rejected error
	for {
		nc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			if rejected != nil {
				return nil, fmt.Errorf("accept kernel: %w (last rejected connection: %v)", err, rejected)
			}
			return nil, fmt.Errorf("accept kernel: %w", err)
		}
		if err := peerIn(nc, uids); err != nil {
			nc.Close()
			rejected = err
			continue
		}
		c, err := handshake(ctx, nc, maxFrame)
		if err == nil {
			return c, nil
		}
		nc.Close()
		rejected = err
	}
}

// peerIn checks the connected peer's uid against uids.
func peerIn(nc *net.UnixConn, uids UIDs) error {
	raw, err := nc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if uid := int(cred.Uid); uid < uids.First || uid >= uids.End {
		return fmt.Errorf("peer uid %d (pid %d) is not the sandbox's (%d-%d)", uid, cred.Pid, uids.First, uids.End-1)
	}
	return nil
}

func handshake(ctx context.Context, nc *net.UnixConn, maxFrame int) (*Conn, error) {
	stop := watchDeadline(ctx, nc.SetDeadline)
	defer stop()
	// Small: one per live session, and a frame's payload past it is read
	// straight into the frame (bufio skips its buffer for large reads);
	// 64 KiB each was 64 MB of the daemon's memory for 1000 sessions.
	r := bufio.NewReaderSize(nc, 4<<10)
	b, err := ReadFrame(r, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	h, err := decodeHello(b)
	if err != nil {
		return nil, err
	}
	switch {
	case h.PID <= 0:
		return nil, fmt.Errorf("hello pid %d: %w", h.PID, ErrProtocol)
	case h.Cells < 0:
		return nil, fmt.Errorf("hello cells %d: %w", h.Cells, ErrProtocol)
	case len(h.Python) > maxPythonLen:
		return nil, fmt.Errorf("hello python version of %d bytes: %w", len(h.Python), ErrProtocol)
	}
	return &Conn{
		nc:       nc,
		r:        r,
		maxFrame: maxFrame,
		hello:    h,
		sem:      make(chan struct{}, 1),
		cells:    h.Cells,
	}, nil
}

// decodeHello decodes a hello frame without materialising more than its
// small fields: anything may connect and send 64 MiB.
func decodeHello(b []byte) (Hello, error) {
	var h Hello
	obj, t, _, err := frameHead(b)
	if err != nil {
		return h, fmt.Errorf("decode hello: %w", err)
	}
	if t != frameHello {
		return h, fmt.Errorf("first frame is not a hello: %w", ErrProtocol)
	}
	err = eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"pid"`, `"cells"`:
			if kind(v) != '0' || len(v) > 20 {
				return fmt.Errorf("hello %s is not an integer: %w", k, ErrProtocol)
			}
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return fmt.Errorf("hello %s is not an integer: %w", k, ErrProtocol)
			}
			if k[1] == 'p' {
				h.PID = n
			} else {
				h.Cells = n
			}
		case `"python"`:
			if kind(v) != '"' || len(v) > 6*maxPythonLen+2 {
				return fmt.Errorf("hello python version of %d bytes: %w", len(v), ErrProtocol)
			}
			h.Python, _, _ = unquote(v, 6*maxPythonLen)
		case `"busy"`:
			return boolField(&h.Busy, k, v)
		case `"acks"`:
			return boolField(&h.Acks, k, v)
		}
		return nil
	})
	return h, err
}

// Hello returns the hello the kernel sent on this connection.
func (c *Conn) Hello() Hello { return c.hello }

// Cells is the kernel's cell count as the host saw it: the hello's count
// (untrusted, for display only) plus every cell started since.
func (c *Conn) Cells() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cells
}

// Close closes the connection. The kernel notices and reconnects.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("use of closed kernel connection: %w", net.ErrClosed)
	}
	c.mu.Unlock()
	return c.closeNet()
}

func (c *Conn) closeNet() error {
	var err error
	c.closeOnce.Do(func() { err = c.nc.Close() })
	return err
}

// fail marks the Conn broken with err (unless it already is) and closes it.
func (c *Conn) fail(err error) error {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.closeNet()
	return err
}

func (c *Conn) broken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Exec sends one cell and blocks until its result or a connection error.
// onStream, if not nil, gets each piece of output as it arrives, already
// capped at req.MaxOutput per stream by the host's own count. Exec has no
// timeout of its own: the caller enforces one (SIGINT to the sandbox, then a
// kill) or calls Close.
//
// An error means the Conn is broken, except for an invalid request and code
// too large to send, which leave it usable. When the connection ends after
// the cell started, the error comes with a partial Result: no Status, only
// the output received until then and the cell's ExecutionCount. An error that wraps
// ErrNotStarted says the cell's code never ran: nothing was sent, or the
// connection ended before the kernel's "started" frame (only meaningful
// when Hello().Acks).
func (c *Conn) Exec(req ExecRequest, onStream func(name, text string)) (*Result, error) {
	if req.ID == "" {
		return nil, errors.New("exec: empty id")
	}
	if req.MaxOutput < 0 {
		return nil, fmt.Errorf("exec %s: max output %d: must not be negative", req.ID, req.MaxOutput)
	}
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	if err := c.broken(); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, ErrNotStarted)
	}
	frame := struct {
		T         frameType `json:"t"`
		ID        string    `json:"id"`
		Code      string    `json:"code"`
		MaxOutput int64     `json:"max_output"`
		Context   string    `json:"context,omitempty"`
		Cwd       string    `json:"cwd,omitempty"`
		Reset     bool      `json:"reset,omitempty"`
	}{frameExec, req.ID, req.Code, req.MaxOutput, req.Context, req.Cwd, req.Reset}
	if err := WriteFrame(c.nc, frame); err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			return nil, fmt.Errorf("exec %s: %w", req.ID, err) // nothing was written
		}
		return nil, c.fail(fmt.Errorf("exec %s: %w (%w)", req.ID, err, ErrNotStarted))
	}
	st := newExecState(req, onStream)
	for {
		b, err := ReadFrame(c.r, c.maxFrame)
		if err != nil {
			if !st.started {
				err = fmt.Errorf("%w (%w)", err, ErrNotStarted)
				return nil, c.fail(fmt.Errorf("exec %s: %w", req.ID, err))
			}
			// The kernel died mid-cell (the OOM killer, os._exit, a
			// kill at the deadline): what it printed before is the
			// agent's best clue to why, so it is kept.
			res := st.partial()
			res.ExecutionCount = c.Cells()
			return res, c.fail(fmt.Errorf("exec %s: %w", req.ID, err))
		}
		was := st.started
		res, err := st.handle(b)
		if st.started && !was {
			c.mu.Lock()
			if c.cells < maxInt {
				c.cells++
			}
			c.mu.Unlock()
		}
		if err != nil {
			return nil, c.fail(fmt.Errorf("exec %s: %w", req.ID, err))
		}
		if res != nil {
			res.ExecutionCount = c.Cells()
			return res, nil
		}
	}
}

// Ping checks that the kernel answers, until ctx is done. It waits for a
// running Exec to finish first. A failed Ping, for whatever reason, breaks
// the Conn: an unanswered ping leaves the stream out of step.
func (c *Conn) Ping(ctx context.Context) error { return c.ping(ctx, "ping kernel", nil) }

// Reseed has the kernel draw new seeds from its own os.urandom for every
// generator seeded once at import (Python's random, numpy's global one,
// tempfile's names, multiprocessing's authkey), then answer as a Ping. A
// kernel restored from a template carries the template's seeds: it must be
// reseeded before it runs anyone's cell. A kernel older than this ignores
// the flag and answers: the host ships the kernel it speaks to.
func (c *Conn) Reseed(ctx context.Context) error {
	return c.ping(ctx, "reseed kernel", map[string]any{"reseed": true})
}

func (c *Conn) ping(ctx context.Context, what string, extra map[string]any) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	defer func() { <-c.sem }()
	if err := c.broken(); err != nil {
		return err
	}
	stop := watchDeadline(ctx, c.nc.SetDeadline)
	defer stop()
	c.pings++
	id := fmt.Sprintf("ping-%d", c.pings)
	failed := func(err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return c.fail(fmt.Errorf("%s: %w", what, err))
	}
	frame := map[string]any{"t": framePing, "id": id}
	for k, v := range extra {
		frame[k] = v
	}
	if err := WriteFrame(c.nc, frame); err != nil {
		return failed(err)
	}
	for {
		b, err := ReadFrame(c.r, c.maxFrame)
		if err != nil {
			return failed(err)
		}
		_, t, gotID, err := frameHead(b)
		if err != nil {
			return failed(err)
		}
		if t == framePong && stringIs(gotID, id) {
			return nil
		}
	}
}
