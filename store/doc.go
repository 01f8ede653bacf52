// Package store keeps objects (persisted workspaces, hibernated sessions)
// outside a node's own state directory: in a local directory
// (file:///var/lib/jailcell/store, the default) or in S3-compatible
// storage (s3://BUCKET/PREFIX). It sits below session and above nothing
// of jailcell's own. It must never trust what it reads back: a store is
// outside the sandbox but anyone with its credentials (or root on the
// box holding it) can change an object, so every object carries a sha256
// that is checked on the way back, every read is bounded by the caller's
// limit, and keys and sizes from a listing are checked, never used as
// paths on the host.
//
// API (for session, and the fleet work that calls session):
//
//	st, err := store.Open(ctx, store.Options{URL: "s3://bkt/jc", S3: ...})
//	obj, err := st.Put(ctx, key, file, size)  // atomic: all or nothing visible
//	rc, obj, err := st.Get(ctx, key, maxBytes) // rc.Read returns ErrCorrupt at
//	                                           // EOF on a checksum mismatch
//	objs, err := st.List(ctx, prefix, maxObjects)
//	err = st.Delete(ctx, key)
//	ver, err := st.Swap(ctx, key, oldVer, data) // compare-and-swap of a
//	                                            // small record ("" = create)
//	data, ver, err := st.Record(ctx, key, maxBytes)
//
// session copies persisted workspaces into a file store itself (sparse,
// within its quotas) and records and checks their checksums with
// SetFileSum and FileSum, writing under TempName until complete.
//
// Keys are slash-separated, each segment non-empty and not "." or "..",
// valid UTF-8 without control characters (CheckKey). OwnerPrefix(uid)
// namespaces keys by owner. Quota wraps a Store with a byte quota.
//
// Errors carry one of the sentinels below; ErrUnavailable (the store is
// down, or a call passed its bound) names the store. Every call is bounded
// by Options.Timeout (per request) on top of the caller's context.
package store
