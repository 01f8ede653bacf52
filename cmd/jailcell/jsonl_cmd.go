package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

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
		log, err := hf.logger()
		if err != nil {
			return err
		}
		st, err := hf.build(log)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		wf, err := newWorkflow(st.manager, hf.cfg, log)
		if err != nil {
			_ = st.shutdown(30 * time.Second)
			return err
		}
		d := &api.Dispatcher{Manager: st.manager, Version: version, Logger: log, Workflow: wf}
		serr := api.ServeJSONL(ctx, os.Stdin, os.Stdout, d, api.JSONLOptions{MaxLineBytes: maxLine, Logger: log})
		if errors.Is(serr, context.Canceled) {
			log.Info("interrupted; tearing sandboxes down")
			serr = nil
		}
		if err := st.shutdown(30 * time.Second); err != nil {
			return err
		}
		return serr
	}
	return cmd
}
