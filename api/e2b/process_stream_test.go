package e2b

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/e2b/proto/process"
	"github.com/jailcell/jailcell/api/e2b/proto/process/processconnect"
	"github.com/jailcell/jailcell/session/seam"
)

// fakeCommands is a dispatcher whose command op runs one endless job that
// writes a line per streamed wait until killed, and answers busy to the
// first busy requests, as a sandbox running a cell would.
type fakeCommands struct {
	mu     sync.Mutex
	silent bool
	busy   int
	killed bool
	waits  int
	paused bool
	ended  bool // the session ended without the door (its timeout, another door)
	closed bool // the session was closed under a wait, which fails as its kernel's loss
}

func (f *fakeCommands) Handle(_ context.Context, _ int, req *api.Request, emit func(api.Event)) *api.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeExpired, Message: "session " + req.Session + " expired"}}
	}
	if f.closed {
		if req.Op == api.OpInfo {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeNotFound, Message: "session " + req.Session + " was closed"}}
		}
		return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeUnavailable, Message: "the kernel did not answer, so it was stopped"}}
	}
	switch req.Op {
	case api.OpInfo:
		state := "ready"
		if f.paused {
			state = "hibernated"
		}
		if strings.HasPrefix(req.Session, "gone") {
			return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeNotFound, Message: "no session " + req.Session}}
		}
		return &api.Response{ID: req.ID, OK: true, Info: &seam.Info{ID: req.Session, State: state}}
	case api.OpCommand:
	default:
		return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeBadRequest, Message: "op " + req.Op}}
	}
	if f.busy > 0 {
		f.busy--
		return &api.Response{ID: req.ID, Error: &api.Error{Code: api.CodeBusy, Message: "session is running a cell"}}
	}
	res := &seam.CommandResult{Job: "job-1", PID: 42}
	switch req.Action {
	case seam.CommandWait:
		f.waits++
		if req.Stream && emit != nil && !f.killed && !f.silent {
			emit(api.Event{ID: req.ID, Event: api.EventStdout, Text: "tick " + strconv.Itoa(f.waits) + "\n"})
		}
	case seam.CommandKill:
		f.killed = true
	}
	if f.killed {
		res.Done, res.ExitCode = true, -9
	}
	return &api.Response{ID: req.ID, OK: true, Command: res}
}

func (f *fakeCommands) waitCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waits
}

func fakeDoor(t *testing.T, f *fakeCommands) (processconnect.ProcessClient, *Door, func(connect.AnyRequest)) {
	t.Helper()
	d, err := New(f, Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	headers := func(r connect.AnyRequest) {
		r.Header().Set("E2b-Sandbox-Id", "sbx1")
		r.Header().Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
		r.Header().Set("X-Access-Token", d.accessToken(1000, "sbx1"))
	}
	return processconnect.NewProcessClient(http.DefaultClient, srv.URL), d, headers
}

func startReq() *connect.Request[process.StartRequest] {
	return connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "yes"}}})
}

// TestStreamEndsWhenClientLeaves: a client that goes away ends its stream
// and, with no stream left, the pump: the door stops asking the sandbox,
// and the process stays listed and killable.
func TestStreamEndsWhenClientLeaves(t *testing.T) {
	f := &fakeCommands{busy: 3} // the start meets busy and retries
	c, d, hdr := fakeDoor(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	req := startReq()
	hdr(req)
	st, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetEvent().GetStart().GetPid() != 42 {
		t.Fatalf("first event %v, %v; want the start with pid 42", st.Msg(), st.Err())
	}
	if !st.Receive() || string(st.Msg().GetEvent().GetData().GetStdout()) == "" {
		t.Fatalf("second event %v, %v; want output", st.Msg(), st.Err())
	}
	cancel()
	st.Close()
	b := d.procs.lookup("sbx1")
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		idle := !b.pumping && len(b.procs[42].subs) == 0
		b.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pump still runs 5 s after the only client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := f.waitCount()
	time.Sleep(3 * pollMax)
	if f.waitCount() != n {
		t.Fatalf("the door still waits on the sandbox with no stream: %d waits, then %d", n, f.waitCount())
	}
	lreq := connect.NewRequest(&process.ListRequest{})
	hdr(lreq)
	l, err := c.List(context.Background(), lreq)
	if err != nil || len(l.Msg.Processes) != 1 || l.Msg.Processes[0].Pid != 42 {
		t.Fatalf("list: %v, %v", l, err)
	}
	// SIGTERM is the command op's kill, a SIGKILL.
	term := connect.NewRequest(&process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 42}}, Signal: process.Signal_SIGNAL_SIGTERM})
	hdr(term)
	if _, err := c.SendSignal(context.Background(), term); err != nil {
		t.Fatal(err)
	}
	kreq := connect.NewRequest(&process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 42}}, Signal: process.Signal_SIGNAL_SIGKILL})
	hdr(kreq)
	if _, err := c.SendSignal(context.Background(), kreq); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a second kill: %v, want not_found", err)
	}
	creq := connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 42}}})
	hdr(creq)
	cs, err := c.Connect(context.Background(), creq)
	if err != nil {
		t.Fatal(err)
	}
	var end *process.ProcessEvent_EndEvent
	for cs.Receive() {
		if e := cs.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil || end.ExitCode != -1 || end.Status != "signal: killed" {
		t.Fatalf("connect to the killed process: end %v, err %v", end, cs.Err())
	}
}

// TestStreamEndsOnPauseAndKill: pausing the sandbox ends its streams (a
// wait would restore it), and so does killing it, by the door's kill or
// by its end elsewhere (its timeout, another door): Unavailable, which
// the SDKs raise as their TimeoutError.
func TestStreamEndsOnPauseAndKill(t *testing.T) {
	f := &fakeCommands{}
	c, d, hdr := fakeDoor(t, f)
	for _, how := range []string{"pause", "kill", "ended elsewhere", "closed under a wait"} {
		req := startReq()
		hdr(req)
		f.mu.Lock()
		f.killed, f.paused, f.ended, f.closed = false, false, false, false
		f.mu.Unlock()
		st, err := c.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		st.Receive()
		switch how {
		case "pause":
			f.mu.Lock()
			f.paused = true
			f.mu.Unlock()
		case "kill":
			d.procs.forget("sbx1")
		case "ended elsewhere":
			f.mu.Lock()
			f.ended = true
			f.mu.Unlock()
		default:
			f.mu.Lock()
			f.closed = true
			f.mu.Unlock()
		}
		done := make(chan error, 1)
		go func() {
			for st.Receive() {
			}
			done <- st.Err()
		}()
		select {
		case err := <-done:
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
				t.Fatalf("%s: the stream ended with %v, want unavailable", how, err)
			}
			// E2B's words for the case, then the session's own reason,
			// not the wait's.
			if want := map[string]string{"ended elsewhere": "the sandbox was killed or reached its end of life: sandbox sbx1 is not running: session sbx1 expired", "closed under a wait": "the sandbox was killed or reached its end of life: sandbox sbx1 is not running: session sbx1 was closed"}[how]; !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", how, err, want)
			}
			t.Logf("%s: %v", how, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the stream did not end", how)
		}
		if how == "pause" {
			// The process stays in the door's table, to be connected to again.
			if b := d.procs.lookup("sbx1"); b == nil || b.procs[42] == nil || b.procs[42].end != nil {
				t.Fatal("pause dropped the sandbox's process from the table")
			}
		}
	}
}

// TestInputRefusals: input, resize and terminal requests that name
// nothing to act on, or carry what the command op cannot, are refused
// before any reaches the sandbox, each with its reason; a signal other
// than a kill is unimplemented. (The stock SDK's stdin and PTY paths run
// end to end in test/e2bsdk's commands.test.mjs.)
func TestInputRefusals(t *testing.T) {
	c, _, hdr := fakeDoor(t, &fakeCommands{})
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 1}}
	check := func(what string, err error, code connect.Code, says string) {
		t.Helper()
		if connect.CodeOf(err) != code || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %v saying %q", what, err, code, says)
		}
	}
	in := connect.NewRequest(&process.SendInputRequest{Process: sel})
	hdr(in)
	_, err := c.SendInput(context.Background(), in)
	check("SendInput without input", err, connect.CodeInvalidArgument, "want stdin or pty bytes")
	bad := connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte{0xff, 0xfe}}}})
	hdr(bad)
	_, err = c.SendInput(context.Background(), bad)
	check("SendInput of bytes that are not UTF-8", err, connect.CodeInvalidArgument, "not valid UTF-8")
	cl := connect.NewRequest(&process.CloseStdinRequest{Process: sel})
	hdr(cl)
	_, err = c.CloseStdin(context.Background(), cl)
	check("CloseStdin of an unknown pid", err, connect.CodeNotFound, "pid 1 not found")
	si := c.StreamInput(context.Background())
	probe := connect.NewRequest(&process.ListRequest{})
	hdr(probe)
	for k, v := range probe.Header() {
		si.RequestHeader()[k] = v
	}
	si.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("x")}}}}})
	_, err = si.CloseAndReceive()
	check("StreamInput data before its start", err, connect.CodeInvalidArgument, "before the start message")
	up := connect.NewRequest(&process.UpdateRequest{Process: sel})
	hdr(up)
	_, err = c.Update(context.Background(), up)
	check("Update without a size", err, connect.CodeInvalidArgument, "pty.size")
	big := connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Rows: 24, Cols: 1 << 31}}})
	hdr(big)
	_, err = c.Update(context.Background(), big)
	check("Update to 2^31 columns", err, connect.CodeInvalidArgument, "each must be 1 to 1000")
	pty := startReq()
	pty.Msg.Pty = &process.PTY{}
	hdr(pty)
	st, err := c.Start(context.Background(), pty)
	if err == nil {
		st.Receive()
		err = st.Err()
	}
	check("Start with a PTY of no size", err, connect.CodeInvalidArgument, "rows 0, cols 0")
	sig := connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_UNSPECIFIED})
	hdr(sig)
	_, err = c.SendSignal(context.Background(), sig)
	check("an unspecified signal", err, connect.CodeUnimplemented, "only SIGKILL")
}

// TestBusyAnswersAborted: a sandbox busy past busyRetry answers Aborted.
func TestBusyAnswersAborted(t *testing.T) {
	c, _, hdr := fakeDoor(t, &fakeCommands{busy: 1 << 20})
	req := startReq()
	hdr(req)
	t0 := time.Now()
	st, err := c.Start(context.Background(), req)
	if err == nil {
		st.Receive()
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeAborted || time.Since(t0) < busyRetry {
		t.Fatalf("%v after %v; want aborted after %v", err, time.Since(t0), busyRetry)
	}
}

// TestKeepalive: a silent stream gets a keepalive at the client's interval.
func TestKeepalive(t *testing.T) {
	c, _, hdr := fakeDoor(t, &fakeCommands{silent: true})
	req := startReq()
	hdr(req)
	req.Header().Set("Keepalive-Ping-Interval", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Receive() // the start
	t0 := time.Now()
	if !st.Receive() || st.Msg().GetEvent().GetKeepalive() == nil {
		t.Fatalf("after the start: %v, %v; want a keepalive", st.Msg(), st.Err())
	}
	if d := time.Since(t0); d < 900*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("the keepalive came after %v, want about 1 s", d)
	}
}

// TestSweep: past maxBoxes, the tables of sandboxes that are gone are
// dropped; those of live ones stay.
func TestSweep(t *testing.T) {
	_, d, _ := fakeDoor(t, &fakeCommands{})
	for i := range maxBoxes - 1 {
		d.procs.box(d, "gone"+strconv.Itoa(i), 1000)
	}
	d.procs.box(d, "live", 1000)
	d.procs.box(d, "new", 1000)
	if n := len(d.procs.boxes); n != 2 {
		t.Fatalf("%d tables after the sweep, want 2 (live, new)", n)
	}
	if d.procs.lookup("live") == nil {
		t.Fatal("a live sandbox's table was swept")
	}
}
