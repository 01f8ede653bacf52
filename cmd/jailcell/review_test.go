package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/workflow"
)

// runBin runs this test binary as jailcell with args, env added to a clean
// environment, stdin; it returns the exit status, stdout and stderr.
func runBin(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = jailcellEnv(env...)
	return testenv.Run(t, cmd, stdin)
}

// TestReviewCommandReadsAWorkflowLog: a real `jailcell json` runs a fix
// loop that never succeeds, which writes the review log and the failure
// memory; the real `jailcell review` then lists, shows and clears them.
// Privileged tier (the loop runs real sandboxes).
func TestReviewCommandReadsAWorkflowLog(t *testing.T) {
	cmd, state, stderr := jsonCommand(t)
	dir := filepath.Join(state, "review")
	fixer, err := filepath.Abs("../../testdata/fixer/never_fix.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, "JAILCELL_FIXER_COMMAND=/usr/bin/python3 "+fixer)
	code := "import json\nopen('/work/missing-17.csv')"
	req, _ := json.Marshal(map[string]any{"id": 1, "op": "exec", "code": code, "fix": map[string]int{"max_attempts": 2}})
	cmd.Stdin = bytes.NewReader(append(req, '\n'))
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"fallback"`) {
		t.Fatalf("jailcell json: %v\n%s\nstderr:\n%s", err, out, stderr)
	}

	review := func(args ...string) (int, string, string) {
		t.Helper()
		return runBin(t, nil, "", append([]string{"review", "--review-dir", dir}, args...)...)
	}
	status, stdout, errOut := review()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if status != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "N ") ||
		!strings.Contains(lines[1], "(one-shot)") || !strings.Contains(lines[1], "retries exhausted after 2 attempts") {
		t.Fatalf("review: exit %d\n%s\nstderr: %s", status, stdout, errOut)
	}
	if status2, stdout2, _ := review("list"); status2 != 0 || stdout2 != stdout {
		t.Errorf("review list differs from review: %d\n%s", status2, stdout2)
	}

	status, stdout, errOut = review("show", "1")
	var e workflow.ReviewEntry
	if status != 0 || json.Unmarshal([]byte(stdout), &e) != nil {
		t.Fatalf("review show 1: exit %d\n%s\nstderr: %s", status, stdout, errOut)
	}
	if e.Code != code || len(e.Attempts) != 2 || e.Fingerprint == "" || !strings.Contains(strings.Join(e.Errors, "\n"), "FileNotFoundError") {
		t.Errorf("review show 1: %+v", e)
	}
	for _, n := range []string{"2", "0", "x"} {
		if status, _, errOut := review("show", n); status != 1 || !strings.Contains(errOut, `no review entry "`+n+`": 1 entries, numbered from 1`) {
			t.Errorf("review show %s: exit %d, stderr %q", n, status, errOut)
		}
	}

	status, stdout, errOut = review("failures")
	if status != 0 || !strings.Contains(stdout, e.Fingerprint) || !strings.Contains(stdout, "default") || !strings.Contains(stdout, "FileNotFoundError") {
		t.Fatalf("review failures: exit %d\n%s\nstderr: %s", status, stdout, errOut)
	}
	if status, stdout, _ = review("failures", "--clear"); status != 0 || strings.TrimSpace(stdout) != "cleared 1 fingerprints" {
		t.Errorf("review failures --clear: exit %d %q", status, stdout)
	}
	if status, stdout, _ = review("failures"); status != 0 || strings.Contains(stdout, e.Fingerprint) {
		t.Errorf("after --clear: exit %d\n%s", status, stdout)
	}

	// An empty review directory says so; a bad subcommand names what is allowed.
	if status, stdout, errOut := runBin(t, nil, "", "review", "--review-dir", t.TempDir()); status != 0 || stdout != "" || !strings.Contains(errOut, "no review entries in") {
		t.Errorf("empty review dir: exit %d %q %q", status, stdout, errOut)
	}
	if status, _, errOut := review("nonsense"); status == 0 || !strings.Contains(errOut, "nonsense") {
		t.Errorf("review nonsense: exit %d %q", status, errOut)
	}
}

// TestReviewEscapesControlChars: what a cell put in its exception (a type
// name holding OSC 52, a CSI, DEL) reaches the administrator's terminal
// escaped, in every field `jailcell review` prints.
func TestReviewEscapesControlChars(t *testing.T) {
	hermeticConfig(t)
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, ""))
	dir := t.TempDir()
	hostile := "Evil\x1b]52;c;cm0gLXJmIH4=\x07\u009b31m\x7f\xff\n"
	e := workflow.ReviewEntry{Time: time.Now(), Session: hostile, Code: hostile, Errors: []string{hostile}, Reason: hostile, Fingerprint: hostile,
		Attempts: []workflow.Attempt{{Attempt: 1, Code: hostile, Status: hostile, Error: &seam.CellError{Type: hostile, Message: hostile, Traceback: hostile}, Stdout: hostile, Stderr: hostile}}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, workflow.ReviewFile), append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	f := []workflow.Failure{{Policy: hostile, Fingerprint: hostile, Type: hostile, Message: hostile, Modules: []string{hostile}, Count: 3, FirstSeen: time.Now(), LastSeen: time.Now()}}
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, workflow.FailuresFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"show", "1"}, {"failures"}} {
		out, err := runCmd(newReviewCmd(), append([]string{"--review-dir", dir}, args...)...)
		if err != nil {
			t.Fatalf("review %v: %v", args, err)
		}
		if !strings.Contains(out, "Evil") {
			t.Errorf("review %v does not show the entry:\n%s", args, out)
		}
		if strings.ContainsAny(out, "\x1b\x07\x7f\u009b") || strings.IndexByte(out, 0x9b) >= 0 || !utf8.ValidString(out) {
			t.Errorf("review %v prints control bytes: %q", args, out)
		}
		if args[0] == "show" {
			var got workflow.ReviewEntry
			if err := json.Unmarshal([]byte(out), &got); err != nil || got.Reason != strings.ToValidUTF8(hostile, "\ufffd") {
				t.Errorf("review show: %v, reason %q; want the escaped JSON of the entry", err, got.Reason)
			}
		}
	}
}
