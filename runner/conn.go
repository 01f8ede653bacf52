package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unicode/utf8"
)

// maxRichBytes caps the JSON of one result's value and display items
// together. Larger items are replaced by a text/plain marker.
const maxRichBytes = 32 << 20

// maxPythonLen bounds the version string a hello may carry.
const maxPythonLen = 64

// Hello is what the kernel says after each connect. It is untrusted: the
// counts are for display and diagnostics, not for decisions.
type Hello struct {
	// PID is the kernel's pid inside the sandbox's pid namespace.
	PID int `json:"pid"`
	// Python is the interpreter version, e.g. "3.11.2".
	Python string `json:"python"`
	// Cells counts the cells run since the kernel started, across
	// reconnects.
	Cells int `json:"cells"`
	// Busy is true if a cell was still running when the kernel connected
	// (the host restarted during a cell). Its result goes to the old id and
	// is ignored.
	Busy bool `json:"busy"`
	// Acks is true if the kernel sends a "started" frame before each
	// cell's code runs (see ErrNotStarted); older kernels do not.
	Acks bool `json:"acks"`
}

// ExecRequest is one cell to run.
type ExecRequest struct {
	// ID names the cell on the wire; frames with other ids are ignored. It
	// must not be empty, and must be unique over the kernel's life, across
	// reconnects: a cell orphaned by a host restart still sends its result
	// under its id, and a reused id would take it for its own.
	ID string
	// Code is the cell's Python source.
	Code string
	// MaxOutput caps the bytes kept per stream (stdout, stderr). The kernel
	// stops forwarding past it, and the host cuts there regardless.
	MaxOutput int64
}

// Result is the outcome of one cell. Everything but Stdout, Stderr and their
// truncation flags is the kernel's report, validated but untrusted.
type Result struct {
	// Status is "ok" or "error", as the kernel reported.
	Status string `json:"status"`
	// Stdout and Stderr are what the host received for the cell, at most
	// MaxOutput bytes each, cut at a UTF-8 boundary.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutTruncated and StderrTruncated are set if the kernel or the host
	// dropped output past MaxOutput.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// Value is the MIME bundle of the cell's trailing expression (always
	// with "text/plain"), or nil if there was none or it was None.
	Value map[string]any `json:"value,omitempty"`
	// Display lists what the cell showed: display() calls and matplotlib
	// figures, in order.
	Display []DisplayItem `json:"display,omitempty"`
	// Error describes the exception that ended the cell, if Status is
	// "error".
	Error *CellError `json:"error,omitempty"`
	// Interrupted is set if a SIGINT (the host's timeout) reached the cell.
	Interrupted bool `json:"interrupted,omitempty"`
}

// DisplayItem is one rich output.
type DisplayItem struct {
	// MIME is the preferred type of the item: image/png, image/svg+xml,
	// text/html, text/markdown, application/json, then text/plain.
	MIME string `json:"mime"`
	// Data is the item in that type: text, or base64 for binary types.
	Data string `json:"data"`
	// Bundle holds every representation the object offered, keyed by MIME
	// type, binary ones in base64.
	Bundle map[string]any `json:"bundle,omitempty"`
}

// CellError is an exception raised by a cell.
type CellError struct {
	// Type is the exception's class, e.g. "ZeroDivisionError"; qualified by
	// module unless builtin or defined in a cell.
	Type string `json:"type"`
	// Message is str() of the exception (for SyntaxError, its msg).
	Message string `json:"message"`
	// Traceback is formatted as Python does, without the kernel's frames.
	Traceback string `json:"traceback"`
	// Frames is the stack from the cell down to the raise. Cell code has
	// file "<cell-N>", N counting cells from 1.
	Frames []Frame `json:"frames"`
}

// Frame is one stack frame of a CellError.
type Frame struct {
	// File is the code's file name: "<cell-N>" for cell code.
	File string `json:"file"`
	// Line is the 1-based line number in File, 0 if unknown.
	Line int `json:"line"`
	// Name is the function, "<module>" for a cell's top level.
	Name string `json:"name"`
	// Code is the source line, stripped, or "" if unavailable.
	Code string `json:"code"`
}

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

	mu        sync.Mutex
	err       error
	closeOnce sync.Once
}

// Accept waits for the kernel to connect and say hello, until ctx is done.
// maxFrame bounds every frame read from the kernel (<= 0: DefaultMaxFrame).
// A connection whose first frame is not a valid hello is closed and Accept
// keeps waiting: only the kernel is expected, but anything able to reach the
// socket could connect.
func Accept(ctx context.Context, l *net.UnixListener, maxFrame int) (*Conn, error) {
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
		c, err := handshake(ctx, nc, maxFrame)
		if err == nil {
			return c, nil
		}
		nc.Close()
		rejected = err
	}
}

func handshake(ctx context.Context, nc *net.UnixConn, maxFrame int) (*Conn, error) {
	stop := watchDeadline(ctx, nc.SetDeadline)
	defer stop()
	r := bufio.NewReaderSize(nc, 64<<10)
	b, err := ReadFrame(r, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	var h struct {
		T string `json:"t"`
		Hello
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decode hello: %w: %v", ErrProtocol, err)
	}
	switch {
	case h.T != "hello":
		return nil, fmt.Errorf("first frame has type %q, want hello: %w", h.T, ErrProtocol)
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
		hello:    h.Hello,
		sem:      make(chan struct{}, 1),
	}, nil
}

// Hello returns the hello the kernel sent on this connection.
func (c *Conn) Hello() Hello { return c.hello }

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
// too large to send, which leave it usable. An error that wraps
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
		T         string `json:"t"`
		ID        string `json:"id"`
		Code      string `json:"code"`
		MaxOutput int64  `json:"max_output"`
	}{"exec", req.ID, req.Code, req.MaxOutput}
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
			}
			return nil, c.fail(fmt.Errorf("exec %s: %w", req.ID, err))
		}
		res, err := st.handle(b)
		if err != nil {
			return nil, c.fail(fmt.Errorf("exec %s: %w", req.ID, err))
		}
		if res != nil {
			return res, nil
		}
	}
}

// Ping checks that the kernel answers, until ctx is done. It waits for a
// running Exec to finish first. A failed Ping, for whatever reason, breaks
// the Conn: an unanswered ping leaves the stream out of step.
func (c *Conn) Ping(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("ping kernel: %w", context.Cause(ctx))
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
		return c.fail(fmt.Errorf("ping kernel: %w", err))
	}
	if err := WriteFrame(c.nc, map[string]string{"t": "ping", "id": id}); err != nil {
		return failed(err)
	}
	for {
		b, err := ReadFrame(c.r, c.maxFrame)
		if err != nil {
			return failed(err)
		}
		t, gotID, ok, err := frameHead(b)
		if err != nil {
			return failed(err)
		}
		if ok && t == "pong" && gotID == id {
			return nil
		}
	}
}

// frameHead decodes the type and id of a frame. ok is false if either is
// missing or not a string: such a frame is not addressed to anyone. err is
// set only if the frame is not a JSON object at all.
func frameHead(b []byte) (t, id string, ok bool, err error) {
	var head struct {
		T  json.RawMessage `json:"t"`
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", "", false, fmt.Errorf("%w: frame is not a JSON object: %v", ErrProtocol, err)
	}
	if json.Unmarshal(head.T, &t) != nil || json.Unmarshal(head.ID, &id) != nil {
		return "", "", false, nil
	}
	return t, id, true, nil
}

// execState accumulates one cell's frames. It is the host's whole defence
// against a forged stream: it keeps only frames with the cell's id, counts
// output bytes itself and cuts at MaxOutput, and validates the result.
//
// Strings need no further sanitising: encoding/json replaces invalid UTF-8
// and lone surrogates in every decoded string (map keys included) with
// U+FFFD, and cuts below are made at rune boundaries.
type execState struct {
	req       ExecRequest
	onStream  func(name, text string)
	out       [2][]byte
	truncated [2]bool
	// started: the kernel said the cell's code is about to run. Any frame
	// of the cell counts: a kernel does not stream for a cell it has not
	// started.
	started bool
}

var streamNames = [2]string{"stdout", "stderr"}

func newExecState(req ExecRequest, onStream func(name, text string)) *execState {
	return &execState{req: req, onStream: onStream}
}

// handle takes one frame. It returns the result once the cell's result frame
// arrived, or an error if the frame breaks the protocol.
func (s *execState) handle(b []byte) (*Result, error) {
	t, id, ok, err := frameHead(b)
	if err != nil {
		return nil, err
	}
	if !ok || id != s.req.ID {
		return nil, nil // stale, forged or meant for another request
	}
	s.started = true
	switch t {
	case "stream":
		var f struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("decode stream frame: %w: %v", ErrProtocol, err)
		}
		s.stream(f.Name, f.Text)
		return nil, nil
	case "result":
		return s.result(b)
	}
	return nil, nil
}

func (s *execState) stream(name, text string) {
	i := 0
	switch name {
	case "stdout":
	case "stderr":
		i = 1
	default:
		return
	}
	if s.truncated[i] || text == "" {
		// Once cut, a stream stays cut: later small pieces would otherwise
		// squeeze in after a gap.
		return
	}
	room := s.req.MaxOutput - int64(len(s.out[i]))
	if int64(len(text)) > room {
		text = cutUTF8(text, int(room))
		s.truncated[i] = true
	}
	if text == "" {
		return
	}
	s.out[i] = append(s.out[i], text...)
	if s.onStream != nil {
		s.onStream(streamNames[i], text)
	}
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a character.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (s *execState) result(b []byte) (*Result, error) {
	var w struct {
		Status          string            `json:"status"`
		Value           json.RawMessage   `json:"value"`
		Display         []json.RawMessage `json:"display"`
		Error           *CellError        `json:"error"`
		StdoutTruncated bool              `json:"stdout_truncated"`
		StderrTruncated bool              `json:"stderr_truncated"`
		Interrupted     bool              `json:"interrupted"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode result: %w: %v", ErrProtocol, err)
	}
	if w.Status != "ok" && w.Status != "error" {
		return nil, fmt.Errorf("result status %.64q: %w", w.Status, ErrProtocol)
	}
	res := &Result{
		Status:          w.Status,
		Stdout:          string(s.out[0]),
		Stderr:          string(s.out[1]),
		StdoutTruncated: w.StdoutTruncated || s.truncated[0],
		StderrTruncated: w.StderrTruncated || s.truncated[1],
		Interrupted:     w.Interrupted,
	}
	budget := maxRichBytes
	if len(w.Value) > 0 && string(w.Value) != "null" {
		if len(w.Value) > budget {
			res.Value = map[string]any{"text/plain": droppedNote("value", len(w.Value))}
		} else {
			budget -= len(w.Value)
			if err := json.Unmarshal(w.Value, &res.Value); err != nil {
				return nil, fmt.Errorf("decode result value: %w: %v", ErrProtocol, err)
			}
		}
	}
	for _, raw := range w.Display {
		if len(raw) > budget {
			note := droppedNote("display item", len(raw))
			res.Display = append(res.Display, DisplayItem{MIME: "text/plain", Data: note})
			continue
		}
		var item DisplayItem
		if err := json.Unmarshal(raw, &item); err != nil {
			return nil, fmt.Errorf("decode display item: %w: %v", ErrProtocol, err)
		}
		if item.MIME == "" {
			continue // nothing a client could render
		}
		budget -= len(raw)
		res.Display = append(res.Display, item)
	}
	switch {
	case w.Status == "ok":
		res.Error = nil
	case w.Error == nil:
		res.Error = &CellError{Type: "Error", Message: "the kernel reported an error without details"}
	default:
		res.Error = w.Error
	}
	return res, nil
}

func droppedNote(what string, n int) string {
	return fmt.Sprintf("[%s dropped: %d bytes is over the %d MiB limit for one result]", what, n, maxRichBytes>>20)
}
