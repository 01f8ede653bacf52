// Package jupyter is jailcell's Jupyter front door: a kernel speaking
// Jupyter's messaging protocol (5.3, ZMQ, HMAC-signed) whose cells run in
// one jailcell session. It decodes Jupyter messages into wire requests,
// hands them to an api.Handler (the dispatcher in this process, or a
// remote service) and encodes the answers back; every message is signed
// and every reader bounded.
//
// It must never touch a sandbox, a session or its files itself, and never
// validate or interpret a request beyond what the dispatcher does: all of
// that goes through api.Handler so this door behaves like every other.
// The ZMQ library is imported here and nowhere else.
package jupyter
