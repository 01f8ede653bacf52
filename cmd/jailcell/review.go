package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

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
		Long: `Show the review log (review.dir/review.jsonl, after review.jsonl.1,
the one rotated out): every failure that ended a fix-and-retry loop or
found no sandbox, with its time, session, uid, code, errors and attempts,
control characters escaped. "list" (the default) prints one line per entry,
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
			b, err := json.MarshalIndent(entries[n-1], "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), jsonPrintable(string(b)))
			return err
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
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s: %.80s\n", printable(f.Fingerprint), f.UID, printable(f.Policy), f.Count,
					f.LastSeen.Format("2006-01-02 15:04:05"), printable(fmt.Sprint(f.Modules)), printable(f.Type), printable(f.Message))
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
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%d\t%.100s\n", i+1, e.Time.Format("2006-01-02 15:04:05"), e.UID, printable(sess), len(e.Attempts), printable(e.Reason))
	}
	return w.Flush()
}

// printable escapes what a cell may have put in a field (an exception's
// type, its message) before it reaches an administrator's terminal, where
// ESC, CSI (U+009B) or OSC 52 would be obeyed: every C0 and C1 control,
// DEL and invalid byte is written \xNN.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if _, n := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else if isControl(r) {
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r < 0xa0 }

// jsonPrintable escapes DEL and C1 controls in JSON, which encoding/json
// leaves raw (it escapes C0); they only occur inside strings, where
// \u00XX decodes to the same text.
func jsonPrintable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 0x7f && r < 0xa0 {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
