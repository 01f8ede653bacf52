// Package errdefs holds the sentinel errors that isolate and its
// sub-packages share, so that a sub-package can return one without
// importing isolate. isolate re-exports each under its own name; callers
// outside isolate use those, never this package.
//
// It must never import anything of jailcell: it sits below every package
// of isolate.
package errdefs
