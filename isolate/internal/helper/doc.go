// Package helper runs this binary re-executed through /proc/self/exe as a
// helper that answers line requests on its stdin (the seccomp filter
// reader, a zygote's id mapper), and bounds what the daemon reads back.
//
// Everything a helper says is bounded in time and size before the daemon
// believes it; a helper must never be given the daemon's environment or
// file descriptors beyond its pipes.
package helper
