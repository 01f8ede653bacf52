// Package jsonl is jailcell's JSON-lines front door: one request object
// per line in, one response (and, for streaming execs, events before it)
// per line out, as `jailcell json` speaks on stdin and stdout. It decodes
// each line with api.DecodeRequest, hands it to an api.Handler (the
// dispatcher in this process, or a remote service) and encodes the answer;
// every line is bounded and the running requests share one api.Budget.
//
// It must never validate, interpret or carry out a request itself, nor
// touch a sandbox or a session: that is the dispatcher's, so this door
// behaves like every other.
package jsonl
