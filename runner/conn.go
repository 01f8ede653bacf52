package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

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
	// OnDisplay, if set, gets each display item (a figure, a display()
	// call) as the cell shows it, before the result. A forged stream of
	// them is held to the result's own display budget: at most
	// maxDisplayItems items and maxRichBytes of JSON per cell; past it
	// items are not passed on (the result's list ends with its note).
	OnDisplay func(DisplayItem)
	// OnClearOutput, if set, gets each IPython clear_output() of the cell
	// (wait: clear when the next output comes, not now), in its place
	// among the streams and display items; at most maxClearOutputs per
	// cell.
	OnClearOutput func(wait bool)
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
	// ValueChart is the chart data of Value when the value is a matplotlib
	// Figure (see Chart).
	ValueChart *Chart `json:"value_chart,omitempty"`
	// Display lists what the cell showed: display() calls and matplotlib
	// figures, in order.
	Display []DisplayItem `json:"display,omitempty"`
	// Error describes the exception that ended the cell, if Status is
	// "error".
	Error *CellError `json:"error,omitempty"`
	// Interrupted is set if a SIGINT (the host's timeout) reached the cell.
	Interrupted bool `json:"interrupted,omitempty"`
	// ExecutionCount is the cell's number in its kernel (1, 2, ...), as
	// Jupyter's: the N of "<cell-N>" in tracebacks and of Out[N]. The host
	// counts it (Conn.Cells), starting from the hello's count, so a
	// restored checkpoint goes on from where it was dumped.
	ExecutionCount int `json:"execution_count,omitempty"`
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
	// Pager marks text IPython sent to its pager (%quickref, obj?, %pdoc,
	// %prun): what Jupyter carries as a `page` payload, kept out of stdout.
	Pager bool `json:"pager,omitempty"`
	// Chart is the data a matplotlib figure drew, beside its PNG (see
	// Chart); nil for anything else.
	Chart *Chart `json:"chart,omitempty"`
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
	// ExitCode is a failed shell command's exit status (`!cmd`, %pip;
	// negative: the signal that killed it), nil for other errors.
	ExitCode *int `json:"exit_code,omitempty"`
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
	// cells counts the cells this kernel started: the hello's count, then
	// one per cell the host saw start. Guarded by mu.
	cells int

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
		T         frameType `json:"t"`
		ID        string    `json:"id"`
		Code      string    `json:"code"`
		MaxOutput int64     `json:"max_output"`
	}{frameExec, req.ID, req.Code, req.MaxOutput}
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

// frameHead checks that b is a JSON object and finds its type (one of the
// kernel's in frameTypes, or "" for any other or none) and its id, raw (nil
// if absent). err is set only if the frame is not a JSON object at all.
func frameHead(b []byte) (obj []byte, t frameType, id []byte, err error) {
	obj, err = validObject(b)
	if err != nil {
		return nil, "", nil, err
	}
	var raw []byte
	eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"t"`:
			raw = v
		case `"id"`:
			id = v
		}
		return nil
	})
	return obj, receivedType(raw), id, nil
}

// Budgets of one result, in bytes of its JSON as the API encodes it
// (compact, no HTML escaping), so that the response a cell can cause has a
// bound MaxResultJSON states. Everything in a result frame counts: text is
// charged after UTF-8 repair and escaping, so "\u0001" costs its 6 bytes
// and a lone surrogate its U+FFFD. Lists are capped in count too, because
// a Go value costs more than its JSON when the elements are tiny.
const (
	// maxRichBytes caps a result's value and display items together: the
	// kernel's RICH_BUDGET, which it measures the same way or larger.
	maxRichBytes = 32 << 20
	// maxDisplayItems caps the display list (the kernel keeps one fewer and
	// ends with its own note of what it dropped). Items past it, or past
	// maxRichBytes, are dropped and summed up in one note.
	maxDisplayItems = 1000
	// maxBundleEntries caps the MIME types of one bundle; IPython's
	// formatters offer 8. Later entries are left out.
	maxBundleEntries = 32
	// maxMIMEBytes caps a MIME type name.
	maxMIMEBytes = 256
	// maxJSONDepth caps the nesting of a JSON value in a bundle: clients
	// parse responses with recursive decoders.
	maxJSONDepth = 64
	// Error fields, cut past these sizes. The kernel keeps 64 KiB of
	// message, 1 MiB of traceback and 1 KiB of each frame's code, in UTF-8.
	maxErrorType    = 1 << 10
	maxErrorMessage = 256 << 10
	maxTraceback    = 2 << 20
	// maxFrames caps the structured stack; as the kernel does, the first
	// and last halves are kept, with one frame in between saying how many
	// were left out.
	maxFrames    = 200
	maxFrameFile = 1 << 10
	maxFrameName = 256
	maxFrameCode = 2 << 10
	// noteBytes bounds the JSON of each note the host adds.
	noteBytes = 256

	// JSON around the fields, generously: {"mime":"","data":"","bundle":{},"pager":true},
	itemOverhead  = 48
	entryOverhead = 4 // "":,
	frameOverhead = 64
	resultFixed   = 512
	maxErrorJSON  = 128 + maxErrorType + maxErrorMessage + maxTraceback + 2*noteBytes +
		(maxFrames+1)*(frameOverhead+maxFrameFile+maxFrameName+maxFrameCode+noteBytes)
)

// MaxResultJSON is the most bytes a Result of a cell run with this
// MaxOutput takes encoded as the API encodes it (encoding/json, no HTML
// escaping), whatever the kernel sent: each stream at most 6 bytes per byte
// kept (a control character is escaped as \u00XX), the rich budget, the
// error's caps and the host's own notes. The daemon decodes a result into
// no more than that much text, plus at most maxDisplayItems items of at
// most maxBundleEntries entries and maxFrames+1 frames.
func MaxResultJSON(maxOutput int64) int64 {
	return resultFixed + 2*(6*maxOutput+2) + maxRichBytes + 2*(itemOverhead+2*noteBytes) + maxErrorJSON
}

// execState accumulates one cell's frames. It is the host's whole defence
// against a forged stream: it keeps only frames with the cell's id, counts
// output bytes itself and cuts at MaxOutput, and decodes the result within
// the budgets above, never materialising more of a frame than they allow.
type execState struct {
	req       ExecRequest
	onStream  func(name, text string)
	out       [2][]byte
	truncated [2]bool
	// started: the kernel said the cell's code is about to run. Any frame
	// of the cell counts: a kernel does not stream for a cell it has not
	// started.
	started bool
	// displayed and displayBudget: the display frames passed on so far,
	// and the bytes left for more, the result's own caps.
	displayed     int
	displayBudget int
	// clears: the clear_output items passed on so far (clear.go).
	clears int
}

var streamNames = [2]string{"stdout", "stderr"}

func newExecState(req ExecRequest, onStream func(name, text string)) *execState {
	return &execState{req: req, onStream: onStream, displayBudget: maxRichBytes}
}

// handle takes one frame. It returns the result once the cell's result frame
// arrived, or an error if the frame breaks the protocol.
func (s *execState) handle(b []byte) (*Result, error) {
	obj, t, id, err := frameHead(b)
	if err != nil {
		return nil, err
	}
	if !stringIs(id, s.req.ID) {
		return nil, nil // stale, forged or meant for another request
	}
	// Any frame of the cell counts as started, not only "started": a
	// kernel does not stream for a cell it has not started.
	s.started = true
	switch t {
	case frameStarted:
		return nil, nil
	case frameStream:
		return nil, s.stream(obj)
	case frameDisplay:
		return nil, s.display(obj)
	case frameResult:
		return s.result(obj)
	}
	return nil, nil // a type the host does not know: ignored
}

// display passes on one display frame's item, {"t":"display","id":...,
// "item":{"mime":...,"data":...,"bundle":{...}}}, decoded within what is
// left of the cell's display budget. Past the budget, or without a MIME
// type, an item is dropped: the result frame's list is the record, with
// its own note of what it left out.
func (s *execState) display(obj []byte) error {
	var raw []byte
	err := eachMember(obj, func(k, v []byte) error {
		if string(k) == `"item"` {
			raw = v
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decode display frame: %w", err)
	}
	switch kind(raw) {
	case 0, 'n':
		return nil
	case '{':
	default:
		return fmt.Errorf("decode display frame: item is not an object: %w", ErrProtocol)
	}
	clear, wait, err := clearItem(raw)
	if err != nil {
		return err
	}
	if clear {
		s.clearOutput(wait)
		return nil
	}
	if s.displayed >= maxDisplayItems || s.displayBudget <= 0 {
		return nil
	}
	item, cost, err := decodeItem(raw, s.displayBudget)
	if err != nil {
		return err
	}
	if cost == 0 || item.MIME == "" {
		return nil
	}
	s.displayed++
	s.displayBudget -= cost
	if s.req.OnDisplay != nil {
		s.req.OnDisplay(item)
	}
	return nil
}

// stringField checks that v, the value of key k, is a string or null.
func stringField(k, v []byte) error {
	if c := kind(v); c != '"' && c != 'n' {
		return fmt.Errorf("%s is not a string: %w", k, ErrProtocol)
	}
	return nil
}

func (s *execState) stream(obj []byte) error {
	var name, text []byte
	err := eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"name"`:
			name = v
		case `"text"`:
			text = v
		default:
			return nil
		}
		return stringField(k, v)
	})
	if err != nil {
		return fmt.Errorf("decode stream frame: %w", err)
	}
	i := 0
	switch {
	case stringIs(name, "stdout"):
	case stringIs(name, "stderr"):
		i = 1
	default:
		return nil
	}
	if s.truncated[i] || kind(text) != '"' || len(text) == 2 {
		// Once cut, a stream stays cut: later small pieces would otherwise
		// squeeze in after a gap.
		return nil
	}
	room := s.req.MaxOutput - int64(len(s.out[i]))
	start := len(s.out[i])
	var cut bool
	s.out[i], _, _, cut = scanString(s.out[i], text, int(min(room, int64(maxInt))), maxInt, decode)
	if cut {
		s.truncated[i] = true
	}
	if len(s.out[i]) > start && s.onStream != nil {
		s.onStream(streamNames[i], string(s.out[i][start:]))
	}
	return nil
}

// boolField sets *dst from v, a JSON boolean or null.
func boolField(dst *bool, k, v []byte) error {
	switch kind(v) {
	case 't':
		*dst = true
	case 'f', 'n':
		*dst = false
	default:
		return fmt.Errorf("%s is not a boolean: %w", k, ErrProtocol)
	}
	return nil
}

func (s *execState) result(obj []byte) (*Result, error) {
	var status, value, valueChart, display, errv []byte
	var stdoutCut, stderrCut, interrupted bool
	err := eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"status"`:
			status = v
		case `"value"`:
			value = v
		case `"value_chart"`:
			valueChart = v
		case `"display"`:
			display = v
		case `"error"`:
			errv = v
		case `"stdout_truncated"`:
			return boolField(&stdoutCut, k, v)
		case `"stderr_truncated"`:
			return boolField(&stderrCut, k, v)
		case `"interrupted"`:
			return boolField(&interrupted, k, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	res := &Result{
		Stdout:          string(s.out[0]),
		Stderr:          string(s.out[1]),
		StdoutTruncated: stdoutCut || s.truncated[0],
		StderrTruncated: stderrCut || s.truncated[1],
		Interrupted:     interrupted,
	}
	switch {
	case stringIs(status, "ok"):
		res.Status = "ok"
	case stringIs(status, "error"):
		res.Status = "error"
	default:
		if len(status) > 64 {
			status = status[:64]
		}
		return nil, fmt.Errorf("result status %q: %w", status, ErrProtocol)
	}
	budget := maxRichBytes
	if value != nil && kind(value) != 'n' {
		if kind(value) != '{' {
			return nil, fmt.Errorf("decode result value: not an object: %w", ErrProtocol)
		}
		v, cost := decodeBundle(value, budget)
		if v == nil {
			v = map[string]any{"text/plain": fmt.Sprintf("[value dropped: over the %d MiB limit for one result]", maxRichBytes>>20)}
		} else {
			budget -= cost
		}
		res.Value = v
	}
	if res.Value != nil && kind(valueChart) != 0 && kind(valueChart) != 'n' {
		c, n, err := decodeChart(valueChart)
		if err != nil {
			c = refusedChart(err)
			b, _ := json.Marshal(c)
			n = len(b)
		}
		if n += len(`,"value_chart":`); n <= budget {
			res.ValueChart = c
			budget -= n
		}
	}
	if res.Display, err = decodeDisplay(display, budget); err != nil {
		return nil, err
	}
	switch {
	case res.Status == "ok":
	case errv == nil || kind(errv) == 'n':
		res.Error = &CellError{Type: "Error", Message: "the kernel reported an error without details"}
	case kind(errv) != '{':
		return nil, fmt.Errorf("decode result error: not an object: %w", ErrProtocol)
	default:
		if res.Error, err = decodeError(errv); err != nil {
			return nil, fmt.Errorf("decode result error: %w", err)
		}
	}
	return res, nil
}

// decodeBundle decodes a MIME bundle (a JSON object) whose JSON may take at
// most budget bytes. It returns the bundle and what it cost, or nil if it
// does not fit. Strings stay strings; other JSON values are kept as
// canonical json.RawMessage, never as trees of Go values, which cost many
// times their JSON when small and nested ("[[],[],...]").
func decodeBundle(obj []byte, budget int) (map[string]any, int) {
	m := map[string]any{}
	cost := 2
	over := errors.New("over")
	err := eachMember(obj, func(k, v []byte) error {
		if len(m) >= maxBundleEntries {
			return nil
		}
		key, kenc, cut := unquote(k, maxMIMEBytes)
		if cut || key == "" {
			return nil
		}
		c := cost + entryOverhead + kenc
		if c > budget {
			return over
		}
		if kind(v) == '"' {
			text, enc, cut := unquote(v, budget-c)
			if cut {
				return over
			}
			m[key] = text
			cost = c + enc
			return nil
		}
		canon, ok := canonical(v, budget-c, maxJSONDepth)
		if !ok {
			return over
		}
		m[key] = json.RawMessage(canon)
		cost = c + len(canon)
		return nil
	})
	if err != nil {
		return nil, 0
	}
	return m, cost
}

// decodeDisplay decodes the display list within budget bytes: at most
// maxDisplayItems items, and one note at the end for all it dropped.
func decodeDisplay(arr []byte, budget int) ([]DisplayItem, error) {
	if arr == nil || kind(arr) == 'n' {
		return nil, nil
	}
	if kind(arr) != '[' {
		return nil, fmt.Errorf("decode display: not a list: %w", ErrProtocol)
	}
	var items []DisplayItem
	dropped, droppedBytes := 0, 0
	var err error
	eachElement(arr, func(raw []byte) bool {
		switch kind(raw) {
		case 'n':
			return true
		case '{':
		default:
			err = fmt.Errorf("decode display item: not an object: %w", ErrProtocol)
			return false
		}
		if len(items) < maxDisplayItems {
			var item DisplayItem
			var cost int
			item, cost, err = decodeItem(raw, budget)
			if err != nil {
				return false
			}
			if cost > 0 && item.MIME == "" {
				return true // nothing a client could render
			}
			if cost > 0 {
				budget -= cost
				items = append(items, item)
				return true
			}
		}
		dropped++
		droppedBytes += len(raw)
		return true
	})
	if err != nil {
		return nil, err
	}
	if dropped > 0 {
		note := fmt.Sprintf("[%d display items dropped (%d bytes): over the limit of %d items and %d MiB for one result]",
			dropped, droppedBytes, maxDisplayItems, maxRichBytes>>20)
		items = append(items, DisplayItem{MIME: "text/plain", Data: note})
	}
	return items, nil
}

// decodeItem decodes one display item whose JSON may take at most budget
// bytes. A cost of 0 means it does not fit.
func decodeItem(obj []byte, budget int) (DisplayItem, int, error) {
	var item DisplayItem
	var chart []byte
	cost := itemOverhead
	fits := true
	err := eachMember(obj, func(k, v []byte) error {
		if !fits {
			return nil
		}
		switch string(k) {
		case `"mime"`, `"data"`:
			if err := stringField(k, v); err != nil {
				return err
			}
			if kind(v) == 'n' {
				return nil
			}
			limit := budget - cost
			if k[1] == 'm' {
				limit = min(limit, maxMIMEBytes)
			}
			text, enc, cut := unquote(v, limit)
			if cut {
				fits = false
				return nil
			}
			if k[1] == 'm' {
				item.MIME = text
			} else {
				item.Data = text
			}
			cost += enc
		case `"bundle"`:
			switch kind(v) {
			case 'n':
				return nil
			case '{':
			default:
				return fmt.Errorf("bundle is not an object: %w", ErrProtocol)
			}
			b, c := decodeBundle(v, budget-cost)
			if b == nil {
				fits = false
				return nil
			}
			if len(b) > 0 {
				item.Bundle = b
			}
			cost += c
		case `"pager"`:
			return boolField(&item.Pager, k, v)
		case `"chart"`:
			chart = v
		}
		return nil
	})
	if err != nil {
		return item, 0, fmt.Errorf("decode display item: %w", err)
	}
	if fits && kind(chart) != 0 && kind(chart) != 'n' {
		// A chart the host refuses leaves the item PNG only, with the
		// reason in its place: it is the cell's own output, so it does
		// not break the connection.
		c, n, err := decodeChart(chart)
		if err != nil {
			c = refusedChart(err)
			b, _ := json.Marshal(c)
			n = len(b)
		}
		item.Chart = c
		cost += len(`,"chart":`) + n
	}
	if !fits || cost > budget {
		return DisplayItem{}, 0, nil
	}
	return item, cost, nil
}

// decodeError decodes a result's error object within the error caps.
func decodeError(obj []byte) (*CellError, error) {
	e := &CellError{}
	err := eachMember(obj, func(k, v []byte) error {
		var dst *string
		limit := 0
		switch string(k) {
		case `"type"`:
			dst, limit = &e.Type, maxErrorType
		case `"message"`:
			dst, limit = &e.Message, maxErrorMessage
		case `"traceback"`:
			dst, limit = &e.Traceback, maxTraceback
		case `"frames"`:
			var err error
			e.Frames, err = decodeFrames(v)
			return err
		case `"exit_code"`:
			switch kind(v) {
			case 'n':
			case '0':
				n, ok := exitCode(v)
				if !ok {
					return fmt.Errorf("exit_code %.20s is not an exit status: %w", v, ErrProtocol)
				}
				e.ExitCode = &n
			default:
				return fmt.Errorf("exit_code is not a number: %w", ErrProtocol)
			}
			return nil
		default:
			return nil
		}
		if err := stringField(k, v); err != nil {
			return err
		}
		if kind(v) == 'n' {
			*dst = ""
			return nil
		}
		text, _, cut := unquote(v, limit)
		if cut && dst != &e.Type {
			text += fmt.Sprintf("\n[%s cut by the host at %d bytes: %d bytes in the frame]", k[1:len(k)-1], limit, len(v))
		}
		*dst = text
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// decodeFrames decodes a traceback's frames: all of them up to maxFrames,
// else the first and last halves with one frame between saying how many
// were left out. The list is counted before any frame is decoded.
func decodeFrames(arr []byte) ([]Frame, error) {
	switch kind(arr) {
	case 'n':
		return nil, nil
	case '[':
	default:
		return nil, fmt.Errorf("frames is not a list: %w", ErrProtocol)
	}
	n := countElements(arr)
	half := maxFrames / 2
	var frames []Frame
	var err error
	i := 0
	eachElement(arr, func(raw []byte) bool {
		defer func() { i++ }()
		if n > maxFrames && i >= half && i < n-half {
			if i == half {
				frames = append(frames, Frame{File: "<jailcell>", Name: fmt.Sprintf("[%d frames left out: over the limit of %d]", n-2*half, maxFrames)})
			}
			return true
		}
		switch kind(raw) {
		case 'n':
			return true
		case '{':
		default:
			err = fmt.Errorf("frame is not an object: %w", ErrProtocol)
			return false
		}
		var f Frame
		f, err = decodeFrame(raw)
		frames = append(frames, f)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return frames, nil
}

func decodeFrame(obj []byte) (Frame, error) {
	var f Frame
	err := eachMember(obj, func(k, v []byte) error {
		var dst *string
		limit := 0
		switch string(k) {
		case `"file"`:
			dst, limit = &f.File, maxFrameFile
		case `"name"`:
			dst, limit = &f.Name, maxFrameName
		case `"code"`:
			dst, limit = &f.Code, maxFrameCode
		case `"line"`:
			switch kind(v) {
			case '0':
				f.Line = smallInt(v)
			case 'n':
			default:
				return fmt.Errorf("frame line is not a number: %w", ErrProtocol)
			}
			return nil
		default:
			return nil
		}
		if err := stringField(k, v); err != nil {
			return err
		}
		if kind(v) == '"' {
			*dst, _, _ = unquote(v, limit)
		}
		return nil
	})
	return f, err
}

// exitCode parses a JSON number as an exit status: 0 to 255, or minus a
// signal number (-1 to -128).
func exitCode(v []byte) (int, bool) {
	if len(v) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < -128 || n > 255 {
		return 0, false
	}
	return n, true
}

// smallInt parses a JSON number as a non-negative int32, or returns 0.
func smallInt(v []byte) int {
	if len(v) > 10 {
		return 0
	}
	n, err := strconv.ParseInt(string(v), 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int(n)
}
