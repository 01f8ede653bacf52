package session

import (
	"context"
	"log/slog"

	"github.com/jailcell/jailcell/session/seam"
)

// The workspace part owns the host's own file operations on a session's
// workspace (upload, download, listing, stat, remove, mkdir, watches), the
// files a cell is handed, the record of what a cell changed, and what
// follows a host write; and the host's connections to servers the
// session's cells run (ports.go), the other thing a door reaches inside a
// session besides its cells. It must never touch the session table, admission
// or the TTL/janitor: it reaches a session only through workspaceHost,
// which checks owner and state, so a file op can never act on a session
// the Manager refused.
//
// Workspace is the workspace part; Manager.Workspace returns the
// Manager's.
type Workspace struct {
	host workspaceHost
	// upper saves a hibernated session's workspace disk after a host
	// write: the durability part's, never the Manager's.
	upper interface{ saveUpper(s *Session) error }
}

// workspaceHost is what the workspace part needs back from the Manager.
type workspaceHost interface {
	lookup(ctx context.Context, owner int, id string) (*Session, error)
	claim(ctx context.Context, owner int, id string) (*Session, error)
	log() *slog.Logger
}

// Workspace returns the workspace part, whose methods act on one session's
// workspace as the host sees it (fileops.go, watch.go), as the API names
// it (seam.Workspace).
func (m *Manager) Workspace() seam.Workspace { return &m.ws }

var _ seam.Workspace = (*Workspace)(nil)
