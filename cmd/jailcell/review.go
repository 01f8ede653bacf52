package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/workflow"
)

// newReviewCmd is `jailcell review`: the review log of loop-ending
// failures and the failure memory, for an administrator.
func newReviewCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "review [list | show N | failures [--clear]]",
		Short: "Show failures that ended a fix-and-retry loop, and the failure memory",
		Long: `Show the review log (review.dir/review.jsonl): every failure that ended a
fix-and-retry loop or found no sandbox, with its time, session, uid, code,
errors and attempts. "list" (the default) prints one line per entry,
"show N" prints entry N in full. "failures" lists the remembered failure
fingerprints; "failures --clear" forgets them (stop the server first, or
use the failures op, so a running one does not write them back).`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	configFlag(pf)
	pf.StringVar(&dir, "review-dir", defaultReviewDir, "review directory (config key review.dir, JAILCELL_REVIEW_DIR)")
	// review.dir and failures.ttl come from the configuration, with
	// --review-dir bound to review.dir like any flag to its key.
	var cfg *config
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		var err error
		if cfg, err = loadConfig(c.Flags()); err == nil {
			dir = cfg.Workflow.ReviewDir
		}
		return err
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return reviewList(cmd, dir) }
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "One line per review entry", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return reviewList(cmd, dir) },
	}, &cobra.Command{
		Use: "show N", Short: "Print review entry N in full", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := workflow.ReadReview(dir)
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 || n > len(entries) {
				return fmt.Errorf("no review entry %q: %d entries, numbered from 1", args[0], len(entries))
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(entries[n-1])
		},
	})
	var clear bool
	failures := &cobra.Command{
		Use: "failures", Short: "List (or --clear) the remembered failure fingerprints", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clear {
				n, err := workflow.ClearFailuresIn(dir)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "cleared %d fingerprints\n", n)
				return nil
			}
			list, err := workflow.LoadFailures(dir, cfg.Workflow.TTL)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "FINGERPRINT\tUID\tPOLICY\tCOUNT\tLAST SEEN\tMODULES\tERROR")
			for _, f := range list {
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%v\t%s: %.80s\n", f.Fingerprint, f.UID, f.Policy, f.Count, f.LastSeen.Format("2006-01-02 15:04:05"), f.Modules, f.Type, f.Message)
			}
			return w.Flush()
		},
	}
	failures.Flags().BoolVar(&clear, "clear", false, "forget every remembered failure")
	cmd.AddCommand(failures)
	return cmd
}

func reviewList(cmd *cobra.Command, dir string) error {
	entries, err := workflow.ReadReview(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintf(os.Stderr, "no review entries in %s\n", dir)
		return nil
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "N\tTIME\tUID\tSESSION\tATTEMPTS\tREASON")
	for i, e := range entries {
		sess := e.Session
		if sess == "" {
			sess = "(one-shot)"
		} else if len(sess) > 12 {
			sess = sess[:12]
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%d\t%.100s\n", i+1, e.Time.Format("2006-01-02 15:04:05"), e.UID, sess, len(e.Attempts), e.Reason)
	}
	return w.Flush()
}
