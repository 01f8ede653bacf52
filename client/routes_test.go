package client

import (
	"context"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jailcell/jailcell/api"
)

// fakeSocket serves h on a Unix socket of the test's own and returns its
// path.
func fakeSocket(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestRoutesMatchServer: each method of the HTTP client sends its op to
// the method and path api.Routes (the server's route table) gives that
// op. The client does not import the server; only this test does.
func TestRoutesMatchServer(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	sock := fakeSocket(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
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
		{api.OpUpload, func() {
			_, _ = c.UploadWith(ctx, "s1", "dir/a.txt", []byte("x"), UploadOptions{Metadata: map[string]string{"k": "v"}})
		}},
		{api.OpDownload, func() { _, _ = c.Download(ctx, "s1", "dir/a.txt") }},
		{api.OpFiles, func() { _, _ = c.Files(ctx, "s1") }},
		{api.OpStat, func() { _, _ = c.Stat(ctx, "s1", "dir/a.txt") }},
		{api.OpRemove, func() { _ = c.Remove(ctx, "s1", "dir/a.txt") }},
		{api.OpMkdir, func() { _, _ = c.MakeDir(ctx, "s1", "dir/a.txt") }},
		{api.OpRename, func() { _, _ = c.Rename(ctx, "s1", "dir/a.txt", "dir/b.txt") }},
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

// TestMetadataHeader: what the HTTP client puts in the metadata header is
// what the server's reader (api.MetadataFromHeader) takes from it, key for
// key, whatever the map holds: a key the service must refuse by name has
// to reach it intact, not fail in an HTTP library or arrive changed.
func TestMetadataHeader(t *testing.T) {
	if metadataHeader != api.MetadataHeader {
		t.Fatalf("client sends metadata in %q, the server reads %q", metadataHeader, api.MetadataHeader)
	}
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []http.Header
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"path":"a.txt","size":1,"metadata":{"k":"v"}}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := NewHTTP(sock)
	ctx := context.Background()
	for _, m := range []map[string]string{
		nil,
		{},
		{"author": "ana", "Mixed Case": `"q" <&> \ ~`, "empty": ""},
		{"a\nb": "tab\there", "nul": "\x00"},
		{"del\x7f": "caf\u00e9", "emoji \U0001F600": "\u2028"},
		{"big": strings.Repeat("\"", 4080)}, // 4092 bytes, each escaped to two
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		e, err := c.UploadWith(ctx, "s1", "a.txt", []byte("x"), UploadOptions{Metadata: m})
		if err != nil || e.Path != "a.txt" || e.Size != 1 || !maps.Equal(e.Metadata, map[string]string{"k": "v"}) {
			t.Fatalf("upload %q: %+v, %v", m, e, err)
		}
		mu.Lock()
		h := got[0]
		mu.Unlock()
		read, apiErr := api.MetadataFromHeader(h)
		if apiErr != nil || !maps.Equal(read, m) || len(m) == 0 && read != nil {
			t.Errorf("sent %q; the server reads %q, %v (header %q)", m, read, apiErr, h.Values(api.MetadataHeader))
		}
		for _, v := range h.Values(api.MetadataHeader) {
			for i := range len(v) {
				if v[i] < 0x20 || v[i] > 0x7e {
					t.Errorf("header %q: byte %#x is not printable ASCII", v, v[i])
				}
			}
		}
	}
	// More than any map the service keeps can make: refused here, as the
	// service's header bound would answer 431 instead of bad_request.
	mu.Lock()
	got = nil
	mu.Unlock()
	if _, err := c.UploadWith(ctx, "s1", "a.txt", nil, UploadOptions{Metadata: map[string]string{"k": strings.Repeat("v", 9000)}}); !IsCode(err, "bad_request") || !strings.Contains(err.Error(), "4096") {
		t.Errorf("oversized metadata: %v, want bad_request naming the bound", err)
	}
	if len(got) != 0 {
		t.Errorf("oversized metadata was sent")
	}
}
