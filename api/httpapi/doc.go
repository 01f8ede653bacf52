// Package httpapi is jailcell's HTTP front door: the service's HTTP/1.1
// server on its Unix socket (and, authenticated by bearer token, on a TCP
// listener), its peer-credential admission, its Prometheus metrics, the
// MCP mount at /mcp (api/mcp over Streamable HTTP), and Remote, the client
// that forwards wire requests to a running service over the same routes
// (so `jailcell json`, `jailcell mcp` and a fleet's nodes need no root of
// their own). It maps a route to an api.Request, decoded and validated by
// api.DecodeRequest like every door's, hands it to an api.Handler, and
// maps the response back; the route table itself is api.Routes.
//
// It must never validate, interpret or carry out a request itself, nor
// touch a sandbox or a session: that is the dispatcher's, so this door
// behaves like every other. Nothing in api core may import it.
package httpapi
