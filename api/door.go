package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
)

// What the front-door packages (api/jsonl, api/jupyter, ...) share with
// the dispatcher: one way to fail a request, one line encoding, one
// in-flight budget, so no door answers or bounds differently.

// Fail is the failed response to the request with id (nil: a null id).
func Fail(id []byte, e *Error) *Response { return fail(id, e) }

// BadRequest is a bad_request error with a formatted message.
func BadRequest(format string, a ...any) *Error { return badRequest(format, a...) }

// EncodeLine is JSON plus a newline, without HTML escaping.
func EncodeLine(v any) ([]byte, error) { return encodeLine(v) }

// encodeLine is JSON plus a newline, without HTML escaping: outputs are
// code and its output, where "<" is common and \u003c only noise.
func encodeLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Budget is the in-flight budget of a door with one client and no owner
// shares (JSON-lines).
type Budget struct{ b *budget }

// NewBudget bounds the requests running at once and their summed bytes
// (0 means the default), and resolves the logger (nil: slog.Default()).
func NewBudget(maxInFlight int, maxBytes int64, log *slog.Logger) (*Budget, *slog.Logger) {
	b, l := transport(maxInFlight, maxBytes, log)
	return &Budget{b}, l
}

// Take waits for a place of weight w, or returns ctx's end.
func (b *Budget) Take(ctx context.Context, w int64) (*Place, error) {
	p, err := b.b.take(ctx, noOwner, w)
	if err != nil {
		return nil, err
	}
	return &Place{p}, nil
}

// Place is one request's share of a Budget, held until its response has
// been written.
type Place struct{ p *place }

// Grow adds n bytes (the encoded response) to the place.
func (p *Place) Grow(n int64) { p.p.grow(n) }

// Release gives the place back.
func (p *Place) Release() { p.p.release() }

// Reader reads r, a request's body taken at first bytes, and grows the
// place by what is read past them: a body is admitted at a share of the
// budget, not at what it declares, and weighed as it comes.
func (p *Place) Reader(r io.Reader, first int64) io.Reader {
	return &growingReader{r: r, p: p, left: first}
}

type growingReader struct {
	r    io.Reader
	p    *Place
	left int64 // of the first weight, not yet read
}

func (g *growingReader) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	if g.left -= int64(n); g.left < 0 {
		g.p.Grow(-g.left)
		g.left = 0
	}
	return n, err
}

// BodyReader reads a request body a door streams into the workspace
// (Putter): it counts the bytes read and keeps the first error other than
// EOF, by which the door tells the body's faults (too large, too slow, cut
// short) from the workspace's.
type BodyReader struct {
	R   io.Reader
	N   int64
	Err error
}

func (b *BodyReader) Read(p []byte) (int, error) {
	n, err := b.R.Read(p)
	b.N += int64(n)
	if err != nil && err != io.EOF && b.Err == nil {
		b.Err = err
	}
	return n, err
}

// DefaultMaxLineBytes bounds one JSON request line or body, in every door
// that reads them (32 MiB).
const DefaultMaxLineBytes = 32 << 20

const defaultMaxLineBytes = DefaultMaxLineBytes

// NullID is the id of a response to a request whose own id is unknown.
var NullID = nullID

// PlainOK reports an info answer that made nothing (info, set_timeout),
// which HTTP answers 200 rather than 201.
func (r *Response) PlainOK() bool { return r.plainOK }

// MaxCount is the bound on the places held at once, its default applied.
func (b *Budget) MaxCount() int { return b.b.maxCount }

// MaxWeight is the bound on the summed weight of the places held.
func (b *Budget) MaxWeight() int64 { return b.b.maxWeight }

// Share bounds one owner's part of the budget (a door with many clients,
// HTTP); one request of an owner holding nothing always fits.
func (b *Budget) Share(perCount int, perWeight int64) { b.b.share(perCount, perWeight) }

// ShareWeight is one owner's share of the bytes (0: no share).
func (b *Budget) ShareWeight() int64 { return b.b.perWeight }

// TakeFor waits for a place of weight w in owner's share, or returns
// ctx's end.
func (b *Budget) TakeFor(ctx context.Context, owner int, w int64) (*Place, error) {
	p, err := b.b.take(ctx, owner, w)
	if err != nil {
		return nil, err
	}
	return &Place{p}, nil
}

// InFlight is what the budget holds now: places and their summed weight
// (tests watch it fill and drain).
func (b *Budget) InFlight() (count int, used int64) {
	b.b.mu.Lock()
	defer b.b.mu.Unlock()
	return b.b.count, b.b.used
}

// Ops lists every op the wire knows, in the order openapi.json's
// Request.op enum lists them.
func Ops() []string { return slices.Clone(ops) }
