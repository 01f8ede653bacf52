// Package sessiontest builds a real session.Manager, on a real isolate
// Host over the built rootfs, for the tests of the packages above session
// (api and its doors, workflow), which would otherwise each carry a copy.
//
// It is for tests only: it must never be imported by a package the
// jailcell binary links, and it skips (naming what is missing) rather
// than run without root or the rootfs.
package sessiontest
