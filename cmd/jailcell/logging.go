package main

import (
	"context"
	"io"
	"log/slog"
	"sort"

	"github.com/sirupsen/logrus"
)

// newSlog is the daemon's logger on w in format ("json" or text), and the
// route of libcontainer's logrus output into it: libcontainer logs through
// logrus's standard logger, and a second format on the same stderr would
// break a journald or JSON log pipeline. Its lines go through the same
// handler, so they follow --log-format and log.level (logrus itself stays
// at the level isolate.NewHost sets, warn: libcontainer's info is noise).
func newSlog(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	l := slog.New(h)
	std := logrus.StandardLogger()
	std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(logrusBridge{l})
	std.SetFormatter(nopFormatter{})
	std.SetOutput(io.Discard)
	return l
}

// logrusBridge hands each logrus entry to slog, with the entry's fields.
type logrusBridge struct{ log *slog.Logger }

func (logrusBridge) Levels() []logrus.Level { return logrus.AllLevels }

func (b logrusBridge) Fire(e *logrus.Entry) error {
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	attrs = append(attrs, slog.String("component", "libcontainer"))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, e.Data[k]))
	}
	b.log.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func slogLevel(l logrus.Level) slog.Level {
	switch l {
	case logrus.TraceLevel, logrus.DebugLevel:
		return slog.LevelDebug
	case logrus.InfoLevel:
		return slog.LevelInfo
	case logrus.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError // error, fatal, panic
}

// nopFormatter: the bridge has written the entry; logrus writes nothing.
type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }
