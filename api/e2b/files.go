package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// envd's HTTP file routes: GET /files downloads one file, POST /files
// uploads one (an application/octet-stream body) or several (a multipart
// form, what the SDKs send by default), each through the workspace's
// download and upload ops. The "username" parameter is not used: a
// jailcell sandbox has one user, who owns what is written, and relative
// paths go to the workspace whoever is named.

// maxUploadBody bounds an upload's body, and, once a gzip body is
// inflated, what it inflates to: one file of seam.MaxFileBytes and a
// multipart form's framing.
const maxUploadBody = seam.MaxFileBytes + 1<<20

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 1000

// fsStatus is the HTTP status envd's SDKs act on for a wire error: a
// sandbox that is gone is E2B's proxy's 502.
func fsStatus(e *api.Error) int {
	if e.Code == codeGone {
		return http.StatusBadGateway
	}
	return statusOf(e)
}

func writeFSError(w http.ResponseWriter, e *api.Error) {
	writeError(w, fsStatus(e), e.Message)
}

// pathStatus is a refused path's status: outside the workspace is 403,
// anything else 400.
func pathStatus(err error) int {
	var out *outsideError
	if errors.As(err, &out) {
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

func (d *Door) getFile(w http.ResponseWriter, r *http.Request) {
	p, err := mapPath(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, pathStatus(err), err.Error())
		return
	}
	if p.rel == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p.show()))
		return
	}
	content, size, e := d.fsOpen(r.Context(), p.rel)
	if e != nil {
		if e.Code == api.CodeNotFound {
			e = &api.Error{Code: e.Code, Message: fmt.Sprintf("path '%s' does not exist", p.show())}
		}
		writeFSError(w, e)
		return
	}
	defer content.Close()
	name := path.Base(p.show())
	// As envd: inline, named for the file, typed by its extension (or
	// sniffed) by http.ServeContent, which also answers Range requests.
	// Accept-Encoding: gzip is answered with identity, which every client
	// that asks for gzip also takes.
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	// What the daemon holds until written is counted in the request's
	// place (it weighed one byte, and four unread 64 MiB downloads held
	// 256 MiB unseen by the budget): a copy buffer when streamed from the
	// file, the file when downloaded through a handler that cannot open
	// it. It is written within a time that a reader of 1 MB/s meets, so a
	// client that stops reading lets it go.
	if t := targetOf(r.Context()); t.place != nil {
		t.place.Grow(content.weight)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(downloadTime(size)))
	http.ServeContent(w, r, name, time.Time{}, content)
	_ = rc.SetWriteDeadline(time.Time{})
}

// fileContent is a file to answer with and what it holds in memory.
type fileContent struct {
	io.ReadSeekCloser
	weight int64
}

// fsOpen opens rel in the target sandbox's workspace to stream it, or,
// through a handler that cannot open files, downloads it.
func (d *Door) fsOpen(ctx context.Context, rel string) (*fileContent, int64, *api.Error) {
	o, ok := d.h.(api.Opener)
	if !ok {
		resp, e := d.fsCall(ctx, &api.Request{Op: api.OpDownload, Path: rel})
		if e != nil {
			return nil, 0, e
		}
		return &fileContent{nopCloser{bytes.NewReader(resp.Data)}, int64(len(resp.Data))}, int64(len(resp.Data)), nil
	}
	t := targetOf(ctx)
	f, e := o.Open(ctx, t.owner, t.id, rel)
	if e != nil {
		return nil, 0, d.goneOr(ctx, t.owner, t.id, e)
	}
	return &fileContent{f.Content, 64 << 10}, f.Size, nil
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// downloadTime is how long a download of n bytes may take to write: 30 s,
// or n at 1 MB/s if longer.
func downloadTime(n int64) time.Duration {
	return max(30*time.Second, time.Duration(n)*time.Microsecond)
}

// uploadEntry is envd's EntryInfo as /files answers it.
type uploadEntry struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeader prefixes the headers whose rest, lowercased, names a
// metadata key of every file an upload writes.
const metadataHeader = "X-Metadata-"

// uploadMetadata is an upload's metadata, as envd reads it: a header sent
// twice counts once, its first value. The session checks the keys, values
// and size (seam's bounds, which are envd's).
func uploadMetadata(h http.Header) map[string]string {
	var m map[string]string
	for name, vals := range h {
		k, ok := strings.CutPrefix(name, metadataHeader)
		if !ok || len(vals) == 0 {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[strings.ToLower(k)] = vals[0]
	}
	return m
}

func (d *Door) postFiles(w http.ResponseWriter, r *http.Request) {
	meta := uploadMetadata(r.Header)
	if ab, ok := r.Body.(*admittedBody); ok {
		if _, put := d.h.(api.Putter); put {
			// Streamed into the workspace: what is read passes through
			// copy buffers and is not held, so the place keeps its first
			// weight instead of growing by every byte.
			ab.r = ab.raw
		}
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxUploadBody)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "error decompressing request body: "+err.Error())
			return
		}
		defer zr.Close()
		// A small body can inflate without end: bound what it inflates to.
		body = &capReader{r: zr, left: maxUploadBody}
	default:
		writeError(w, http.StatusBadRequest, "Content-Encoding "+enc+": allowed gzip or none")
		return
	}
	query, hasPath := r.URL.Query()["path"]
	ct := r.Header.Get("Content-Type")
	media, params, _ := mime.ParseMediaType(ct)
	var out []uploadEntry
	var status int
	var msg string
	switch {
	case media == "application/octet-stream":
		if !hasPath {
			writeError(w, http.StatusBadRequest, "path query parameter is required for raw body upload")
			return
		}
		out, status, msg = d.uploadOne(r, query[0], body, nil, meta)
	case strings.HasPrefix(media, "multipart/"):
		var q *string
		if hasPath {
			q = &query[0]
		}
		out, status, msg = d.uploadForm(r, body, params["boundary"], q, meta)
	default:
		status, msg = http.StatusBadRequest, fmt.Sprintf("unsupported content type: %s, expected multipart/form-data or application/octet-stream", ct)
	}
	if msg != "" {
		// A streamed upload refused before its bytes were all read: the
		// rest is read and dropped, so a client still sending gets the
		// answer rather than a reset connection.
		_, _ = io.Copy(io.Discard, body)
		writeError(w, status, msg)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// uploadOne reads one file (at most seam.MaxFileBytes) and writes it to
// the workspace path p names; seen refuses a second file to one path in
// one form, as envd does.
func (d *Door) uploadOne(r *http.Request, p string, body io.Reader, seen map[string]bool, meta map[string]string) ([]uploadEntry, int, string) {
	fp, err := mapPath(p)
	if err != nil {
		return nil, pathStatus(err), err.Error()
	}
	if fp.rel == "" {
		return nil, http.StatusBadRequest, fmt.Sprintf("path is a directory: %s", fp.show())
	}
	if seen != nil {
		if seen[fp.rel] {
			return nil, http.StatusBadRequest, fmt.Sprintf("you cannot upload multiple files to the same path '%s' in one upload request, only the first specified file was uploaded", fp.show())
		}
		seen[fp.rel] = true
	}
	if pt, ok := d.h.(api.Putter); ok {
		return d.putOne(r, pt, fp, body, meta)
	}
	data, err := io.ReadAll(io.LimitReader(body, seam.MaxFileBytes+1))
	if err != nil {
		st, m := bodyStatus(err)
		return nil, st, m
	}
	if len(data) > seam.MaxFileBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: a file is at most %d bytes here (seam.MaxFileBytes)", fp.show(), seam.MaxFileBytes)
	}
	resp, e := d.fsCall(r.Context(), &api.Request{Op: api.OpUpload, Path: fp.rel, Data: data, Metadata: meta})
	if e != nil {
		return nil, fsStatus(e), e.Message
	}
	return []uploadEntry{{Name: path.Base(fp.show()), Type: "file", Path: fp.show(), Metadata: resp.Metadata}}, 0, ""
}

// putOne streams one file's bytes from body into the workspace as they
// come (api.Putter): the door holds copy buffers, never the file. A busy
// sandbox is retried, as call does, while nothing of the body was read.
func (d *Door) putOne(r *http.Request, pt api.Putter, fp fsPath, body io.Reader, meta map[string]string) ([]uploadEntry, int, string) {
	t := targetOf(r.Context())
	src := &api.BodyReader{R: body}
	deadline := time.Now().Add(busyWait)
	pause := 5 * time.Millisecond
	for {
		resp, e := pt.Put(r.Context(), t.owner, t.id, fp.rel, src, meta)
		switch {
		case src.Err != nil:
			st, m := bodyStatus(src.Err)
			return nil, st, m
		case src.N > seam.MaxFileBytes:
			return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: a file is at most %d bytes here (seam.MaxFileBytes)", fp.show(), seam.MaxFileBytes)
		case e != nil && e.Code == api.CodeBusy && src.N == 0 && time.Now().Add(pause).Before(deadline):
			select {
			case <-r.Context().Done():
				return nil, fsStatus(e), e.Message
			case <-time.After(pause):
			}
			pause = min(2*pause, 100*time.Millisecond)
			continue
		case e != nil:
			e = d.goneOr(r.Context(), t.owner, t.id, e)
			return nil, fsStatus(e), e.Message
		}
		return []uploadEntry{{Name: path.Base(fp.show()), Type: "file", Path: fp.show(), Metadata: resp.Metadata}}, 0, ""
	}
}

// uploadForm writes each "file" part of a multipart form: to the query's
// path if given (one file), else to the path its filename names, in
// full, as envd reads it (Go's Part.FileName would drop the directories).
func (d *Door) uploadForm(r *http.Request, body io.Reader, boundary string, query *string, meta map[string]string) ([]uploadEntry, int, string) {
	if boundary == "" {
		return nil, http.StatusBadRequest, "multipart body without a boundary"
	}
	mr := multipart.NewReader(body, boundary)
	out := []uploadEntry{}
	seen := map[string]bool{}
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			st, m := bodyStatus(err)
			return nil, st, m
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if n >= maxUploadParts {
			return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d files in one upload", maxUploadParts)
		}
		p := ""
		if query != nil {
			p = *query
		} else {
			_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if err != nil || params["filename"] == "" {
				part.Close()
				return nil, http.StatusBadRequest, "a file part names no filename and no path query parameter was given: name each file's path"
			}
			p = params["filename"]
		}
		got, status, msg := d.uploadOne(r, p, part, seen, meta)
		part.Close()
		if msg != "" {
			return nil, status, msg
		}
		out = append(out, got...)
	}
	if len(out) == 0 {
		return nil, http.StatusBadRequest, `no "file" part in the multipart form`
	}
	return out, 0, ""
}

// bodyStatus is the answer to a body that could not be read.
func bodyStatus(err error) (int, string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, errInflatedTooLarge) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("the upload is over %d bytes (a file is at most %d)", maxUploadBody, seam.MaxFileBytes)
	}
	return http.StatusBadRequest, "read the upload: " + err.Error()
}

var errInflatedTooLarge = errors.New("the inflated body is over its bound")

// capReader fails once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errInflatedTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// getEnvs answers the envVars the sandbox was created with, which the
// door keeps in memory only (they may hold secrets, and the record is a
// plain file): after a restart of the service they are not known, and
// that is said rather than answered as none.
func (d *Door) getEnvs(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if _, e := d.fsCall(r.Context(), &api.Request{Op: api.OpInfo}); e != nil {
		writeFSError(w, e)
		return
	}
	rec, ok := d.records.get(t.id)
	if !ok || rec.Envs == nil {
		writeError(w, http.StatusNotFound, "sandbox "+t.id+": its envVars are not known here: the door keeps them in memory only, from the create or fork it served, and this one was made before the service's last start or through another door")
		return
	}
	writeJSON(w, http.StatusOK, rec.Envs)
}
