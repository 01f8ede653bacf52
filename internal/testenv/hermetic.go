package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	hermeticFile string
)

// HermeticConfig is the path of the test processes' configuration file
// (socket: NoServiceSocket), readable by any user (tests run jailcell as
// users who are not root too). It is one file for every test process on
// the host, its content always the same, so no run leaves one behind.
func HermeticConfig() string {
	hermeticOnce.Do(func() {
		d := filepath.Join(os.TempDir(), "jailcell-test-hermetic")
		f := filepath.Join(d, "config.yaml")
		err := os.MkdirAll(d, 0o755)
		if err == nil {
			// Symlink or squatting attack on a fixed name in a shared
			// TMPDIR: another user's directory there could hand the
			// tests a config of theirs. Only our own real directory.
			err = ownDir(d)
		}
		if err == nil {
			err = os.Chmod(d, 0o755)
		}
		// The socket's directory too: another user who made it could
		// listen there and be the "service" a test's front door reaches.
		if sd := filepath.Dir(NoServiceSocket); err == nil {
			if err = os.MkdirAll(sd, 0o755); err == nil {
				err = ownDir(sd)
			}
		}
		if err == nil {
			err = writeWhole(f, fmt.Sprintf("# a test's jailcell: never the host's config or service\nsocket: %s\n", NoServiceSocket))
		}
		if err != nil {
			// Without it a child would read the host's configuration and
			// find its service: no test may run so.
			panic(fmt.Sprintf("testenv: write the hermetic config: %v", err))
		}
		hermeticFile = f
	})
	return hermeticFile
}

// writeWhole writes content to path (mode 0644) through a temporary file
// renamed over it: test processes started in parallel never read a
// half-written file.
func writeWhole(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// ownDir fails unless d is a directory (not a symlink to one) owned by
// this process's user.
func ownDir(d string) error {
	fi, err := os.Lstat(d)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s is not a directory of uid %d: remove it or set TMPDIR", d, os.Getuid())
	}
	return nil
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
