package jsonl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/doortest"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

// A cgroup root of its own: starting a manager sweeps its root, and the
// session package's tests may run at the same time.
const integrationCgroupRoot = "/jailcell-test-api-jsonl"

// startJSONL drives Serve over pipes (api/internal/doortest).
func startJSONL(t *testing.T, d *api.Dispatcher) *doortest.JSONL {
	return doortest.StartJSONL(t, func(ctx context.Context, r io.Reader, w io.Writer) error {
		return Serve(ctx, r, w, d, Options{})
	})
}

func TestJSONLIntegration(t *testing.T) {
	// Skips, naming what is missing, without root or the built rootfs
	// (make rootfs); under CI a missing rootfs fails instead.
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	host, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: integrationCgroupRoot})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := session.New(session.Config{StateDir: filepath.Join(state, "sessions"), Policies: map[string]policy.Policy{"default": p}, Logger: log}, host)
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	shut := false
	t.Cleanup(func() {
		if !shut {
			m.Shutdown(context.Background())
		}
	})
	c := startJSONL(t, &api.Dispatcher{Manager: m, Version: "itest", Logger: log})

	// ping reports the real host's isolation.
	v := c.MustOK(`{"id":"1","op":"ping"}`)
	if v.Version != "itest" || v.Isolation == nil || v.Isolation.CgroupMode == "" || !v.Isolation.UserNS {
		t.Errorf("ping: version %q isolation %+v", v.Version, v.Isolation)
	}

	// A one-shot cell.
	v = c.MustOK(`{"id":"2","op":"exec","code":"print(1+1)","timeout_s":60}`)
	if v.Result == nil || v.Result.Status != session.StatusOK || v.Result.Stdout != "2\n" {
		t.Errorf("one-shot exec: %+v", v.Result)
	}

	// A bad line, then a bad timeout: precise errors, and the stream goes on.
	v, raw := c.Call(`this is not json`)
	if string(v.ID) != "null" || v.Error == nil || v.Error.Code != api.CodeBadRequest {
		t.Errorf("bad line: %s", raw)
	}
	v, raw = c.Call(`{"id":"3","op":"exec","code":"print(1)","timeout_s":-1}`)
	if string(v.ID) != `"3"` || v.Error == nil || v.Error.Code != api.CodeBadRequest || !strings.Contains(v.Error.Message, "timeout_s") {
		t.Errorf("negative timeout: %s", raw)
	}

	// A session keeps its variables between cells.
	v = c.MustOK(`{"id":"4","op":"create","ttl_s":120}`)
	if v.Session == "" || v.ExpiresAt.IsZero() {
		t.Fatalf("create: session %q expires_at %v", v.Session, v.ExpiresAt)
	}
	sid, _ := json.Marshal(v.Session)
	v = c.MustOK(`{"id":"5","op":"exec","session":` + string(sid) + `,"code":"x = 41"}`)
	if v.Result == nil || v.Result.Status != session.StatusOK {
		t.Errorf("first session exec: %+v", v.Result)
	}
	v = c.MustOK(`{"id":"6","op":"exec","session":` + string(sid) + `,"code":"print(x + 1)"}`)
	if v.Result == nil || v.Result.Status != session.StatusOK || v.Result.Stdout != "42\n" {
		t.Errorf("second session exec did not see x: %+v", v.Result)
	}
	c.MustOK(`{"id":"7","op":"close","session":` + string(sid) + `}`)
	v, raw = c.Call(`{"id":"8","op":"exec","session":` + string(sid) + `,"code":"print(x)"}`)
	if v.Error == nil || v.Error.Code != api.CodeNotFound {
		t.Errorf("exec after close: %s", raw)
	}

	// Streaming: events carry the request's id and come before the result.
	c.Send(`{"id":"9","op":"exec","stream":true,"code":"import time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', flush=True)"}`)
	var streamed strings.Builder
	events := 0
	for {
		v, raw = c.Next()
		if string(v.ID) != `"9"` {
			t.Fatalf("line for another request: %s", raw)
		}
		if v.Event == "" {
			break
		}
		if v.Event != "stdout" && v.Event != "stderr" {
			t.Errorf("event %q", v.Event)
		}
		if v.Event == "stdout" {
			streamed.WriteString(v.Text)
		}
		events++
	}
	if v.OK == nil || !*v.OK || v.Result == nil || v.Result.Stdout != "a\nb\n" {
		t.Fatalf("stream final response: %s", raw)
	}
	if events == 0 || streamed.String() != "a\nb\n" {
		t.Errorf("streamed %d events, stdout %q; want the output before the response", events, streamed.String())
	}

	// EOF ends the transport cleanly; then every sandbox goes.
	c.Close()
	select {
	case err := <-c.Done:
		if err != nil {
			t.Fatalf("Serve at EOF: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return at EOF")
	}
	shut = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if got := m.List(context.Background(), 0); len(got) != 0 {
		t.Errorf("sessions left after Shutdown: %+v", got)
	}
	if err := host.Close(); err != nil {
		t.Errorf("host Close: %v", err)
	}
}
