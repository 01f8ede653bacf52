// Package runner owns the Python kernel that runs inside each sandbox and the
// host side of its wire protocol.
//
// The kernel (the Python package jailcell_kernel, embedded from the
// directory of that name, written by WriteKernel, started by Argv) is the
// sandbox's PID 1. It connects to a Unix socket that the host listens on
// (Listen, Accept), says hello, and runs the cells sent with Conn.Exec one
// at a time in one persistent namespace, like a notebook. If the connection
// drops, the kernel reconnects to the same path, so a restarted host can
// re-adopt it with its variables intact.
//
// Everything the kernel sends is untrusted: cell code runs inside the
// kernel's process and can write any bytes to the socket. Conn bounds every
// frame, counts and caps output itself, validates results, and lets a frame
// decide nothing but the content of its own cell's result. Verdicts such as
// timeouts, exits and kills belong to the caller, which watches the sandbox
// from outside.
//
// FRAMES.md, beside this file, is the protocol's contract: every frame
// type, its direction, fields and bounds, and the framing and ordering
// rules. TestFramesContract checks it against frameTypes (protocol.go), the
// constants it quotes and the kernel's source.
//
// runner must never import isolate (or any other jailcell package): it knows
// nothing of how the sandbox is built, only what runs inside it.
package runner
