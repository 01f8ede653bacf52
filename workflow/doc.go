// Package workflow runs the code-interpreter loop on top of session.Manager:
// run a cell, ask a fixer for new code when it fails, run again; fall back
// explicitly (a fallback block, an optional degraded stateless run) when
// that does not work; log every loop-ending failure for review and remember
// repeated failures. It must never run code outside a sandbox or under a
// weaker policy than the request's own: every run goes through the Manager.
// It reaches the Manager through Sessions and speaks session/seam's types,
// and must never import session or isolate: the API links workflow, and
// must not link the sandbox machinery with it.
package workflow
