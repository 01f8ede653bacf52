package seam

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// CellContext names the namespace of its session's kernel a cell runs in.
// The session's main namespace is the default; each other context is a
// dict of globals of its own in the same kernel, with its own working
// directory (the E2B door's code contexts). A context is made by its
// first cell and lives as long as the kernel.
type CellContext struct {
	// ID names the context: 1 to MaxContextIDBytes letters, digits, "-"
	// and "_". "" is the main namespace.
	ID string `json:"id"`
	// Cwd is the absolute directory, inside the sandbox, a new context
	// starts in; its cells may change it, and it stays theirs. Ignored
	// for a context that exists. "" starts it in the session's Workdir.
	Cwd string `json:"cwd,omitempty"`
	// Reset drops the context's namespace before the cell, so the cell
	// runs in a fresh one; with empty code nothing runs and none is made
	// (a removed context).
	Reset bool `json:"reset,omitempty"`
}

// Bounds of a CellContext.
const (
	MaxContextIDBytes  = 64
	MaxContextCwdBytes = 4096
)

var contextIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckContext validates a client's cell context; field names the request
// field for the error.
func CheckContext(field string, c *CellContext) error {
	if c == nil {
		return nil
	}
	switch {
	case c.ID == "" && (c.Cwd != "" || c.Reset):
		return fmt.Errorf("%w: %s.id is required with cwd or reset: the main namespace has neither", ErrBadRequest, field)
	case len(c.ID) > MaxContextIDBytes || (c.ID != "" && !contextIDRE.MatchString(c.ID)):
		return fmt.Errorf("%w: %s.id %.80q: want 1 to %d letters, digits, - and _", ErrBadRequest, field, c.ID, MaxContextIDBytes)
	case c.Cwd != "" && (!path.IsAbs(c.Cwd) || len(c.Cwd) > MaxContextCwdBytes || strings.IndexByte(c.Cwd, 0) >= 0):
		return fmt.Errorf("%w: %s.cwd %.80q: want an absolute path inside the sandbox, at most %d bytes, without NUL", ErrBadRequest, field, c.Cwd, MaxContextCwdBytes)
	}
	return nil
}
