// Package client calls jailcell from Go: over HTTP on the Unix socket of a
// running `jailcell serve` (HTTP), or over JSON lines with a `jailcell
// json` child process or any other stream (JSONL). Both speak the same
// wire types and satisfy API.
//
// It uses the standard library only and never imports the rest of
// jailcell, so a program that calls jailcell does not link the sandbox
// machinery (or need root, cgo or libseccomp). To run sandboxes in-process
// instead, see examples/embed.
package client
