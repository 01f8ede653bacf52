package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// sinkSessions is a manager whose every session's workspace takes
// streamed uploads into nothing, counting their bytes as the session's
// workspace part would write them; no other op is answered.
type sinkSessions struct {
	api.Sessions
	got *atomic.Int64
}

func (sinkSessions) Collectors() []prometheus.Collector { return nil }

func (s sinkSessions) Workspace() seam.Workspace { return sinkWorkspace{got: s.got} }

type sinkWorkspace struct {
	seam.Workspace
	got *atomic.Int64
}

func (s sinkWorkspace) UploadFrom(_ context.Context, _ int, _, rel string, r io.Reader, meta map[string]string) (*seam.Entry, error) {
	n, err := io.CopyBuffer(io.Discard, io.LimitReader(r, seam.MaxFileBytes+1), make([]byte, 64<<10))
	if err != nil {
		return nil, err
	}
	s.got.Add(n)
	return &seam.Entry{Path: rel, Size: n, Metadata: meta}, nil
}

// TestHostileUploadsAreStreamedHTTP: a file route's upload is written as
// its bytes come: the daemon holds a copy buffer per request, not the
// file. Read whole first, four uploads each 16 MiB into a 200 MiB body
// held 64 MiB and grew their places by every byte read, past an owner's
// share and toward the node's byte bound. A stalled one ends at the body
// timeout; a whole one is answered with its size; one over the bound is
// refused by its declared length before a byte is read.
func TestHostileUploadsAreStreamedHTTP(t *testing.T) {
	var got atomic.Int64
	srv, sock := serveUnix(t, sinkSessions{got: &got}, HTTPOptions{MaxInFlightBytes: 64 << 20, MaxInFlightBytesPerOwner: 8 << 20, BodyTimeout: 3 * time.Second})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	chunk := []byte(strings.Repeat("x", 1<<20))
	var stalled []net.Conn
	for range 4 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PUT /v1/sessions/s1/files/big.bin HTTP/1.1\r\nHost: jailcell\r\nContent-Length: %d\r\n\r\n", 200<<20)
		for range 16 {
			if _, err := c.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		stalled = append(stalled, c)
	}
	waitFor(t, func() bool { return got.Load() == 0 && inFlight(srv) == 4 })
	if _, used := srv.lim.InFlight(); used > 4*(copyBuffer+64<<10) {
		t.Errorf("four uploads 16 MiB into their bodies hold %d bytes of the budget, want copy buffers only", used)
	}
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
		t.Errorf("the heap grew by %d MiB with four uploads 16 MiB in, want buffers only", grew>>20)
	}
	// Stalled, each ends at the body timeout, its place given back.
	for _, c := range stalled {
		if st, body := readStatus(t, c); st != http.StatusBadRequest || !strings.Contains(body, "not received within") {
			t.Errorf("a stalled upload: %d %s, want 400 naming the body timeout", st, clip(body, 200))
		}
	}
	waitFor(t, func() bool { return inFlight(srv) == 0 })
	// A whole upload: answered with its size.
	resp, err := unixPut(sock, "/v1/sessions/s1/files/whole.bin", strings.NewReader(strings.Repeat("y", 40<<20)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Size == nil || *resp.Size != 40<<20 {
		t.Errorf("a whole 40 MiB upload: %d %+v", resp.StatusCode, resp.Response)
	}
	// Declared over the bound: refused before a byte is read.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /v1/sessions/s1/files/huge.bin HTTP/1.1\r\nHost: jailcell\r\nContent-Length: %d\r\n\r\n", seam.MaxFileBytes+1)
	if st, _ := readStatus(t, c); st != http.StatusRequestEntityTooLarge {
		t.Errorf("an upload declared over %d bytes: %d, want 413", seam.MaxFileBytes, st)
	}
}

func inFlight(srv *HTTPServer) int {
	n, _ := srv.lim.InFlight()
	return n
}

type putResult struct {
	StatusCode int
	api.Response
}

func unixPut(sock, path string, body io.Reader) (*putResult, error) {
	req, err := http.NewRequest(http.MethodPut, "http://jailcell"+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := unixClient(sock).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &putResult{StatusCode: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(b, &out.Response); err != nil {
		return nil, fmt.Errorf("answer %q: %w", clip(string(b), 200), err)
	}
	return out, nil
}
