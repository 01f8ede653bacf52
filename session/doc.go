// Package session keeps Python kernels alive between cells: it creates,
// runs, expires and cleans up sessions, each one long-lived sandbox built
// by isolate with a kernel from runner. It must never trust what comes out
// of a sandbox for a verdict, and never let a session outlive its TTL.
package session
