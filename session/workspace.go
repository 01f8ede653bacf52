package session

import (
	"context"
	"log/slog"
)

// The workspace part owns the host's own file operations on a session's
// workspace (stat, remove, mkdir, watches) and what follows a host write.
// It must never touch the session table, admission or the TTL/janitor:
// it reaches a session only through workspaceHost, which checks owner
// and state, so a file op can never act on a session the Manager refused.
type workspace struct {
	host workspaceHost
	// upper saves a hibernated session's workspace disk after a host
	// write: the durability part's, never the Manager's.
	upper interface{ saveUpper(s *Session) error }
}

// workspaceHost is what the workspace part needs back from the Manager.
type workspaceHost interface {
	lookup(ctx context.Context, owner int, id string) (*Session, error)
	claim(ctx context.Context, owner int, id string) (*Session, error)
	rescan(s *Session)
	log() *slog.Logger
}

// Stat describes path in session id's workspace without following a link
// (ErrNotFound if nothing is there): what files.exists asks.
func (m *Manager) Stat(ctx context.Context, owner int, id, path string) (*Entry, error) {
	return m.ws.stat(ctx, owner, id, path)
}

// Remove deletes path in session id's workspace (see workspace.remove).
func (m *Manager) Remove(ctx context.Context, owner int, id, path string) error {
	return m.ws.remove(ctx, owner, id, path)
}

// MakeDir creates path in session id's workspace (see workspace.makeDir).
func (m *Manager) MakeDir(ctx context.Context, owner int, id, path string) (created bool, _ error) {
	return m.ws.makeDir(ctx, owner, id, path)
}

// Watch starts, polls or stops a watch on session id's workspace (see
// workspace.watch).
func (m *Manager) Watch(ctx context.Context, owner int, id string, req WatchRequest) (*WatchResult, error) {
	return m.ws.watch(ctx, owner, id, req)
}
