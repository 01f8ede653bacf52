// Package ndjson sends a streamed response's JSON lines for the front
// doors that stream (a cell's output): the producer, the cell, never
// waits on the client; a writer goroutine sends what it queued.
//
// A client that stops reading must not hold the session (before the fix,
// over HTTP and then over E2B's /execute: a streamed cell whose client
// stopped reading kept its session busy, its output waiting on a full
// socket, until the client read again). What is queued is bounded by the
// cell's own output caps; the caller counts it in its request's place in
// the in-flight budget.
package ndjson
