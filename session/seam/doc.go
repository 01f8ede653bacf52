// Package seam is the vocabulary that crosses the seam between session and
// the layers above it (api, its front doors, workflow): the requests a
// session takes (ExecRequest, CreateOptions, CommandRequest, ...), what it
// answers (Result, Info, Entry, ...), the host's Features and the sentinel
// errors the API maps to wire codes. session aliases every name here, so a
// value is the same type on both sides and errors.Is holds across the seam.
//
// It exists so that api and workflow can be built without the sandbox
// machinery: it must never import isolate, libcontainer, seccomp, or
// anything else that builds a sandbox or runs a process. What it needs
// from below (isolate's sentinels, the host probe) session registers at
// init (Register).
package seam
