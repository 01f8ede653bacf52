package session

import (
	"context"
	"encoding/json"
	"time"
)

// recordLiveTimeout bounds writing a new session's live lease.
const recordLiveTimeout = 10 * time.Second

// recordLive writes a new session's lease, {state: live, node: this
// one}, into a shared store. Then a node asked for the session after this
// one was killed with -9 (a fleet's proxy sends its requests elsewhere)
// finds the record and answers ErrLost naming this node, instead of a
// plain not found. A store that is down costs only that answer: the
// session works, and the failure is logged.
func (m *durable) recordLive(s *Session) {
	if !m.shared() || !storedIDRE.MatchString(s.id) {
		return
	}
	s.mu.Lock()
	owner := s.owner
	s.mu.Unlock()
	b, _ := json.Marshal(lease{Version: leaseVersion, ID: s.id, Owner: owner, Node: m.node(), State: leaseLive, At: time.Now().UTC()})
	ctx, cancel := context.WithTimeout(context.Background(), recordLiveTimeout)
	defer cancel()
	ver, err := m.objects.Swap(ctx, leaseKey(s.id), "", b)
	if err != nil {
		m.log().Warn("live session not recorded in the store: if this node dies, other nodes will not say it was lost",
			"session", s.id, "store", m.objects.Name(), "err", err)
		return
	}
	s.mu.Lock()
	s.lease = ver
	s.mu.Unlock()
}
