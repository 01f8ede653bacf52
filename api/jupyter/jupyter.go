package jupyter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// Options configure Serve.
type Options struct {
	// Owner is the uid the session belongs to (ignored by a Remote, which
	// is known to the service by its socket's credentials).
	Owner int
	// Policy names the session's policy ("" = the default).
	Policy string
	// TimeoutS is every cell's wall-clock limit (0 = the policy's
	// default).
	TimeoutS float64
	// TTLS is the session's idle timeout in seconds (0 = the service's
	// default, sessions.idle_ttl), up to its ceiling.
	TTLS float64
	// Version is reported in kernel_info as the implementation's version.
	Version string
	// Logger gets dropped messages and faults (default slog.Default()).
	Logger *slog.Logger
}

// Serve is a Jupyter kernel (messaging protocol 5.3) whose cells run
// in one jailcell session made through h: created here, closed at
// shutdown or when ctx ends. It decodes, calls h and encodes; like every
// transport it makes no decision of its own about a cell. It returns nil
// after a shutdown_request (restart or not: the kernel process ends, as
// ipykernel's does, and the Jupyter client starts a new one with a new
// session), or ctx's error.
//
// Every incoming message must carry the HMAC-SHA256 signature made with
// the connection's key, checked in constant time; others are logged and
// dropped unanswered. Every outgoing message is signed. Outgoing messages
// are not secret to whoever connects, so only peers of this process's
// uid are admitted (transport.go), and iopub never waits for a
// subscriber.
func Serve(ctx context.Context, h api.Handler, conn *Connection, opt Options) error {
	if err := conn.check(); err != nil {
		return err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	kt, err := registerTransports(conn, opt.Logger)
	if err != nil {
		return fmt.Errorf("register the kernel's ZMQ transports: %w", err)
	}
	k := &jkernel{h: h, opt: opt, sig: signer{key: []byte(conn.Key)}, id: newUUID(), log: opt.Logger, hist: newHistory()}
	if err := k.createSession(ctx); err != nil {
		return err
	}
	defer k.closeSession()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	k.stop = cancel
	// Sockets live on their own context: ctx ending must not cut a reply
	// or the last status off mid-send.
	sctx, closeSockets := context.WithCancel(context.WithoutCancel(ctx))
	defer closeSockets()
	k.shell = zmq4.NewRouter(sctx, zmq4.WithTimeout(10*time.Second))
	k.control = zmq4.NewRouter(sctx, zmq4.WithTimeout(10*time.Second))
	k.stdin = zmq4.NewRouter(sctx, zmq4.WithTimeout(10*time.Second))
	k.iopub = zmq4.NewPub(sctx, zmq4.WithTimeout(10*time.Second))
	hb := zmq4.NewRep(sctx, zmq4.WithTimeout(10*time.Second))
	for _, s := range []struct {
		sock zmq4.Socket
		port int
		name string
	}{{k.shell, conn.ShellPort, "shell"}, {k.control, conn.ControlPort, "control"}, {k.stdin, conn.StdinPort, "stdin"}, {k.iopub, conn.IOPubPort, "iopub"}, {hb, conn.HBPort, "heartbeat"}} {
		defer s.sock.Close()
		tr := kt.ports
		if s.sock == k.iopub {
			tr = kt.iopub
		}
		if err := s.sock.Listen(conn.endpoint(tr, s.port)); err != nil {
			return fmt.Errorf("listen on the %s port %s:%d: %w", s.name, conn.IP, s.port, err)
		}
	}
	k.log.Info("jupyter kernel ready", "session", k.sid(), "transport", conn.Transport, "ip", conn.IP, "shell_port", conn.ShellPort)
	k.publish(nil, "status", map[string]any{"execution_state": "starting"})

	var wg sync.WaitGroup
	loop := func(sock zmq4.Socket, handle func(*jmsg)) {
		defer wg.Done()
		for {
			msg, err := sock.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue // a dropped peer; the socket keeps listening
			}
			m, err := k.sig.decode(msg.Frames)
			if err != nil {
				k.log.Warn("jupyter: dropped an incoming message", "err", err)
				continue
			}
			handle(m)
			if ctx.Err() != nil {
				return
			}
		}
	}
	wg.Add(4)
	go loop(k.shell, func(m *jmsg) { k.handle(ctx, k.shell, m) })
	go loop(k.control, func(m *jmsg) { k.handle(ctx, k.control, m) })
	go loop(k.stdin, func(m *jmsg) {}) // no input(): cells run with no stdin, as in a kernel without one
	go func() {
		defer wg.Done()
		for {
			msg, err := hb.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			_ = hb.Send(msg)
		}
	}()
	<-ctx.Done()
	// A shutdown's reply and last status are out; the loops end with
	// their sockets.
	closeSockets()
	waitTimeout(&wg, 5*time.Second)
	if err := context.Cause(ctx); !errors.Is(err, errShutdown) {
		return err
	}
	return nil
}

var errShutdown = errors.New("jupyter shutdown_request")

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// jkernel is one running kernel.
type jkernel struct {
	h       api.Handler
	opt     Options
	sig     signer
	id      string // the kernel's own Jupyter session id
	log     *slog.Logger
	stop    context.CancelCauseFunc
	mu      sync.Mutex
	session string // the jailcell session; replaced if it ends under the kernel
	closed  bool   // the session was closed for good (shutdown)

	shell, control, stdin, iopub zmq4.Socket
	pubMu                        sync.Mutex
	// count is Jupyter's execution_count. Atomic: an execute_request may
	// come on the control socket too, whose loop runs beside the shell's.
	count     atomic.Int64
	hist      *jhistory
	reqs      atomic.Int64
	closeOnce sync.Once
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (k *jkernel) call(ctx context.Context, req *api.Request, emit func(api.Event)) *api.Response {
	req.ID = json.RawMessage(fmt.Sprintf(`"jupyter-%d"`, k.reqs.Add(1)))
	return k.h.Handle(ctx, k.opt.Owner, req, emit)
}

func (k *jkernel) createSession(ctx context.Context) error {
	resp := k.h.Handle(ctx, k.opt.Owner, &api.Request{ID: json.RawMessage(`"jupyter-create"`), Op: api.OpCreate, Policy: k.opt.Policy, TTLS: k.opt.TTLS}, nil)
	if resp.Error != nil {
		return fmt.Errorf("create the kernel's jailcell session: %s", resp.Error.Error())
	}
	if resp.Info == nil || resp.Info.ID == "" {
		return errors.New("create the kernel's jailcell session: the response names no session")
	}
	k.mu.Lock()
	k.session = resp.Info.ID
	k.mu.Unlock()
	return nil
}

// sid is the current session's id.
func (k *jkernel) sid() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.session
}

// renew replaces a session the service no longer has, unless the kernel
// is shutting down.
func (k *jkernel) renew(ctx context.Context) bool {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return false
	}
	if err := k.createSession(ctx); err != nil {
		k.log.Warn("jupyter: replace the ended session", "err", err)
		return false
	}
	k.mu.Lock()
	closed, id := k.closed, k.session
	k.mu.Unlock()
	if closed {
		// A shutdown came while it was made: it must not outlive the kernel.
		k.h.Handle(context.WithoutCancel(ctx), k.opt.Owner, &api.Request{ID: json.RawMessage(`"jupyter-close"`), Op: api.OpClose, Session: id}, nil)
		return false
	}
	k.log.Info("jupyter: the session had ended; made a new one", "session", id)
	return true
}

// closeSession closes the session once, whichever of shutdown and the
// end of Serve comes first.
func (k *jkernel) closeSession() { k.closeOnce.Do(k.closeSessionNow) }

func (k *jkernel) closeSessionNow() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k.mu.Lock()
	k.closed = true
	id := k.session
	k.mu.Unlock()
	if resp := k.h.Handle(ctx, k.opt.Owner, &api.Request{ID: json.RawMessage(`"jupyter-close"`), Op: api.OpClose, Session: id}, nil); resp.Error != nil {
		k.log.Warn("jupyter: close the kernel's session", "session", id, "err", resp.Error.Error())
	}
}

func (k *jkernel) header(msgType string) jheader {
	return jheader{MsgID: newUUID(), Session: k.id, Username: "kernel", Date: time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"), MsgType: msgType, Version: JupyterProtocolVersion}
}

// publish sends one message on iopub; parent may be nil.
func (k *jkernel) publish(parent *jmsg, msgType string, content any) {
	var ph json.RawMessage
	if parent != nil {
		ph = parent.rawHdr
	}
	topic := []byte("kernel." + k.id + "." + msgType)
	frames, err := k.sig.encode([][]byte{topic}, k.header(msgType), ph, content)
	if err != nil {
		k.log.Error("jupyter: encode iopub message", "type", msgType, "err", err)
		return
	}
	k.pubMu.Lock()
	defer k.pubMu.Unlock()
	if err := k.iopub.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		k.log.Debug("jupyter: publish", "type", msgType, "err", err)
	}
}

// reply answers m on sock, the channel it came in on.
func (k *jkernel) reply(sock zmq4.Socket, m *jmsg, msgType string, content any) {
	frames, err := k.sig.encode(m.ids, k.header(msgType), m.rawHdr, content)
	if err != nil {
		k.log.Error("jupyter: encode reply", "type", msgType, "err", err)
		return
	}
	if err := sock.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		k.log.Warn("jupyter: send reply", "type", msgType, "err", err)
	}
}

// handle answers one request between a busy and an idle status, as
// ipykernel does.
func (k *jkernel) handle(ctx context.Context, sock zmq4.Socket, m *jmsg) {
	k.publish(m, "status", map[string]any{"execution_state": "busy"})
	defer k.publish(m, "status", map[string]any{"execution_state": "idle"})
	t := m.header.MsgType
	switch t {
	case "kernel_info_request":
		k.reply(sock, m, "kernel_info_reply", k.kernelInfo())
	case "execute_request":
		k.execute(ctx, sock, m)
	case "complete_request", "inspect_request", "is_complete_request":
		k.assist(ctx, sock, m)
	case "interrupt_request":
		resp := k.call(ctx, &api.Request{Op: api.OpInterrupt, Session: k.sid()}, nil)
		k.reply(sock, m, "interrupt_reply", statusOf(resp))
	case "shutdown_request":
		var c struct {
			Restart bool `json:"restart"`
		}
		_ = json.Unmarshal(m.content, &c)
		k.closeSession()
		k.reply(sock, m, "shutdown_reply", map[string]any{"status": "ok", "restart": c.Restart})
		k.stop(errShutdown)
	case "comm_info_request":
		k.reply(sock, m, "comm_info_reply", map[string]any{"status": "ok", "comms": map[string]any{}})
	case "history_request":
		k.history(sock, m)
	case "comm_open":
		// No comms: as ipykernel without the target, the frontend is told
		// the comm is closed.
		var c struct {
			CommID string `json:"comm_id"`
		}
		_ = json.Unmarshal(m.content, &c)
		k.publish(m, "comm_close", map[string]any{"comm_id": c.CommID, "data": map[string]any{}})
	case "comm_msg", "comm_close":
	default:
		k.log.Info("jupyter: unsupported request ignored", "type", t)
		if strings.HasSuffix(t, "_request") {
			k.reply(sock, m, strings.TrimSuffix(t, "_request")+"_reply", map[string]any{
				"status": "error", "ename": "NotImplementedError", "evalue": "jailcell's kernel does not implement " + t, "traceback": []string{}})
		}
	}
}

func statusOf(resp *api.Response) map[string]any {
	if resp.Error != nil {
		return map[string]any{"status": "error", "ename": "jailcell." + resp.Error.Code, "evalue": resp.Error.Message, "traceback": []string{resp.Error.Message}}
	}
	return map[string]any{"status": "ok"}
}

func (k *jkernel) kernelInfo() map[string]any {
	return map[string]any{
		"status":                 "ok",
		"protocol_version":       JupyterProtocolVersion,
		"implementation":         "jailcell",
		"implementation_version": k.opt.Version,
		"language_info": map[string]any{
			"name":               "python",
			"version":            "3",
			"mimetype":           "text/x-python",
			"file_extension":     ".py",
			"pygments_lexer":     "ipython3",
			"codemirror_mode":    map[string]any{"name": "ipython", "version": 3},
			"nbconvert_exporter": "python",
		},
		"banner":     "jailcell " + k.opt.Version + ": every cell runs in an OS-isolated jailcell session",
		"help_links": []any{},
		"debugger":   false,
	}
}

// execute runs one cell: execute_input, streams and displays as they
// come, then the value or the error, then the reply.
func (k *jkernel) execute(ctx context.Context, sock zmq4.Socket, m *jmsg) {
	var c struct {
		Code         string `json:"code"`
		Silent       bool   `json:"silent"`
		StoreHistory *bool  `json:"store_history"`
	}
	if err := json.Unmarshal(m.content, &c); err != nil {
		k.reply(sock, m, "execute_reply", map[string]any{"status": "error", "ename": "BadRequest", "evalue": "execute_request content: " + err.Error(), "traceback": []string{}, "execution_count": k.count.Load()})
		return
	}
	store := c.StoreHistory == nil || *c.StoreHistory
	n := int(k.count.Load())
	if !c.Silent && store {
		n = int(k.count.Add(1))
	}
	if !c.Silent {
		k.publish(m, "execute_input", map[string]any{"code": c.Code, "execution_count": n})
	}
	ok := map[string]any{"status": "ok", "execution_count": n, "payload": []any{}, "user_expressions": map[string]any{}}
	if strings.TrimSpace(c.Code) == "" {
		k.reply(sock, m, "execute_reply", ok) // as IPython: nothing runs
		return
	}
	recorded := !c.Silent && store
	if recorded {
		k.hist.add(n, c.Code)
	}
	emit := func(ev api.Event) {
		switch ev.Event {
		case api.EventStdout, api.EventStderr:
			k.publish(m, "stream", map[string]any{"name": ev.Event, "text": ev.Text})
		case api.EventDisplay:
			// Pager text is not a display: it goes into the reply's
			// payload below, as ipykernel sends it.
			if ev.Display != nil && !ev.Display.Pager {
				k.publish(m, "display_data", map[string]any{"data": bundleOf(*ev.Display), "metadata": map[string]any{}, "transient": map[string]any{}})
			}
		case api.EventClearOutput:
			k.publish(m, "clear_output", map[string]any{"wait": ev.Wait})
		}
	}
	// Raw: Jupyter frontends render ANSI colours and "\r" themselves, as
	// ipykernel sends them.
	resp := k.call(ctx, &api.Request{Op: api.OpExec, Session: k.sid(), Code: c.Code, Stream: true, TimeoutS: k.opt.TimeoutS, RawANSI: true}, emit)
	if resp.Error != nil && (resp.Error.Code == api.CodeNotFound || resp.Error.Code == api.CodeExpired) && k.renew(ctx) {
		// The session ended under a notebook (its TTL, its max lifetime,
		// an operator's close): as a restarted kernel, the cell runs in a
		// new one, and says so.
		k.publish(m, "stream", map[string]any{"name": "stderr", "text": "jailcell: " + resp.Error.Message +
			"; the cell runs in a new session (variables are gone, as after a kernel restart)\n"})
		resp = k.call(ctx, &api.Request{Op: api.OpExec, Session: k.sid(), Code: c.Code, Stream: true, TimeoutS: k.opt.TimeoutS, RawANSI: true}, emit)
	}
	var ename, evalue string
	var tb []string
	switch {
	case resp.Error != nil:
		// The cell could not be run: busy, unavailable, a closed session.
		ename, evalue, tb = "jailcell."+resp.Error.Code, resp.Error.Message, []string{"jailcell: " + resp.Error.Message}
	case resp.Result == nil:
		ename, evalue, tb = "jailcell.internal", "the service answered without a result", nil
	default:
		r := resp.Result
		if r.StateReason != "" {
			k.publish(m, "stream", map[string]any{"name": "stderr", "text": "jailcell: " + r.StateReason + "\n"})
		}
		switch {
		case r.Error != nil:
			ename, evalue = r.Error.Type, r.Error.Message
			tb = strings.Split(strings.TrimRight(r.Error.Traceback, "\n"), "\n")
		case r.Status != "ok":
			ename, evalue = verdictName(r.Status), verdictText(r)
			tb = []string{ename + ": " + evalue}
		default:
			if r.Value != nil && !c.Silent {
				k.publish(m, "execute_result", map[string]any{"execution_count": n, "data": r.Value, "metadata": map[string]any{}})
			}
			if r.Value != nil && recorded {
				k.hist.setOutput(n, r.Value)
			}
			ok["payload"] = pagePayload(r.Display)
			k.reply(sock, m, "execute_reply", ok)
			return
		}
	}
	if tb == nil {
		tb = []string{}
	}
	if !c.Silent {
		k.publish(m, "error", map[string]any{"ename": ename, "evalue": evalue, "traceback": tb})
	}
	k.reply(sock, m, "execute_reply", map[string]any{"status": "error", "execution_count": n, "ename": ename, "evalue": evalue, "traceback": tb})
}

// history answers a history_request from the kernel's history
// (history.go); bad content gets an error reply naming it.
func (k *jkernel) history(sock zmq4.Socket, m *jmsg) {
	h, err := k.hist.query(m.content)
	if err != nil {
		k.reply(sock, m, "history_reply", map[string]any{"status": "error", "ename": "ValueError", "evalue": err.Error(), "traceback": []string{}, "history": []any{}})
		return
	}
	k.reply(sock, m, "history_reply", map[string]any{"status": "ok", "history": h})
}

// verdictName names a host verdict as the exception Jupyter would show.
func verdictName(status string) string {
	switch status {
	case "timeout":
		return "TimeoutError"
	case "oom":
		return "MemoryError"
	}
	return "jailcell." + status
}

func verdictText(r *seam.Result) string {
	switch r.Status {
	case "timeout":
		return "the cell ran past its time limit and was stopped by jailcell"
	case "oom":
		return "the cell ran out of memory (the sandbox's limit)"
	case "killed":
		return "the cell's kernel was killed"
	}
	return "the cell ended with status " + r.Status
}

// pagePayload is a cell's pager text (%quickref, obj?, %prun) as
// Jupyter's `page` payloads of an execute_reply, where front ends show it
// in their pager; an empty list when there is none.
func pagePayload(items []seam.DisplayItem) []any {
	payload := []any{}
	for _, d := range items {
		if d.Pager {
			payload = append(payload, map[string]any{"source": "page", "data": map[string]any{"text/plain": d.Data}, "start": 0})
		}
	}
	return payload
}

// bundleOf is a display item's MIME bundle; binary types stay base64, as
// Jupyter carries them.
func bundleOf(d seam.DisplayItem) map[string]any {
	if len(d.Bundle) > 0 {
		return d.Bundle
	}
	return map[string]any{d.MIME: d.Data}
}

// assist answers complete, inspect and is_complete through the session.
func (k *jkernel) assist(ctx context.Context, sock zmq4.Socket, m *jmsg) {
	var c struct {
		Code        string `json:"code"`
		CursorPos   *int   `json:"cursor_pos"`
		DetailLevel int    `json:"detail_level"`
	}
	t := strings.TrimSuffix(m.header.MsgType, "_request")
	replyType := t + "_reply"
	if err := json.Unmarshal(m.content, &c); err != nil {
		k.reply(sock, m, replyType, map[string]any{"status": "error", "ename": "BadRequest", "evalue": err.Error(), "traceback": []string{}})
		return
	}
	op := map[string]string{"complete": api.OpComplete, "inspect": api.OpInspect, "is_complete": api.OpIsComplete}[t]
	if op == api.OpIsComplete {
		c.CursorPos = nil
	}
	if c.DetailLevel != 1 {
		c.DetailLevel = 0
	}
	resp := k.call(ctx, &api.Request{Op: op, Session: k.sid(), Code: c.Code, CursorPos: c.CursorPos, DetailLevel: c.DetailLevel}, nil)
	if resp.Error != nil {
		// A frontend asks these while typing: an empty answer, not an error
		// dialog, when the kernel is busy.
		k.log.Debug("jupyter: "+t, "err", resp.Error.Error())
	}
	switch op {
	case api.OpComplete:
		cur := len([]rune(c.Code))
		if c.CursorPos != nil {
			cur = *c.CursorPos
		}
		out := map[string]any{"status": "ok", "matches": []string{}, "cursor_start": cur, "cursor_end": cur, "metadata": map[string]any{}}
		if resp.Completion != nil {
			out["matches"], out["cursor_start"], out["cursor_end"] = resp.Completion.Matches, resp.Completion.CursorStart, resp.Completion.CursorEnd
		}
		k.reply(sock, m, replyType, out)
	case api.OpInspect:
		out := map[string]any{"status": "ok", "found": false, "data": map[string]any{}, "metadata": map[string]any{}}
		if resp.Inspection != nil {
			out["found"], out["data"] = resp.Inspection.Found, resp.Inspection.Data
		}
		k.reply(sock, m, replyType, out)
	default:
		out := map[string]any{"status": "unknown"}
		if resp.Completeness != nil {
			out["status"] = resp.Completeness.Status
			if resp.Completeness.Status == "incomplete" {
				out["indent"] = resp.Completeness.Indent
			}
		}
		k.reply(sock, m, replyType, out)
	}
}
