package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/jailcell/jailcell/api"
)

// Options tune Serve. Zero fields take the documented defaults.
type Options struct {
	// MaxLineBytes bounds one request line (without its newline). A longer
	// line is discarded unread and answered with a bad_request whose id is
	// null. Default 32 MiB.
	MaxLineBytes int
	// MaxInFlight bounds the requests running at once; reading pauses
	// while it is reached. Default 256.
	MaxInFlight int
	// MaxInFlightBytes bounds the summed size of the request lines running
	// at once and of their responses until written, so many large uploads,
	// downloads or results cannot pile up in memory; reading pauses while
	// it is reached (one request always fits). Default 256 MiB.
	MaxInFlightBytes int64
	// Logger receives transport problems (default slog.Default()). Never
	// stdout: that is the protocol stream.
	Logger *slog.Logger
}

// Serve speaks the JSON-lines protocol: one request object per line of
// r, one response (and, for streaming execs, events before it) per line of
// w. Each request runs in its own goroutine on behalf of this process's uid;
// each line is written whole under one lock. A line that is not a valid
// request is answered at once, in order, and reading goes on.
//
// Serve returns nil at EOF on r once every request read has been
// answered; the caller then shuts the manager down. If ctx ends first, or a
// write to w fails, it stops reading, waits for the running requests (whose
// context is cancelled) and returns the cause; a read already blocked on r
// is left to return on its own.
func Serve(ctx context.Context, r io.Reader, w io.Writer, d api.Handler, opts Options) error {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = api.DefaultMaxLineBytes
	}
	lim, log := api.NewBudget(opts.MaxInFlight, opts.MaxInFlightBytes, opts.Logger)
	owner := os.Getuid()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &lineWriter{w: w, log: log, fail: cancel}
	lines := make(chan readLine)
	go readLines(ctx, r, opts.MaxLineBytes, lines)

	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var ln readLine
		select {
		case <-ctx.Done():
			wg.Wait()
			return context.Cause(ctx)
		case ln = <-lines:
		}
		switch {
		case ln.err != nil:
			wg.Wait()
			if errors.Is(ln.err, io.EOF) {
				// A write failure may have ended things first.
				if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
				return nil
			}
			return fmt.Errorf("read requests: %w", ln.err)
		case ln.oversized:
			out.response(api.Fail(nil, api.BadRequest("request line of %d bytes is over the %d-byte limit; it was discarded", ln.n, opts.MaxLineBytes)))
			continue
		case len(bytes.TrimSpace(ln.data)) == 0:
			// Blank lines (a trailing "\n\n", keep-alives) are not requests.
			continue
		}

		req, derr := api.DecodeRequest(ln.data)
		if derr != nil {
			// Answered here, before the next line is read, so a bad line's
			// response keeps its place in the stream.
			out.response(api.Fail(req.ID, derr))
			continue
		}
		pl, err := lim.Take(ctx, int64(len(ln.data)))
		if err != nil {
			out.response(api.Fail(req.ID, &api.Error{Code: api.CodeUnavailable, Message: "shutting down: " + context.Cause(ctx).Error()}))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pl.Release()
			var emit func(api.Event)
			if req.Stream {
				emit = out.event
			}
			b := out.encode(d.Handle(ctx, owner, req, emit))
			// The response holds the request's place until it is written:
			// a client that sends downloads and does not read the answers
			// stops the reading of new requests instead of piling up
			// responses in the daemon.
			pl.Grow(int64(len(b)))
			out.write(b)
		}()
	}
}

// readLine is one line of input, or why there is none.
type readLine struct {
	data      []byte // without the line ending
	oversized bool   // over the limit: data is nil, n is how much was skipped
	n         int
	err       error // io.EOF at the end (after a last unterminated line)
}

// readLines reads r line by line without ever holding more than max bytes
// of one line: the rest of an oversized line is skipped as it is read, so
// a client cannot grow the buffer without bound (bufio.Scanner would
// instead fail and stop).
func readLines(ctx context.Context, r io.Reader, max int, lines chan<- readLine) {
	br := bufio.NewReaderSize(r, 64<<10)
	send := func(l readLine) bool {
		select {
		case lines <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var buf []byte
		n := 0
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			n += len(chunk)
			// +2 leaves room for a "\r\n" that is not content.
			if n <= max+2 {
				buf = append(buf, chunk...)
			} else {
				buf = nil
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			// A partial line before a read error is not a request.
			send(readLine{err: err})
			return
		}
		content := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
		switch {
		case n == 0:
		case n > max+2 || len(content) > max:
			skipped := n
			if err == nil {
				skipped-- // the newline
			}
			if !send(readLine{oversized: true, n: skipped}) {
				return
			}
		default:
			if !send(readLine{data: content}) {
				return
			}
		}
		if err != nil {
			send(readLine{err: err})
			return
		}
	}
}

// lineWriter writes whole lines under one lock. After the first write
// error it drops everything and cancels the serve context: nobody is
// listening any more.
type lineWriter struct {
	mu   sync.Mutex
	w    io.Writer
	log  *slog.Logger
	fail context.CancelCauseFunc
	err  error
}

func (lw *lineWriter) response(r *api.Response) { lw.write(lw.encode(r)) }

// encode is a response's line.
func (lw *lineWriter) encode(r *api.Response) []byte {
	b, err := api.EncodeLine(r)
	if err != nil {
		// E.g. a value the sandbox produced that JSON cannot carry; the
		// request still gets its one response.
		lw.log.Error("encode response", "err", err)
		b, _ = api.EncodeLine(api.Fail(r.ID, &api.Error{Code: api.CodeInternal, Message: "encode response: " + err.Error()}))
	}
	return b
}

func (lw *lineWriter) event(ev api.Event) {
	b, err := api.EncodeLine(ev)
	if err != nil {
		lw.log.Error("encode event", "err", err)
		return
	}
	lw.write(b)
}

func (lw *lineWriter) write(b []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return
	}
	if _, err := lw.w.Write(b); err != nil {
		lw.err = fmt.Errorf("write response: %w", err)
		lw.log.Error("write response", "err", err)
		lw.fail(lw.err)
	}
}
