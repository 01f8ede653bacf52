package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
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

// DefaultMaxLineBytes bounds one JSON request line or body, in every door
// that reads them (32 MiB).
const DefaultMaxLineBytes = 32 << 20

const defaultMaxLineBytes = DefaultMaxLineBytes
