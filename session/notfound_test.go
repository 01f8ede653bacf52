package session

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Every not-found answer names what was not found: the file and its
// session, the session id, the snapshot. The sentinel itself says only
// "not found", so that a missing file never reads "session not found".
func TestNotFoundNamesWhatIsMissing(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{})
	closed := e.create(t, CreateOptions{})
	if err := e.m.Close(ctx, 0, closed); err != nil {
		t.Fatal(err)
	}
	const ghost = "s-never-created"
	check := func(what string, err error, want ...string) {
		t.Helper()
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", what, err)
			return
		}
		msg := err.Error()
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not name %q", what, msg, w)
			}
		}
		if strings.Contains(msg, "session not found") && !strings.Contains(what, "session") {
			t.Errorf("%s: %q says a session was not found", what, msg)
		}
	}

	_, err := e.m.Workspace().Download(ctx, 0, id, "missing.txt")
	check("download of a missing file", err, "file missing.txt not found", "session "+id)
	_, err = e.m.Workspace().Download(ctx, 0, id, "sub/dir/missing.txt")
	check("download under a missing directory", err, "file sub/dir/missing.txt not found", "session "+id)
	if strings.Contains(err.Error(), "session not found") {
		t.Errorf("a missing file reads as a missing session: %v", err)
	}

	_, err = e.m.Durability().Rollback(ctx, 0, id)
	check("rollback without a snapshot", err, "session "+id, "no snapshot")

	// A session never created: every op names its id.
	for what, op := range map[string]func() error{
		"exec in a missing session":       func() error { _, err := e.m.Exec(ctx, 0, ghost, ExecRequest{Code: "1"}); return err },
		"download from a missing session": func() error { _, err := e.m.Workspace().Download(ctx, 0, ghost, "a.txt"); return err },
		"upload to a missing session":     func() error { _, err := e.m.Workspace().Upload(ctx, 0, ghost, "a.txt", []byte("x"), nil); return err },
		"files of a missing session":      func() error { _, err := e.m.Workspace().Files(ctx, 0, ghost); return err },
		"close of a missing session":      func() error { return e.m.Close(ctx, 0, ghost) },
		"hibernate of a missing session":  func() error { _, err := e.m.Durability().Hibernate(ctx, 0, ghost); return err },
		"restore of a missing session":    func() error { _, err := e.m.Durability().Restore(ctx, 0, ghost); return err },
		"fork of a missing session":       func() error { _, err := e.m.Durability().Fork(ctx, 0, ghost); return err },
		"snapshot of a missing session":   func() error { _, err := e.m.Durability().Snapshot(ctx, 0, ghost); return err },
		"rollback of a missing session":   func() error { _, err := e.m.Durability().Rollback(ctx, 0, ghost); return err },
		"interrupt of a missing session":  func() error { _, err := e.m.Interrupt(ctx, 0, ghost); return err },
		"lookup of a missing session":     func() error { _, err := e.m.Lookup(ctx, 0, ghost); return err },
	} {
		check(what, op(), `session "`+ghost+`" not found`)
	}

	// A closed session: its id and what became of it.
	_, err = e.m.Workspace().Download(ctx, 0, closed, "a.txt")
	check("download from a closed session", err, "session "+closed, "was closed")
	_, err = e.m.Exec(ctx, 0, closed, ExecRequest{Code: "1"})
	check("exec in a closed session", err, "session "+closed, "was closed")

	// Another owner's session is reported as missing, by the id asked for.
	_, err = e.m.Workspace().Download(ctx, 4242, id, "missing.txt")
	check("download from another owner's session", err, `session "`+id+`" not found`)
}
