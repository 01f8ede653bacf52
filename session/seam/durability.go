package seam

import "context"

// Durability is what outlives a session's process, the API's view of
// session's durability part: hibernation to checkpoint images and back,
// forks, and a snapshot to roll back to. The Manager hands the part out
// (Manager.Durability) rather than forwarding each op, and the API names
// this interface because it may not name session's types.
type Durability interface {
	Hibernate(ctx context.Context, owner int, id string) (*Info, error)
	Restore(ctx context.Context, owner int, id string) (*Info, error)
	Fork(ctx context.Context, owner int, id string) (*Info, error)
	Snapshot(ctx context.Context, owner int, id string) (*Info, error)
	Rollback(ctx context.Context, owner int, id string) (*Info, error)
	// HibernationAvailable says whether this host can hibernate (and
	// snapshot and fork) sessions, or why not.
	HibernationAvailable() error
}
