// Package api owns jailcell's wire protocol: the request, response and event
// types, the one Dispatcher every transport calls, the Handler interface,
// the HTTP route table, the in-flight budget and what the front doors
// share (door.go). The doors are sub-packages: HTTP (with the Remote
// client and the /mcp mount) in api/httpapi, MCP in api/mcp, JSON lines in
// api/jsonl and the Jupyter kernel in api/jupyter. Doors only decode, call
// a Handler and encode: the Dispatcher in this process, or an
// httpapi.Remote that forwards the same requests to a running service over
// its HTTP routes (so `jailcell mcp` and `jailcell json` need no root
// beside the service). All validation lives in DecodeRequest and
// Request.Validate so no transport can skip it. api must never touch a
// sandbox or a session's files itself: it goes through session.Manager,
// which owns confinement; and it never imports a door's package. It
// reaches the Manager through Sessions and speaks session/seam's types: it
// must never import session or isolate, so that a front door links no
// libcontainer or libseccomp.
package api
