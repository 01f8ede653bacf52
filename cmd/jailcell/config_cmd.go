package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newConfigCmd is `jailcell config`: the effective configuration, as
// `jailcell serve` with the same flags and environment would use it.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration and where each value came from",
		Long: `Print every configuration key with its effective value and its source:
default, file (the YAML file), env (a JAILCELL_* variable) or flag. Later
sources win: flags over the environment over the file over the defaults.
Exits non-zero, naming each bad key, if the configuration is invalid.`,
		Example: `  jailcell config
  JAILCELL_SESSIONS_MAX=8 jailcell config --config ./config.yaml`,
		Args: cobra.NoArgs,
	}
	hf := addServeFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		printConfig(cmd.OutOrStdout(), hf.cfg)
		return nil
	}
	return cmd
}

func printConfig(w io.Writer, c *config) {
	if c.File != "" {
		fmt.Fprintf(w, "# config file: %s\n", c.File)
	} else {
		fmt.Fprintf(w, "# config file: none (%s not found)\n", defaultConfigPath)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range c.Settings {
		v := s.Value
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, v, s.Source)
	}
	tw.Flush()
}
