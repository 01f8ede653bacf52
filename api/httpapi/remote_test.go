package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
)

const remoteCgroupRoot = "/jailcell-test-api-remote"

// TestRemote sends wire requests through a Remote to an HTTPServer over a
// real Dispatcher and manager on a Unix socket: each op comes back as the
// Dispatcher answers it, streamed events included, with the caller's id.
func TestRemote(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	m := newTestManager(t, remoteCgroupRoot, p)
	sock := filepath.Join(testenv.StateDir(t), "r.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(&api.Dispatcher{Manager: m, Version: "test-remote"}, HTTPOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	r := NewRemote(sock)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.Reachable(ctx, 10*time.Second); err != nil {
		t.Fatalf("Reachable: %v", err)
	}

	n := 0
	do := func(req *api.Request, emit func(api.Event)) *api.Response {
		t.Helper()
		n++
		req.ID = json.RawMessage(`"r` + string(rune('a'+n)) + `"`)
		resp := r.Handle(ctx, 12345, req, emit)
		if string(resp.ID) != string(req.ID) {
			t.Errorf("%s: response id %s, want %s", req.Op, resp.ID, req.ID)
		}
		return resp
	}
	ok := func(req *api.Request) *api.Response {
		t.Helper()
		resp := do(req, nil)
		if !resp.OK {
			t.Fatalf("%s: %+v", req.Op, resp.Error)
		}
		return resp
	}

	if resp := ok(&api.Request{Op: api.OpPing}); resp.Version != "test-remote" || resp.Isolation == nil {
		t.Errorf("ping: %+v", resp)
	}
	id := ok(&api.Request{Op: api.OpCreate}).Info.ID

	// Streaming: every event before the response, with the caller's id.
	var mu sync.Mutex
	var events []api.Event
	resp := do(&api.Request{Op: api.OpExec, Session: id, Code: "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.2)\nx = 7", Stream: true},
		func(ev api.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() })
	if !resp.OK || resp.Result.Stdout != "0\n1\n2\n" {
		t.Fatalf("streamed exec: %+v %+v", resp.Error, resp.Result)
	}
	var streamed strings.Builder
	for _, ev := range events {
		if ev.Event != "stdout" || string(ev.ID) != string(resp.ID) {
			t.Errorf("event %+v", ev)
		}
		streamed.WriteString(ev.Text)
	}
	if streamed.String() != "0\n1\n2\n" {
		t.Errorf("streamed %q", streamed.String())
	}
	// Stream asked without anyone to emit to: one plain response.
	if res := ok(&api.Request{Op: api.OpExec, Session: id, Code: "print('s')\nx * 6", Stream: true}).Result; res.Value["text/plain"] != "42" || res.Stdout != "s\n" {
		t.Errorf("the session kept x: %+v", res)
	}
	if res := ok(&api.Request{Op: api.OpExec, Code: "print('once')"}).Result; res.Stdout != "once\n" {
		t.Errorf("one-shot: %+v", res)
	}

	// Files: a path with a space and a subdirectory, binary content.
	data := []byte("a,b\n\x00\xff1,2\n")
	if resp := ok(&api.Request{Op: api.OpUpload, Session: id, Path: "in dir/data 1.csv", Data: data}); resp.Path != "in dir/data 1.csv" || *resp.Size != int64(len(data)) {
		t.Errorf("upload: %+v", resp)
	}
	dl := ok(&api.Request{Op: api.OpDownload, Session: id, Path: "in dir/data 1.csv"})
	sum := sha256.Sum256(data)
	if string(dl.Data) != string(data) || dl.SHA256 != hex.EncodeToString(sum[:]) || *dl.Size != int64(len(data)) {
		t.Errorf("download: %q %s", dl.Data, dl.SHA256)
	}
	if files := ok(&api.Request{Op: api.OpFiles, Session: id}).Files; len(files) != 2 {
		t.Errorf("files: %+v", files)
	}
	if list := ok(&api.Request{Op: api.OpSessions}).Sessions; len(list) != 1 || list[0].ID != id {
		t.Errorf("sessions: %+v", list)
	}

	// Errors come back with their codes; a bad request never leaves.
	for _, tc := range []struct {
		req  *api.Request
		code string
	}{
		{&api.Request{Op: api.OpDownload, Session: id, Path: "../etc/passwd"}, api.CodeBadRequest},
		{&api.Request{Op: api.OpExec, Session: id}, api.CodeBadRequest},
		{&api.Request{Op: api.OpFailures}, api.CodeUnavailable},
	} {
		if resp := do(tc.req, nil); resp.OK || resp.Error.Code != tc.code {
			t.Errorf("%s %s: %+v, want code %s", tc.req.Op, tc.req.Path, resp.Error, tc.code)
		}
	}
	ok(&api.Request{Op: api.OpClose, Session: id})
	if resp := do(&api.Request{Op: api.OpExec, Session: id, Code: "1"}, nil); resp.OK || resp.Error.Code != api.CodeNotFound {
		t.Errorf("exec in a closed session: %+v", resp.Error)
	}

	// A Scoped handler closes what was created through it.
	sc := NewScoped(r)
	a := sc.Handle(ctx, 0, &api.Request{ID: json.RawMessage("1"), Op: api.OpCreate}, nil)
	b := sc.Handle(ctx, 0, &api.Request{ID: json.RawMessage("2"), Op: api.OpCreate}, nil)
	if !a.OK || !b.OK {
		t.Fatalf("create: %+v %+v", a.Error, b.Error)
	}
	sc.Handle(ctx, 0, &api.Request{ID: json.RawMessage("3"), Op: api.OpClose, Session: a.Info.ID}, nil)
	sc.CloseAll(ctx, 0)
	if list := ok(&api.Request{Op: api.OpSessions}).Sessions; len(list) != 0 {
		t.Errorf("sessions left after CloseAll: %+v", list)
	}

	// No service on a socket: unavailable, naming it.
	gone := NewRemote(filepath.Join(t.TempDir(), "none.sock"))
	if err := gone.Reachable(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("Reachable without a service: %v", err)
	}
	if resp := gone.Handle(ctx, 0, &api.Request{ID: json.RawMessage("1"), Op: api.OpPing}, nil); resp.OK || resp.Error.Code != api.CodeUnavailable || !strings.Contains(resp.Error.Message, "none.sock") {
		t.Errorf("ping without a service: %+v", resp.Error)
	}
}
