package main

import (
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestServeMetricsBoundedCardinality scrapes a real `jailcell serve`: the
// exposition parses (prometheus/common expfmt), the standard process_* and
// go_* collectors are there beside jailcell's own, and many more sessions
// add no series: no label carries a session id. Privileged tier.
func TestServeMetricsBoundedCardinality(t *testing.T) {
	testenv.RequiresRoot(t)
	srv := startServe(t, "root", "")
	sock := srv.Sock
	var ids []string
	create := func() string {
		t.Helper()
		status, body := curl(t, sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
		w := decode(t, body)
		if status != 201 || w.Session == "" {
			t.Fatalf("create: %d %s", status, body)
		}
		ids = append(ids, w.Session)
		return w.Session
	}
	exec := func(path, code, want string) {
		t.Helper()
		status, body := curl(t, sock, "http://jailcell"+path, "-d", code)
		if w := decode(t, body); status != 200 || w.Result == nil || w.Result.Status != want {
			t.Fatalf("exec %s %s: %d %s, want %s", path, code, status, body, want)
		}
	}
	// One session stays alive, so the per-policy usage figures exist.
	live := create()
	exec("/v1/sessions/"+live+"/exec", `{"code":"x = bytearray(8 << 20)"}`, "ok")
	// Each round: sessions that run a good and a bad cell and close, and a
	// one-shot cell under another policy.
	round := func(n int) {
		for range n {
			sid := create()
			exec("/v1/sessions/"+sid+"/exec", `{"code":"print(1)"}`, "ok")
			exec("/v1/sessions/"+sid+"/exec", `{"code":"1/0"}`, "error")
			if status, body := curl(t, sock, "-X", "DELETE", "http://jailcell/v1/sessions/"+sid); status != 200 {
				t.Fatalf("close: %d %s", status, body)
			}
		}
		exec("/v1/exec", `{"code":"print(2)","policy":"small"}`, "ok")
	}
	round(2)
	scrape(t, sock, nil) // the metrics route's own series, from here on
	first := scrape(t, sock, nil)
	const more = 5
	round(more)
	after := scrape(t, sock, nil)

	for _, key := range []string{
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds",
		"go_goroutines", "go_threads", "go_memstats_heap_alloc_bytes",
		"jailcell_build_info,version=dev", "jailcell_sessions_live", "jailcell_cells_total,status=ok", "jailcell_cells_total,status=oom",
		"jailcell_cell_duration_seconds,count", "jailcell_sandbox_start_seconds,count", "jailcell_sessions_created_total",
		"jailcell_sessions_memory_bytes,policy=default", "jailcell_sessions_cpu_seconds,policy=default",
		"jailcell_http_requests_total,code=201,route=sessions",
	} {
		if _, ok := after[key]; !ok {
			t.Errorf("series %s missing", key)
		}
	}
	if got := after["jailcell_sessions_created_total"] - first["jailcell_sessions_created_total"]; got < more {
		t.Errorf("sessions created moved by %g, want at least %d", got, more)
	}
	if after["jailcell_sessions_live"] != 1 || after["jailcell_sessions_memory_bytes,policy=default"] < 8<<20 {
		t.Errorf("live %g, memory %g: want the one live session with its 8 MiB", after["jailcell_sessions_live"], after["jailcell_sessions_memory_bytes,policy=default"])
	}
	// Bounded: three times the sessions, the same jailcell series, and
	// none names a session.
	series := func(m map[string]float64) map[string]bool {
		out := map[string]bool{}
		for k := range m {
			if strings.HasPrefix(k, "jailcell_") {
				out[k] = true
			}
		}
		return out
	}
	a, b := series(first), series(after)
	for k := range b {
		if !a[k] {
			t.Errorf("series %s appeared with more sessions", k)
		}
		for _, id := range ids {
			if strings.Contains(k, id) {
				t.Errorf("series %s names session %s", k, id)
			}
		}
	}
	if len(b) != len(a) {
		t.Errorf("%d jailcell series after %d more sessions, %d before", len(b), more, len(a))
	}
}
