package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
	mcpdoor "github.com/jailcell/jailcell/api/mcp"
)

// newMCPCmd is `jailcell mcp`: the Model Context Protocol on stdio, for
// desktop and IDE agents that spawn jailcell as a tool server.
func newMCPCmd() *cobra.Command {
	var policyName string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol on stdin/stdout",
		Long: `Serve the Model Context Protocol over stdio with the tools run_python,
upload_file, download_file, list_files, reset_session, snapshot_session
and rollback_session. The client's
session is created on first use, kept across calls and closed when the
client goes (EOF on stdin). Logs go to stderr.

When the jailcell service answers on its socket (or --connect names one),
the tools run there, as this user, with no root needed: the service's
allowed uids or groups decide. Otherwise the sandboxes run in this process,
which needs root. The service also serves MCP itself over Streamable HTTP
at /mcp on its socket. Client configuration:

  {"mcpServers":{"jailcell":{"command":"/usr/local/bin/jailcell","args":["mcp"]}}}`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(cmd)
	conn := addConnectFlags(cmd, hf)
	cmd.Flags().StringVar(&policyName, "policy", "", "policy of the client's session (default: the default policy)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return hf.runFrontDoor(conn, func(ctx context.Context, h api.Handler, log *slog.Logger) error {
			return mcpdoor.Serve(ctx, h, &mcp.StdioTransport{}, mcpdoor.Options{Owner: os.Getuid(), Policy: policyName, Version: version, Logger: log})
		}, mcp.ErrConnectionClosed)
	}
	return cmd
}
