package session

import (
	"context"
	"os"
	"time"
)

// Interrupt sends the cell running in session id a KeyboardInterrupt, as
// Jupyter's interrupt does: the same SIGINT the host sends at a cell's
// timeout, without the timeout's verdict. It reports whether a cell was
// running. The interrupted cell's own response is an ordinary Python
// error (KeyboardInterrupt) with its state kept; a cell that catches it
// runs on under its timeout. Like Jupyter's, it is best effort: a cell
// caught before its code started (still waking its kernel) is not
// stopped.
//
// It does not take the session's run lock (the running cell holds it), so
// it works on a busy session; the owner check is every other op's.
func (m *Manager) Interrupt(ctx context.Context, owner int, id string) (bool, error) {
	s, err := m.get(owner, id)
	if err != nil {
		return false, err
	}
	if err := m.pastLife(s, time.Now()); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.running == nil {
		return false, nil
	}
	// Under s.mu: sendCell clears running before its kernel can be
	// dropped, so the signal never reaches a sandbox the session let go.
	if err := s.running.sb.Signal(os.Interrupt); err != nil {
		return false, nil // the kernel is gone: the cell ends with the loss
	}
	return true, nil
}
