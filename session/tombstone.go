package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"
)

// A closed session stays closed on the node that closed it. Objects in a
// shared store are signed, but a writer of the store can put a session's
// earlier, validly signed objects back after its owner closed it (a
// rollback), and the next request for the id would restore it with its
// old state. So a node remembers, on disk, every session it ended while
// it shared a store, and never takes one of them from the store again.
// The record is bounded (maxClosed, oldest first out) and each entry
// expires after sessions.hibernated_ttl: by then a put-back lease is older
// than that TTL and take refuses it as expired (as sweepStored would
// remove it). A node that never saw the close cannot know of it
// (SECURITY.md).

const (
	// closedName is the record's file in the state dir.
	closedName = "closed.json"
	// maxClosed bounds the record.
	maxClosed = 8192
	// maxClosedFile bounds reading it: an entry is well under 256 bytes.
	maxClosedFile = maxClosed*256 + 4096
	closedVersion = 1
)

type closedEntry struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

type closedFile struct {
	Version int           `json:"version"`
	Closed  []closedEntry `json:"closed"`
}

// closedSet is the record of closed sessions, in memory and on disk.
type closedSet struct {
	mu   sync.Mutex
	path string
	max  int
	ttl  time.Duration
	ents []closedEntry // oldest first
	at   map[string]time.Time
}

// loadClosed reads the record at path (none yet: empty). A record that
// cannot be read is an error: starting without it would forget closes.
func loadClosed(path string, max int, ttl time.Duration) (*closedSet, error) {
	c := &closedSet{path: path, max: max, ttl: ttl, at: map[string]time.Time{}}
	b, err := readStateFile(path, maxClosedFile)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if errors.Is(err, errStateFileTooLarge) {
		return nil, fmt.Errorf("read closed sessions %s: %w; it is this node's own record, written bounded: check it, or remove it to forget every close", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read closed sessions %s: %w", path, err)
	}
	var cf closedFile
	if err := json.Unmarshal(b, &cf); err != nil || cf.Version != closedVersion {
		return nil, fmt.Errorf("read closed sessions %s: not a record this version reads (version %d, %v): check it, or remove it to forget every close", path, cf.Version, err)
	}
	for _, e := range cf.Closed {
		if !storedIDRE.MatchString(e.ID) {
			return nil, fmt.Errorf("read closed sessions %s: id %q is not a session id", path, trunc(e.ID))
		}
		c.put(e)
	}
	c.prune(time.Now())
	return c, nil
}

// put appends e (moved to the end if its id is there).
func (c *closedSet) put(e closedEntry) {
	if _, ok := c.at[e.ID]; ok {
		for i := range c.ents {
			if c.ents[i].ID == e.ID {
				c.ents = append(c.ents[:i], c.ents[i+1:]...)
				break
			}
		}
	}
	c.ents = append(c.ents, e)
	c.at[e.ID] = e.At
}

// prune drops entries past the TTL and the oldest past max.
func (c *closedSet) prune(now time.Time) {
	n := 0
	for n < len(c.ents) && (len(c.ents)-n > c.max || now.Sub(c.ents[n].At) > c.ttl) {
		delete(c.at, c.ents[n].ID)
		n++
	}
	c.ents = c.ents[n:]
}

// has reports whether id was closed here, and when.
func (c *closedSet) has(id string, now time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[id]
	if !ok || now.Sub(at) > c.ttl {
		return time.Time{}, false
	}
	return at, true
}

// add records id as closed at now, on disk before it returns.
func (c *closedSet) add(id string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(closedEntry{ID: id, At: now.UTC()})
	c.prune(now)
	return c.writeLocked()
}

// writeLocked replaces the file with the record: a new file renamed over
// the old one, so a crash leaves one or the other, whole.
func (c *closedSet) writeLocked() error {
	b, err := json.Marshal(closedFile{Version: closedVersion, Closed: c.ents})
	if err != nil {
		return err
	}
	if err := writeStateFile(c.path, b); err != nil {
		return fmt.Errorf("write closed sessions %s: %w", c.path, err)
	}
	return nil
}
