package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api/internal/doortest"
	"github.com/jailcell/jailcell/internal/testenv"
)

var bigPings = doortest.BigPings

// TestHostileLargeResponsesCountInFlightHTTP: the same over HTTP, where a
// peer that never reads its answers could otherwise hold any number of
// them in the daemon.
func TestHostileLargeResponsesCountInFlightHTTP(t *testing.T) {
	var calls atomic.Int32
	sock := filepath.Join(testenv.StateDir(t), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(bigPings(&calls), HTTPOptions{MaxInFlightBytes: 1 << 20, Logger: discardLogger()})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	// A peer asks and does not read: 4 MiB is more than the socket holds.
	slow, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: jailcell\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return calls.Load() == 1 })
	// The first byte of its answer proves it is encoded and in the write;
	// 4 MiB is more than the socket holds, so the rest stays stuck there.
	if _, err := io.ReadFull(slow, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	c := unixClient(sock)
	get := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://jailcell/healthz", nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := get(500 * time.Millisecond); err == nil || calls.Load() != 1 {
		t.Fatalf("a request was served (err %v, %d pings) while 4 MiB of unread response sat in a 1 MiB in-flight budget", err, calls.Load())
	}
	// Once the slow peer reads, the place is free again.
	go io.Copy(io.Discard, slow)
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("after the slow peer read its answer: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d pings served, want 2", n)
	}
}
