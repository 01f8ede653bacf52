// Package api owns jailcell's wire protocol: the request, response and event
// types, the one Dispatcher every transport calls, and the JSON-lines,
// HTTP and MCP transports. Transports only decode, call a Handler and
// encode: the Dispatcher in this process, or a Remote that forwards the
// same requests to a running service over its HTTP routes (so `jailcell
// mcp` and `jailcell json` need no root beside the service). The Jupyter
// kernel lives in api/jupyter and speaks to a Handler on the same terms:
// one session per kernel, every message signed and bounded. All validation
// lives in DecodeRequest and Request.Validate so no transport can skip it.
// api must never touch a sandbox or a session's files itself: it goes
// through session.Manager, which owns confinement.
package api
