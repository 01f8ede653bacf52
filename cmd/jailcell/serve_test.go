package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jailcell/jailcell/internal/testenv"
)

// These tests run a real `jailcell serve` process (this test binary,
// re-executed as jailcell: see TestMain) on a temporary socket, and drive
// it with curl, raw HTTP, a second real user, signals and systemd's own
// socket-activation tool. Privileged tier: root and the rootfs.

// serveConfig is the configuration of a test service: small limits,
// debug logs in JSON, the socket and state in dir, then extra.
func serveConfig(t *testing.T, dir, group, extra string) string {
	t.Helper()
	return testenv.ServeConfig(dir, group, testenv.Rootfs(t).Root) + `log:
  level: debug
  format: json
sessions:
  max: 6
drain_grace: 20s
policies:
` + testenv.DefaultPolicy + `  small:
    memory_bytes: 128MiB
    timeout: 5s
` + extra
}

// jailcellEnv is the environment of a jailcell child: nothing from the
// developer's shell, and the switch that makes this binary jailcell.
func jailcellEnv(extra ...string) []string {
	return testenv.ChildEnv(append([]string{"JAILCELL_TEST_MAIN=1"}, extra...)...)
}

// serveCmd is this test binary as `jailcell serve` on a fresh state dir
// with serveConfig plus extra, not started; it returns the dir too.
func serveCmd(t *testing.T, extra string) (*exec.Cmd, string) {
	t.Helper()
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(serveConfig(t, dir, "root", extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--config", cfg)
	cmd.Env = jailcellEnv()
	return cmd, dir
}

// startServe starts this test binary as `jailcell serve` and waits until
// it answers.
func startServe(t *testing.T, group, extraConfig string) *testenv.Service {
	t.Helper()
	return testenv.StartServe(t, testenv.Serve{
		Env:    []string{"JAILCELL_TEST_MAIN=1"},
		Config: func(dir string) string { return serveConfig(t, dir, group, extraConfig) },
	})
}

// curlAs runs curl against the socket as cred (nil: root). The last line
// of its output is the status code.
func curlAs(t *testing.T, cred *syscall.Credential, sock string, args ...string) (int, string) {
	t.Helper()
	full := append([]string{"-sS", "--max-time", "60", "--unix-socket", sock, "-w", "\n%{http_code}"}, args...)
	cmd := exec.Command("curl", full...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("curl %q: %v: %s %s", args, err, out, stderr)
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	code, err := strconv.Atoi(s[i+1:])
	if err != nil {
		t.Fatalf("curl %q: no status in %q", args, s)
	}
	if i < 0 {
		return code, ""
	}
	return code, s[:i]
}

func curl(t *testing.T, sock string, args ...string) (int, string) {
	t.Helper()
	return curlAs(t, nil, sock, args...)
}

// wire is the subset of a response the tests look at.
type wire struct {
	ID      json.RawMessage `json:"id"`
	OK      bool            `json:"ok"`
	Event   string          `json:"event"`
	Text    string          `json:"text"`
	Session string          `json:"session"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Result *struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
		Files  []struct {
			Path string `json:"path"`
			Data []byte `json:"data"`
		} `json:"files"`
	} `json:"result"`
	Sessions []struct {
		ID string `json:"session"`
	} `json:"sessions"`
	Files []struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	} `json:"files"`
	Path string `json:"path"`
	Size *int64 `json:"size"`
}

func decode(t *testing.T, body string) wire {
	t.Helper()
	var w wire
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatalf("not a JSON response: %q: %v", body, err)
	}
	return w
}

// wantError checks an error response's status and code.
func wantError(t *testing.T, status int, body string, wantStatus int, code string) wire {
	t.Helper()
	w := decode(t, body)
	if status != wantStatus || w.OK || w.Error == nil || w.Error.Code != code {
		t.Fatalf("got %d %s, want %d with code %q", status, body, wantStatus, code)
	}
	return w
}

func ensureTestUser(t *testing.T, name string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v: %s", name, err, out)
		}
		if u, err = user.Lookup(name); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// scrape reads /metrics with the Prometheus text parser and returns
// series values by name and sorted labels.
func scrape(t *testing.T, sock string, cred *syscall.Credential) map[string]float64 {
	t.Helper()
	status, body := curlAs(t, cred, sock, "http://jailcell/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := strings.Join(append([]string{name}, labels...), ",")
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+",count"] = float64(m.GetHistogram().GetSampleCount())
				out[key+",sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func TestServe(t *testing.T) {
	testenv.RequiresRoot(t)
	other := ensureTestUser(t, "jailcell-test2")
	otherUID := strconv.Itoa(int(other.Uid))
	// The socket's group is the second user's, so it can connect; only
	// allowed_uids lets it call.
	srv := startServe(t, "jailcell-test2", "allowed_uids: [jailcell-test2]\n")
	sock := srv.Sock
	// The service rehashes its rootfs before it builds a sandbox.
	srv.WaitLog(t, "rootfs content matches its manifest")

	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(filepath.Dir(sock))
	if err != nil {
		t.Fatal(err)
	}
	st, dt := fi.Sys().(*syscall.Stat_t), di.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != other.Gid {
		t.Errorf("socket %v uid %d gid %d, want 0660 root:%d", fi.Mode(), st.Uid, st.Gid, other.Gid)
	}
	if di.Mode().Perm() != 0o750 || dt.Uid != 0 || dt.Gid != other.Gid {
		t.Errorf("socket dir %v uid %d gid %d, want 0750 root:%d", di.Mode(), dt.Uid, dt.Gid, other.Gid)
	}

	before := scrape(t, sock, nil)
	var sid string

	t.Run("curl every route", func(t *testing.T) {
		status, body := curl(t, sock, "http://jailcell/healthz")
		if w := decode(t, body); status != 200 || !w.OK {
			t.Fatalf("healthz: %d %s", status, body)
		}
		status, body = curl(t, sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{"ttl_s":600}`)
		w := decode(t, body)
		if status != 201 || !w.OK || !sessionIDRE.MatchString(w.Session) {
			t.Fatalf("create: %d %s", status, body)
		}
		sid = w.Session
		status, body = curl(t, sock, "http://jailcell/v1/sessions")
		if w := decode(t, body); status != 200 || len(w.Sessions) != 1 || w.Sessions[0].ID != sid {
			t.Fatalf("list: %d %s", status, body)
		}
		status, body = curl(t, sock, "http://jailcell/v1/sessions/"+sid+"/exec", "-d", `{"code":"x = 41\nprint(x + 1)"}`)
		if w := decode(t, body); status != 200 || w.Result == nil || w.Result.Stdout != "42\n" {
			t.Fatalf("exec: %d %s", status, body)
		}
		// Streaming: the same events as JSON-lines mode, then the result.
		status, body = curl(t, sock, "-N", "-H", "Accept: application/x-ndjson", "http://jailcell/v1/sessions/"+sid+"/exec",
			"-d", `{"code":"import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)\nprint('oops', file=sys.stderr)\nundefined_name"}`)
		lines := strings.Split(strings.TrimSpace(body), "\n")
		if status != 200 || len(lines) < 3 {
			t.Fatalf("streamed exec: %d %s", status, body)
		}
		var out strings.Builder
		sawErr := false
		for _, l := range lines[:len(lines)-1] {
			ev := decode(t, l)
			switch ev.Event {
			case "stdout":
				out.WriteString(ev.Text)
			case "stderr":
				sawErr = sawErr || strings.Contains(ev.Text, "oops")
			default:
				t.Fatalf("not an event before the result: %s", l)
			}
		}
		last := decode(t, lines[len(lines)-1])
		if out.String() != "0\n1\n2\n" || !sawErr || !last.OK || last.Result == nil || last.Result.Status != "error" {
			t.Fatalf("streamed exec: events %q, result %s", out.String(), lines[len(lines)-1])
		}
		// Files: raw bytes in and out, and the listing.
		status, body = curl(t, sock, "-X", "PUT", "--data-binary", "a,b\n1,2\n", "http://jailcell/v1/sessions/"+sid+"/files/data/in.csv")
		if w := decode(t, body); status != 200 || w.Path != "data/in.csv" || w.Size == nil || *w.Size != 8 {
			t.Fatalf("upload: %d %s", status, body)
		}
		status, body = curl(t, sock, "http://jailcell/v1/sessions/"+sid+"/exec",
			"-d", `{"code":"open('out.txt','w').write(open('data/in.csv').read().upper())"}`)
		if w := decode(t, body); status != 200 || w.Result == nil || w.Result.Status != "ok" {
			t.Fatalf("exec on the upload: %d %s", status, body)
		}
		status, body = curl(t, sock, "http://jailcell/v1/sessions/"+sid+"/files/out.txt")
		if status != 200 || body != "A,B\n1,2\n" {
			t.Fatalf("download: %d %q", status, body)
		}
		status, body = curl(t, sock, "http://jailcell/v1/sessions/"+sid+"/files")
		w = decode(t, body)
		var paths []string
		for _, f := range w.Files {
			paths = append(paths, f.Path)
		}
		if status != 200 || !strings.Contains(strings.Join(paths, " "), "data/in.csv") || !strings.Contains(strings.Join(paths, " "), "out.txt") {
			t.Fatalf("files: %d %s", status, body)
		}
		// One-shot: a fresh sandbox, files come back with their content.
		status, body = curl(t, sock, "http://jailcell/v1/exec", "-d",
			`{"code":"open('r.txt','w').write('one-shot')\nprint('hi')","policy":"small","files":[{"path":"in.txt","data":"aGk="}]}`)
		w = decode(t, body)
		if status != 200 || w.Result == nil || w.Result.Stdout != "hi\n" {
			t.Fatalf("one-shot: %d %s", status, body)
		}
		found := false
		for _, f := range w.Result.Files {
			found = found || (f.Path == "r.txt" && string(f.Data) == "one-shot")
		}
		if !found {
			t.Fatalf("one-shot files: %s", body)
		}
	})
	if sid == "" {
		t.Fatal("no session; the rest needs one")
	}

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			args   []string
			status int
			code   string
		}{
			{"unknown session exec", []string{"http://jailcell/v1/sessions/0123456789abcdef0123456789abcdef/exec", "-d", `{"code":"1"}`}, 404, "not_found"},
			{"unknown session delete", []string{"-X", "DELETE", "http://jailcell/v1/sessions/nope"}, 404, "not_found"},
			{"unknown session files", []string{"http://jailcell/v1/sessions/nope/files"}, 404, "not_found"},
			{"unknown session upload", []string{"-X", "PUT", "--data-binary", "x", "http://jailcell/v1/sessions/nope/files/a"}, 404, "not_found"},
			{"unknown policy", []string{"-X", "POST", "http://jailcell/v1/sessions", "-d", `{"policy":"huge"}`}, 400, "bad_request"},
			{"limits above the policy", []string{"-X", "POST", "http://jailcell/v1/sessions", "-d", `{"limits":{"memory_bytes":99999999999}}`}, 400, "bad_request"},
			{"wrong type", []string{"http://jailcell/v1/sessions/" + sid + "/exec", "-d", `{"code":["print(1)"]}`}, 400, "bad_request"},
			{"not JSON", []string{"http://jailcell/v1/exec", "-d", `print(1)`}, 400, "bad_request"},
			{"traversal download", []string{"--path-as-is", "http://jailcell/v1/sessions/" + sid + "/files/../../../etc/passwd"}, 400, "bad_request"},
			{"encoded traversal download", []string{"http://jailcell/v1/sessions/" + sid + "/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd"}, 400, "bad_request"},
			{"traversal upload", []string{"--path-as-is", "-X", "PUT", "--data-binary", "x", "http://jailcell/v1/sessions/" + sid + "/files/../escape"}, 400, "bad_request"},
			{"absolute upload", []string{"-X", "PUT", "--data-binary", "x", "http://jailcell/v1/sessions/" + sid + "/files/%2Fetc%2Fpasswd"}, 400, "bad_request"},
			{"traversal in exec files", []string{"http://jailcell/v1/sessions/" + sid + "/exec", "-d", `{"code":"1","files":[{"path":"../x","data":""}]}`}, 400, "bad_request"},
			{"missing file", []string{"http://jailcell/v1/sessions/" + sid + "/files/nope.txt"}, 404, "not_found"},
			{"oversized body", []string{"http://jailcell/v1/exec", "-H", "Content-Type: application/json", "--data-binary", "@" + bigFile(t, 33<<20)}, 413, "limit"},
			{"no route", []string{"http://jailcell/v1/nothing"}, 404, "not_found"},
			{"wrong method", []string{"-X", "PUT", "http://jailcell/v1/exec"}, 405, "bad_request"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, body := curl(t, sock, tc.args...)
				wantError(t, status, body, tc.status, tc.code)
			})
		}
		// A session running a cell is busy for a second one.
		resp, sc := startStream(t, sock, "/v1/sessions/"+sid+"/exec", `{"code":"import time\nprint('started', flush=True)\ntime.sleep(1)"}`)
		status, body := curl(t, sock, "http://jailcell/v1/sessions/"+sid+"/exec", "-d", `{"code":"1"}`)
		for sc.Scan() {
		}
		resp.Body.Close()
		wantError(t, status, body, 409, "busy")
		// The service keeps serving.
		if status, body := curl(t, sock, "http://jailcell/healthz"); status != 200 {
			t.Fatalf("healthz after bad input: %d %s", status, body)
		}
	})

	t.Run("metrics move", func(t *testing.T) {
		after := scrape(t, sock, nil)
		for _, key := range []string{"jailcell_cells_total,status=ok", "jailcell_sessions_created_total", "jailcell_cell_duration_seconds,count", "jailcell_sandbox_start_seconds,count"} {
			if after[key] <= before[key] {
				t.Errorf("%s did not move: %g -> %g", key, before[key], after[key])
			}
		}
		if after["jailcell_cells_total,status=error"] < 1 {
			t.Errorf("the failing cell was not counted by status: %v", after)
		}
		if after["jailcell_sessions_live"] != 1 {
			t.Errorf("sessions live = %g, want 1", after["jailcell_sessions_live"])
		}
		if after["jailcell_sessions_memory_bytes,policy=default"] <= 0 || after["jailcell_sessions_cpu_seconds,policy=default"] <= 0 {
			t.Errorf("no cgroup usage for policy default")
		}
		if after["process_resident_memory_bytes"] <= 0 || after["process_open_fds"] <= 0 || after["go_goroutines"] <= 0 {
			t.Errorf("no process or Go runtime figures")
		}
		if after["jailcell_http_requests_total,code=404,route=session_exec"] < 1 {
			t.Errorf("requests by route and code not counted")
		}
	})

	t.Run("second uid", func(t *testing.T) {
		// Another uid cannot tell root's session from a missing one.
		status, body := curlAs(t, other, sock, "http://jailcell/v1/sessions/"+sid+"/exec", "-d", `{"code":"print(1)"}`)
		w := wantError(t, status, body, 404, "not_found")
		status, body2 := curlAs(t, other, sock, "http://jailcell/v1/sessions/0123456789abcdef0123456789abcdef/exec", "-d", `{"code":"print(1)"}`)
		w2 := wantError(t, status, body2, 404, "not_found")
		if strings.Replace(w.Error.Message, sid, "X", 1) != strings.Replace(w2.Error.Message, "0123456789abcdef0123456789abcdef", "X", 1) {
			t.Errorf("another user's session and a missing one differ: %q vs %q", w.Error.Message, w2.Error.Message)
		}
		for _, args := range [][]string{
			{"http://jailcell/v1/sessions/" + sid + "/files"},
			{"http://jailcell/v1/sessions/" + sid + "/files/out.txt"},
			{"-X", "PUT", "--data-binary", "x", "http://jailcell/v1/sessions/" + sid + "/files/planted"},
			{"-X", "DELETE", "http://jailcell/v1/sessions/" + sid},
		} {
			status, body := curlAs(t, other, sock, args...)
			wantError(t, status, body, 404, "not_found")
		}
		status, body = curlAs(t, other, sock, "http://jailcell/v1/sessions")
		if w := decode(t, body); status != 200 || len(w.Sessions) != 0 {
			t.Fatalf("second uid lists %d %s, want no sessions", status, body)
		}
		// Its own session is its own; root sees it too.
		status, body = curlAs(t, other, sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
		w = decode(t, body)
		if status != 201 || w.Session == "" {
			t.Fatalf("second uid create: %d %s", status, body)
		}
		mine := w.Session
		status, body = curlAs(t, other, sock, "http://jailcell/v1/sessions/"+mine+"/exec", "-d", `{"code":"import os; print(os.getuid())"}`)
		if w := decode(t, body); status != 200 || w.Result == nil || w.Result.Status != "ok" {
			t.Fatalf("second uid exec: %d %s", status, body)
		}
		status, body = curl(t, sock, "http://jailcell/v1/sessions")
		if w := decode(t, body); status != 200 || len(w.Sessions) != 2 {
			t.Fatalf("root lists %d %s, want both sessions", status, body)
		}
		// /metrics names no session: not root's to another user, nor any.
		for key := range scrape(t, sock, other) {
			if strings.Contains(key, sid) || strings.Contains(key, mine) {
				t.Errorf("/metrics series %s names a session", key)
			}
		}
		status, body = curlAs(t, other, sock, "-X", "DELETE", "http://jailcell/v1/sessions/"+mine)
		if w := decode(t, body); status != 200 || !w.OK {
			t.Fatalf("second uid close: %d %s", status, body)
		}
		// A uid that can reach the socket but is not allowed is refused.
		nobody := &syscall.Credential{Uid: 65534, Gid: other.Gid, Groups: []uint32{}}
		status, body = curlAs(t, nobody, sock, "http://jailcell/v1/sessions")
		wantError(t, status, body, 403, "forbidden")
		srv.WaitLog(t, `"uid":`+otherUID)
	})

	t.Run("reload", func(t *testing.T) {
		// Only reloadable keys apply; the rest is reported.
		c := serveConfig(t, srv.Dir, "jailcell-test2", "allowed_uids: []\n")
		c = strings.Replace(c, "level: debug", "level: info", 1)
		c = strings.Replace(c, "max: 6", "max: 5", 1)
		if err := os.WriteFile(srv.Config, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := srv.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		srv.WaitLog(t, "configuration reloaded", `"log_level":"info"`)
		srv.WaitLog(t, "take effect only after a restart", "sessions.max")
		status, body := curlAs(t, other, sock, "http://jailcell/v1/sessions")
		wantError(t, status, body, 403, "forbidden")
		// A broken file is refused and the running configuration kept.
		if err := os.WriteFile(srv.Config, []byte("sessions:\n  max: lots\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		srv.Cmd.Process.Signal(syscall.SIGHUP)
		srv.WaitLog(t, "keeping the running configuration", "sessions.max")
		if status, _ := curl(t, sock, "http://jailcell/healthz"); status != 200 {
			t.Fatalf("healthz after a bad reload: %d", status)
		}
	})

	t.Run("refuses at start", func(t *testing.T) {
		dir := testenv.StateDir(t)
		for _, tc := range []struct{ name, config, want string }{
			// Its own state dir, the running one's socket.
			{"live socket", strings.Replace(serveConfig(t, dir, "root", ""), dir+"/run/j.sock", sock, 1), "another process is serving on it"},
			{"invalid config", strings.Replace(serveConfig(t, dir, "root", ""), "drain_grace: 20s", "drain_grace: forever", 1), `drain_grace = "forever"`},
			{"unknown group", serveConfig(t, dir, "no-such-group-jc", ""), `socket_group = "no-such-group-jc"`},
		} {
			cfg := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "serve", "--config", cfg)
			cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + dir + "/review")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("%s: %v, output %s; want a failure naming %q", tc.name, err, out, tc.want)
			}
		}
		if status, _ := curl(t, sock, "http://jailcell/healthz"); status != 200 {
			t.Fatalf("the running service was disturbed: %d", status)
		}
	})

	t.Run("SIGTERM drains", func(t *testing.T) {
		testDrain(t, srv)
	})
}

// testDrain sends SIGTERM while a cell runs: the cell finishes and its
// result arrives, serve exits 0, and nothing is left behind.
func testDrain(t *testing.T, srv *testenv.Service) {
	resp, sc := startStream(t, srv.Sock, "/v1/exec", `{"code":"import time\nprint('started', flush=True)\ntime.sleep(2)\nprint('finished')"}`)
	defer resp.Body.Close()
	if err := srv.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the cell finishes.
	time.Sleep(300 * time.Millisecond)
	if conn, err := net.Dial("unix", srv.Sock); err == nil {
		conn.Close()
		t.Errorf("a new connection was accepted while draining")
	}
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if w := decode(t, last); !w.OK || w.Result == nil || w.Result.Stdout != "started\nfinished\n" {
		t.Fatalf("the running cell did not finish: %s", last)
	}
	select {
	case <-srv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after draining")
	}
	if srv.Err() != nil {
		t.Fatalf("serve exited with %v, want status 0", srv.Err())
	}
	srv.WaitLog(t, `"msg":"stopped"`)
	for _, d := range []string{"sessions", "sandboxes", "containers"} {
		ents, err := os.ReadDir(filepath.Join(srv.State, d))
		if err != nil || len(ents) != 0 {
			t.Errorf("state dir %s after drain: %v %v", d, ents, err)
		}
	}
	if _, err := os.Lstat(srv.Sock); err == nil {
		t.Errorf("socket %s left behind", srv.Sock)
	}
}

// startStream posts a streamed exec and returns once its first event,
// which must say "started", has arrived: the cell is running.
func startStream(t *testing.T, sock, path, body string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest("POST", "http://jailcell"+path, strings.NewReader(body))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "started") {
		resp.Body.Close()
		t.Fatalf("first event: %q", sc.Text())
	}
	return resp, sc
}

// eventually polls cond for up to 10 s.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// bigFile writes a file of n bytes of JSON-ish junk for an oversized body.
func bigFile(t *testing.T, n int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	io.WriteString(w, `{"code":"`)
	for i := 0; i < n; i += 64 {
		io.WriteString(w, strings.Repeat("x", 64))
	}
	io.WriteString(w, `"}`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSocketActivation starts serve the way systemd does, through
// systemd-socket-activate, with a NOTIFY_SOCKET the test listens on.
func TestSocketActivation(t *testing.T) {
	testenv.RequiresRoot(t)
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatalf("systemd-socket-activate not installed (make deps installs package systemd): %v", err)
	}
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(serveConfig(t, dir, "root", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	notifyPath := filepath.Join(dir, "notify.sock")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	msgs := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := nl.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	actDir := filepath.Join(dir, "act")
	if err := os.Mkdir(actDir, 0o750); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(actDir, "j.sock")
	stderr := &testenv.LockedBuffer{}
	cmd := exec.Command(sa, "-l", sock,
		"-E", "JAILCELL_TEST_MAIN=1", "-E", "JAILCELL_REVIEW_DIR="+dir+"/review", "-E", "NOTIFY_SOCKET="+notifyPath, "-E", "WATCHDOG_USEC=400000",
		os.Args[0], "serve", "--config", cfg)
	cmd.Env = jailcellEnv()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	saDone := make(chan error, 1)
	go func() { saDone <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("log:\n%s", stderr.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd-socket-activate did not listen:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The first connection starts jailcell, which serves it on the socket
	// it was handed.
	status, body := curl(t, sock, "http://jailcell/healthz")
	if w := decode(t, body); status != 200 || !w.OK {
		t.Fatalf("healthz through the activated socket: %d %s", status, body)
	}
	next := func(want string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed waiting for %s", want)
				}
				if strings.Contains(m, want) {
					return m
				}
			case <-timeout:
				t.Fatalf("no %s on NOTIFY_SOCKET", want)
			}
		}
	}
	ready := next("READY=1")
	var pid int
	for _, l := range strings.Split(ready, "\n") {
		if v, ok := strings.CutPrefix(l, "MAINPID="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid <= 0 {
		t.Fatalf("READY without MAINPID: %q", ready)
	}
	next("WATCHDOG=1")
	// stderr arrives through a pipe: poll rather than read once.
	if !eventually(func() bool { return strings.Contains(stderr.String(), `"socket_activated":true`) }) {
		t.Errorf("serve did not say it uses the activated socket:\n%s", stderr.String())
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	deadline = time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("serve (pid %d) still running 30s after SIGTERM", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !eventually(func() bool { return strings.Contains(stderr.String(), `"msg":"stopped"`) }) {
		t.Errorf("serve did not stop cleanly:\n%s", stderr.String())
	}
	// The socket belongs to systemd: serve must not remove it.
	if _, err := os.Lstat(sock); err != nil {
		t.Errorf("activated socket removed by serve: %v", err)
	}
}

// sessionIDRE is a session id: the node's name (node.id, from the host
// name by default), "-", 128 random bits in hex.
var sessionIDRE = regexp.MustCompile(`^[a-z0-9]{1,16}-[0-9a-f]{32}$`)
