package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Commands, environment, session info, timeout, metrics, paths and
// watches: the ops E2B's SDK has names for (sandbox.commands, envs,
// get_info, set_timeout, get_metrics, files.exists/remove/make_dir/
// rename/watch_dir). Both transports implement them.

// CommandOptions shape one command request; the zero value starts a
// foreground command in /work with the policy's cell timeout.
type CommandOptions struct {
	// Action is "start" (default), "wait", "kill", "input" (write Input
	// to a background job's stdin) or "resize" (its terminal, to PTY).
	// Input and resize answer at once, as a wait with no Timeout does.
	Action string
	// Envs are added to the session's environment for the command.
	Envs map[string]string
	// Cwd is the working directory, relative to /work.
	Cwd string
	// Timeout: a foreground command's limit (0: the policy's cell
	// timeout), a background one's (0: none), or how long a wait waits.
	Timeout time.Duration
	// Background answers at once with the job to wait for or kill.
	Background bool
	// Job names the background command of a wait, kill, input or resize.
	Job string
	// Stdin (start, with Background) keeps the command's stdin a pipe open
	// for action "input"; without it (and without PTY) stdin is /dev/null.
	Stdin bool
	// PTY (start, with Background) runs the command in a new terminal of
	// this size: the terminal is its stdin, stdout and stderr, so all it
	// prints, the echo of its input too, comes as Stdout. For "resize",
	// the new size.
	PTY *PTYSize
	// Input (action "input") is written to the job's stdin: UTF-8, at most
	// MaxCommandInput bytes a request; "" is allowed (with EOF, say).
	Input string
	// EOF (action "input") closes the job's stdin after Input. A terminal
	// refuses it: send "\x04" (Ctrl-D) instead.
	EOF bool
	// OnOutput, if set, receives stdout and stderr while the request
	// waits for the command (the request is then streamed).
	OnOutput func(stream, text string)
}

// PTYSize is a terminal's size in character cells, each side 1 to 1000.
type PTYSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// MaxCommandInput bounds the input of one "input" request, in bytes; the
// service refuses a larger one, and any while the job has 1 MiB it has not
// read (both with code limit).
const MaxCommandInput = 1 << 20

// CommandResult is what a command did, as far as the request waited.
type CommandResult struct {
	Job             string `json:"job"`
	PID             int    `json:"pid,omitempty"`
	Done            bool   `json:"done"`
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
}

// SessionMetrics is one sample of a session's usage, the host's view of
// its cgroup and disk.
type SessionMetrics struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUUsedPct float64   `json:"cpu_used_pct"`
	CPUCount   float64   `json:"cpu_count"`
	CPUSeconds float64   `json:"cpu_seconds"`
	MemUsed    int64     `json:"mem_used"`
	MemPeak    int64     `json:"mem_peak"`
	MemTotal   int64     `json:"mem_total"`
	DiskUsed   int64     `json:"disk_used"`
	DiskTotal  int64     `json:"disk_total"`
	Running    bool      `json:"running"`
}

// WatchEvent is one change in a watched directory; Name is relative to
// it and untrusted (the sandbox named it).
type WatchEvent struct {
	Name string `json:"name"`
	Type string `json:"type"` // create, write, remove, rename
}

// WatchResult answers a watch request.
type WatchResult struct {
	Watch    string       `json:"watch"`
	Events   []WatchEvent `json:"events"`
	Overflow bool         `json:"overflow,omitempty"`
}

// e2bResponse is the fields of these ops' responses.
type e2bResponse struct {
	response
	Command  *CommandResult  `json:"command"`
	Metrics  *SessionMetrics `json:"metrics"`
	Entry    *Entry          `json:"entry"`
	Created  bool            `json:"created"`
	Watch    string          `json:"watch"`
	Events   []WatchEvent    `json:"events"`
	Overflow bool            `json:"overflow"`
}

type commandBody struct {
	Action     string            `json:"action,omitempty"`
	Cmd        string            `json:"cmd,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	TimeoutS   float64           `json:"timeout_s,omitempty"`
	Background bool              `json:"background,omitempty"`
	Job        string            `json:"job,omitempty"`
	Stdin      bool              `json:"stdin,omitempty"`
	PTY        *PTYSize          `json:"pty,omitempty"`
	Input      string            `json:"input,omitempty"`
	EOF        bool              `json:"eof,omitempty"`
}

func newCommandBody(cmd string, o *CommandOptions) commandBody {
	b := commandBody{Cmd: cmd}
	if o != nil {
		b.Action, b.Envs, b.Cwd, b.TimeoutS, b.Background, b.Job = o.Action, o.Envs, o.Cwd, o.Timeout.Seconds(), o.Background, o.Job
		b.Stdin, b.PTY, b.Input, b.EOF = o.Stdin, o.PTY, o.Input, o.EOF
	}
	return b
}

// doE2B sends a request and decodes a JSON response with these ops'
// fields; a wire error becomes *Error.
func (c *HTTP) doE2B(ctx context.Context, method, path string, body any) (*e2bResponse, error) {
	var rd io.Reader
	ctype := ""
	if body != nil {
		var err error
		if rd, err = jsonBody(body); err != nil {
			return nil, err
		}
		ctype = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jailcell %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var r e2bResponse
	return &r, decodeHTTPInto(resp, &r)
}

func decodeHTTPInto(resp *http.Response, r *e2bResponse) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("jailcell: read response: %w", err)
	}
	if err := json.Unmarshal(b, r); err != nil {
		return &Error{Status: resp.StatusCode, Code: "internal", Message: fmt.Sprintf("response is not JSON (%s): %.200q", resp.Status, b)}
	}
	return checkResponse(resp.StatusCode, &r.response)
}

// Command runs a shell command in session id's sandbox (bash -c, cwd under
// /work), or waits for, kills, writes to the stdin of or resizes the
// terminal of a background one (opts.Action, opts.Job). With opts.OnOutput
// the response is streamed.
func (c *HTTP) Command(ctx context.Context, id, cmd string, opts *CommandOptions) (*CommandResult, error) {
	path := sessionPath(id, "commands")
	if opts == nil || opts.OnOutput == nil {
		r, err := c.doE2B(ctx, http.MethodPost, path, newCommandBody(cmd, opts))
		if err != nil {
			return nil, err
		}
		return r.Command, nil
	}
	body, err := jsonBody(newCommandBody(cmd, opts))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jailcell POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	var r e2bResponse
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		if err := decodeHTTPInto(resp, &r); err != nil {
			return nil, err
		}
		return r.Command, nil
	}
	eo := &ExecOptions{OnOutput: opts.OnOutput}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(br, maxResponseBytes)
		if err != nil {
			return nil, fmt.Errorf("jailcell: read streamed response: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var probe event
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("jailcell: streamed line is not JSON: %.200q", line)
		}
		if probe.Event != "" {
			eo.deliver(probe)
			continue
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("jailcell: decode response: %w", err)
		}
		if err := checkResponse(resp.StatusCode, &r.response); err != nil {
			return nil, err
		}
		return r.Command, nil
	}
}

// Info returns session id's info as it is now.
func (c *HTTP) Info(ctx context.Context, id string) (*Session, error) {
	r, err := c.doE2B(ctx, http.MethodGet, sessionPath(id), nil)
	if err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// SetTimeout makes session id end d from now unless used again.
func (c *HTTP) SetTimeout(ctx context.Context, id string, d time.Duration) (*Session, error) {
	r, err := c.doE2B(ctx, http.MethodPost, sessionPath(id, "timeout"), map[string]float64{"timeout_s": d.Seconds()})
	if err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// SessionMetrics samples session id's CPU, memory and disk.
func (c *HTTP) SessionMetrics(ctx context.Context, id string) (*SessionMetrics, error) {
	r, err := c.doE2B(ctx, http.MethodGet, sessionPath(id, "metrics"), nil)
	if err != nil {
		return nil, err
	}
	return r.Metrics, nil
}

// Stat describes path in session id's workspace (not_found if missing).
func (c *HTTP) Stat(ctx context.Context, id, path string) (*Entry, error) {
	r, err := c.doE2B(ctx, http.MethodGet, sessionPath(id, "stat", filePath(path)), nil)
	if err != nil {
		return nil, err
	}
	return r.Entry, nil
}

// Remove deletes path (a directory with all it holds).
func (c *HTTP) Remove(ctx context.Context, id, path string) error {
	_, err := c.doE2B(ctx, http.MethodDelete, sessionPath(id, "files", filePath(path)), nil)
	return err
}

// MakeDir makes directory path and its parents; false if it was there.
func (c *HTTP) MakeDir(ctx context.Context, id, path string) (bool, error) {
	r, err := c.doE2B(ctx, http.MethodPut, sessionPath(id, "dirs", filePath(path)), nil)
	if err != nil {
		return false, err
	}
	return r.Created, nil
}

// Rename moves path to newPath in one rename(2), so the sandbox sees one
// or the other, never a copy half made; metadata goes along and missing
// parents of newPath are made. A file may replace a file; a directory
// moves only to a path where nothing is (bad_request otherwise, as for
// onto or into itself). It returns the entry at newPath; not_found if
// nothing is at path.
func (c *HTTP) Rename(ctx context.Context, id, path, newPath string) (*Entry, error) {
	r, err := c.doE2B(ctx, http.MethodPost, sessionPath(id, "rename"), renameBody{path, newPath})
	if err != nil {
		return nil, err
	}
	return r.Entry, nil
}

type renameBody struct {
	Path string `json:"path"`
	To   string `json:"to"`
}

// Watch starts (action "start", path, recursive), polls or stops (action,
// watch) a directory watch.
func (c *HTTP) Watch(ctx context.Context, id, action, path string, recursive bool, watch string) (*WatchResult, error) {
	r, err := c.doE2B(ctx, http.MethodPost, sessionPath(id, "watch"), watchBody{action, path, recursive, watch})
	if err != nil {
		return nil, err
	}
	return &WatchResult{Watch: r.Watch, Events: r.Events, Overflow: r.Overflow}, nil
}

type watchBody struct {
	Action    string `json:"action,omitempty"`
	Path      string `json:"path,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Watch     string `json:"watch,omitempty"`
}

// The same over JSON lines.

func (c *JSONL) e2b(ctx context.Context, req map[string]any, events *ExecOptions) (*e2bResponse, error) {
	raw, err := c.roundTripRaw(ctx, req, events)
	if err != nil {
		return nil, err
	}
	var r e2bResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("jailcell: decode response: %w", err)
	}
	return &r, checkResponse(0, &r.response)
}

// Command implements HTTP.Command over JSON lines.
func (c *JSONL) Command(ctx context.Context, id, cmd string, opts *CommandOptions) (*CommandResult, error) {
	req, err := asMap(newCommandBody(cmd, opts))
	if err != nil {
		return nil, err
	}
	req["op"], req["session"] = "command", id
	var eo *ExecOptions
	if opts != nil && opts.OnOutput != nil {
		eo = &ExecOptions{OnOutput: opts.OnOutput}
	}
	r, err := c.e2b(ctx, req, eo)
	if err != nil {
		return nil, err
	}
	return r.Command, nil
}

// Info implements HTTP.Info over JSON lines.
func (c *JSONL) Info(ctx context.Context, id string) (*Session, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "info", "session": id}, nil)
	if err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// SetTimeout implements HTTP.SetTimeout over JSON lines.
func (c *JSONL) SetTimeout(ctx context.Context, id string, d time.Duration) (*Session, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "set_timeout", "session": id, "timeout_s": d.Seconds()}, nil)
	if err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// SessionMetrics implements HTTP.SessionMetrics over JSON lines.
func (c *JSONL) SessionMetrics(ctx context.Context, id string) (*SessionMetrics, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "metrics", "session": id}, nil)
	if err != nil {
		return nil, err
	}
	return r.Metrics, nil
}

// Stat implements HTTP.Stat over JSON lines.
func (c *JSONL) Stat(ctx context.Context, id, path string) (*Entry, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "stat", "session": id, "path": path}, nil)
	if err != nil {
		return nil, err
	}
	return r.Entry, nil
}

// Remove implements HTTP.Remove over JSON lines.
func (c *JSONL) Remove(ctx context.Context, id, path string) error {
	_, err := c.e2b(ctx, map[string]any{"op": "remove", "session": id, "path": path}, nil)
	return err
}

// MakeDir implements HTTP.MakeDir over JSON lines.
func (c *JSONL) MakeDir(ctx context.Context, id, path string) (bool, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "mkdir", "session": id, "path": path}, nil)
	if err != nil {
		return false, err
	}
	return r.Created, nil
}

// Rename implements HTTP.Rename over JSON lines.
func (c *JSONL) Rename(ctx context.Context, id, path, newPath string) (*Entry, error) {
	r, err := c.e2b(ctx, map[string]any{"op": "rename", "session": id, "path": path, "to": newPath}, nil)
	if err != nil {
		return nil, err
	}
	return r.Entry, nil
}

// Watch implements HTTP.Watch over JSON lines.
func (c *JSONL) Watch(ctx context.Context, id, action, path string, recursive bool, watch string) (*WatchResult, error) {
	req, err := asMap(watchBody{action, path, recursive, watch})
	if err != nil {
		return nil, err
	}
	req["op"], req["session"] = "watch", id
	r, err := c.e2b(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return &WatchResult{Watch: r.Watch, Events: r.Events, Overflow: r.Overflow}, nil
}
