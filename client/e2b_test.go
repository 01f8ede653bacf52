package client

import (
	"context"
	"maps"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/session"
)

// e2bAPI is what both transports offer for the E2B-shaped ops.
type e2bAPI interface {
	API
	Command(ctx context.Context, id, cmd string, opts *CommandOptions) (*CommandResult, error)
	Info(ctx context.Context, id string) (*Session, error)
	SetTimeout(ctx context.Context, id string, d time.Duration) (*Session, error)
	SessionMetrics(ctx context.Context, id string) (*SessionMetrics, error)
	Stat(ctx context.Context, id, path string) (*Entry, error)
	Remove(ctx context.Context, id, path string) error
	MakeDir(ctx context.Context, id, path string) (bool, error)
	Rename(ctx context.Context, id, path, newPath string) (*Entry, error)
	Watch(ctx context.Context, id, action, path string, recursive bool, watch string) (*WatchResult, error)
}

var (
	_ e2bAPI = (*HTTP)(nil)
	_ e2bAPI = (*JSONL)(nil)
)

// e2bConformance drives every E2B-shaped op against a real service
// through c: commands (streamed, background, killed), envs of the session,
// the cell and the command, info, timeout, metrics, paths and a watch.
func e2bConformance(t *testing.T, c e2bAPI) {
	ctx := context.Background()
	s, err := c.Create(ctx, CreateOptions{Envs: map[string]string{"SB": "sandbox"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseSession(ctx, s.ID)
	var mu sync.Mutex
	var out strings.Builder
	r, err := c.Command(ctx, s.ID, `echo "$SB $CMD"; echo warn >&2; exit 5`, &CommandOptions{
		Envs:     map[string]string{"CMD": "command"},
		OnOutput: func(stream, text string) { mu.Lock(); out.WriteString(stream + ":" + text); mu.Unlock() },
	})
	if err != nil || !r.Done || r.ExitCode != 5 || r.Stdout != "sandbox command\n" || r.Stderr != "warn\n" {
		t.Fatalf("command = %+v, %v", r, err)
	}
	if !strings.Contains(out.String(), "stdout:sandbox command") {
		t.Errorf("streamed %q", out.String())
	}
	bg, err := c.Command(ctx, s.ID, "sleep 300", &CommandOptions{Background: true})
	if err != nil || bg.Done {
		t.Fatalf("background = %+v, %v", bg, err)
	}
	if r, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "kill", Job: bg.Job}); err != nil || !r.Done || r.ExitCode != -9 {
		t.Errorf("kill = %+v, %v", r, err)
	}
	if _, err := c.Command(ctx, s.ID, "true", &CommandOptions{Cwd: "../etc"}); !IsCode(err, "bad_request") {
		t.Errorf("cwd outside /work: %v, want bad_request", err)
	}
	// A session that starts in /home/user, the workspace's second name.
	home, err := c.Create(ctx, CreateOptions{Cwd: "/home/user"})
	if err != nil || home.Cwd != "/home/user" {
		t.Fatalf("create in /home/user: %+v, %v", home, err)
	}
	if r, err := c.Command(ctx, home.ID, "pwd; ls /work", nil); err != nil || r.Stdout != "/home/user\n" {
		t.Errorf("pwd in a session started in /home/user: %+v, %v", r, err)
	}
	c.CloseSession(ctx, home.ID)
	if _, err := c.Create(ctx, CreateOptions{Cwd: "/tmp"}); !IsCode(err, "bad_request") {
		t.Errorf("create in /tmp: %v, want bad_request", err)
	}
	res, err := c.Exec(ctx, s.ID, "import os; os.environ['SB'] + os.environ['CELL']", &ExecOptions{Envs: map[string]string{"CELL": "!"}})
	if err != nil || res.Value["text/plain"] != "'sandbox!'" {
		t.Errorf("cell envs: %+v, %v", res, err)
	}
	info, err := c.Info(ctx, s.ID)
	if err != nil || info.ID != s.ID || info.State != "ready" {
		t.Errorf("info = %+v, %v", info, err)
	}
	before := time.Now()
	info, err = c.SetTimeout(ctx, s.ID, 100*time.Second)
	if err != nil || info.ExpiresAt.Sub(before) < 99*time.Second || info.ExpiresAt.Sub(before) > 110*time.Second {
		t.Errorf("set_timeout(100) = %+v, %v", info, err)
	}
	if _, err := c.SetTimeout(ctx, s.ID, 1000*time.Hour); !IsCode(err, "bad_request") {
		t.Errorf("set_timeout past the ceiling: %v, want bad_request", err)
	}
	m, err := c.SessionMetrics(ctx, s.ID)
	if err != nil || !m.Running || m.MemUsed <= 0 || m.MemTotal != 256<<20 || m.DiskTotal <= 0 {
		t.Errorf("metrics = %+v, %v", m, err)
	}
	if created, err := c.MakeDir(ctx, s.ID, "d/e"); err != nil || !created {
		t.Fatalf("mkdir = %v, %v", created, err)
	}
	w, err := c.Watch(ctx, s.ID, "start", "d", true, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Upload(ctx, s.ID, "d/e/x.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	got, err := c.Watch(ctx, s.ID, "poll", "", false, w.Watch)
	if err != nil || !slices.Contains(got.Events, WatchEvent{"e/x.txt", "create"}) {
		t.Errorf("watch poll = %+v, %v", got, err)
	}
	if e, err := c.Stat(ctx, s.ID, "d/e/x.txt"); err != nil || e.Size != 1 {
		t.Errorf("stat = %+v, %v", e, err)
	}
	// The entry tells a link from its target and carries the bits and
	// owner the sandbox set, so a caller need not follow a link to learn
	// what it is.
	if r, err := c.Command(ctx, s.ID, "printf hi > f.txt && chmod 640 f.txt && ln -s f.txt ln", nil); err != nil || r.ExitCode != 0 {
		t.Fatalf("command = %+v, %v", r, err)
	}
	if e, err := c.Stat(ctx, s.ID, "f.txt"); err != nil || e.Mode != 0o640 || e.UID != 0 || e.GID != 0 || e.Symlink || e.Size != 2 {
		t.Errorf("stat f.txt = %+v, %v", e, err)
	}
	if e, err := c.Stat(ctx, s.ID, "ln"); err != nil || !e.Symlink || e.Link != "f.txt" || e.Dir {
		t.Errorf("stat ln = %+v, %v", e, err)
	}
	files, err := c.Files(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == "ln" && (!f.Symlink || f.Link != "f.txt") || f.Path == "f.txt" && f.Mode != 0o640 {
			t.Errorf("files: %+v", f)
		}
	}
	fileMetadata(ctx, t, c, s.ID)
	fileRename(ctx, t, c, s.ID)
	if err := c.Remove(ctx, s.ID, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, s.ID, "d"); !IsCode(err, "not_found") {
		t.Errorf("stat after remove: %v, want not_found", err)
	}
}

// fileRename: a file moves into a directory the rename makes, with its
// content and metadata, and is gone from its old path; a directory moves
// with what it holds; a directory is never moved onto what exists, nor
// into itself (bad_request), and a missing source is not_found.
func fileRename(ctx context.Context, t *testing.T, c e2bAPI, id string) {
	t.Helper()
	meta := map[string]string{"author": "ana"}
	if _, err := c.UploadWith(ctx, id, "r/a.txt", []byte("moved"), UploadOptions{Metadata: meta}); err != nil {
		t.Fatal(err)
	}
	e, err := c.Rename(ctx, id, "r/a.txt", "r/new/sub/b.txt")
	if err != nil || e.Path != "r/new/sub/b.txt" || e.Size != 5 || e.Dir || !maps.Equal(e.Metadata, meta) {
		t.Fatalf("rename a file into a new directory = %+v, %v", e, err)
	}
	if _, err := c.Stat(ctx, id, "r/a.txt"); !IsCode(err, "not_found") {
		t.Errorf("stat of the old path: %v, want not_found", err)
	}
	if b, err := c.Download(ctx, id, "r/new/sub/b.txt"); err != nil || string(b) != "moved" {
		t.Errorf("download of the new path = %q, %v", b, err)
	}
	// Absolute paths, under either name of the workspace.
	if e, err := c.Rename(ctx, id, "/work/r/new", "/home/user/moved"); err != nil || e.Path != "moved" || !e.Dir {
		t.Errorf("rename a directory = %+v, %v", e, err)
	}
	if e, err := c.Stat(ctx, id, "moved/sub/b.txt"); err != nil || !maps.Equal(e.Metadata, meta) {
		t.Errorf("stat of the moved directory's file = %+v, %v", e, err)
	}
	for _, to := range []string{"r", "moved/in"} {
		if _, err := c.Rename(ctx, id, "moved", to); !IsCode(err, "bad_request") {
			t.Errorf("rename a directory to %s: %v, want bad_request", to, err)
		}
	}
	if _, err := c.Rename(ctx, id, "nothing", "x"); !IsCode(err, "not_found") {
		t.Errorf("rename of a missing path: %v, want not_found", err)
	}
	for _, p := range []string{"r", "moved"} {
		if err := c.Remove(ctx, id, p); err != nil {
			t.Error(err)
		}
	}
}

// fileMetadata: an upload's metadata comes back, keys exactly as given,
// from the upload, stat and the listing; an upload without it clears it;
// metadata the service refuses is bad_request and leaves no file.
func fileMetadata(ctx context.Context, t *testing.T, c e2bAPI, id string) {
	t.Helper()
	meta := map[string]string{"author": "ana", "Mixed Case": `"quoted" <&> \ ~`, "empty": ""}
	e, err := c.UploadWith(ctx, id, "m.txt", []byte("m"), UploadOptions{Metadata: meta})
	if err != nil || e.Path != "m.txt" || e.Size != 1 || !maps.Equal(e.Metadata, meta) {
		t.Fatalf("upload with metadata = %+v, %v", e, err)
	}
	if e, err := c.Stat(ctx, id, "m.txt"); err != nil || !maps.Equal(e.Metadata, meta) || e.Size != 1 {
		t.Errorf("stat m.txt = %+v, %v", e, err)
	}
	files, err := c.Files(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == "m.txt" && !maps.Equal(f.Metadata, meta) || f.Path != "m.txt" && f.Metadata != nil {
			t.Errorf("files: %+v", f)
		}
	}
	// Each upload replaces the whole map.
	if e, err := c.UploadWith(ctx, id, "m.txt", []byte("mm"), UploadOptions{Metadata: map[string]string{"author": "bo"}}); err != nil || !maps.Equal(e.Metadata, map[string]string{"author": "bo"}) {
		t.Errorf("upload replacing metadata = %+v, %v", e, err)
	}
	if e, err := c.Stat(ctx, id, "m.txt"); err != nil || !maps.Equal(e.Metadata, map[string]string{"author": "bo"}) {
		t.Errorf("stat after replacing = %+v, %v", e, err)
	}
	if err := c.Upload(ctx, id, "m.txt", []byte("plain")); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Stat(ctx, id, "m.txt"); err != nil || e.Metadata != nil || e.Size != 5 {
		t.Errorf("stat after an upload without metadata = %+v, %v", e, err)
	}
	for _, bad := range []map[string]string{
		{"a\nb": "v"},
		{"": "v"},
		{"k": "caf\u00e9"},
		{"del\x7f": "v"},
		{strings.Repeat("k", 247): "v"},
		{"big": strings.Repeat("v", 4096)},
		{"bigger": strings.Repeat("v", 16<<10)}, // past the HTTP header bound
	} {
		if _, err := c.UploadWith(ctx, id, "bad.txt", []byte("x"), UploadOptions{Metadata: bad}); !IsCode(err, "bad_request") || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("upload with metadata %.60q: %v, want bad_request naming the metadata", bad, err)
		}
	}
	if _, err := c.Stat(ctx, id, "bad.txt"); !IsCode(err, "not_found") {
		t.Errorf("stat after refused uploads: %v, want not_found", err)
	}
}

func TestHTTPClientE2B(t *testing.T) {
	svc := startService(t)
	c := NewHTTP(svc.Sock)
	defer c.CloseIdleConnections()
	e2bConformance(t, c)
	t.Run("hibernate on idle", func(t *testing.T) { hibernateOnIdle(t, c) })
}

func TestJSONLClientE2B(t *testing.T) {
	c := startJSONL(t)
	e2bConformance(t, c)
	t.Run("hibernate on idle", func(t *testing.T) { hibernateOnIdle(t, c) })
}

// startJSONL runs `jailcell json` until the test ends, logging its stderr
// if the test failed.
func startJSONL(t *testing.T) *JSONL {
	t.Helper()
	testenv.RequiresRoot(t)
	bin := testenv.Jailcell(t)
	dir := testenv.StateDir(t)
	stderr := &testenv.LockedBuffer{}
	cmd := exec.Command(bin, "json", "--config", testConfig(t, dir))
	cmd.Env, cmd.Stderr = testenv.ChildEnv("JAILCELL_REVIEW_DIR="+dir+"/review"), stderr
	c, err := StartJSONCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jailcell json log:\n%s", stderr.String())
		}
		c.Close()
	})
	return c
}

// TestE2BWireTypesMatch: the client's copies of the E2B-shaped ops' types
// keep every JSON field of the originals.
func TestE2BWireTypesMatch(t *testing.T) {
	for _, tc := range []struct{ mine, theirs any }{
		{CommandResult{}, session.CommandResult{}},
		{SessionMetrics{}, session.SessionMetrics{}},
		{WatchEvent{}, session.WatchEvent{}},
		{WatchResult{}, session.WatchResult{}},
	} {
		mine, theirs := jsonFields(reflect.TypeOf(tc.mine)), jsonFields(reflect.TypeOf(tc.theirs))
		if !reflect.DeepEqual(mine, theirs) {
			t.Errorf("%T fields %v, %T's %v", tc.mine, mine, tc.theirs, theirs)
		}
	}
}
