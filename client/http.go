package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf16"
)

// DefaultSocket is where `jailcell serve` listens unless configured.
const DefaultSocket = "/run/jailcell/jailcell.sock"

// maxResponseBytes bounds a response read into memory: the largest file a
// session may hold (256 MiB) as base64, plus room.
const maxResponseBytes = 400 << 20

// HTTP is a client of `jailcell serve` over its Unix socket. The caller's
// uid (as the kernel sees it) is who owns the sessions it creates. Safe for
// concurrent use.
type HTTP struct {
	hc *http.Client
}

var _ API = (*HTTP)(nil)

// NewHTTP returns a client of the service on socket ("" = DefaultSocket).
func NewHTTP(socket string) *HTTP {
	if socket == "" {
		socket = DefaultSocket
	}
	return &HTTP{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: time.Minute, // below the server's 2 min
	}}}
}

// CloseIdleConnections lets go of kept-alive connections.
func (c *HTTP) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// base is the URL prefix; the host is a placeholder, the socket is what
// connects.
const base = "http://jailcell"

func sessionPath(id string, rest ...string) string {
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// filePath escapes each segment of a workspace path for the URL.
func filePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// do sends a request and decodes a JSON response into out; a wire error
// becomes *Error.
func (c *HTTP) do(ctx context.Context, method, path string, body io.Reader, contentType string, out *response) error {
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return c.send(req, out)
}

// send sends req and decodes a JSON response into out; a wire error
// becomes *Error.
func (c *HTTP) send(req *http.Request, out *response) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("jailcell %s %s: %w", req.Method, req.URL.EscapedPath(), err)
	}
	defer resp.Body.Close()
	return decodeHTTP(resp, out)
}

func decodeHTTP(resp *http.Response, out *response) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("jailcell: read response: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &Error{Status: resp.StatusCode, Code: "internal", Message: fmt.Sprintf("response is not JSON (%s): %.200q", resp.Status, b)}
	}
	return checkResponse(resp.StatusCode, out)
}

func checkResponse(status int, r *response) error {
	if r.OK {
		return nil
	}
	if r.Error == nil {
		return &Error{Status: status, Code: "internal", Message: "response without ok or error"}
	}
	return &Error{Status: status, Code: r.Error.Code, Message: r.Error.Message, State: r.Error.State}
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// Health answers GET /healthz.
func (c *HTTP) Health(ctx context.Context) (*Health, error) {
	var r response
	if err := c.do(ctx, http.MethodGet, "/healthz", nil, "", &r); err != nil {
		return nil, err
	}
	return &Health{Version: r.Version, Isolation: r.Isolation}, nil
}

// Create implements API.
func (c *HTTP) Create(ctx context.Context, opts CreateOptions) (*Session, error) {
	body, err := jsonBody(newCreateBody(opts))
	if err != nil {
		return nil, err
	}
	var r response
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", body, "application/json", &r); err != nil {
		return nil, err
	}
	return created(ctx, c, opts, r.Session)
}

// Sessions implements API.
func (c *HTTP) Sessions(ctx context.Context) ([]Session, error) {
	var r response
	if err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, "", &r); err != nil {
		return nil, err
	}
	return r.Sessions, nil
}

// CloseSession implements API.
func (c *HTTP) CloseSession(ctx context.Context, id string) error {
	var r response
	return c.do(ctx, http.MethodDelete, sessionPath(id), nil, "", &r)
}

// Hibernate implements API.
func (c *HTTP) Hibernate(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "hibernate")
}

// Restore implements API.
func (c *HTTP) Restore(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "restore")
}

// Snapshot implements API.
func (c *HTTP) Snapshot(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "snapshot")
}

// Rollback implements API.
func (c *HTTP) Rollback(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "rollback")
}

// Fork implements API.
func (c *HTTP) Fork(ctx context.Context, id string) (*Session, error) {
	return c.sessionOp(ctx, id, "fork")
}

func (c *HTTP) sessionOp(ctx context.Context, id, op string) (*Session, error) {
	var r response
	if err := c.do(ctx, http.MethodPost, sessionPath(id, op), nil, "", &r); err != nil {
		return nil, err
	}
	s := r.Session
	return &s, nil
}

// Interrupt implements API.
func (c *HTTP) Interrupt(ctx context.Context, id string) (bool, error) {
	var r response
	if err := c.do(ctx, http.MethodPost, sessionPath(id, "interrupt"), nil, "", &r); err != nil {
		return false, err
	}
	return r.Interrupted, nil
}

// Exec implements API. With opts.OnOutput or opts.OnDisplay the response
// is streamed (Accept: application/x-ndjson) and output and display items
// arrive as they happen.
func (c *HTTP) Exec(ctx context.Context, id, code string, opts *ExecOptions) (*Result, error) {
	path := "/v1/exec"
	if id != "" {
		path = sessionPath(id, "exec")
	}
	body, err := jsonBody(newExecBody(code, opts))
	if err != nil {
		return nil, err
	}
	if !opts.streamed() {
		var r response
		if err := c.do(ctx, http.MethodPost, path, body, "application/json", &r); err != nil {
			return nil, err
		}
		return r.result(), nil
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
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		var r response
		if err := decodeHTTP(resp, &r); err != nil {
			return nil, err
		}
		return r.result(), nil
	}
	r, err := readStream(resp.Body, opts)
	if err != nil {
		return nil, err
	}
	if err := checkResponse(resp.StatusCode, r); err != nil {
		return nil, err
	}
	return r.result(), nil
}

// readStream reads JSON lines: output and display events, then the one
// response.
func readStream(body io.Reader, opts *ExecOptions) (*response, error) {
	br := bufio.NewReaderSize(body, 64<<10)
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
			opts.deliver(probe)
			continue
		}
		var r response
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("jailcell: decode response: %w", err)
		}
		return &r, nil
	}
}

// readLine reads one line of at most max bytes, without its newline.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("line over %d bytes", max)
		}
		line = append(line, chunk...)
		switch err {
		case nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(line) > 0 {
				return line, nil
			}
		}
		return nil, err
	}
}

// Upload implements API: the raw bytes go in the body.
func (c *HTTP) Upload(ctx context.Context, id, path string, data []byte) error {
	_, err := c.UploadWith(ctx, id, path, data, UploadOptions{})
	return err
}

// UploadWith implements API: the raw bytes go in the body, the metadata
// in the Jailcell-Metadata header.
func (c *HTTP) UploadWith(ctx context.Context, id, path string, data []byte, opts UploadOptions) (*Entry, error) {
	meta, err := metadataHeaderValue(opts.Metadata)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+sessionPath(id, "files", filePath(path)), bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if meta != "" {
		req.Header.Set(metadataHeader, meta)
	}
	var r response
	if err := c.send(req, &r); err != nil {
		return nil, err
	}
	return r.uploaded(), nil
}

// metadataHeader carries an upload's metadata as one JSON object of
// strings (the server's api.MetadataHeader: TestRoutesMatchServer holds
// them equal).
const metadataHeader = "Jailcell-Metadata"

// maxMetadataHeader is the longest header a map the service keeps can
// make: 4096 bytes in all, no byte escaped to more than two, and each
// key's 9-byte share covering its quotes, colon and comma. A longer one
// is refused here, since past the service's header bound (16 KiB) it
// would be answered 431, not bad_request.
const maxMetadataHeader = 2*4096 + 2

// metadataHeaderValue is m as the header's JSON ("" for none), in ASCII:
// DEL and every non-ASCII character go \u-escaped, since Go's HTTP client
// refuses DEL in a header and HTTP leaves other bytes to each side's
// reading. So a key the service refuses reaches it and is refused by
// name, as over JSON lines.
func metadataHeaderValue(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<" as one byte, within maxMetadataHeader
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, r := range strings.TrimSuffix(buf.String(), "\n") {
		if r < 0x7f {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	if b.Len() > maxMetadataHeader {
		return "", &Error{Code: "bad_request", Message: fmt.Sprintf("metadata of %d bytes as JSON: a file's metadata is at most 4096 bytes (each key counted with a 9-byte prefix)", b.Len())}
	}
	return b.String(), nil
}

// Download implements API.
func (c *HTTP) Download(ctx context.Context, id, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+sessionPath(id, "files", filePath(path)), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jailcell download %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var r response
		if err := decodeHTTP(resp, &r); err != nil {
			return nil, err
		}
		return nil, &Error{Status: resp.StatusCode, Code: "internal", Message: "unexpected " + resp.Status}
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
}

// Files implements API.
func (c *HTTP) Files(ctx context.Context, id string) ([]Entry, error) {
	var r response
	if err := c.do(ctx, http.MethodGet, sessionPath(id, "files"), nil, "", &r); err != nil {
		return nil, err
	}
	return r.Files, nil
}

// Metrics returns the Prometheus text of GET /metrics.
func (c *HTTP) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("jailcell GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var r response
		if err := decodeHTTP(resp, &r); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return string(b), err
}
