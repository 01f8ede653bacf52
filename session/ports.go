package session

import (
	"context"
	"fmt"
	"net"
)

// DialPort connects to a server a process of session id listens on, on
// TCP port of the sandbox's own loopback (isolate.Sandbox.DialPort): how a
// door reaches the web app or API a cell started, as E2B's proxy reaches a
// sandbox's ports. The session's network policy is unchanged: the host
// connects from inside, the sandbox gets no route out. A hibernated
// session is not woken (ErrUnavailable: the caller resumes it first, as
// E2B's auto-resume does); a dial is no use of the session and renews no
// TTL, as traffic to an E2B sandbox does not. The connection ends when the
// session's kernel is checkpointed, replaced or ended.
func (wk *Workspace) DialPort(ctx context.Context, owner int, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d: want 1-65535", ErrBadRequest, port)
	}
	s, err := wk.host.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	k, hib := s.k, s.hibernated
	s.mu.Unlock()
	switch {
	case hib:
		return nil, fmt.Errorf("%w: session %s is hibernated: restore it (or run a cell) before reaching its servers", ErrUnavailable, id)
	case k == nil || k.sb == nil:
		return nil, fmt.Errorf("%w: session %s has no kernel running now (it is starting or restarting)", ErrUnavailable, id)
	}
	c, err := k.sb.DialPort(ctx, port)
	if err != nil {
		return nil, hostErr(ErrUnavailable, fmt.Errorf("session %s: %w", id, err))
	}
	return c, nil
}
