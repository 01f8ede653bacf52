package ndjson

import (
	"net/http"
	"sync"
	"time"
)

// Writer queues lines and writes them to an http.ResponseWriter from its
// own goroutine. The response's status is the first line's, unless Start
// wrote the header already.
type Writer struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	mu     sync.Mutex
	lines  [][]byte
	status int
	closed bool
	wake   chan struct{}
	done   chan struct{}
	onCut  func()
}

// Start begins a stream on w; status, if not 0, is written (with the
// headers and a flush) at once, before any line. onCut, if set, is called
// once if the client fails to take a line (gone, or past a deadline): the
// lines after it are dropped.
func Start(w http.ResponseWriter, status int, onCut func()) *Writer {
	lw := &Writer{w: w, rc: http.NewResponseController(w), wake: make(chan struct{}, 1), done: make(chan struct{}), onCut: onCut}
	started := status != 0
	if started {
		lw.header(status)
		_ = lw.rc.Flush()
	}
	go lw.run(started)
	return lw
}

func (lw *Writer) header(status int) {
	lw.w.Header().Set("Content-Type", "application/x-ndjson")
	lw.w.Header().Set("Cache-Control", "no-store")
	lw.w.WriteHeader(status)
}

// Push queues one line (b ends with its newline). It never blocks on the
// client.
func (lw *Writer) Push(status int, b []byte) {
	lw.mu.Lock()
	if lw.status == 0 {
		lw.status = status
	}
	lw.lines = append(lw.lines, b)
	lw.mu.Unlock()
	lw.signal()
}

// Finish gives the client grace to take what is queued, then ends the
// stream; w is not used once it returns.
func (lw *Writer) Finish(grace time.Duration) {
	_ = lw.rc.SetWriteDeadline(time.Now().Add(grace))
	lw.close()
	<-lw.done
	_ = lw.rc.SetWriteDeadline(time.Time{})
}

func (lw *Writer) close() {
	lw.mu.Lock()
	lw.closed = true
	lw.mu.Unlock()
	lw.signal()
}

func (lw *Writer) signal() {
	select {
	case lw.wake <- struct{}{}:
	default:
	}
}

// take waits for lines; none once the stream is closed and drained.
func (lw *Writer) take() (lines [][]byte, status int, more bool) {
	for {
		lw.mu.Lock()
		lines, lw.lines = lw.lines, nil
		status, closed := lw.status, lw.closed
		lw.mu.Unlock()
		if len(lines) > 0 || closed {
			return lines, status, len(lines) > 0
		}
		<-lw.wake
	}
}

func (lw *Writer) run(started bool) {
	defer close(lw.done)
	broken := false
	for {
		lines, status, more := lw.take()
		if !more {
			return
		}
		if broken {
			continue
		}
		if !started {
			lw.header(status)
			started = true
		}
		for _, b := range lines {
			if _, err := lw.w.Write(b); err != nil {
				broken = true
				break
			}
		}
		if !broken && lw.rc.Flush() != nil {
			broken = true
		}
		if broken && lw.onCut != nil {
			lw.onCut()
		}
	}
}
