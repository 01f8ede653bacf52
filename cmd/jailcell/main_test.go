package main

import (
	"os"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

// TestMain lets this test binary be jailcell itself: a sandbox init
// (libcontainer re-executes it as "init"), or, with JAILCELL_TEST_MAIN=1,
// the command line, so tests can start a real `jailcell serve` process
// from the code under test without a separate build.
func TestMain(m *testing.M) {
	isolate.Init()
	if os.Getenv("JAILCELL_TEST_MAIN") == "1" {
		// The installed layout's default file, placed by a test.
		if p := os.Getenv("JAILCELL_TEST_DEFAULT_CONFIG"); p != "" {
			defaultConfigPath = p
		}
		main()
		os.Exit(0)
	}
	// Not the host's /etc/jailcell nor its service: the children get the
	// same through jailcellEnv.
	testenv.Hermetic()
	code := m.Run()
	testenv.RemoveBuild()
	os.Exit(code)
}
