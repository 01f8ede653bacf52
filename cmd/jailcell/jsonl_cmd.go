package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
)

// newJSONCmd is `jailcell json`: the JSON-lines protocol on stdin/stdout,
// for a parent process (an LLM tool runner) that spawns jailcell and talks
// to it over pipes.
func newJSONCmd() *cobra.Command {
	var maxLine int
	cmd := &cobra.Command{
		Use:   "json",
		Short: "Serve JSON-lines requests on stdin, responses on stdout",
		Long: `Serve the JSON-lines protocol: one request object per line on stdin, one
response per line on stdout (streamed output events before it, with
"stream":true). Requests run concurrently and run as this process's uid.
Logs go to stderr. EOF on stdin waits for running requests, tears every
sandbox down and exits 0; SIGINT/SIGTERM cancel running cells first.

  echo '{"id":1,"op":"exec","code":"print(1+1)"}' | sudo jailcell json`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(cmd)
	cmd.Flags().IntVar(&maxLine, "max-line-bytes", 32<<20, "longest request line accepted; longer ones are discarded and answered with an error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return hf.runFrontDoor(func(ctx context.Context, d *api.Dispatcher, log *slog.Logger) error {
			return api.ServeJSONL(ctx, os.Stdin, os.Stdout, d, api.JSONLOptions{MaxLineBytes: maxLine, Logger: log})
		})
	}
	return cmd
}
