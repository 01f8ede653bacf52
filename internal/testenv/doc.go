// Package testenv holds what tests share: the probes that decide whether
// the host can run a tier of tests (a test skips only when a probe proves
// the host lacks something, and the skip message says what), and the one
// harness that starts a real `jailcell serve` in a temporary directory,
// waits for its socket, stops it and prints its log if the test failed.
//
// It is for tests only: product code must never import it, and it never
// touches state, sockets or cgroups outside the directories it creates.
package testenv
