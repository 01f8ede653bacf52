package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/runner"
)

// forgeResult is cell code that builds a result frame for its own cell and
// writes it to the kernel's host link, as hostile code can: body is a
// Python bytes expression that may use cid, the cell's id.
func forgeResult(body string) string {
	return `import sys, struct
k = sys.modules['jailcell_kernel.state']._State.kernel
cid = k.cell.req.id.encode()
body = ` + body + `
with k.link.lock:
    k.link.sock.sendall(struct.pack('>I', len(body)) + body)
del body
`
}

// procStatus reads a field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// readLine reads one response line, however long, keeping at most keep
// bytes of it.
func readLine(r *bufio.Reader, keep int) ([]byte, int64, error) {
	var line []byte
	var n int64
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		if len(line) < keep {
			line = append(line, chunk[:min(len(chunk), keep-len(line))]...)
		}
		if err != bufio.ErrBufferFull {
			return line, n, err
		}
	}
}

// TestHostileForgedResultFrames: a cell forges result frames for itself,
// each under the 64 MiB frame limit, through the real `jailcell json`. On
// the code before the bounded decoder, 22 million empty traceback frames
// made a 650 MiB response line and raised the daemon's peak RSS by 7.1 GiB;
// a near-budget value and millions of display items, one note per dropped
// item and a 1 GiB line. Now the line stays within runner.MaxResultJSON,
// the daemon's peak within DaemonCellBound, and the session runs the next
// cell.
func TestHostileForgedResultFrames(t *testing.T) {
	cmd, _, stderr := jsonCommand(t)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("json stderr (tail):\n%s", tail(stderr.String(), 4000))
		}
	})
	pid := cmd.Process.Pid
	lines := bufio.NewReaderSize(stdout, 1<<20)
	const outputBytes = 1 << 20 // the default policy's output_bytes
	lineBound := runner.MaxResultJSON(outputBytes) + 64<<10
	ask := func(req string) ([]byte, int64) {
		t.Helper()
		if _, err := io.WriteString(stdin, req+"\n"); err != nil {
			t.Fatal(err)
		}
		line, n, err := readLine(lines, int(lineBound))
		if err != nil {
			t.Fatalf("no answer to %.80s: %v", req, err)
		}
		return line, n
	}
	line, _ := ask(`{"id":"c","op":"create"}`)
	var created struct {
		OK      bool   `json:"ok"`
		Session string `json:"session"`
	}
	if json.Unmarshal(line, &created) != nil || !created.OK {
		t.Fatalf("create: %s", line)
	}
	exec := func(code string) ([]byte, int64) {
		t.Helper()
		req, _ := json.Marshal(map[string]any{"id": "x", "op": "exec", "session": created.Session, "code": code})
		return ask(string(req))
	}
	works := func() {
		t.Helper()
		if line, _ := exec("print(6*7)"); !strings.Contains(string(line), `"stdout":"42\n"`) {
			t.Fatalf("the session does not run a cell after the attack: %.500s", line)
		}
	}
	works()
	memBound := DaemonCellBound(outputBytes)
	value := fmt.Sprintf(`b'"value":{"text/plain":"' + b'v' * %d + b'"},'`, 32<<20-64)
	for _, tc := range []struct{ name, body string }{
		{"22M empty traceback frames",
			`b'{"t":"result","id":"' + cid + b'","status":"error","error":{"type":"X","message":"m","traceback":"","frames":[' + b'{},' * 21999999 + b'{}]}}'`},
		{"a near-budget value and 2.4M display items",
			`b'{"t":"result","id":"' + cid + b'","status":"ok",' + ` + value + ` + b'"display":[' + b'{"mime":"a"},' * 2399999 + b'{"mime":"a"}]}'`},
		{"10M escaped control characters in the error message",
			`b'{"t":"result","id":"' + cid + b'","status":"error","error":{"type":"X","message":"' + b'\\u0001' * 10000000 + b'","traceback":"","frames":[]}}'`},
		// The host's ANSI cleaning (internal/termtext) runs over all of it.
		{"2M escape sequences in the error's message and traceback",
			`b'{"t":"result","id":"' + cid + b'","status":"error","error":{"type":"X","message":"' + b'\\u001b[1m\\r' * 2000000 + b'","traceback":"' + b'\\u001b]' * 2000000 + b'","frames":[]}}'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rss := procStatus(t, pid, "VmRSS")
			// Reset the peak to the current RSS (proc(5), clear_refs "5").
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				t.Fatalf("reset the daemon's peak RSS: %v", err)
			}
			start := time.Now()
			line, n := exec(forgeResult(tc.body))
			peak := procStatus(t, pid, "VmHWM")
			t.Logf("response line %.1f MiB in %v; daemon RSS %d MiB, peak %d MiB (+%d MiB; bound +%d MiB)",
				float64(n)/(1<<20), time.Since(start).Round(time.Millisecond), rss>>20, peak>>20, (peak-rss)>>20, memBound>>20)
			if n > lineBound {
				t.Errorf("response line of %d bytes, over %d", n, lineBound)
			}
			if peak-rss > memBound {
				t.Errorf("daemon peak RSS rose by %d MiB, over the %d MiB bound", (peak-rss)>>20, memBound>>20)
			}
			var resp struct {
				OK     bool `json:"ok"`
				Result struct {
					Status string `json:"status"`
				} `json:"result"`
			}
			if n > int64(len(line)) || json.Unmarshal(line, &resp) != nil || !resp.OK || resp.Result.Status == "" {
				t.Errorf("not a whole exec response: %.300s", line)
			}
			works()
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// DaemonCellBound is the stated bound on what one cell's result can add
// to the daemon's peak RSS: the frame being read (at most 1.5 times
// runner.DefaultMaxFrame while it grows), the decoded result and its
// encoding (4 times runner.MaxResultJSON), all doubled for Go's collector,
// which lets the heap reach twice what is live (GOGC=100).
func DaemonCellBound(outputBytes int64) int64 {
	return 2 * (runner.DefaultMaxFrame*3/2 + 4*runner.MaxResultJSON(outputBytes))
}
