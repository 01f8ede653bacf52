package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Tests are hermetic: a jailcell a test starts never reads the host's
// /etc/jailcell/config.yaml and never finds a service on the default
// socket (/run/jailcell/jailcell.sock), even on a host where jailcell is
// installed and running. Every child gets JAILCELL_CONFIG naming a file
// of this test process that says only where the socket is: a path where
// nothing listens. As a file (the lowest precedence) it changes nothing
// for a child given --config, --socket or JAILCELL_SOCKET.

// NoServiceSocket is the socket a test's jailcell finds when the test
// names none: nothing ever listens there, so a front door without
// --connect runs its sandboxes itself, as the test meant.
var NoServiceSocket = filepath.Join(os.TempDir(), "jailcell-test-no-service", "jailcell.sock")

var (
	hermeticOnce sync.Once
	hermeticDir  string
	hermeticFile string
)

// HermeticConfig is the path of the test processes' configuration file
// (socket: NoServiceSocket), readable by any user (tests run jailcell as
// users who are not root too).
func HermeticConfig() string {
	hermeticOnce.Do(func() {
		d, err := os.MkdirTemp("", "jchermetic")
		if err == nil {
			err = os.Chmod(d, 0o755)
		}
		if err == nil {
			f := filepath.Join(d, "config.yaml")
			err = os.WriteFile(f, []byte(fmt.Sprintf("# a test's jailcell: never the host's config or service\nsocket: %s\n", NoServiceSocket)), 0o644)
			hermeticDir, hermeticFile = d, f
		}
		if err != nil {
			// Without it a child would read the host's configuration and
			// find its service: no test may run so.
			panic(fmt.Sprintf("testenv: write the hermetic config: %v", err))
		}
	})
	return hermeticFile
}

// TestClaimDir is where the tests' daemons claim their uid ranges: never
// the host's (/run/jailcell/claims), but one for every test process on
// the host, so that test daemons started in parallel by different
// packages still keep off each other's uids (per-uid limits, egress link
// names). A test that must not see the others' claims sets its own.
var TestClaimDir = filepath.Join(os.TempDir(), "jailcell-test-claims")

// KeepNothingEnv opts a test's serve out of keeping sessions across a
// stop (sessions.survive_restart and hibernate_on_shutdown, on by
// default): a test that stops its service leaves no kernel, mount or
// cgroup behind (scripts/check-leaks.sh). A test of keeping them sets
// either key again, after this (the last value of a variable wins).
var KeepNothingEnv = []string{"JAILCELL_SESSIONS_SURVIVE_RESTART=false", "JAILCELL_SESSIONS_HIBERNATE_ON_SHUTDOWN=false"}

// HermeticEnv is what a jailcell child's environment must hold for it to
// be hermetic; ChildEnv includes it, an environment built by hand adds it.
func HermeticEnv() []string {
	return append([]string{"JAILCELL_CONFIG=" + HermeticConfig(), "JAILCELL_SANDBOX_CLAIM_DIR=" + TestClaimDir}, KeepNothingEnv...)
}

// Hermetic makes this test process's own jailcell code hermetic too (a
// command run in-process reads JAILCELL_CONFIG), unless the developer
// set JAILCELL_CONFIG. Main calls it; a TestMain of its own calls it.
func Hermetic() {
	if os.Getenv("JAILCELL_CONFIG") == "" {
		os.Setenv("JAILCELL_CONFIG", HermeticConfig())
	}
	for _, kv := range HermeticEnv()[1:] {
		k, v, _ := strings.Cut(kv, "=")
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// removeHermetic removes the file HermeticConfig wrote, if any.
func removeHermetic() {
	if hermeticDir != "" {
		os.RemoveAll(hermeticDir)
	}
}
