package session

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/store"
)

// The durability part owns what outlives a process: session metadata on
// disk (adopt.go), hibernation to checkpoint images and back
// (hibernate.go), the checkpoint copies of snapshots and forks
// (snapshot.go, fork.go's checkpointCopy), persisted workspaces (persist.go), the shared store and
// its leases (shared.go, fleet.go), the records of lost sessions (lost.go)
// and the host-disk quotas they are charged to (quota.go). It must never
// touch the session table, admission or the TTL/janitor: a session enters
// or leaves the table, a place is reserved and a kernel is dropped only
// through durableHost, so a record written here never makes a session live
// that the Manager did not admit.
type durable struct {
	cfg     *Config
	host    *isolate.Host
	metrics *Metrics
	mgr     durableHost
	// files records a session's workspace as it is now: the workspace
	// part's, never the Manager's.
	files interface{ rescan(s *Session) }
	// kernels restores a session's kernel from its images: the warm-start
	// part's, never the Manager's.
	kernels interface {
		restoreKernel(ctx context.Context, s *Session, images string) (*kernel, error)
	}

	// ended is the Manager's record of what ended ids answer: the lost
	// ones are this part's to add and keep across restarts (lost.go).
	ended *endedIDs

	// objects is Config.Store under the store quota (nil without a Store).
	objects store.Store

	// Host-disk accounting (quota.go).
	stateQuota, storeQuota *quota
	entryMu                sync.Mutex
	entryLocks             map[string]*entryLock
}

// durableHost is what the durability part needs back from the Manager.
type durableHost interface {
	get(owner int, id string) (*Session, error)
	reserve() error
	reserveOwner(owner int) (release func(), _ error)
	unreserve()
	hibernatedCount() int
	reserveHibernation(s *Session) (release func(), err error)
	pastLife(s *Session, now time.Time) error
	metaPastLife(meta sessionMeta, now time.Time) error
	forgetStored(s *Session)
	ensureKernel(ctx context.Context, s *Session) (*kernel, error)
	dropKernel(s *Session, k *kernel)
	exec(ctx context.Context, s *Session, req ExecRequest) (*Result, error)
	claim(ctx context.Context, owner int, id string) (*Session, error)
	infoOf(s *Session) Info
	newSession(owner int, p policy.Policy) (*Session, error)
	register(s *Session) error
	destroy(s *Session) error
	lifeEnd(s *Session) (time.Duration, time.Time)
	sessionsWhere(keep func(s *Session) bool) []*Session
	stopping() <-chan struct{}
}

// Durability returns the durability part, whose exported methods hibernate,
// restore, fork, snapshot and roll back one session (hibernate.go, fork.go,
// snapshot.go), as the API names it (seam.Durability).
func (m *Manager) Durability() seam.Durability { return &m.dur }

var _ seam.Durability = (*durable)(nil)

func (m *durable) log() *slog.Logger { return m.cfg.Logger }
