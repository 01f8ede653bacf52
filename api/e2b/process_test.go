package e2b

import (
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jailcell/jailcell/api/e2b/proto/process"
	"github.com/jailcell/jailcell/session/seam"
)

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"/bin/bash", []string{"-l", "-c", "echo hi"}, "echo hi"},
		{"bash", []string{"-c", "ls | wc -l"}, "ls | wc -l"},
		{"/bin/sh", []string{"--login", "-c", "x"}, "x"},
		{"/usr/bin/python3", []string{"-c", "print('a b')"}, `exec '/usr/bin/python3' '-c' 'print('\''a b'\'')'`},
		{"/bin/bash", []string{"-c", "echo $0", "name"}, `exec '/bin/bash' '-c' 'echo $0' 'name'`},
		{"/bin/bash", []string{"-i", "-l"}, `exec '/bin/bash' '-i' '-l'`},
		{"ls", nil, `exec 'ls'`},
	} {
		got, err := commandLine(&process.ProcessConfig{Cmd: tc.cmd, Args: tc.args})
		if err != nil || got != tc.want {
			t.Errorf("commandLine(%q, %q) = %q, %v; want %q", tc.cmd, tc.args, got, err, tc.want)
		}
	}
	if _, err := commandLine(&process.ProcessConfig{}); err == nil {
		t.Error("an empty cmd was accepted")
	}
	if _, err := commandLine(nil); err == nil {
		t.Error("no process config was accepted")
	}
}

func TestCheckUser(t *testing.T) {
	basic := func(u string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"))}}
	}
	for _, u := range []string{"root", "user"} {
		if err := checkUser(basic(u)); err != nil {
			t.Errorf("user %s: %v", u, err)
		}
	}
	if err := checkUser(http.Header{}); err != nil {
		t.Errorf("no user: %v", err)
	}
	for name, h := range map[string]http.Header{
		"other user": basic("alice"),
		"bearer":     {"Authorization": {"Bearer x"}},
		"not base64": {"Authorization": {"Basic !!"}},
	} {
		if err := checkUser(h); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

func TestTimeoutAndKeepalive(t *testing.T) {
	if d, err := timeoutOf(http.Header{"Connect-Timeout-Ms": {"1500"}}); err != nil || d != 1500*time.Millisecond {
		t.Errorf("timeoutOf(1500) = %v, %v", d, err)
	}
	if d, err := timeoutOf(http.Header{}); err != nil || d != 0 {
		t.Errorf("timeoutOf() = %v, %v; want 0 (none)", d, err)
	}
	for _, v := range []string{"-1", "x", "99999999999999"} {
		if _, err := timeoutOf(http.Header{"Connect-Timeout-Ms": {v}}); err == nil {
			t.Errorf("timeoutOf(%q) accepted", v)
		}
	}
}

func TestEndOf(t *testing.T) {
	for _, tc := range []struct {
		r      seam.CommandResult
		code   int32
		exited bool
		status string
		err    string
	}{
		{seam.CommandResult{Done: true}, 0, true, "exit status 0", ""},
		{seam.CommandResult{Done: true, ExitCode: 3}, 3, true, "exit status 3", "exit status 3"},
		{seam.CommandResult{Done: true, ExitCode: -9}, -1, false, "signal: killed", "signal: killed"},
		{seam.CommandResult{Done: true, ExitCode: -15}, -1, false, "signal: terminated", "signal: terminated"},
		{seam.CommandResult{Done: true, ExitCode: 1 << 20}, 255, true, "exit status 255", "exit status 255"},
		{seam.CommandResult{Done: true, ExitCode: -2, TimedOut: true}, -1, false, "signal: interrupt", "signal: interrupt; the command reached its timeout (the request's timeoutMs) and was stopped"},
		{seam.CommandResult{Done: true, StdoutTruncated: true}, 0, true, "exit status 0", "output past the sandbox policy's output_bytes per stream was dropped"},
	} {
		e := endOf(&tc.r)
		if e.ExitCode != tc.code || e.Exited != tc.exited || e.Status != tc.status || e.GetError() != tc.err {
			t.Errorf("endOf(%+v) = %d %v %q %q; want %d %v %q %q", tc.r, e.ExitCode, e.Exited, e.Status, e.GetError(), tc.code, tc.exited, tc.status, tc.err)
		}
	}
}

func TestPick(t *testing.T) {
	tag := "srv"
	running := &proc{pid: 7, info: &process.ProcessInfo{Pid: 7, Tag: &tag}}
	ended := &proc{pid: 3, info: &process.ProcessInfo{Pid: 3, Tag: &tag}, end: &process.ProcessEvent_EndEvent{}}
	procs := map[uint32]*proc{7: running, 3: ended}
	byPid := func(pid uint32) *process.ProcessSelector {
		return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	}
	byTag := &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
	if p, err := pick(procs, byPid(7), false); p != running || err != nil {
		t.Errorf("pid 7: %v, %v", p, err)
	}
	if _, err := pick(procs, byPid(3), false); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("an ended pid for a signal: %v, want not_found", err)
	}
	if p, err := pick(procs, byPid(3), true); p != ended || err != nil {
		t.Errorf("an ended pid for connect: %v, %v", p, err)
	}
	if p, err := pick(procs, byTag, true); p != running || err != nil {
		t.Errorf("tag: %v, %v; want the running one", p, err)
	}
	if _, err := pick(procs, byPid(99), true); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown pid: %v, want not_found", err)
	}
	if _, err := pick(procs, &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "x"}}, true); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown tag: %v, want not_found", err)
	}
	if _, err := pick(procs, nil, true); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no selector: %v, want invalid_argument", err)
	}
}

// TestProcessTableBounds: a sandbox's table refuses a start past maxProcs
// when all are running, makes room by dropping ended ones, and keeps at
// most keptEnded of those.
func TestProcessTableBounds(t *testing.T) {
	b := newProcesses().box(nil, "sbx", 1000)
	for pid := uint32(1); pid <= maxProcs; pid++ {
		if err := b.reserve(); err != nil {
			t.Fatalf("start %d: %v", pid, err)
		}
		b.add(&proc{pid: pid, info: &process.ProcessInfo{Pid: pid}})
	}
	err := b.reserve()
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("start %d: %v, want resource_exhausted", maxProcs+1, err)
	}
	t.Log(err)
	for pid := uint32(1); pid <= keptEnded+5; pid++ {
		b.finish(b.procs[pid], &process.ProcessEvent_EndEvent{})
	}
	if len(b.ended) != keptEnded || len(b.procs) != maxProcs-5 {
		t.Fatalf("after %d ends: %d ended kept, %d in the table; want %d and %d", keptEnded+5, len(b.ended), len(b.procs), keptEnded, maxProcs-5)
	}
	if err := b.reserve(); err != nil {
		t.Fatalf("a start with room: %v", err)
	}
	if b.pending != 1 {
		t.Fatalf("pending %d, want 1", b.pending)
	}
}

// TestSubscriberEnds: a stream gets output, then the end as its last
// event; a stream of an ended process gets only the end; closing the
// sandbox ends streams with its error and refuses new ones.
func TestSubscriberEnds(t *testing.T) {
	b := newProcesses().box(nil, "sbx", 1000)
	p := &proc{pid: 5, info: &process.ProcessInfo{Pid: 5}}
	b.add(p)
	s := newSub()
	p.subs = map[*sub]struct{}{s: {}}
	b.output(p, "stdout", "hi")
	b.finish(p, &process.ProcessEvent_EndEvent{ExitCode: 1})
	evs, done, err := s.take()
	if len(evs) != 2 || !done || err != nil || string(evs[0].GetData().GetStdout()) != "hi" || evs[1].GetEnd().GetExitCode() != 1 {
		t.Fatalf("events %v, done %v, err %v", evs, done, err)
	}
	b.output(p, "stdout", "late")
	if evs, _, _ := s.take(); len(evs) != 0 {
		t.Fatalf("output after the end reached the stream: %v", evs)
	}
	late := b.subscribe(nil, p)
	if evs, done, _ := late.take(); len(evs) != 1 || !done || evs[0].GetEnd() == nil {
		t.Fatalf("a stream of an ended process: %v, done %v", evs, done)
	}
	q := &proc{pid: 6, info: &process.ProcessInfo{Pid: 6}}
	b.add(q)
	s2 := newSub()
	q.subs = map[*sub]struct{}{s2: {}}
	b.close(connect.NewError(connect.CodeUnavailable, nil))
	if _, done, err := s2.take(); !done || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("after close: done %v, err %v", done, err)
	}
	if _, done, err := b.subscribe(nil, q).take(); !done || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a stream after close: done %v, err %v", done, err)
	}
	if err := b.reserve(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a start after close: %v", err)
	}
}
