package api_test

import (
	"context"
	"io"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/jsonl"
)

// The contract and workflow tests in package api drive the JSON-lines
// door; it lives in api/jsonl, which only this external package may import.
func init() {
	api.ServeJSONLForTest = func(ctx context.Context, r io.Reader, w io.Writer, h api.Handler) error {
		return jsonl.Serve(ctx, r, w, h, jsonl.Options{})
	}
}
