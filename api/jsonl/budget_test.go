package jsonl

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api/internal/doortest"
)

var bigPings = doortest.BigPings

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
		done <- Serve(ctx, inR, outW, bigPings(&calls), Options{MaxInFlightBytes: 1 << 20, Logger: discardLogger()})
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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
