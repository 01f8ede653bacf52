package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/session/seam"
)

// fileSessions is a manager whose every session's workspace holds one
// file, opened or read whole as the session's workspace part does; no
// other op is answered.
type fileSessions struct {
	api.Sessions
	file string
}

func (fileSessions) Collectors() []prometheus.Collector { return nil }

func (f fileSessions) Workspace() seam.Workspace { return fileWorkspace{file: f.file} }

// fileWorkspace answers downloads and opens; any other file op panics
// (its embedded interface is nil), which the dispatcher turns into
// "internal".
type fileWorkspace struct {
	seam.Workspace
	file string
}

func (f fileWorkspace) Download(_ context.Context, _ int, _, rel string) (*seam.Download, error) {
	b, err := os.ReadFile(f.file)
	if err != nil {
		return nil, err
	}
	s := sha256.Sum256(b)
	return &seam.Download{Path: rel, Data: b, Size: int64(len(b)), SHA256: hex.EncodeToString(s[:])}, nil
}

func (f fileWorkspace) Open(_ context.Context, _ int, _, rel string) (*seam.OpenFile, error) {
	fl, err := os.Open(f.file)
	if err != nil {
		return nil, err
	}
	fi, _ := fl.Stat()
	return &seam.OpenFile{Path: rel, Size: fi.Size(), Content: fl}, nil
}

// serveUnix serves the HTTP API over manager m on a Unix socket of the
// test's own until the test ends.
func serveUnix(t *testing.T, m api.Sessions, opts HTTPOptions) (*HTTPServer, string) {
	t.Helper()
	sock := filepath.Join(testenv.StateDir(t), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = discardLogger()
	srv := NewHTTPServer(&api.Dispatcher{Manager: m, Version: "test"}, opts)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return srv, sock
}

// TestHostileDownloadsAreStreamedHTTP: a file route's download is
// streamed from the file: the daemon holds a copy buffer per request, not
// the file. Read whole, four unread downloads of a sparse 256 MiB file
// held 1 GiB, weighed only once read, past the node's byte budget. The
// digest header and the bytes still agree.
func TestHostileDownloadsAreStreamedHTTP(t *testing.T) {
	big := filepath.Join(t.TempDir(), "sparse.bin")
	if err := os.WriteFile(big, []byte("head"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 256<<20); err != nil {
		t.Fatal(err)
	}
	srv, sock := serveUnix(t, fileSessions{file: big}, HTTPOptions{MaxInFlightBytes: 512 << 20})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 4 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /v1/sessions/s1/files/big.bin HTTP/1.1\r\nHost: jailcell\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			t.Fatalf("download answer: %q %v", line, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, used := srv.lim.InFlight(); used > 1<<20 {
		t.Errorf("four unread 256 MiB downloads hold %d bytes of the budget, want copy buffers only", used)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("the heap grew by %d MiB with four downloads of 256 MiB in flight, want buffers only", grew>>20)
	}
	// A whole download: its digest header is the bytes'.
	resp, err := unixClient(sock).Get("http://jailcell/v1/sessions/s1/files/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || n != 256<<20 || resp.Header.Get("X-Jailcell-Sha256") != hex.EncodeToString(h.Sum(nil)) {
		t.Errorf("download: %d bytes, %v, digest header %s, bytes' %x", n, err, resp.Header.Get("X-Jailcell-Sha256"), h.Sum(nil))
	}
}
