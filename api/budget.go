package api

import (
	"context"
	"log/slog"
	"sync"
)

// DefaultMaxInFlight and DefaultMaxInFlightBytes are the in-flight
// budget's defaults (the http.* keys' too); over HTTP an owner's share is
// a quarter of each bound by default.
const (
	DefaultMaxInFlight      = 256
	DefaultMaxInFlightBytes = 256 << 20
)

const (
	defaultMaxInFlight      = DefaultMaxInFlight
	defaultMaxInFlightBytes = DefaultMaxInFlightBytes
)

// budget bounds the number and summed weight of running requests: their
// request bytes, and their response bytes until written. In JSON-lines
// only the read loop acquires, so there is no fairness to keep; over HTTP
// every handler does, and waits in no order. Over HTTP each owner (a uid,
// or a token's owner) may also hold only its share of either bound, so one
// caller's slow bodies or unread responses cannot stall every other
// caller (before the fix: twelve slow 30 MiB bodies from one uid used to hold
// the whole budget for the body timeout).
type budget struct {
	mu        sync.Mutex
	count     int
	used      int64
	maxCount  int
	maxWeight int64
	// perCount and perWeight bound one owner's places (0: no share).
	perCount  int
	perWeight int64
	owners    map[int]*ownerUse
	wake      chan struct{}
}

type ownerUse struct {
	count int
	used  int64
}

// noOwner takes a place outside any owner's share (JSON-lines: one client).
const noOwner = -1

func newBudget(maxCount int, maxWeight int64) *budget {
	return &budget{maxCount: maxCount, maxWeight: maxWeight, owners: map[int]*ownerUse{}, wake: make(chan struct{})}
}

// share bounds each owner to perCount places and perWeight bytes.
func (b *budget) share(perCount int, perWeight int64) *budget {
	b.perCount, b.perWeight = perCount, perWeight
	return b
}

// fits says whether a place of weight w for owner may be taken now; one
// request always fits an empty budget (or an owner holding nothing).
func (b *budget) fits(owner int, w int64) bool {
	if b.count >= b.maxCount || (b.count > 0 && b.used+w > b.maxWeight) {
		return false
	}
	if owner == noOwner || b.perCount <= 0 {
		return true
	}
	u := b.owners[owner]
	if u == nil {
		return true
	}
	return u.count < b.perCount && (u.count == 0 || u.used+w <= b.perWeight)
}

func (b *budget) acquire(ctx context.Context, owner int, w int64) error {
	for {
		b.mu.Lock()
		if b.fits(owner, w) {
			b.count++
			b.used += w
			if owner != noOwner {
				u := b.owners[owner]
				if u == nil {
					u = &ownerUse{}
					b.owners[owner] = u
				}
				u.count++
				u.used += w
			}
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// place is one request's share of a budget, held until its response has
// been written.
type place struct {
	b     *budget
	owner int
	w     int64
}

// take acquires a place of weight w for owner (noOwner: no share).
func (b *budget) take(ctx context.Context, owner int, w int64) (*place, error) {
	if err := b.acquire(ctx, owner, w); err != nil {
		return nil, err
	}
	return &place{b: b, owner: owner, w: w}, nil
}

// grow adds n bytes (the response) to the place at once, over the bound if
// need be: the bytes exist already, and waiting here while holding the
// place could deadlock. Later acquires wait until they are released.
func (p *place) grow(n int64) {
	p.b.mu.Lock()
	p.b.used += n
	if u := p.b.owners[p.owner]; u != nil {
		u.used += n
	}
	p.b.mu.Unlock()
	p.w += n
}

// release gives the place back; it may be called once.
func (p *place) release() { p.b.release(p.owner, p.w) }

func (b *budget) release(owner int, w int64) {
	b.mu.Lock()
	b.count--
	b.used -= w
	if u := b.owners[owner]; u != nil {
		u.count--
		u.used -= w
		if u.count == 0 {
			delete(b.owners, owner)
		}
	}
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// transport applies the defaults every transport shares: the in-flight
// budget (0 means the default) and the logger (nil: slog.Default()).
func transport(maxInFlight int, maxBytes int64, log *slog.Logger) (*budget, *slog.Logger) {
	if maxInFlight <= 0 {
		maxInFlight = defaultMaxInFlight
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxInFlightBytes
	}
	if log == nil {
		log = slog.Default()
	}
	return newBudget(maxInFlight, maxBytes), log
}
