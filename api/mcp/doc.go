// Package mcp is jailcell's Model Context Protocol front door: a handful
// of tools (run_python, upload_file, download_file, list_files,
// snapshot_session, rollback_session, reset_session) over one jailcell
// session per MCP connection, spoken on any MCP transport: stdio for
// `jailcell mcp`, Streamable HTTP when api/httpapi mounts it at /mcp.
// Each tool becomes an api.Request handed to an api.Handler (the
// dispatcher in this process, or a remote service), and its answer
// becomes the tool's result.
//
// It must never validate, interpret or carry out a request itself, nor
// touch a sandbox or a session: that is the dispatcher's, so this door
// behaves like every other. It knows nothing of HTTP (the /mcp mount, its
// caps and session ids are api/httpapi's), and nothing in api core may
// import it or the MCP SDK.
package mcp
