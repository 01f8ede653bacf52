// Package soak is the load test of a real `jailcell serve`: many
// concurrent sessions, normal and hostile cells mixed, every response
// matched to its request, and the daemon's memory and open fds flat at
// the end. It runs only when JAILCELL_SOAK is set (make test: short,
// make soak: long). It holds tests only and drives the daemon only through
// its socket, the way a client would; it must never reach into the
// daemon's state.
package soak
