package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// JSONL is a client of the JSON-lines protocol: requests as lines on a
// writer, responses (and streamed output events) as lines on a reader,
// matched by id, so any number of requests may run at once. Sessions
// belong to the uid of the jailcell process at the other end. Safe for
// concurrent use.
type JSONL struct {
	w   io.Writer
	wmu sync.Mutex

	mu      sync.Mutex
	nextID  int64
	pending map[string]*call
	err     error // set once the reader has stopped
	done    chan struct{}

	closer func() error
}

var _ API = (*JSONL)(nil)

// call is one request waiting for its answer. Its events are queued by
// the reader and delivered by the caller's own goroutine: a callback that
// calls the client (an Interrupt from OnOutput) needs the reader free to
// read that call's answer, and would deadlock if it ran on the reader.
type call struct {
	events *ExecOptions // nil: no events expected
	resp   chan json.RawMessage

	mu sync.Mutex
	// queued are the events read and not yet delivered. Unbounded on
	// purpose: jailcell bounds what one cell may print (the policy's
	// output_bytes), and a reader that waited on a slow callback would
	// stall every other request's answers.
	queued []event
	wake   chan struct{} // one pending signal: queued has more
}

// queue hands an event to the caller's goroutine.
func (cl *call) queue(ev event) {
	cl.mu.Lock()
	cl.queued = append(cl.queued, ev)
	cl.mu.Unlock()
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// deliver runs the callbacks of every queued event, in order, on the
// calling goroutine.
func (cl *call) deliver() {
	for {
		cl.mu.Lock()
		evs := cl.queued
		cl.queued = nil
		cl.mu.Unlock()
		if len(evs) == 0 {
			return
		}
		for _, ev := range evs {
			cl.events.deliver(ev)
		}
	}
}

// NewJSONL speaks JSON lines over r and w, e.g. the two ends of a pipe to
// `jailcell json`, or a socket to something that relays it.
func NewJSONL(r io.Reader, w io.Writer) *JSONL {
	c := &JSONL{w: w, pending: map[string]*call{}, done: make(chan struct{})}
	go c.read(r)
	return c
}

// StartJSON runs `binary json args...` (binary "" = "jailcell" on PATH)
// and speaks to it over its stdin and stdout; its stderr (logs) goes to
// stderr if not nil. Close ends it.
func StartJSON(binary string, stderr io.Writer, args ...string) (*JSONL, error) {
	if binary == "" {
		binary = "jailcell"
	}
	cmd := exec.Command(binary, append([]string{"json"}, args...)...)
	cmd.Stderr = stderr
	return StartJSONCmd(cmd)
}

// StartJSONCmd starts cmd, a `jailcell json` command line the caller has
// set up (environment, credentials, stderr), and speaks to it over its
// stdin and stdout. Close ends it.
func StartJSONCmd(cmd *exec.Cmd) (*JSONL, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := NewJSONL(out, in)
	c.closer = func() error {
		if cmd.WaitDelay == 0 {
			// A process it started holding stderr open must not keep Wait
			// from returning once jailcell itself is gone.
			cmd.WaitDelay = time.Second
		}
		killed := make(chan struct{})
		exited := make(chan error, 1)
		go func() {
			// Wait closes our end of stdout: only once the reader has seen
			// its end, so no answer still in the pipe is lost, or once
			// jailcell is killed.
			select {
			case <-c.done:
			case <-killed:
			}
			exited <- cmd.Wait()
		}()
		// EOF on stdin: jailcell answers what it has, tears every sandbox
		// down and exits.
		in.Close()
		timer := time.NewTimer(closeWait)
		defer timer.Stop()
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("%s: %w", cmd.Path, err)
			}
			return nil
		case <-timer.C:
		}
		// One that does not exit (a teardown stuck in the kernel, a child
		// that stopped reading) must not hang the caller's Close for ever.
		_ = cmd.Process.Kill()
		close(killed)
		err := <-exited
		return fmt.Errorf("%s did not exit within %s of its stdin closing, so it was killed (a jailcell started on its state directory sweeps what it left): %w",
			cmd.Path, closeWait, err)
	}
	return c, nil
}

// closeWait bounds what Close waits for a `jailcell json` it started to
// exit, and the close of a session the client refuses (created).
var closeWait = 30 * time.Second

// Close ends a process started by StartJSON and waits for it, up to 30 s
// (then it is killed, and Close says so); otherwise it does nothing (the
// caller owns the stream).
func (c *JSONL) Close() error {
	if c.closer == nil {
		return nil
	}
	return c.closer()
}

// read dispatches lines to their callers until the stream ends.
func (c *JSONL) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line []byte
		line, err = readLine(br, maxResponseBytes)
		if err != nil {
			break
		}
		var head struct {
			ID json.RawMessage `json:"id"`
			event
		}
		if json.Unmarshal(line, &head) != nil {
			continue
		}
		key := string(head.ID)
		c.mu.Lock()
		cl := c.pending[key]
		if cl != nil && head.Event == "" {
			delete(c.pending, key)
		}
		c.mu.Unlock()
		if cl == nil {
			continue
		}
		if head.Event != "" {
			if cl.events != nil {
				cl.queue(head.event)
			}
			continue
		}
		cl.resp <- json.RawMessage(line)
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("jailcell: the JSON-lines stream ended")
	}
	c.mu.Lock()
	c.err = err
	for k, cl := range c.pending {
		delete(c.pending, k)
		close(cl.resp)
	}
	c.mu.Unlock()
	close(c.done)
}

// roundTrip sends one request and waits for its response.
func (c *JSONL) roundTrip(ctx context.Context, req map[string]any, events *ExecOptions) (*response, error) {
	raw, err := c.roundTripRaw(ctx, req, events)
	if err != nil {
		return nil, err
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("jailcell: decode response: %w", err)
	}
	return &r, checkResponse(0, &r)
}

// roundTripRaw sends one request and returns its response line.
func (c *JSONL) roundTripRaw(ctx context.Context, req map[string]any, events *ExecOptions) (json.RawMessage, error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	if !events.streamed() {
		events = nil
	}
	cl := &call{events: events, resp: make(chan json.RawMessage, 1), wake: make(chan struct{}, 1)}
	c.pending[id] = cl
	c.mu.Unlock()

	req["id"] = json.RawMessage(id)
	if events != nil {
		req["stream"] = true
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return nil, err
	}
	c.wmu.Lock()
	_, err = c.w.Write(append(b, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("jailcell: send request: %w", err)
	}
	for {
		select {
		case <-cl.wake:
			cl.deliver()
		case raw, ok := <-cl.resp:
			// The reader queued every event before the answer: all are
			// delivered before the call returns.
			cl.deliver()
			if !ok {
				c.mu.Lock()
				defer c.mu.Unlock()
				return nil, c.err
			}
			return raw, nil
		case <-ctx.Done():
			// The request runs on in jailcell; its answer is dropped.
			c.forget(id)
			return nil, ctx.Err()
		}
	}
}

func (c *JSONL) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// Ping reports the version and isolation of the jailcell at the other end.
func (c *JSONL) Ping(ctx context.Context) (*Health, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": "ping"}, nil)
	if err != nil {
		return nil, err
	}
	return &Health{Version: r.Version, Isolation: r.Isolation}, nil
}

// Create implements API.
func (c *JSONL) Create(ctx context.Context, opts CreateOptions) (*Session, error) {
	req, err := asMap(newCreateBody(opts))
	if err != nil {
		return nil, err
	}
	req["op"] = "create"
	r, err := c.roundTrip(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return created(ctx, c, opts, r.Session)
}

// Sessions implements API.
func (c *JSONL) Sessions(ctx context.Context) ([]Session, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": "sessions"}, nil)
	if err != nil {
		return nil, err
	}
	return r.Sessions, nil
}

// CloseSession implements API.
func (c *JSONL) CloseSession(ctx context.Context, id string) error {
	_, err := c.roundTrip(ctx, map[string]any{"op": "close", "session": id}, nil)
	return err
}

// Hibernate implements API.
func (c *JSONL) Hibernate(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "hibernate")
}

// Restore implements API.
func (c *JSONL) Restore(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "restore")
}

// Snapshot implements API.
func (c *JSONL) Snapshot(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "snapshot")
}

// Rollback implements API.
func (c *JSONL) Rollback(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "rollback")
}

// Fork implements API.
func (c *JSONL) Fork(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "fork")
}

// Interrupt implements API.
func (c *JSONL) Interrupt(ctx context.Context, id string) (bool, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": "interrupt", "session": id}, nil)
	if err != nil {
		return false, err
	}
	return r.Interrupted, nil
}

func (c *JSONL) sessionOp(ctx context.Context, id, op string) (*Session, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": op, "session": id}, nil)
	if err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// Exec implements API.
func (c *JSONL) Exec(ctx context.Context, id, code string, opts *ExecOptions) (*Result, error) {
	req, err := asMap(newExecBody(code, opts))
	if err != nil {
		return nil, err
	}
	req["op"] = "exec"
	if id != "" {
		req["session"] = id
	}
	r, err := c.roundTrip(ctx, req, opts)
	if err != nil {
		return nil, err
	}
	return r.result(), nil
}

// Upload implements API.
func (c *JSONL) Upload(ctx context.Context, id, path string, data []byte) error {
	_, err := c.UploadWith(ctx, id, path, data, UploadOptions{})
	return err
}

// UploadWith implements API.
func (c *JSONL) UploadWith(ctx context.Context, id, path string, data []byte, opts UploadOptions) (*Entry, error) {
	if data == nil {
		data = []byte{}
	}
	req := map[string]any{"op": "upload", "session": id, "path": path, "data": data}
	if len(opts.Metadata) > 0 {
		req["metadata"] = opts.Metadata
	}
	r, err := c.roundTrip(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return r.uploaded(), nil
}

// Download implements API.
func (c *JSONL) Download(ctx context.Context, id, path string) ([]byte, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": "download", "session": id, "path": path}, nil)
	if err != nil {
		return nil, err
	}
	if r.Data == nil {
		return []byte{}, nil
	}
	return r.Data, nil
}

// Files implements API.
func (c *JSONL) Files(ctx context.Context, id string) ([]Entry, error) {
	r, err := c.roundTrip(ctx, map[string]any{"op": "files", "session": id}, nil)
	if err != nil {
		return nil, err
	}
	return r.Files, nil
}

// asMap turns a body struct into a request map (its omitempty rules kept).
func asMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}
