package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// Remote forwards wire requests to a `jailcell serve` over its Unix socket,
// through the same HTTP routes any client uses. The service knows the
// caller from the socket's peer credentials, so the owner passed to Handle
// is ignored: sessions belong to this process's uid as the kernel reports
// it, and the service's allow list decides whether it may call at all.
// Safe for concurrent use.
type Remote struct {
	socket string
	hc     *http.Client
}

// remoteMaxResponse bounds a response read into memory: the largest file a
// session may hold, as base64 inside JSON, plus room.
const remoteMaxResponse = seam.MaxFileBytes/3*4 + 64<<20

// NewRemote returns a Handler that forwards to the service on socket.
func NewRemote(socket string) *Remote {
	return &Remote{socket: socket, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    8,
		IdleConnTimeout: time.Minute, // below the server's 2 min
	}}}
}

// Socket is the service's socket.
func (r *Remote) Socket() string { return r.socket }

// Close lets go of kept-alive connections.
func (r *Remote) Close() { r.hc.CloseIdleConnections() }

// Handle validates req here (a bad request never leaves the process), maps
// it to its HTTP route and returns the service's response with req's id.
// A service that cannot be reached is "unavailable", naming the socket.
func (r *Remote) Handle(ctx context.Context, _ int, req *api.Request, emit func(api.Event)) *api.Response {
	if req == nil {
		return api.Fail(nil, api.BadRequest("no request"))
	}
	if err := req.Validate(); err != nil {
		return api.Fail(req.ID, err)
	}
	resp, err := r.forward(ctx, req, emit)
	if err != nil {
		var e *api.Error
		if !errors.As(err, &e) {
			e = &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("jailcell service at %s: %v", r.socket, err)}
		}
		return api.Fail(req.ID, e)
	}
	resp.ID = req.ID
	return resp
}

func (r *Remote) forward(ctx context.Context, req *api.Request, emit func(api.Event)) (*api.Response, error) {
	sp := func(rest ...string) string {
		p := "/v1/sessions/" + url.PathEscape(req.Session)
		for _, s := range rest {
			p += "/" + s
		}
		return p
	}
	switch req.Op {
	case api.OpPing:
		return r.call(ctx, http.MethodGet, "/healthz", nil, "")
	case api.OpSessions:
		return r.call(ctx, http.MethodGet, "/v1/sessions", nil, "")
	case api.OpCreate:
		return r.callJSON(ctx, "/v1/sessions", req)
	case api.OpExec:
		path := "/v1/exec"
		if req.Session != "" {
			path = sp("exec")
		}
		if req.Stream && emit != nil {
			return r.stream(ctx, path, req, emit)
		}
		return r.callJSON(ctx, path, req)
	case api.OpUpload:
		return r.upload(ctx, sp("files", escapeFilePath(req.Path)), req)
	case api.OpDownload:
		return r.download(ctx, sp("files", escapeFilePath(req.Path)), req.Path)
	case api.OpFiles:
		return r.call(ctx, http.MethodGet, sp("files"), nil, "")
	case api.OpClose:
		return r.call(ctx, http.MethodDelete, sp(), nil, "")
	case api.OpComplete, api.OpInspect, api.OpIsComplete:
		return r.callJSON(ctx, sp(req.Op), req)
	case api.OpHibernate, api.OpRestore, api.OpFork, api.OpSnapshot, api.OpRollback, api.OpInterrupt:
		return r.call(ctx, http.MethodPost, sp(req.Op), nil, "")
	case api.OpCommand:
		if req.Stream && emit != nil {
			return r.stream(ctx, sp("commands"), req, emit)
		}
		return r.callJSON(ctx, sp("commands"), req)
	case api.OpInfo:
		return r.call(ctx, http.MethodGet, sp(), nil, "")
	case api.OpSetTimeout:
		return r.callJSON(ctx, sp("timeout"), req)
	case api.OpMetrics:
		return r.call(ctx, http.MethodGet, sp("metrics"), nil, "")
	case api.OpWatch:
		return r.callJSON(ctx, sp("watch"), req)
	case api.OpStat:
		return r.call(ctx, http.MethodGet, sp("stat", escapeFilePath(req.Path)), nil, "")
	case api.OpRemove:
		return r.call(ctx, http.MethodDelete, sp("files", escapeFilePath(req.Path)), nil, "")
	case api.OpRename:
		return r.callJSON(ctx, sp("rename"), req)
	case api.OpMkdir:
		return r.call(ctx, http.MethodPut, sp("dirs", escapeFilePath(req.Path)), nil, "")
	}
	return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
		"op %q is not offered through the jailcell service's HTTP API; run it in a process of its own (--embedded, as root)", req.Op)}
}

// escapeFilePath escapes each segment of a workspace path for the URL; the
// service confines the path itself.
func escapeFilePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// body is req as an HTTP body: its fields less op and session, which the
// route carries, and stream, which the Accept header asks for (a streamed
// answer to a caller that reads one JSON object would not decode).
func body(req *api.Request) (io.Reader, error) {
	c := *req
	c.Op, c.Session, c.ID, c.Stream = "", "", nil, false
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	delete(fields, "op")
	delete(fields, "id")
	b, err = json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return bytes.NewReader(b), nil
}

func (r *Remote) callJSON(ctx context.Context, path string, req *api.Request) (*api.Response, error) {
	b, err := body(req)
	if err != nil {
		return nil, err
	}
	return r.call(ctx, http.MethodPost, path, b, "application/json")
}

func (r *Remote) send(ctx context.Context, method, path string, b io.Reader, contentType, accept string, meta map[string]string) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, method, "http://jailcell"+path, b)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		hr.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		hr.Header.Set("Accept", accept)
	}
	api.SetMetadataHeader(hr.Header, meta)
	resp, err := r.hc.Do(hr)
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is a placeholder; the socket is what matters
	}
	return resp, err
}

// upload sends a file as a PUT body, its metadata as MetadataHeader.
func (r *Remote) upload(ctx context.Context, path string, req *api.Request) (*api.Response, error) {
	hresp, err := r.send(ctx, http.MethodPut, path, bytes.NewReader(req.Data), "application/octet-stream", "", req.Metadata)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	return decodeRemote(hresp.Body, hresp.StatusCode)
}

// call sends one request and decodes its one JSON response.
func (r *Remote) call(ctx context.Context, method, path string, b io.Reader, contentType string) (*api.Response, error) {
	hresp, err := r.send(ctx, method, path, b, contentType, "", nil)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	return decodeRemote(hresp.Body, hresp.StatusCode)
}

// decodeRemote reads one bounded JSON response.
func decodeRemote(rd io.Reader, status int) (*api.Response, error) {
	b, err := io.ReadAll(io.LimitReader(rd, remoteMaxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if len(b) > remoteMaxResponse {
		return nil, fmt.Errorf("response is over the %d-byte limit", remoteMaxResponse)
	}
	var resp api.Response
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("HTTP %d with a body that is not a jailcell response (is this a jailcell socket?): %s", status, clip(string(b), 200))
	}
	if !resp.OK && resp.Error == nil {
		return nil, fmt.Errorf("HTTP %d with a response that is neither ok nor an error", status)
	}
	return &resp, nil
}

// stream runs an exec with its output events passed to emit as they come.
func (r *Remote) stream(ctx context.Context, path string, req *api.Request, emit func(api.Event)) (*api.Response, error) {
	b, err := body(req)
	if err != nil {
		return nil, err
	}
	hresp, err := r.send(ctx, http.MethodPost, path, b, "application/json", "application/x-ndjson", nil)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	if !strings.HasPrefix(hresp.Header.Get("Content-Type"), "application/x-ndjson") {
		return decodeRemote(hresp.Body, hresp.StatusCode)
	}
	br := bufio.NewReaderSize(hresp.Body, 64<<10)
	for {
		line, err := readBoundedLine(br, remoteMaxResponse)
		if err != nil {
			return nil, fmt.Errorf("read streamed response: %w", err)
		}
		var probe struct {
			OK      *bool             `json:"ok"`
			Event   string            `json:"event"`
			Text    string            `json:"text"`
			Display *seam.DisplayItem `json:"display"`
			Wait    bool              `json:"wait"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("streamed line is not JSON: %s", clip(string(line), 200))
		}
		if probe.OK == nil && probe.Event != "" {
			emit(api.Event{ID: req.ID, Event: probe.Event, Text: probe.Text, Display: probe.Display, Wait: probe.Wait})
			continue
		}
		return decodeRemote(bytes.NewReader(line), hresp.StatusCode)
	}
}

// readBoundedLine reads one line of at most max bytes.
func readBoundedLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("line is over the %d-byte limit", max)
		}
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		return line, nil
	}
}

// download fetches a file's raw bytes; an error is JSON like any route's.
func (r *Remote) download(ctx context.Context, path, file string) (*api.Response, error) {
	hresp, err := r.send(ctx, http.MethodGet, path, nil, "", "", nil)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		return decodeRemote(hresp.Body, hresp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(hresp.Body, seam.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read download: %w", err)
	}
	if len(data) > seam.MaxFileBytes {
		return nil, fmt.Errorf("download is over the %d-byte file limit", seam.MaxFileBytes)
	}
	size := int64(len(data))
	return &api.Response{OK: true, Path: file, Data: data, Size: &size, SHA256: hresp.Header.Get("X-Jailcell-Sha256")}, nil
}

// Reachable reports whether a service answers on the socket within
// timeout, and admits this process: a service that refuses it answers
// with its "forbidden" *Error, which is what the caller should show.
func (r *Remote) Reachable(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.call(ctx, http.MethodGet, "/healthz", nil, "")
	switch {
	case err != nil:
		return fmt.Errorf("no jailcell service answers on %s: %w", r.socket, err)
	case resp.Error != nil:
		return &api.Error{Code: resp.Error.Code, Message: fmt.Sprintf("jailcell service at %s: %s", r.socket, resp.Error.Message)}
	}
	return nil
}

// Scoped is a Handler that remembers the sessions created through it
// (create, fork) until they are closed, so they can be closed together:
// a `jailcell json` connected to the service closes its sessions at EOF,
// as an embedded one tears its sandboxes down. Bounded by the service's
// own session limit.
type Scoped struct {
	h   api.Handler
	mu  sync.Mutex
	ids map[string]struct{}
}

// NewScoped wraps h.
func NewScoped(h api.Handler) *Scoped { return &Scoped{h: h, ids: map[string]struct{}{}} }

// Handle passes req on and notes the sessions it creates or closes.
func (s *Scoped) Handle(ctx context.Context, owner int, req *api.Request, emit func(api.Event)) *api.Response {
	resp := s.h.Handle(ctx, owner, req, emit)
	if resp == nil || !resp.OK || req == nil {
		return resp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case (req.Op == api.OpCreate || req.Op == api.OpFork) && resp.Info != nil:
		s.ids[resp.Info.ID] = struct{}{}
	case req.Op == api.OpClose:
		delete(s.ids, req.Session)
	}
	return resp
}

// CloseAll closes every session still open that was created through s.
func (s *Scoped) CloseAll(ctx context.Context, owner int) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.ids))
	for id := range s.ids {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.Handle(ctx, owner, &api.Request{ID: json.RawMessage(`"close"`), Op: api.OpClose, Session: id}, nil)
	}
}

var _ api.Handler = (*Remote)(nil)
