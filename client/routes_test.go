package client

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jailcell/jailcell/api"
)

// TestRoutesMatchServer: each method of the HTTP client sends its op to
// the method and path api.Routes (the server's route table) gives that
// op. The client does not import the server; only this test does.
func TestRoutesMatchServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := NewHTTP(sock)
	ctx := context.Background()
	// op "" is a path that runs no op (the Prometheus metrics).
	for _, tc := range []struct {
		op   string
		call func()
	}{
		{api.OpPing, func() { _, _ = c.Health(ctx) }},
		{api.OpCreate, func() { _, _ = c.Create(ctx, CreateOptions{}) }},
		{api.OpSessions, func() { _, _ = c.Sessions(ctx) }},
		{api.OpClose, func() { _ = c.CloseSession(ctx, "s1") }},
		{api.OpHibernate, func() { _, _ = c.Hibernate(ctx, "s1") }},
		{api.OpRestore, func() { _, _ = c.Restore(ctx, "s1") }},
		{api.OpSnapshot, func() { _, _ = c.Snapshot(ctx, "s1") }},
		{api.OpRollback, func() { _, _ = c.Rollback(ctx, "s1") }},
		{api.OpFork, func() { _, _ = c.Fork(ctx, "s1") }},
		{api.OpInterrupt, func() { _, _ = c.Interrupt(ctx, "s1") }},
		{api.OpExec, func() { _, _ = c.Exec(ctx, "s1", "x", nil) }},
		{api.OpExec, func() { _, _ = c.Exec(ctx, "", "x", nil) }},
		{api.OpUpload, func() { _ = c.Upload(ctx, "s1", "dir/a.txt", []byte("x")) }},
		{api.OpDownload, func() { _, _ = c.Download(ctx, "s1", "dir/a.txt") }},
		{api.OpFiles, func() { _, _ = c.Files(ctx, "s1") }},
		{"", func() { _, _ = c.Metrics(ctx) }},
	} {
		mu.Lock()
		sent = nil
		mu.Unlock()
		tc.call()
		mu.Lock()
		got := slices.Clone(sent)
		mu.Unlock()
		if len(got) != 1 {
			t.Errorf("op %q: the client sent %q, want one request", tc.op, got)
			continue
		}
		verb, path, _ := strings.Cut(got[0], " ")
		pattern := strings.NewReplacer("/v1/sessions/s1", "/v1/sessions/{id}", "dir/a.txt", "{path}").Replace(path)
		ok := false
		for _, r := range api.Routes {
			if r.Path != pattern || !slices.Contains(r.Methods, verb) {
				continue
			}
			ok = r.Ops[verb] == tc.op
		}
		if !ok {
			t.Errorf("op %q: the client sends %s %s, which the route table does not give that op", tc.op, verb, pattern)
		}
	}
}
