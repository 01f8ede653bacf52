package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
	"github.com/jailcell/jailcell/api/jsonl"
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
Logs go to stderr. EOF on stdin waits for running requests, closes every
session it created and exits 0; SIGINT/SIGTERM cancel running cells first.

When the jailcell service answers on its socket (or --connect names one),
requests go to it, as this user, with no root needed: the service's
allowed uids or groups decide. Otherwise the sandboxes run in this process,
which needs root.

  echo '{"id":1,"op":"exec","code":"print(1+1)"}' | jailcell json`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(cmd)
	conn := addConnectFlags(cmd, hf)
	cmd.Flags().IntVar(&maxLine, "max-line-bytes", 32<<20, "longest request line accepted; longer ones are discarded and answered with an error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return hf.runFrontDoor(conn, func(ctx context.Context, h api.Handler, log *slog.Logger) error {
			if r, ok := h.(*httpapi.Remote); ok {
				// The service keeps sessions after their client goes; this
				// one's end is EOF, as in the embedded case.
				sc := httpapi.NewScoped(r)
				defer func() {
					cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					sc.CloseAll(cctx, os.Getuid())
				}()
				h = sc
			}
			return jsonl.Serve(ctx, os.Stdin, os.Stdout, h, jsonl.Options{MaxLineBytes: maxLine, Logger: log})
		})
	}
	return cmd
}
