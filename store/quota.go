package store

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// MaxObjects bounds how many objects a quota-counted store may hold (and
// so the quota's memory).
const MaxObjects = 200_000

// Quota wraps s: a Put that would take the bytes of all objects in s past
// limit is refused with ErrQuota naming key (the config key). What s
// holds is measured by listing it on first use; from then on this node's
// own puts and deletes are counted (in apparent bytes: S3 has no other),
// so on a shared store each node enforces the limit on what it saw.
func Quota(s Store, limit int64, key string) Store {
	return &quotaStore{Store: s, limit: limit, key: key}
}

type quotaStore struct {
	Store
	limit int64
	key   string

	mu    sync.Mutex
	ready bool
	used  int64
	sizes map[string]int64
}

// Unwrap is the store under the quota.
func (q *quotaStore) Unwrap() Store { return q.Store }

func (q *quotaStore) init(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready {
		return nil
	}
	objs, err := q.Store.List(ctx, "", MaxObjects)
	if err != nil {
		return fmt.Errorf("measure store for %s: %w", q.key, err)
	}
	q.sizes = make(map[string]int64, len(objs))
	for _, o := range objs {
		q.sizes[o.Key] = o.Size
		q.used += o.Size
	}
	q.ready = true
	return nil
}

// InUse is what the quota counts now.
func (q *quotaStore) InUse() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used
}

func (q *quotaStore) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if err := q.init(ctx); err != nil {
		return Object{}, err
	}
	q.mu.Lock()
	old := q.sizes[key]
	if size-old > q.limit-q.used {
		used := q.used
		q.mu.Unlock()
		return Object{}, fmt.Errorf("%w: %s (%d bytes) would pass %s = %d bytes (%d in use) in %s", ErrQuota, key, size, q.key, q.limit, used, q.Name())
	}
	// Reserved while it uploads: two puts cannot both take the last bytes.
	q.used += size
	q.mu.Unlock()
	obj, err := q.Store.Put(ctx, key, r, size)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		q.used -= size
		return obj, err
	}
	q.used -= q.sizes[key]
	q.sizes[key] = size
	return obj, nil
}

func (q *quotaStore) Swap(ctx context.Context, key, old string, data []byte) (string, error) {
	// Records are small (a lease); they are counted, never refused.
	v, err := q.Store.Swap(ctx, key, old, data)
	if err == nil && q.init(ctx) == nil {
		q.mu.Lock()
		q.used += int64(len(data)) - q.sizes[key]
		q.sizes[key] = int64(len(data))
		q.mu.Unlock()
	}
	return v, err
}

func (q *quotaStore) Delete(ctx context.Context, key string) error {
	if err := q.Store.Delete(ctx, key); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n, ok := q.sizes[key]; ok {
		q.used -= n
		delete(q.sizes, key)
	}
	return nil
}
