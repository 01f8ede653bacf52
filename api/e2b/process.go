package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/e2b/proto/process"
	"github.com/jailcell/jailcell/api/e2b/proto/process/processconnect"
	"github.com/jailcell/jailcell/session/seam"
)

// envd's process service over the dispatcher's command op.
//
// A process is a background command of the sandbox's kernel: Start starts
// it and answers its pid at once, then streams what it writes. The kernel
// answers one command request at a time, and one that waits holds the
// whole sandbox (any other request meets busy), so the door never waits
// long: a pump per sandbox asks for each streamed process's new output
// with a wait of pollWait, then lets the sandbox go for a while. The
// kernel keeps what a job wrote and what it has already streamed, so no
// output is lost between the start and a wait, nor between two waits.

const (
	// maxProcs bounds the processes the door remembers per sandbox (the
	// kernel runs at most 16 at once; the rest are ended ones).
	maxProcs = 1024
	// keptEnded is how many ended processes stay for a late Connect.
	keptEnded = 16
	// maxBoxes is how many sandboxes' tables are kept before those of
	// sandboxes that ended without the door's kill are swept.
	maxBoxes = 4096
	// pollWait is how long one wait holds the sandbox (it answers at
	// once when the process ends); between rounds the pump sleeps
	// pollMin after output, and while the processes are silent from
	// pollStart doubling up to pollMax. A new stream starts at pollStart:
	// most commands an agent runs end within a few rounds, and each
	// round's sleep is latency added to their answer.
	pollWait  = 10 * time.Millisecond
	pollStart = 2 * time.Millisecond
	pollMin   = 25 * time.Millisecond
	pollMax   = 250 * time.Millisecond
	// busyRetry is how long a Start, List or SendSignal retries a sandbox
	// busy with another request (a cell, a file, another door) before it
	// answers busy.
	busyRetry = 3 * time.Second
)

// processes remembers the commands the process service started, by
// sandbox and pid.
type processes struct {
	mu    sync.Mutex
	boxes map[string]*box
}

func newProcesses() *processes { return &processes{boxes: map[string]*box{}} }

// forget drops a killed sandbox's processes and ends their streams.
func (p *processes) forget(id string) {
	p.mu.Lock()
	b := p.boxes[id]
	delete(p.boxes, id)
	p.mu.Unlock()
	if b != nil {
		b.close(sandboxGone(id, "was killed"))
	}
}

// drop removes b from the table if it is still there: a pump that ends
// late must not take a newer table of the same id with it (a stale pump
// dropped by id closed the next box's streams with "was killed").
func (p *processes) drop(b *box) {
	p.mu.Lock()
	if p.boxes[b.id] == b {
		delete(p.boxes, b.id)
	}
	p.mu.Unlock()
}

// box is one sandbox's table.
type box struct {
	id    string
	owner int
	// link serializes the door's own command requests to the sandbox, so
	// that they queue behind each other instead of meeting busy.
	link sync.Mutex

	mu      sync.Mutex
	procs   map[uint32]*proc
	ended   []uint32 // ended processes' pids, oldest first
	pending int      // starts in flight, counted against maxProcs
	pumping bool
	gone    bool
	wake    chan struct{}
}

// proc is one process the door started.
type proc struct {
	pid  uint32
	job  string
	info *process.ProcessInfo
	subs map[*sub]struct{}
	end  *process.ProcessEvent_EndEvent // set once it ended
	// pty: it runs in a terminal, whose output is a DataEvent's pty.
	pty bool
}

// sub is one stream (Start or Connect) of a process's events. Its queue
// never blocks the pump; it is bounded by the policy's output bytes, which
// bound what a command can write at all.
type sub struct {
	mu    sync.Mutex
	q     []*process.ProcessEvent
	done  bool  // the end (or err) is the last of q
	err   error // why the stream fails, if it does
	ready chan struct{}
}

func newSub() *sub { return &sub{ready: make(chan struct{}, 1)} }

func (s *sub) push(ev *process.ProcessEvent, last bool, err error) {
	s.mu.Lock()
	if !s.done {
		if ev != nil {
			s.q = append(s.q, ev)
		}
		s.done, s.err = last, err
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *sub) take() ([]*process.ProcessEvent, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q = nil
	return q, s.done, s.err
}

// box returns sandbox id's table, made if need be.
func (p *processes) box(d *Door, id string, owner int) *box {
	p.mu.Lock()
	b := p.boxes[id]
	if b == nil {
		if len(p.boxes) >= maxBoxes {
			p.mu.Unlock()
			p.sweep(d)
			p.mu.Lock()
		}
		if b = p.boxes[id]; b == nil {
			b = &box{id: id, owner: owner, procs: map[uint32]*proc{}, wake: make(chan struct{}, 1)}
			p.boxes[id] = b
		}
	}
	p.mu.Unlock()
	return b
}

func (p *processes) lookup(id string) *box {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.boxes[id]
}

// sweep drops the tables of sandboxes that ended without the door's kill
// (their idle timeout, another door's close).
func (p *processes) sweep(d *Door) {
	p.mu.Lock()
	boxes := make([]*box, 0, len(p.boxes))
	for _, b := range p.boxes {
		boxes = append(boxes, b)
	}
	p.mu.Unlock()
	for _, b := range boxes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, e := d.call(ctx, b.owner, &api.Request{Op: api.OpInfo, Session: b.id}, nil)
		cancel()
		if e != nil && (e.Code == api.CodeNotFound || e.Code == api.CodeExpired) {
			p.drop(b)
			b.close(sandboxGone(b.id, "is not running: "+e.Message))
		}
	}
}

// close ends every stream of the sandbox with err, and refuses new ones.
func (b *box) close(err error) {
	b.mu.Lock()
	b.gone = true
	b.mu.Unlock()
	b.endStreams(err)
}

// endStreams ends every stream of the sandbox with err.
func (b *box) endStreams(err error) {
	b.mu.Lock()
	var subs []*sub
	for _, p := range b.procs {
		for s := range p.subs {
			subs = append(subs, s)
		}
		p.subs = nil
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.push(nil, true, err)
	}
}

// reserve counts a start against maxProcs, dropping the oldest ended
// processes to make room.
func (b *box) reserve() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return sandboxGone(b.id, "was killed")
	}
	for len(b.procs)+b.pending >= maxProcs && len(b.ended) > 0 {
		b.dropEndedLocked()
	}
	if len(b.procs)+b.pending >= maxProcs {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s: the door keeps at most %d processes per sandbox and all are running or unobserved; kill some or wait for them", b.id, maxProcs))
	}
	b.pending++
	return nil
}

func (b *box) dropEndedLocked() {
	pid := b.ended[0]
	b.ended = b.ended[1:]
	if p := b.procs[pid]; p != nil && p.end != nil {
		delete(b.procs, pid)
	}
}

// add records a started process (a reserved start), replacing an ended
// one whose pid the sandbox reused.
func (b *box) add(p *proc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending--
	if old := b.procs[p.pid]; old != nil {
		for i, pid := range b.ended {
			if pid == p.pid {
				b.ended = append(b.ended[:i:i], b.ended[i+1:]...)
				break
			}
		}
		for s := range old.subs {
			s.push(nil, true, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d ended and its pid was reused", p.pid)))
		}
	}
	b.procs[p.pid] = p
}

// finish records p's end once and hands it to its streams.
func (b *box) finish(p *proc, end *process.ProcessEvent_EndEvent) {
	b.mu.Lock()
	if p.end != nil {
		b.mu.Unlock()
		return
	}
	p.end = end
	subs := p.subs
	p.subs = nil
	if b.procs[p.pid] == p {
		b.ended = append(b.ended, p.pid)
		for len(b.ended) > keptEnded {
			b.dropEndedLocked()
		}
	}
	b.mu.Unlock()
	ev := &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
	for s := range subs {
		s.push(ev, true, nil)
	}
}

// output hands a chunk of p's output to its streams.
func (b *box) output(p *proc, stream, text string) {
	if text == "" {
		return
	}
	var data process.ProcessEvent_DataEvent
	switch {
	case p.pty && stream == api.EventStdout:
		// A terminal has one output, which the command op answers as stdout.
		data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: []byte(text)}
	case stream == api.EventStdout:
		data.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(text)}
	case stream == api.EventStderr:
		data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(text)}
	default:
		return
	}
	ev := &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &data}}
	b.mu.Lock()
	subs := make([]*sub, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.push(ev, false, nil)
	}
}

// subscribe adds a stream of p's further events; an ended p's stream has
// only its end.
func (b *box) subscribe(d *Door, p *proc) *sub {
	s := newSub()
	b.mu.Lock()
	if b.gone {
		b.mu.Unlock()
		s.push(nil, true, sandboxGone(b.id, "was killed"))
		return s
	}
	if p.end != nil {
		end := p.end
		b.mu.Unlock()
		s.push(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}, true, nil)
		return s
	}
	if p.subs == nil {
		p.subs = map[*sub]struct{}{}
	}
	p.subs[s] = struct{}{}
	start := !b.pumping
	b.pumping = true
	b.mu.Unlock()
	if start {
		go d.pump(b)
	} else {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return s
}

func (b *box) unsubscribe(p *proc, s *sub) {
	b.mu.Lock()
	delete(p.subs, s)
	b.mu.Unlock()
}

// streamed lists the running processes someone streams; the pump stops
// (pumping false) when there are none.
func (b *box) streamed() []*proc {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*proc
	if !b.gone {
		for _, p := range b.procs {
			if p.end == nil && len(p.subs) > 0 {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		b.pumping = false
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// pump streams the output and ends of b's streamed processes until none
// is streamed: it holds the sandbox for pollWait per process per round.
func (d *Door) pump(b *box) {
	interval := pollStart
	for {
		procs := b.streamed()
		if len(procs) == 0 {
			return
		}
		if d.paused(b) {
			// Its processes are kept with it and run on when it resumes:
			// only the streams end, and the pump with them.
			b.endStreams(connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s was paused: the streams of its processes end; after resuming it, Connect to a process again", b.id)))
			continue
		}
		active := false
		for _, p := range procs {
			wrote, err := d.poll(context.Background(), b, p, true, 0)
			if err != nil && connect.CodeOf(err) == connect.CodeUnavailable {
				// The streams learn why: a wait cut by the sandbox's end
				// fails with its kernel's loss, which says nothing of it.
				if e := d.endedWithin(b); e != nil {
					err = sandboxGone(b.id, "is not running: "+e.Message)
				}
				b.close(err)
				d.procs.drop(b)
				break
			}
			active = active || wrote
		}
		if active {
			interval = pollMin
		} else {
			interval = min(interval*2, pollMax)
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-b.wake:
			t.Stop()
			interval = pollStart
		}
	}
}

// endedWithin is d.ended for the pump, which no caller's context bounds.
func (d *Door) endedWithin(b *box) *api.Error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.ended(ctx, b.owner, b.id)
}

// paused: a wait would restore a paused sandbox, so the pump asks first.
func (d *Door) paused(b *box) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, e := d.call(ctx, b.owner, &api.Request{Op: api.OpInfo, Session: b.id}, nil)
	return e == nil && resp.Info != nil && resp.Info.State == "hibernated"
}

// poll asks the kernel once about p: with stream, its new output goes to
// p's streams. It records p's end if it ended; wrote says whether it
// wrote or ended. A busy sandbox is retried for retry.
func (d *Door) poll(ctx context.Context, b *box, p *proc, stream bool, retry time.Duration) (wrote bool, _ error) {
	req := &api.Request{Op: api.OpCommand, Session: b.id, Action: seam.CommandWait, Job: p.job, TimeoutS: pollWait.Seconds(), Stream: stream}
	res, err := d.command(ctx, b, req, func(ev api.Event) {
		wrote = true
		b.output(p, ev.Event, ev.Text)
	}, retry)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			// The kernel forgot the job: it ended with a kernel that was
			// replaced, or more than 16 newer jobs ran since it ended.
			b.finish(p, &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: ptr("jailcell no longer knows how the command ended: its kernel was restarted, or 16 newer commands ran since")})
			return true, nil
		}
		return wrote, err
	}
	if res.Done {
		b.finish(p, endOf(res))
		return true, nil
	}
	return wrote, nil
}

// command sends one command request through b's link, retrying a busy
// sandbox for up to retry, and maps its error to Connect's.
func (d *Door) command(ctx context.Context, b *box, req *api.Request, emit func(api.Event), retry time.Duration) (*seam.CommandResult, error) {
	deadline := time.Now().Add(retry)
	for {
		b.link.Lock()
		resp, e := d.callOnce(ctx, b.owner, req, emit)
		b.link.Unlock()
		if e == nil {
			if resp.Command == nil {
				return nil, connect.NewError(connect.CodeInternal, errors.New("the command op answered no command"))
			}
			return resp.Command, nil
		}
		if e.Code != api.CodeBusy || !time.Now().Before(deadline) {
			return nil, procError(b.id, e)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, procError(b.id, e)
		case <-t.C:
		}
	}
}

// sandboxGone is the error of a stream or request whose sandbox ended
// under it: Unavailable, as E2B's proxy answers for a sandbox that is
// gone, which the SDKs raise as TimeoutError. Its text begins with E2B's
// own words for the case, so a program or a person that knows them (and
// E2B's tests, which look for them) reads it as E2B's, then says which
// sandbox and why.
func sandboxGone(id, why string) *connect.Error {
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the sandbox was killed or reached its end of life: sandbox %s %s", id, why))
}

// procError maps a wire error to the Connect code E2B's SDKs act on: a
// sandbox that is gone is Unavailable (as E2B's proxy's 502 is), a job the
// kernel does not know NotFound.
func procError(id string, e *api.Error) error {
	if (e.Code == api.CodeNotFound || e.Code == api.CodeExpired) && !strings.Contains(e.Message, "no job") {
		return sandboxGone(id, "is not running: "+e.Message)
	}
	return connectError(e)
}

// endOf is a finished command's EndEvent, as envd reports a process's
// wait status (Go's os.ProcessState): a negative exit code from the
// kernel is the signal that ended the command.
func endOf(r *seam.CommandResult) *process.ProcessEvent_EndEvent {
	end := &process.ProcessEvent_EndEvent{}
	var notes []string
	switch code := r.ExitCode; {
	case code < 0:
		end.ExitCode, end.Exited = -1, false
		end.Status = "signal: " + syscall.Signal(min(-code, 255)).String()
		notes = append(notes, end.Status)
	default:
		end.ExitCode, end.Exited = int32(min(code, 255)), true
		end.Status = "exit status " + strconv.Itoa(int(end.ExitCode))
		if code != 0 {
			notes = append(notes, end.Status)
		}
	}
	if r.TimedOut {
		notes = append(notes, "the command reached its timeout (the request's timeoutMs) and was stopped")
	}
	if r.StdoutTruncated || r.StderrTruncated {
		notes = append(notes, "output past the sandbox policy's output_bytes per stream was dropped")
	}
	if len(notes) > 0 {
		end.Error = ptr(strings.Join(notes, "; "))
	}
	return end
}

func ptr[T any](v T) *T { return &v }

// routeProcess mounts the process service on envd's mux.
func (d *Door) routeProcess(m *http.ServeMux) {
	path, h := processconnect.NewProcessHandler(processService{d}, connect.WithReadMaxBytes(maxJSONBody))
	m.Handle(path, h)
}

type processService struct{ d *Door }

var _ processconnect.ProcessHandler = processService{}

// Start starts a background command, answers its pid, then streams its
// output and its end.
func (s processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	d, t, m := s.d, targetOf(ctx), req.Msg
	var size *seam.PTYSize
	if m.Pty != nil {
		size = ptySize(m.Pty.GetSize())
		if err := size.Check("pty.size"); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	// As envd: stdin unset is stdin open (older SDKs); the stock SDKs send
	// false unless asked. A terminal is its stdin.
	stdin := (m.Stdin == nil || m.GetStdin()) && size == nil
	if err := checkUser(req.Header()); err != nil {
		return err
	}
	line, err := commandLine(m.Process)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	limit, err := timeoutOf(req.Header())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	b := d.procs.box(d, t.id, t.owner)
	if err := b.reserve(); err != nil {
		return err
	}
	// Not the caller's cancellation: a start that went through must be
	// recorded, so that a process whose client left can still be listed
	// and killed. The request is bounded by busyRetry and the op's own.
	res, err := d.command(context.WithoutCancel(ctx), b, &api.Request{Op: api.OpCommand, Session: t.id, Action: seam.CommandStart, Cmd: line,
		Envs: m.Process.GetEnvs(), Cwd: m.Process.GetCwd(), Background: true, TimeoutS: limit.Seconds(),
		Stdin: stdin, PTY: size}, nil, busyRetry)
	if err != nil {
		b.mu.Lock()
		b.pending--
		b.mu.Unlock()
		return err
	}
	info := &process.ProcessInfo{Pid: uint32(res.PID), Tag: m.Tag, Config: &process.ProcessConfig{
		Cmd: m.Process.GetCmd(), Args: m.Process.GetArgs(), Envs: m.Process.GetEnvs(), Cwd: m.Process.Cwd}}
	p := &proc{pid: uint32(res.PID), job: res.Job, info: info, pty: size != nil}
	b.add(p)
	sb := b.subscribe(d, p)
	if err := stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}}); err != nil {
		b.unsubscribe(p, sb)
		return err
	}
	return follow(ctx, b, p, sb, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

// Connect streams a process's further output and its end (only the end
// if it has ended and is still remembered).
func (s processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	d, t := s.d, targetOf(ctx)
	b, p, err := d.selectProc(ctx, t, req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	sb := b.subscribe(d, p)
	if err := stream.Send(&process.ConnectResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}}); err != nil {
		b.unsubscribe(p, sb)
		return err
	}
	return follow(ctx, b, p, sb, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// follow sends sb's events until the end, the client leaving, or a failed
// send; a silent stream gets a keepalive every interval.
func follow(ctx context.Context, b *box, p *proc, sb *sub, interval time.Duration, send func(*process.ProcessEvent) error) error {
	defer b.unsubscribe(p, sb)
	keep := time.NewTimer(interval)
	defer keep.Stop()
	for {
		evs, done, err := sb.take()
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
		}
		if len(evs) > 0 {
			keep.Reset(interval)
		}
		if done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sb.ready:
		case <-keep.C:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			keep.Reset(interval)
		}
	}
}

// List answers the running processes the door started in the sandbox. A
// process no stream follows is asked about first, so one that ended since
// is not listed.
func (s processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	d, t := s.d, targetOf(ctx)
	b := d.procs.lookup(t.id)
	if b == nil {
		if _, e := d.call(ctx, t.owner, &api.Request{Op: api.OpInfo, Session: t.id}, nil); e != nil {
			return nil, procError(t.id, e)
		}
		return connect.NewResponse(&process.ListResponse{}), nil
	}
	b.mu.Lock()
	var ask []*proc
	for _, p := range b.procs {
		if p.end == nil && len(p.subs) == 0 {
			ask = append(ask, p)
		}
	}
	b.mu.Unlock()
	for _, p := range ask {
		if _, err := d.poll(ctx, b, p, false, busyRetry); err != nil {
			return nil, err
		}
	}
	out := &process.ListResponse{}
	b.mu.Lock()
	for _, p := range b.procs {
		if p.end == nil {
			out.Processes = append(out.Processes, p.info)
		}
	}
	b.mu.Unlock()
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].Pid < out.Processes[j].Pid })
	return connect.NewResponse(out), nil
}

// SendSignal kills a process's whole group: SIGKILL and SIGTERM alike,
// since the command op's kill is a SIGKILL.
func (s processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	d, t := s.d, targetOf(ctx)
	switch sig := req.Msg.GetSignal(); sig {
	case process.Signal_SIGNAL_SIGKILL, process.Signal_SIGNAL_SIGTERM:
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("signal %s: jailcell sends only SIGKILL (SIGTERM is a SIGKILL too)", sig))
	}
	b, p, err := d.selectProc(ctx, t, req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	res, err := d.command(ctx, b, &api.Request{Op: api.OpCommand, Session: t.id, Action: seam.CommandKill, Job: p.job}, nil, busyRetry)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			b.finish(p, &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: ptr("jailcell no longer knows how the command ended")})
		}
		return nil, err
	}
	if res.Done {
		b.finish(p, endOf(res))
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// selectProc finds the process a selector names: by pid, or the first by
// tag (a running one before an ended one). ended admits an ended process.
func (d *Door) selectProc(ctx context.Context, t target, sel *process.ProcessSelector, ended bool) (*box, *proc, error) {
	b := d.procs.lookup(t.id)
	var p *proc
	if b != nil {
		var err error
		b.mu.Lock()
		p, err = pick(b.procs, sel, ended)
		b.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
	} else if _, err := pick(nil, sel, ended); connect.CodeOf(err) == connect.CodeInvalidArgument {
		return nil, nil, err
	}
	if p == nil {
		// Tell a sandbox that is gone from a process that is not there.
		if _, e := d.call(ctx, t.owner, &api.Request{Op: api.OpInfo, Session: t.id}, nil); e != nil {
			return nil, nil, procError(t.id, e)
		}
		_, err := pick(nil, sel, ended)
		return nil, nil, err
	}
	return b, p, nil
}

// pick is selectProc's choice within a table (nil p with a NotFound error
// if none, InvalidArgument for a selector naming nothing).
func pick(procs map[uint32]*proc, sel *process.ProcessSelector, ended bool) (*proc, error) {
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p := procs[v.Pid]; p != nil && (ended || p.end == nil) {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found: jailcell knows the running processes this door started, and the last %d that ended", v.Pid, keptEnded))
	case *process.ProcessSelector_Tag:
		var found *proc
		for _, p := range procs {
			if p.info.GetTag() != v.Tag || (!ended && p.end != nil) {
				continue
			}
			if found == nil || (found.end != nil && p.end == nil) || ((found.end == nil) == (p.end == nil) && p.pid < found.pid) {
				found = p
			}
		}
		if found != nil {
			return found, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process: want a selector, a pid or a tag"))
}

// Update resizes a process's terminal.
func (s processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	d, t := s.d, targetOf(ctx)
	sz := req.Msg.GetPty().GetSize()
	if sz == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("pty.size: want the terminal's new cols and rows"))
	}
	size := ptySize(sz)
	if err := size.Check("pty.size"); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	b, p, err := d.selectProc(ctx, t, req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if _, err := d.command(ctx, b, &api.Request{Op: api.OpCommand, Session: t.id, Action: seam.CommandResize, Job: p.job, PTY: size}, nil, busyRetry); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// ptySize is envd's terminal size as the command op's, each side clamped
// just past the bound so that Check refuses it by name rather than an
// int conversion wrapping a uint32.
func ptySize(sz *process.PTY_Size) *seam.PTYSize {
	return &seam.PTYSize{Rows: int(min(sz.GetRows(), seam.MaxPTYSide+1)), Cols: int(min(sz.GetCols(), seam.MaxPTYSide+1))}
}

// input writes data to a process's stdin or terminal, eof closing its
// stdin after.
func (d *Door) input(ctx context.Context, t target, sel *process.ProcessSelector, in *process.ProcessInput, eof bool) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = v.Stdin
	case *process.ProcessInput_Pty:
		data = v.Pty
	case nil:
		if !eof {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("input: want stdin or pty bytes"))
		}
	}
	if !utf8.Valid(data) {
		// The command op carries text; a terminal's input is text too.
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input: jailcell writes UTF-8 text to a command's stdin; these bytes are not valid UTF-8"))
	}
	b, p, err := d.selectProc(ctx, t, sel, false)
	if err != nil {
		return err
	}
	_, err = d.command(ctx, b, &api.Request{Op: api.OpCommand, Session: t.id, Action: seam.CommandInput, Job: p.job, Input: string(data), EOF: eof}, nil, busyRetry)
	return err
}

func (s processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	if err := s.d.input(ctx, targetOf(ctx), req.Msg.GetProcess(), req.Msg.GetInput(), false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

// StreamInput writes each data message to the process its start message
// names, in order; each message is bounded by the handler's read limit.
func (s processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	var sel *process.ProcessSelector
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			sel = ev.Start.GetProcess()
		case *process.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("StreamInput: data before the start message that names the process"))
			}
			if err := s.d.input(ctx, targetOf(ctx), sel, ev.Data.GetInput(), false); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (s processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	if err := s.d.input(ctx, targetOf(ctx), req.Msg.GetProcess(), nil, true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// commandLine is the bash command line that runs a ProcessConfig. The
// SDKs send /bin/bash -l -c CMD: that is CMD, run with bash -c as every
// jailcell command is (a login shell's profile would reset the sandbox's
// PATH). Any other program and arguments are quoted and exec'd.
func commandLine(pc *process.ProcessConfig) (string, error) {
	if pc.GetCmd() == "" {
		return "", errors.New("process.cmd is empty: want a program to run, e.g. /bin/bash with args -c CMD")
	}
	args := pc.GetArgs()
	if base := pc.Cmd[strings.LastIndexByte(pc.Cmd, '/')+1:]; base == "bash" || base == "sh" {
		i := 0
		for i < len(args) && (args[i] == "-l" || args[i] == "--login") {
			i++
		}
		if i+2 == len(args) && args[i] == "-c" && args[i+1] != "" {
			return args[i+1], nil
		}
	}
	var sb strings.Builder
	sb.WriteString("exec ")
	sb.WriteString(shellQuote(pc.Cmd))
	for _, a := range args {
		sb.WriteByte(' ')
		sb.WriteString(shellQuote(a))
	}
	return sb.String(), nil
}

// shellQuote makes s one bash word, whatever it holds.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkUser admits the users E2B's SDKs name (Authorization: Basic
// USER:): a jailcell sandbox has one user, so "root" and "user" are the
// same one, and any other is refused rather than silently made it.
func checkUser(h http.Header) error {
	auth := h.Get("Authorization")
	if auth == "" {
		return nil
	}
	enc, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("Authorization: want Basic USER: (the user to run as)"))
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("Authorization: the Basic credentials are not base64"))
	}
	user, _, _ := strings.Cut(string(raw), ":")
	switch user {
	case "", "root", "user":
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("user %.64q: a jailcell sandbox has one user; use root or user (the same one)", user))
}

// timeoutOf is the command's limit: the stream's Connect-Timeout-Ms, as
// envd ends a process with its request's deadline (0: none).
func timeoutOf(h http.Header) (time.Duration, error) {
	v := h.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > 1e10 {
		return 0, fmt.Errorf("Connect-Timeout-Ms %.32q: want milliseconds, 0 to 10000000000", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
