package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jailcell/jailcell/api"
	fspb "github.com/jailcell/jailcell/api/e2b/proto/filesystem"
	"github.com/jailcell/jailcell/api/e2b/proto/filesystem/filesystemconnect"
	"github.com/jailcell/jailcell/session/seam"
)

func TestMapPath(t *testing.T) {
	ok := []struct{ in, rel, shown string }{
		{"", "", "/home/user"},
		{"~", "", "/home/user"},
		{"~/a/b.txt", "a/b.txt", "/home/user/a/b.txt"},
		{"a.txt", "a.txt", "/home/user/a.txt"},
		{"./a/../b.txt", "b.txt", "/home/user/b.txt"},
		{"/home/user", "", "/home/user"},
		{"/home/user/", "", "/home/user"},
		{"/home/user/x/y", "x/y", "/home/user/x/y"},
		{"/home/user//x/./y", "x/y", "/home/user/x/y"},
		{"/work", "", "/work"},
		{"/work/x", "x", "/work/x"},
		{"/work/work/x", "work/x", "/work/work/x"},
		{"/home/user/../user/x", "x", "/home/user/x"},
	}
	for _, c := range ok {
		p, err := mapPath(c.in)
		if err != nil || p.rel != c.rel || p.show() != c.shown {
			t.Errorf("mapPath(%q) = %+v (%q), %v; want rel %q shown %q", c.in, p, p.show(), err, c.rel, c.shown)
		}
	}
	outside := []string{"/", "/etc/passwd", "/home", "/home/userx/a", "/home/user/..", "/work/../etc", "..", "../x", "/workx", "/root/a"}
	for _, in := range outside {
		_, err := mapPath(in)
		var out *outsideError
		if !errors.As(err, &out) || !strings.Contains(err.Error(), "/work") || !strings.Contains(err.Error(), "/home/user") {
			t.Errorf("mapPath(%q) = %v; want outside the workspace, naming /work and /home/user", in, err)
		}
	}
	if _, err := mapPath("~root/x"); err == nil || errors.As(err, new(*outsideError)) {
		t.Errorf("mapPath(~root/x) = %v; want a refusal of another user's home", err)
	}
}

func TestWithin(t *testing.T) {
	cases := []struct {
		dir, entry string
		depth      int
		rel        string
		ok         bool
	}{
		{"", "a", 1, "a", true},
		{"", "a/b", 1, "", false},
		{"", "a/b", 2, "a/b", true},
		{"d", "d", 1, "", false},
		{"d", "d/x", 1, "x", true},
		{"d", "d/x/y", 1, "", false},
		{"d", "d/x/y", 2, "x/y", true},
		{"d", "dd/x", 5, "", false},
	}
	for _, c := range cases {
		rel, ok := within(c.dir, c.entry, c.depth)
		if rel != c.rel || ok != c.ok {
			t.Errorf("within(%q, %q, %d) = %q, %v; want %q, %v", c.dir, c.entry, c.depth, rel, ok, c.rel, c.ok)
		}
	}
}

func TestEventMapping(t *testing.T) {
	in := []seam.WatchEvent{{Name: "a", Type: seam.EventCreate}, {Name: "a", Type: seam.EventWrite}, {Name: "b/c", Type: seam.EventRemove}, {Name: "d", Type: seam.EventRename}, {Name: "e", Type: "chmod-or-new"}}
	want := []*fspb.FilesystemEvent{
		{Name: "a", Type: fspb.EventType_EVENT_TYPE_CREATE},
		{Name: "a", Type: fspb.EventType_EVENT_TYPE_WRITE},
		{Name: "b/c", Type: fspb.EventType_EVENT_TYPE_REMOVE},
		{Name: "d", Type: fspb.EventType_EVENT_TYPE_RENAME},
	}
	got := fsEvents(in)
	if len(got) != len(want) {
		t.Fatalf("fsEvents = %v; want %v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Type != want[i].Type {
			t.Errorf("event %d = %v; want %v", i, got[i], want[i])
		}
	}
	if lostEvents(&api.Response{Overflow: true, Events: make([]seam.WatchEvent, 3)}) != nil {
		t.Error("a scan cut short (overflow with few events) lost nothing; want no error")
	}
	if err := lostEvents(&api.Response{Overflow: true, Events: make([]seam.WatchEvent, watchEventCap)}); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a full poll that overflowed: %v; want ResourceExhausted", err)
	}
	for h, want := range map[string]time.Duration{"": keepaliveDefault, "x": keepaliveDefault, "50": 50 * time.Second, "0": keepaliveMin, "-3": keepaliveMin, "100000": keepaliveMax} {
		if got := keepaliveOf(h); got != want {
			t.Errorf("keepaliveOf(%q) = %s; want %s", h, got, want)
		}
	}
}

// fakeFS answers the workspace ops of one sandbox from memory.
type fakeFS struct {
	mu      sync.Mutex
	id      string
	gone    bool
	files   map[string][]byte // rel -> content; nil content: a directory
	meta    map[string]map[string]string
	watches map[string]bool
	polled  map[string]bool
	calls   []string
}

func newFakeFS(id string) *fakeFS {
	return &fakeFS{id: id, files: map[string][]byte{}, meta: map[string]map[string]string{}, watches: map[string]bool{}, polled: map[string]bool{}}
}

func (f *fakeFS) Handle(_ context.Context, _ int, req *api.Request, _ func(api.Event)) *api.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req.Op+" "+req.Action+" "+req.Path+req.Watch)
	fail := func(code, msg string) *api.Response {
		return &api.Response{Error: &api.Error{Code: code, Message: msg}}
	}
	if f.gone || req.Session != f.id {
		return fail(api.CodeNotFound, "no session "+req.Session)
	}
	ok := &api.Response{OK: true}
	entry := func(p string) *seam.Entry {
		d, there := f.files[p]
		if !there {
			return nil
		}
		return &seam.Entry{Path: p, Size: int64(len(d)), Dir: d == nil, ModTime: time.Unix(1700000000, 0), Metadata: f.meta[p]}
	}
	mkdirs := func(p string) {
		for i := range p {
			if p[i] == '/' {
				f.files[p[:i]] = nil
			}
		}
	}
	switch req.Op {
	case api.OpInfo:
		return ok
	case api.OpStat:
		if e := entry(req.Path); e != nil {
			ok.Entry = e
			return ok
		}
		return fail(api.CodeNotFound, "no file or directory "+req.Path+" in the workspace")
	case api.OpMkdir:
		created := false
		if d, there := f.files[req.Path]; there && d != nil {
			return fail(api.CodeBadRequest, req.Path+" is a regular file, not a directory")
		} else if !there {
			mkdirs(req.Path)
			f.files[req.Path], created = nil, true
		}
		ok.Created = &created
		return ok
	case api.OpRemove:
		if _, there := f.files[req.Path]; !there {
			return fail(api.CodeNotFound, "no file or directory "+req.Path+" in the workspace")
		}
		for p := range f.files {
			if p == req.Path || strings.HasPrefix(p, req.Path+"/") {
				delete(f.files, p)
			}
		}
		return ok
	case api.OpFiles:
		ok.Files = []seam.Entry{}
		for p := range f.files {
			ok.Files = append(ok.Files, *entry(p))
		}
		sort.Slice(ok.Files, func(i, j int) bool { return ok.Files[i].Path < ok.Files[j].Path })
		return ok
	case api.OpDownload:
		d, there := f.files[req.Path]
		if !there {
			return fail(api.CodeNotFound, "file "+req.Path+" not found")
		}
		if d == nil {
			return fail(api.CodeBadRequest, req.Path+" is a directory")
		}
		ok.Data = d
		return ok
	case api.OpRename:
		if _, there := f.files[req.Path]; !there {
			return fail(api.CodeNotFound, "no file or directory "+req.Path+" in the workspace")
		}
		mkdirs(req.To)
		for p, d := range f.files {
			if p == req.Path || strings.HasPrefix(p, req.Path+"/") {
				np := req.To + strings.TrimPrefix(p, req.Path)
				delete(f.files, p)
				f.files[np] = d
				if m, ok := f.meta[p]; ok {
					delete(f.meta, p)
					f.meta[np] = m
				}
			}
		}
		ok.Entry = entry(req.To)
		return ok
	case api.OpUpload:
		mkdirs(req.Path)
		f.files[req.Path] = append([]byte{}, req.Data...)
		f.meta[req.Path], ok.Metadata = req.Metadata, req.Metadata
		return ok
	case api.OpWatch:
		switch req.Action {
		case seam.WatchStart:
			ok.Watch = "watch-" + strconv.Itoa(len(f.calls))
			f.watches[ok.Watch] = true
		case seam.WatchPoll:
			if !f.watches[req.Watch] {
				return fail(api.CodeNotFound, "no watch "+req.Watch)
			}
			// One change, seen by the first poll.
			ok.Events = []seam.WatchEvent{}
			if !f.polled[req.Watch] {
				f.polled[req.Watch] = true
				ok.Events = append(ok.Events, seam.WatchEvent{Name: "x", Type: seam.EventCreate})
			}
		case seam.WatchStop:
			if !f.watches[req.Watch] {
				return fail(api.CodeNotFound, "no watch "+req.Watch)
			}
			delete(f.watches, req.Watch)
		}
		return ok
	}
	return fail(api.CodeInternal, "fake: op "+req.Op)
}

// envdOf starts a door over h and returns a client of its envd for
// sandbox id, and the door's URL.
func envdOf(t *testing.T, h api.Handler, id string) (*http.Client, string) {
	t.Helper()
	d, err := New(h, Options{Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: headers{rt: http.DefaultTransport, h: map[string]string{
		"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": d.accessToken(1000, id),
	}}}
	return c, srv.URL
}

type headers struct {
	rt http.RoundTripper
	h  map[string]string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header.Set(k, v)
	}
	return h.rt.RoundTrip(r)
}

func TestFilesystemService(t *testing.T) {
	fs := newFakeFS("n1-ab")
	c, url := envdOf(t, fs, "n1-ab")
	cl := filesystemconnect.NewFilesystemClient(c, url)
	ctx := context.Background()

	if _, err := cl.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/home/user/none"})); err != nil {
		t.Errorf("remove of a missing path: %v; want success, as envd's os.RemoveAll", err)
	}
	if _, err := cl.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "d/e"})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/work/d/e"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("makeDir of a directory there: %v; want AlreadyExists", err)
	}
	fs.files["d/e/f.txt"] = []byte("abc")
	fs.files["d/g.txt"] = []byte("g")
	mv, err := cl.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/home/user/d", Destination: "/home/user/d2"}))
	if err != nil {
		t.Fatal(err)
	}
	if mv.Msg.Entry.Path != "/home/user/d2" || mv.Msg.Entry.Type != fspb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("move answered %v", mv.Msg.Entry)
	}
	if string(fs.files["d2/e/f.txt"]) != "abc" || string(fs.files["d2/g.txt"]) != "g" || fs.files["d/g.txt"] != nil {
		t.Errorf("after moving d to d2: %v", fs.files)
	}
	fs.files["other"] = nil
	if _, err := cl.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "d2/g.txt", Destination: "other"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("move onto a directory: %v; want AlreadyExists", err)
	}
	if _, err := cl.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "d2", Destination: "/etc/d2"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("move out of the workspace: %v; want PermissionDenied", err)
	}
	ls, err := cl.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/work/d2", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ls.Msg.Entries {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "/work/d2/e /work/d2/e/f.txt /work/d2/g.txt" {
		t.Errorf("listDir depth 2 = %v", paths)
	}

	// include_entry: each event names the entry it is about, stat'ed
	// through the session; the watcher id carries the directory.
	fs.files["d2/x"] = []byte("new")
	we, err := cl.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "d2", IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := cl.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: we.Msg.WatcherId}))
	if err != nil || len(evs.Msg.Events) != 1 || evs.Msg.Events[0].Entry.GetPath() != "/home/user/d2/x" || evs.Msg.Events[0].Entry.GetSize() != 3 {
		t.Errorf("getWatcherEvents with entries = %v, %v; want x's entry", evs, err)
	}
	if _, err := cl.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: "watch-1+entries:%%%"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a watcher id with a mangled directory: %v; want InvalidArgument", err)
	}
	if _, err := cl.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: we.Msg.WatcherId})); err != nil {
		t.Error(err)
	}
	delete(fs.files, "d2/x")
	w, err := cl.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "d2"}))
	if err != nil {
		t.Fatal(err)
	}
	evs, err = cl.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: w.Msg.WatcherId}))
	if err != nil || len(evs.Msg.Events) != 1 || evs.Msg.Events[0].Entry != nil || evs.Msg.Events[0].Type != fspb.EventType_EVENT_TYPE_CREATE {
		t.Errorf("getWatcherEvents = %v, %v", evs, err)
	}
	if _, err := cl.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: w.Msg.WatcherId})); err != nil {
		t.Error(err)
	}
	if _, err := cl.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: w.Msg.WatcherId})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher: %v; want NotFound", err)
	}

	// The stream stops its watch when the client goes away.
	sctx, cancel := context.WithCancel(ctx)
	st, err := cl.WatchDir(sctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "d2"}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("first message %v, %v; want StartEvent", st.Msg(), st.Err())
	}
	if !st.Receive() || st.Msg().GetFilesystem().GetName() != "x" {
		t.Fatalf("second message %v, %v; want the event", st.Msg(), st.Err())
	}
	cancel()
	st.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fs.mu.Lock()
		n := len(fs.watches)
		fs.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream's watch was not stopped after its client went away")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Nothing more happens: a KeepAlive comes after the interval asked.
	kreq := connect.NewRequest(&fspb.WatchDirRequest{Path: "d2"})
	kreq.Header().Set("Keepalive-Ping-Interval", "1")
	kctx, kcancel := context.WithTimeout(ctx, 10*time.Second)
	defer kcancel()
	ks, err := cl.WatchDir(kctx, kreq)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 && ks.Receive() {
		switch {
		case ks.Msg().GetStart() != nil:
			got = append(got, "start")
		case ks.Msg().GetFilesystem() != nil:
			got = append(got, "event")
		case ks.Msg().GetKeepalive() != nil:
			got = append(got, "keepalive")
		}
	}
	ks.Close()
	if strings.Join(got, " ") != "start event keepalive" {
		t.Errorf("stream with a 1 s keepalive: %v, %v; want start, event, keepalive", got, ks.Err())
	}

	fs.files["d3"] = nil
	if _, err := cl.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "d2", Destination: "d3"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("move of a directory onto one that exists: %v; want AlreadyExists", err)
	}
	// A move is one rename op: nothing is downloaded, uploaded or removed.
	fs.mu.Lock()
	fs.calls = nil
	fs.mu.Unlock()
	if _, err := cl.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "d2", Destination: "d4"})); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	for _, c := range fs.calls {
		if strings.HasPrefix(c, api.OpDownload) || strings.HasPrefix(c, api.OpUpload) || strings.HasPrefix(c, api.OpRemove) {
			t.Errorf("a move copied: %q", fs.calls)
		}
	}
	fs.mu.Unlock()

	fs.mu.Lock()
	fs.gone = true
	fs.mu.Unlock()
	if _, err := cl.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "d2"})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("stat in a sandbox that is gone: %v; want Unavailable, not a missing file", err)
	}
	if _, err := cl.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "d2"})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("remove in a sandbox that is gone: %v; want Unavailable", err)
	}
}

func TestFileRoutes(t *testing.T) {
	fs := newFakeFS("n1-ab")
	c, url := envdOf(t, fs, "n1-ab")
	post := func(ct string, body io.Reader, query string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/files"+query, body)
		req.Header.Set("Content-Type", ct)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for name, data := range map[string]string{"/home/user/a/one.txt": "1", "/work/two.txt": "2"} {
		w, _ := mw.CreateFormFile("file", name)
		w.Write([]byte(data))
	}
	mw.Close()
	code, body := post(mw.FormDataContentType(), &form, "", nil)
	if code != http.StatusOK || string(fs.files["a/one.txt"]) != "1" || string(fs.files["two.txt"]) != "2" {
		t.Fatalf("multipart upload: %d %s; files %v", code, body, fs.files)
	}
	var entries []uploadEntry
	if err := json.Unmarshal([]byte(body), &entries); err != nil || len(entries) != 2 {
		t.Fatalf("upload answer %s: %v", body, err)
	}

	if code, body := post("application/octet-stream", strings.NewReader("x"), "?path=/etc/x", nil); code != http.StatusForbidden || !strings.Contains(body, "outside the workspace") {
		t.Errorf("upload outside: %d %s; want 403 naming the workspace", code, body)
	}
	// Metadata: X-Metadata-KEY headers, keys lowercased, the first of a
	// repeated header; answered back and kept for stat.
	req, _ := http.NewRequest(http.MethodPost, url+"/files?path=m.txt", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Add("X-Metadata-Author", "mish")
	req.Header.Add("X-Metadata-Author", "second")
	req.Header.Set("x-metadata-PURPOSE", "upload")
	if resp, err := c.Do(req); err != nil {
		t.Fatal(err)
	} else {
		var got []uploadEntry
		err := json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		want := map[string]string{"author": "mish", "purpose": "upload"}
		if err != nil || len(got) != 1 || !maps.Equal(got[0].Metadata, want) || !maps.Equal(fs.meta["m.txt"], want) {
			t.Errorf("upload with metadata answered %v (%v), kept %v; want %v", got, err, fs.meta["m.txt"], want)
		}
	}
	if code, _ := post("text/plain", strings.NewReader("x"), "?path=m.txt", nil); code != http.StatusBadRequest {
		t.Errorf("upload as text/plain: %d; want 400", code)
	}
	if code, _ := post("application/octet-stream", strings.NewReader("x"), "?path=m.txt", map[string]string{"Content-Encoding": "br"}); code != http.StatusBadRequest {
		t.Errorf("upload encoded br: %d; want 400", code)
	}
	big := io.LimitReader(zeros{}, maxUploadBody+1)
	if code, _ := post("application/octet-stream", big, "?path=big.bin", nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an upload over the bound: %d; want 413", code)
	}
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestSpeed)
	io.Copy(zw, io.LimitReader(zeros{}, seam.MaxFileBytes+1))
	zw.Close()
	if code, _ := post("application/octet-stream", &bomb, "?path=bomb.bin", map[string]string{"Content-Encoding": "gzip"}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a gzip body inflating past the bound: %d; want 413", code)
	}
	if _, there := fs.files["big.bin"]; there {
		t.Error("an upload over the bound was written")
	}

	get := func(p string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, url+"/files?path="+p, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, b := get("/home/user/a/one.txt")
	if resp.StatusCode != 200 || b != "1" || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Disposition") != `inline; filename=one.txt` || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("download: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	if resp, b := get("a/one.txt&username=root"); resp.StatusCode != 200 || b != "1" {
		t.Errorf("download as username=root: %d %q; want the same file (one user, one workspace)", resp.StatusCode, b)
	}
	if resp, b := get("nope.txt"); resp.StatusCode != 404 || !strings.Contains(b, "/home/user/nope.txt") || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("download of a missing file: %d %s; want 404 JSON naming the path", resp.StatusCode, b)
	}
	if resp, _ := get("a"); resp.StatusCode != 400 {
		t.Errorf("download of a directory: %d; want 400", resp.StatusCode)
	}
	// This sandbox was not created through this door: its envVars are
	// not known, which is said.
	if resp, b := get2(c, url+"/envs"); resp.StatusCode != 404 || !strings.Contains(b, "not known") {
		t.Errorf("/envs of a sandbox this door did not create: %d %s; want 404 saying so", resp.StatusCode, b)
	}
	fs.mu.Lock()
	fs.gone = true
	fs.mu.Unlock()
	if resp, _ := get("a/one.txt"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("download from a sandbox that is gone: %d; want 502", resp.StatusCode)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func get2(c *http.Client, url string) (*http.Response, string) {
	resp, err := c.Get(url)
	if err != nil {
		return &http.Response{}, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
