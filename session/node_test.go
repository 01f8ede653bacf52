package session

import (
	"context"
	"regexp"
	"testing"
)

// TestNodeOf: the node is the part of an id before its first "-", when it
// is a node name; ids from before nodes (bare hex) have none.
func TestNodeOf(t *testing.T) {
	for id, want := range map[string]string{
		"n1-0123456789abcdef0123456789abcdef": "n1",
		"0123456789abcdef0123456789abcdef":    "",
		"N1-0123":                             "",
		"-0123":                               "",
		"abcdefghijklmnopq-0123":              "", // 17 characters
		"a/b-0123":                            "",
	} {
		if got := NodeOf(id); got != want {
			t.Errorf("NodeOf(%q) = %q, want %q", id, got, want)
		}
	}
}

// TestNodeSessionIDs: a daemon with a node name puts it in every new
// session id; a session from a daemon without one (a bare id, from before
// nodes) is re-adopted by a daemon that now has one.
func TestNodeSessionIDs(t *testing.T) {
	r := newRestartable(t)
	ctx := context.Background()
	m1 := r.start(true)
	old, err := m1.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(old.ID) {
		t.Fatalf("id without a node: %q, want 32 hex digits", old.ID)
	}
	if res, err := m1.Exec(ctx, 1000, old.ID, ExecRequest{Code: "x = 41"}); err != nil || res.Status != StatusOK {
		t.Fatalf("cell: %v %+v", err, res)
	}
	if err := m1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := r.startWith(func(c *Config) { c.NodeID = "n7"; c.KeepOnShutdown = false })
	res, err := m2.Exec(ctx, 1000, old.ID, ExecRequest{Code: "print(x + 1)"})
	if err != nil || res.Stdout != "42\n" {
		t.Fatalf("re-adopted bare id: %v %+v", err, res)
	}
	info, err := m2.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^n7-[0-9a-f]{32}$`).MatchString(info.ID) || NodeOf(info.ID) != "n7" {
		t.Fatalf("id of node n7: %q", info.ID)
	}
	if res, err := m2.Exec(ctx, 1000, info.ID, ExecRequest{Code: "print('ok')"}); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("cell in a node-named session: %v %+v", err, res)
	}
	if err := m2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{StateDir: t.TempDir(), NodeID: "Bad_Node"}, nil); err == nil {
		t.Error("node name Bad_Node accepted")
	}
}
