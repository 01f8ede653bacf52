// Package api owns jailcell's wire protocol: the request, response and event
// types, the one Dispatcher every transport calls, the Handler interface
// and the in-flight budget, and the HTTP and MCP transports. The
// JSON-lines door is api/jsonl and the Jupyter kernel api/jupyter.
// Transports only decode, call a Handler and encode: the Dispatcher in
// this process, or a Remote that forwards the same requests to a running
// service over its HTTP routes (so `jailcell mcp` and `jailcell json` need
// no root beside the service). All validation lives in DecodeRequest and
// Request.Validate so no transport can skip it. api must never touch a
// sandbox or a session's files itself: it goes through session.Manager,
// which owns confinement; and it never imports a door's package. It
// reaches the Manager through Sessions and speaks session/seam's types: it
// must never import session or isolate, so that a front door links no
// libcontainer or libseccomp.
package api
