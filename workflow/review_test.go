package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

// reviewRunner is a Runner with only what review needs.
func reviewRunner(dir string, log *slog.Logger) *Runner {
	return &Runner{cfg: Config{Now: time.Now, Logger: log}, rev: &reviewLog{dir: dir}}
}

// TestReviewEntryBounded: a caller whose every exec is refused (limit,
// unavailable) with 17 MiB of code leaves a bounded entry, which names the
// whole code's sha256; past its bound the log is rotated, and both files
// are listed.
func TestReviewEntryBounded(t *testing.T) {
	dir := t.TempDir()
	r := reviewRunner(dir, discard)
	code := strings.Repeat("x = 1\n", 17<<20/6)
	big := strings.Repeat("\x1b", 1<<20)
	out := &Outcome{
		Attempts: []Attempt{{Attempt: 1, Code: code, Status: "error", Error: &seam.CellError{Type: big, Message: big, Traceback: big, Frames: make([]seam.Frame, 200)}}},
		Fallback: &Fallback{Reason: "the sandbox could not be created: " + big, Error: big},
	}
	r.review(Request{Exec: seam.ExecRequest{Code: code}}, out, "")
	out.Attempts = nil
	r.review(Request{Exec: seam.ExecRequest{Code: code}}, out, "")
	fi, err := os.Stat(filepath.Join(dir, ReviewFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 2<<20 {
		t.Fatalf("two entries of 17 MiB of code take %d bytes of review log", fi.Size())
	}
	entries, err := ReadReview(dir)
	if err != nil || len(entries) != 2 {
		t.Fatalf("ReadReview: %d entries, %v", len(entries), err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(code)))
	e := entries[0]
	for what, c := range map[string]string{"code": e.Code, "attempt's code": e.Attempts[0].Code} {
		if len(c) > maxReviewCode+200 || !strings.HasPrefix(code, c[:maxReviewCode]) || !strings.Contains(c, "cut by jailcell") || !strings.Contains(c, sum) {
			t.Errorf("the entry's %s (%d bytes) is not cut to %d with the whole code's sha256", what, len(c), maxReviewCode)
		}
	}
	if a := e.Attempts[0].Error; len(a.Type) > maxReviewType+10 || len(a.Message) > maxReviewText+10 || len(a.Traceback) > maxReviewText+20 || a.Frames != nil ||
		len(e.Reason) > maxReviewText+10 || len(e.Errors[0]) > maxReviewText+10 || len(entries[1].Errors[0]) > maxReviewText+10 {
		t.Errorf("error texts not bounded: type %d, message %d, traceback %d, reason %d, errors %d/%d",
			len(a.Type), len(a.Message), len(a.Traceback), len(e.Reason), len(e.Errors[0]), len(entries[1].Errors[0]))
	}
	if out := (&Outcome{Attempts: []Attempt{{Code: code}}}); reviewAttempt(out.Attempts[0]).Code == code || out.Attempts[0].Code != code {
		t.Error("the review changed the response's attempt")
	}

	// Rotation: the log stays under its bound; the one before is kept once.
	r.rev.max = 1 << 20
	for range 20 {
		r.review(Request{Exec: seam.ExecRequest{Code: code}}, out, "")
	}
	for _, name := range []string{ReviewFile, ReviewFile + ".1"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() > r.rev.max {
			t.Errorf("%s: %v, want at most %d bytes", name, err, r.rev.max)
		}
	}
	lines := 0
	for _, name := range []string{ReviewFile, ReviewFile + ".1"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		lines += bytes.Count(b, []byte("\n"))
	}
	if entries, err := ReadReview(dir); err != nil || len(entries) != lines || lines < 4 {
		t.Errorf("after rotation: %d entries, %v; want the %d lines of both files", len(entries), err, lines)
	}
}

// TestReadReviewSkipsOverlongLine: one line over the read bound is listed
// as skipped; the entries around it are still read.
func TestReadReviewSkipsOverlongLine(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	for _, reason := range []string{"before", strings.Repeat("x", maxReviewLine+1), "after"} {
		line, _ := json.Marshal(ReviewEntry{Reason: reason})
		b.Write(append(line, '\n'))
	}
	b.WriteString("{not an entry\n")
	if err := os.WriteFile(filepath.Join(dir, ReviewFile), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadReview(dir)
	if err != nil || len(entries) != 4 {
		t.Fatalf("ReadReview: %d entries, %v; want 4", len(entries), err)
	}
	if entries[0].Reason != "before" || !strings.Contains(entries[1].Reason, "line 2 skipped: over") ||
		entries[2].Reason != "after" || !strings.Contains(entries[3].Reason, "line 4 skipped") {
		t.Errorf("reasons %.80q %.80q %.80q %.80q", entries[0].Reason, entries[1].Reason, entries[2].Reason, entries[3].Reason)
	}
}

// TestReviewDirRefusesForeignOwnerOrWritable: whoever can write review.dir
// can plant a symlink where jailcell writes as root, so New refuses such a
// directory, naming it, its owner and mode; in its own directory,
// jailcell's writes never follow a symlink found in place.
func TestReviewDirRefusesForeignOwnerOrWritable(t *testing.T) {
	refused := func(t *testing.T, dir, want string) {
		t.Helper()
		_, err := New(nil, Config{ReviewDir: dir})
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), want) {
			t.Fatalf("New: %v; want a refusal naming %s and %q", err, dir, want)
		}
	}
	t.Run("group writable", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o770); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, "drwxrwx---")
	})
	t.Run("others writable, sticky", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, "dtrwxrwxrwx")
	})
	t.Run("another owner", func(t *testing.T) {
		testenv.RequiresRoot(t) // to chown
		dir := t.TempDir()
		if err := os.Chown(dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, "uid 4242")
	})
	t.Run("a symlink", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "review")
		if err := os.Symlink(t.TempDir(), dir); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, "want a directory")
	})

	t.Run("symlinks planted inside", func(t *testing.T) {
		dir, victims := t.TempDir(), t.TempDir()
		targets := map[string]string{}
		for _, name := range []string{FailuresFile + ".tmp", ReviewFile} {
			target := filepath.Join(victims, name)
			if err := os.WriteFile(target, []byte("root:secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			targets[name] = target
		}
		var logs bytes.Buffer
		r, err := New(nil, Config{ReviewDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("New in a 0700 directory of ours: %v", err)
		}
		res := &seam.Result{Status: "error", Error: &seam.CellError{Type: "ZeroDivisionError", Message: "division by zero"}}
		r.mem.record(0, scopeOf(policy.Default(), "default"), "1/0", "1/0", res)
		r.review(Request{Exec: seam.ExecRequest{Code: "1/0"}}, &Outcome{Fallback: &Fallback{Reason: "r"}}, "")
		for name, target := range targets {
			if b, err := os.ReadFile(target); err != nil || string(b) != "root:secret\n" {
				t.Errorf("%s planted as a symlink: its target now holds %q (%v)", name, b, err)
			}
		}
		if fi, err := os.Lstat(filepath.Join(dir, FailuresFile)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("failures.json: %v, %v; want a regular file", fi, err)
		}
		if l := r.Failures(0); len(l) != 1 {
			t.Errorf("failures %+v, want the one recorded", l)
		}
		if !strings.Contains(logs.String(), "append review log") {
			t.Errorf("the refused review append is not logged:\n%s", logs.String())
		}
	})
}
