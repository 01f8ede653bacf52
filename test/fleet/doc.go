// Package fleet is the test of several `jailcell serve` nodes on one
// machine behind HAProxy (configs/haproxy.cfg), the way docs/fleet.md
// deploys them: each node with its own state dir, uid range, cgroup root
// and loopback TCP listener with bearer tokens, HAProxy routing by the
// node named in each session id. It holds tests only and drives the nodes
// only through HTTP, as a client would; it must never reach into a node's
// state.
package fleet
