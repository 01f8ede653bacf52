package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

// TestRemoteE2BOps sends the E2B-shaped ops through a Remote (what `jailcell
// json` in front of a service does) to an HTTPServer over a real manager:
// each answers as the Dispatcher does, a streamed command's events
// included.
func TestRemoteE2BOps(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	m := newTestManager(t, "/jailcell-test-api-remote-e2b", p)
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
		_ = srv.Shutdown(ctx)
		<-served
	})
	r := NewRemote(sock)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.Reachable(ctx, 10*time.Second); err != nil {
		t.Fatalf("Reachable: %v", err)
	}
	ok := func(req *api.Request, emit func(api.Event)) *api.Response {
		t.Helper()
		req.ID = json.RawMessage(`"x"`)
		resp := r.Handle(ctx, 12345, req, emit)
		if !resp.OK {
			t.Fatalf("%s: %+v", req.Op, resp.Error)
		}
		return resp
	}
	id := ok(&api.Request{Op: api.OpCreate, Envs: map[string]string{"SB": "remote"}}, nil).Info.ID
	var events []api.Event
	resp := ok(&api.Request{Op: api.OpCommand, Session: id, Cmd: "echo $SB $C", Envs: map[string]string{"C": "cmd"}, Stream: true},
		func(ev api.Event) { events = append(events, ev) })
	if resp.Command == nil || resp.Command.Stdout != "remote cmd\n" || len(events) == 0 || events[0].Text != "remote cmd\n" {
		t.Errorf("streamed command: %+v, events %+v", resp.Command, events)
	}
	if resp := ok(&api.Request{Op: api.OpInfo, Session: id}, nil); resp.Info == nil || resp.Info.ID != id {
		t.Errorf("info: %+v", resp.Info)
	}
	ok(&api.Request{Op: api.OpSetTimeout, Session: id, TimeoutS: 60}, nil)
	if resp := ok(&api.Request{Op: api.OpMetrics, Session: id}, nil); resp.Metrics == nil || !resp.Metrics.Running {
		t.Errorf("metrics: %+v", resp.Metrics)
	}
	if resp := ok(&api.Request{Op: api.OpMkdir, Session: id, Path: "d/e"}, nil); resp.Created == nil || !*resp.Created {
		t.Errorf("mkdir: %+v", resp)
	}
	w := ok(&api.Request{Op: api.OpWatch, Session: id, Path: "d", Recursive: true}, nil).Watch
	ok(&api.Request{Op: api.OpUpload, Session: id, Path: "d/e/f.txt", Data: []byte("f")}, nil)
	time.Sleep(150 * time.Millisecond)
	if resp := ok(&api.Request{Op: api.OpWatch, Session: id, Action: seam.WatchPoll, Watch: w}, nil); !slices.Contains(resp.Events, seam.WatchEvent{Name: "e/f.txt", Type: seam.EventCreate}) {
		t.Errorf("watch poll: %+v", resp.Events)
	}
	if resp := ok(&api.Request{Op: api.OpStat, Session: id, Path: "d/e/f.txt"}, nil); resp.Entry == nil || resp.Entry.Size != 1 {
		t.Errorf("stat: %+v", resp.Entry)
	}
	ok(&api.Request{Op: api.OpRemove, Session: id, Path: "d"}, nil)
	if resp := r.Handle(ctx, 12345, &api.Request{ID: json.RawMessage("1"), Op: api.OpStat, Session: id, Path: "d"}, nil); resp.OK || resp.Error.Code != api.CodeNotFound || !strings.Contains(resp.Error.Message, "d") {
		t.Errorf("stat after remove: %+v", resp.Error)
	}
	ok(&api.Request{Op: api.OpClose, Session: id}, nil)
}
