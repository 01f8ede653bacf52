// Command embed runs jailcell in-process: a Go program on an edge server
// that runs Python cells in OS-isolated sandboxes without a jailcell
// daemon. Run it as root (sandboxes need it) after `make rootfs`:
//
//	go build -tags seccomp -o embed ./examples/embed && sudo ./embed
//
// The library API is the same core `jailcell serve` uses:
//
//  1. isolate.Init() first thing in main. Sandboxes are started by
//     re-executing this very binary as their init (the way runc does);
//     in that process Init becomes the sandbox's init and never returns.
//     Anything main does before it would also run inside every sandbox.
//  2. rootfs.Open finds the Python rootfs built by `make rootfs`.
//  3. isolate.NewHost checks the host (failing closed on anything a
//     sandbox needs) and owns sandbox state under a state directory and
//     a cgroup root of its own.
//  4. session.New makes the Manager: Create, Exec, RunOnce, Upload,
//     Download, Files, Close, List, and Shutdown at the end, which tears
//     every sandbox down. Owner is a uid; pass your own.
//
// One process at a time may use a state directory: a second one would
// remove the first one's sandboxes as leftovers when it starts. A program
// that embeds jailcell must never do anything before isolate.Init, and
// never run a cell outside the Manager.
package main
