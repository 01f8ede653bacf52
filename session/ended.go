package session

import (
	"fmt"
	"sync"
	"time"
)

// maxTombstones bounds how many ended sessions are remembered for "expired
// at" messages.
const maxTombstones = 10000

// endedIDs is what an id that left the session table answers: why it is
// gone, as not_found, ErrExpired or ErrLost, for the last maxTombstones
// ids; a lost one only until the time its id would have lived (lost.go).
// Without it a client whose session ended learns only "not found" and
// cannot tell a typo from a loss.
//
// Its lock is its own, taken after Manager.mu where both are held (never
// the other way): the Manager removes a session from its table and
// records why in one step, so no request sees an id that is neither live
// nor ended.
type endedIDs struct {
	mu    sync.Mutex
	why   map[string]string
	order []string
	// kind is ErrLost or ErrExpired for the ids that answer so; the rest
	// answer not_found with their why.
	kind map[string]error
	// lostUntil is when each lost id stops answering ErrLost, kept across
	// restarts in the state dir (lost.go).
	lostUntil map[string]time.Time
	// owner is each id's owner, where known: only that owner (and root)
	// is told why it ended; another gets not_found as for an id that
	// never was (an ended session's answer was an existence oracle).
	owner map[string]int
}

// unknownOwner is an owner not recorded (a lost record written before
// owners were): answered to anyone, as it was.
const unknownOwner = -1

func newEndedIDs() *endedIDs {
	return &endedIDs{why: map[string]string{}, kind: map[string]error{}, lostUntil: map[string]time.Time{}, owner: map[string]int{}}
}

// add remembers why id, owner's, is gone, and as what (kind: ErrLost,
// ErrExpired or nil), pushing out the oldest beyond maxTombstones.
func (e *endedIDs) add(id string, owner int, why string, kind error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addLocked(id, owner, why, kind)
}

// addLost makes id answer ErrLost with why until until.
func (e *endedIDs) addLost(id string, owner int, why string, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addLocked(id, owner, why, ErrLost)
	e.lostUntil[id] = until
}

func (e *endedIDs) addLocked(id string, owner int, why string, kind error) {
	if _, ok := e.why[id]; !ok {
		e.order = append(e.order, id)
	}
	e.why[id] = why
	delete(e.kind, id)
	if kind == ErrLost || kind == ErrExpired {
		e.kind[id] = kind
	}
	delete(e.owner, id)
	if owner != unknownOwner {
		e.owner[id] = owner
	}
	if len(e.order) > maxTombstones {
		old := e.order[0]
		delete(e.why, old)
		delete(e.kind, old)
		delete(e.owner, old)
		e.order = e.order[1:]
	}
}

// answer is the error a request of asker (0: root) for id gets, or nil if
// id did not end here (as far as the record reaches) or not as asker's.
func (e *endedIDs) answer(id string, asker int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	why, ok := e.why[id]
	if !ok {
		return nil
	}
	if o, known := e.owner[id]; known && asker != 0 && asker != o {
		return nil
	}
	switch e.kind[id] {
	case ErrLost:
		return fmt.Errorf("%w: session %s %s", ErrLost, id, why)
	case ErrExpired:
		return expiredErr(id, why)
	}
	return fmt.Errorf("%w: session %s %s", ErrNotFound, id, why)
}

// stillLost lists the lost ids that answer so after now, forgetting the
// rest (expired, or pushed out of the record).
func (e *endedIDs) stillLost(now time.Time) []lostEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	var entries []lostEntry
	for id, until := range e.lostUntil {
		why, ok := e.why[id]
		if !ok || e.kind[id] != ErrLost || !until.After(now) {
			delete(e.lostUntil, id)
			continue
		}
		entry := lostEntry{ID: id, Why: why, Until: until}
		if o, known := e.owner[id]; known {
			entry.Owner = &o
		}
		entries = append(entries, entry)
	}
	return entries
}
