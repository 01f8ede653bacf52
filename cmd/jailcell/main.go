package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/isolate"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// First thing: a sandbox init re-executes this binary as "init".
	isolate.Init()

	root := &cobra.Command{
		Use:           "jailcell",
		Short:         "Run Python cells in OS-isolated sandboxes",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRootfsCmd(), newRunCmd(), newJSONCmd(), newDoctorCmd(), newMCPCmd(), newReviewCmd(), newServeCmd(), newConfigCmd(), newKernelCmd(), newKernelspecCmd())
	root.SetArgs(joinConnectValue(os.Args[1:]))
	if err := root.Execute(); err != nil {
		// An exitError carries a cell's status; what went wrong was
		// already shown.
		if _, ok := err.(exitError); !ok {
			fmt.Fprintln(os.Stderr, "jailcell:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific exit status out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func exitCode(err error) int {
	if e, ok := err.(exitError); ok {
		return e.code
	}
	return 1
}
