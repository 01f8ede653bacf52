package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestLibcontainerLogsFollowLogFormat: libcontainer's logrus lines come out
// in the --log-format of jailcell's own lines, on the same writer, with
// their fields and mapped levels, filtered by log.level. No libcontainer
// line can be provoked reliably from outside, so this logs through logrus's
// standard logger, which is the one libcontainer calls.
func TestLibcontainerLogsFollowLogFormat(t *testing.T) {
	std := logrus.StandardLogger()
	out, formatter, hooks, lvl := std.Out, std.Formatter, std.ReplaceHooks(logrus.LevelHooks{}), std.GetLevel()
	t.Cleanup(func() {
		std.SetOutput(out)
		std.SetFormatter(formatter)
		std.ReplaceHooks(hooks)
		std.SetLevel(lvl)
	})
	std.SetLevel(logrus.DebugLevel)

	var buf bytes.Buffer
	level := new(slog.LevelVar)
	log := newSlog(&buf, "json", level)
	log.Info("jailcell line")
	logrus.WithField("container", "jc-1").WithError(errors.New("no such process")).Warn("kill 17: no such process")
	logrus.Debug("dropped: below log.level")
	logrus.Error("an error line")
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("with --log-format json, line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want jailcell's, the warning and the error (debug filtered): %s", len(lines), buf.String())
	}
	if w := lines[1]; w["level"] != "WARN" || w["msg"] != "kill 17: no such process" || w["component"] != "libcontainer" ||
		w["container"] != "jc-1" || w["error"] != "no such process" {
		t.Errorf("warning line %v", w)
	}
	if e := lines[2]; e["level"] != "ERROR" || e["msg"] != "an error line" {
		t.Errorf("error line %v", e)
	}

	// Text, and log.level debug lets the debug line through.
	buf.Reset()
	level.Set(slog.LevelDebug)
	newSlog(&buf, "text", level)
	logrus.WithField("container", "jc-2").Debug("a debug line")
	if got := buf.String(); !strings.Contains(got, `level=DEBUG msg="a debug line" component=libcontainer container=jc-2`) || strings.HasPrefix(got, "{") {
		t.Errorf("text line %q", got)
	}
	// Nothing reaches logrus's own output any more.
	if std.Out != io.Discard {
		t.Errorf("logrus still writes to %v", std.Out)
	}
}
