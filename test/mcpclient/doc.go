// Package mcpclient tests jailcell's front doors as agent developers meet
// them: a user that is not root drives a real `jailcell serve` through
// `jailcell json`, `jailcell run` and `jailcell mcp` (connected to the
// service), and through MCP over Streamable HTTP on the service's socket,
// the MCP ones from the official MCP TypeScript client
// (@modelcontextprotocol/sdk on node, installed once by
// scripts/fetch-mcpclient.sh from the committed package-lock.json).
// It must never reach the host's installed service: it starts its own on
// a socket of its own.
package mcpclient
