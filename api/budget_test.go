package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/session"
)

// bigPings is a Dispatcher whose ping answers carry 4 MiB (a stand-in for
// a download or a large result) and counts the pings it served.
func bigPings(calls *atomic.Int32) *Dispatcher {
	big := strings.Repeat("k", 4<<20)
	return testDispatcher(func() session.Features {
		calls.Add(1)
		return session.Features{Kernel: big}
	})
}

// TestHostileLargeResponsesCountInFlight: a JSON-lines client that sends
// requests with large answers and does not read them must not make the
// daemon pile the answers up: an unwritten response holds its bytes in the
// in-flight budget, and reading waits for it.
func TestHostileLargeResponsesCountInFlight(t *testing.T) {
	var calls atomic.Int32
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- ServeJSONL(ctx, inR, outW, bigPings(&calls), JSONLOptions{MaxInFlightBytes: 1 << 20, Logger: discardLogger()})
	}()
	io.WriteString(inW, `{"id":1,"op":"ping"}`+"\n")
	waitFor(t, func() bool { return calls.Load() == 1 })
	// Its answer's first byte proves it is encoded and in the write, where
	// the pipe holds the rest (a sleep here lost the race under load).
	first := make([]byte, 1)
	if _, err := io.ReadFull(outR, first); err != nil {
		t.Fatal(err)
	}
	io.WriteString(inW, `{"id":2,"op":"ping"}`+"\n")
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("request 2 ran (%d pings served) while 4 MiB of unread response sat in a 1 MiB in-flight budget", n)
	}
	// Taking the first answer makes room for the second.
	sc := scanLines(outR, 8<<20)
	for i := 1; i <= 2; i++ {
		if !sc.Scan() {
			t.Fatalf("response %d missing: %v", i, sc.Err())
		}
		if n := len(sc.Bytes()) + len(first)*b2i(i == 1); n < 4<<20 {
			t.Fatalf("response %d is %d bytes, want the 4 MiB answer", i, n)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("ServeJSONL: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d pings served, want 2", n)
	}
}

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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
