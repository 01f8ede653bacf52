package main

import (
	"fmt"
	"log"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The "restart" section: what a routine restart (systemctl restart, a
// package upgrade, a reboot's SIGTERM) costs a fresh install's sessions.
// N live sessions each hold a variable and a file; the service is stopped
// with SIGTERM and started again on the same state dir and configuration
// (every key at its default); the figure is the time from the new start
// until every session answered a cell that reads both back. A session that
// answers anything else, or not at all within the bound, is counted lost.

// restartSessions is how many live sessions the restart carries.
const restartSessions = 50

func benchRestart(dir string) {
	n := n(restartSessions, 8)
	log.Printf("restart: %d sessions on a fresh install's configuration, then SIGTERM and a new start", n)
	d := filepath.Join(dir, "restart")
	s := startServer(dir, "restart", nil, poolDefault)
	ids := make([]string, n)
	for i := range ids {
		id, _ := s.create()
		ids[i] = id
		out, err := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{
			"code": fmt.Sprintf("x = %d\nopen('kept.txt', 'w').write('file %d')", i, i)})
		if err != nil || status(out) != "ok" {
			fatal("restart: set up session %d: %v %v", i, err, out)
		}
	}
	t := time.Now()
	s.stop()
	res.Raw["restart_stop_s"] = time.Since(t).Seconds()

	t = time.Now()
	s = startServerConfig(d, "restart2", filepath.Join(d, "config.yaml"), "info")
	errs := make([]string, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("%d file %d", i, i)
			out, err := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": "print(x, open('kept.txt').read())"})
			switch {
			case err != nil:
				errs[i] = err.Error()
			case status(out) != "ok" || strings.TrimSpace(fmt.Sprint(stdout(out))) != want:
				errs[i] = fmt.Sprintf("%v", out)
			}
		}()
	}
	wg.Wait()
	res.Raw["restart_all_answered_s"] = time.Since(t).Seconds()
	lost := 0
	for i, e := range errs {
		if e != "" {
			lost++
			log.Printf("restart: session %d after the restart: %s", i, e)
		}
	}
	res.Raw["restart_sessions"] = float64(n)
	res.Raw["restart_lost"] = float64(lost)
	for _, id := range ids {
		s.close(id)
	}
	s.stop()
}

func restartRows(add func(string, Row, bool, float64)) {
	r := res.Raw
	note := fmt.Sprintf("%.0f live sessions, each x and a file; a fresh install's configuration; SIGTERM, then a new start on the same state dir", r["restart_sessions"])
	add("restart", Row{Figure: "restart: SIGTERM until the service exited", Unit: "s", Jailcell: r["restart_stop_s"], Note: note,
		Close: "the stop hibernates or releases every session; systemd's stop timeout bounds it"}, true, 90)
	add("restart", Row{Figure: "restart: new start until every session answered with its variable and file", Unit: "s",
		Jailcell: r["restart_all_answered_s"], Note: note}, true, 0)
	kept := r["restart_lost"] == 0
	add("restart", Row{Figure: "restart: sessions lost", Unit: "sessions", Jailcell: r["restart_lost"], Note: note,
		Target: "0", Met: &kept}, true, 0)
}

// stdout is an exec answer's stdout.
func stdout(out map[string]any) any {
	if r, ok := out["result"].(map[string]any); ok {
		return r["stdout"]
	}
	return out["stdout"]
}
