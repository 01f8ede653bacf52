package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// handleSeeds are the outcomes expected of the FuzzHandleFrame seeds, fed to
// an execState for id "c1" with MaxOutput 16.
var handleSeeds = map[string]struct {
	stdout, stderr string
	truncated      bool // either stream
	result         bool
	displayed      int // items passed to OnDisplay
	cleared        int // clear_outputs passed to OnClearOutput
	err            error
	check          func(t *testing.T, r *Result)
}{
	"display":       {displayed: 1},
	"display-chart": {displayed: 1},
	"result-charts": {result: true, check: func(t *testing.T, r *Result) {
		if c := r.ValueChart; c == nil || c.Type != "unknown" || !strings.Contains(c.Reason, "not a number") {
			t.Errorf("value chart %+v, want a refusal", c)
		}
		if len(r.Display) != 1 || r.Display[0].Chart == nil || r.Display[0].Chart.Elements[0].Points[0] != [2]float64{1, 2} {
			t.Errorf("display %+v", r.Display)
		}
	}},
	"display-other-id":    {},
	"display-item-string": {err: ErrProtocol},
	"display-no-mime":     {},
	// A clear item is passed on as a clear, never as a display.
	"display-clear":          {cleared: 1},
	"display-clear-not-bool": {err: ErrProtocol},
	"stream":                 {stdout: "hello"},
	"stream-over-cap":        {stderr: strings.Repeat("é", 8), truncated: true},
	"stream-other-id":        {},
	"stream-no-text":         {},
	"stream-bad-utf8":        {stdout: "a\uFFFD\uFFFDb\uFFFD"},
	"result-ok": {result: true, check: func(t *testing.T, r *Result) {
		if r.Status != "ok" || r.Value["text/plain"] != "2" || len(r.Display) != 1 || r.Display[0].MIME != "text/html" || r.Error != nil {
			t.Errorf("result %+v", r)
		}
	}},
	"result-error": {result: true, check: func(t *testing.T, r *Result) {
		want := &CellError{Type: "ZeroDivisionError", Message: "division by zero", Traceback: "Traceback...",
			Frames: []Frame{{File: "<cell-1>", Line: 1, Name: "<module>", Code: "1/0"}}}
		if r.Status != "error" || !reflect.DeepEqual(r.Error, want) || !r.Interrupted || r.Value != nil {
			t.Errorf("result %+v, error %+v", r, r.Error)
		}
	}},
	"result-bad-status":  {err: ErrProtocol},
	"result-other-id":    {},
	"result-value-array": {err: ErrProtocol},
	"result-empty-mime": {result: true, check: func(t *testing.T, r *Result) {
		if len(r.Display) != 0 {
			t.Errorf("display %+v, want items without a MIME type dropped", r.Display)
		}
	}},
	"not-json":     {err: ErrProtocol},
	"array":        {err: ErrProtocol},
	"id-number":    {},
	"unknown-type": {},
}

func newTestState(onStream func(name, text string)) *execState {
	return newExecState(ExecRequest{ID: "c1", MaxOutput: 16}, onStream)
}

// TestHandleFrame runs the seed corpus of FuzzHandleFrame, each seed alone,
// with its expected outcome.
func TestHandleFrame(t *testing.T) {
	seeds := readSeedCorpus(t, "FuzzHandleFrame")
	names := make([]string, 0, len(seeds))
	for name := range seeds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			w, ok := handleSeeds[name]
			if !ok {
				t.Fatalf("seed %s has no expected outcome in this table", name)
			}
			var streamed [2]string
			st := newTestState(func(name, text string) {
				if name == "stdout" {
					streamed[0] += text
				} else {
					streamed[1] += text
				}
			})
			displayed, cleared := 0, 0
			st.req.OnDisplay = func(DisplayItem) { displayed++ }
			st.req.OnClearOutput = func(bool) { cleared++ }
			res, err := st.handle(seeds[name])
			if displayed != w.displayed || cleared != w.cleared {
				t.Errorf("%d items passed to OnDisplay and %d to OnClearOutput, want %d and %d", displayed, cleared, w.displayed, w.cleared)
			}
			if !errors.Is(err, w.err) || (w.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, w.err)
			}
			if (res != nil) != w.result {
				t.Fatalf("result %+v, want one: %v", res, w.result)
			}
			if streamed[0] != w.stdout || streamed[1] != w.stderr {
				t.Errorf("streamed %q, want %q and %q", streamed, w.stdout, w.stderr)
			}
			if got := st.truncated[0] || st.truncated[1]; got != w.truncated {
				t.Errorf("truncated = %v, want %v", got, w.truncated)
			}
			if w.check != nil {
				w.check(t, res)
			}
			checkHandleFrame(t, seeds[name])
		})
	}
	for name := range handleSeeds {
		if _, ok := seeds[name]; !ok {
			t.Errorf("case %s has no seed file in testdata/fuzz/FuzzHandleFrame", name)
		}
	}
}

func TestHandleFrameSequence(t *testing.T) {
	var calls []string
	st := newTestState(func(name, text string) { calls = append(calls, name+":"+text) })
	frames := []string{
		`{"t":"stream","id":"c1","name":"stdout","text":"0123456789"}`,
		`{"t":"stream","id":"c1","name":"stderr","text":"err"}`,
		`{"t":"stream","id":"c1","name":"stdout","text":"abcdefghij"}`, // crosses the cap of 16
		`{"t":"stream","id":"c1","name":"stdout","text":"k"}`,          // after the cut: dropped
		`{"t":"result","id":"c0","status":"ok","value":{"text/plain":"forged"}}`,
		`{"t":"pong","id":"c1"}`,
		`{"t":"result","id":"c1","status":"ok","stdout_truncated":false,"stderr_truncated":true}`,
	}
	var res *Result
	for i, f := range frames {
		r, err := st.handle([]byte(f))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if r != nil && i != len(frames)-1 {
			t.Fatalf("frame %d ended the cell", i)
		}
		res = r
	}
	if res == nil {
		t.Fatal("no result")
	}
	if res.Stdout != "0123456789abcdef" || !res.StdoutTruncated {
		t.Errorf("stdout %q truncated=%v, want the first 16 bytes and truncated", res.Stdout, res.StdoutTruncated)
	}
	if res.Stderr != "err" || !res.StderrTruncated {
		t.Errorf("stderr %q truncated=%v, want the kernel's truncation flag kept", res.Stderr, res.StderrTruncated)
	}
	want := []string{"stdout:0123456789", "stderr:err", "stdout:abcdef"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("onStream calls %q, want %q", calls, want)
	}
	if res.Value != nil {
		t.Errorf("value %v from a frame with another id", res.Value)
	}
}

func TestHandleFrameRichBudget(t *testing.T) {
	big := strings.Repeat("A", maxRichBytes/2+1)
	frame := `{"t":"result","id":"c1","status":"ok","value":{"text/plain":"` + big + `"},` +
		`"display":[{"mime":"image/png","data":"` + big + `"},{"mime":"text/plain","data":"small"}]}`
	res, err := newTestState(nil).handle([]byte(frame))
	if err != nil || res == nil {
		t.Fatalf("result %v, err %v", res, err)
	}
	if res.Value["text/plain"] != big {
		t.Errorf("value dropped although within the budget")
	}
	if len(res.Display) != 2 || res.Display[0].Data != "small" {
		t.Fatalf("display %.200v, want the small item kept", res.Display)
	}
	if d := res.Display[1]; d.MIME != "text/plain" || !strings.Contains(d.Data, "1 display items dropped") {
		t.Errorf("last display item %.200v, want one note of what was dropped", d)
	}
}

// checkHandleFrame feeds data to an execState twice and checks the host's
// invariants: output within MaxOutput and valid UTF-8, and any result of a
// known status with an error exactly when the status says so.
func checkHandleFrame(t *testing.T, data []byte) {
	t.Helper()
	st := newTestState(func(name, text string) {
		if name != "stdout" && name != "stderr" {
			t.Fatalf("onStream got stream %q", name)
		}
		if !utf8.ValidString(text) {
			t.Fatalf("onStream got invalid UTF-8 %q", text)
		}
	})
	displayed := 0
	st.req.OnDisplay = func(it DisplayItem) {
		displayed++
		if it.MIME == "" || !utf8.ValidString(it.MIME) || !utf8.ValidString(it.Data) || !validUTF8(it.Bundle) {
			t.Fatalf("OnDisplay got a bad item %+v", it)
		}
		if it.Chart != nil {
			chartCounts(t, it.Chart, 0)
		}
		if displayed > maxDisplayItems || st.displayBudget < 0 {
			t.Fatalf("%d items passed on, budget left %d: over the display caps", displayed, st.displayBudget)
		}
	}
	cleared := 0
	st.req.OnClearOutput = func(bool) {
		cleared++
		if cleared > maxClearOutputs {
			t.Fatalf("%d clear_outputs passed on: over maxClearOutputs", cleared)
		}
	}
	for i := 0; i < 2; i++ {
		res, err := st.handle(data)
		for j, out := range st.out {
			if int64(len(out)) > st.req.MaxOutput {
				t.Fatalf("%s holds %d bytes, over MaxOutput %d", streamNames[j], len(out), st.req.MaxOutput)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		if res == nil {
			continue
		}
		if res.Status != "ok" && res.Status != "error" {
			t.Fatalf("status %q", res.Status)
		}
		if enc, err := json.Marshal(res); err != nil || int64(len(enc)) > MaxResultJSON(st.req.MaxOutput) {
			t.Fatalf("result of %d bytes encoded (%v), over MaxResultJSON", len(enc), err)
		}
		if (res.Status == "error") != (res.Error != nil) {
			t.Fatalf("status %q with error %+v", res.Status, res.Error)
		}
		if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) || !validUTF8(res.Value) {
			t.Fatalf("invalid UTF-8 in result %+v", res)
		}
		for _, it := range res.Display {
			if it.MIME == "" || !utf8.ValidString(it.Data) || !validUTF8(it.Bundle) {
				t.Fatalf("bad display item %+v", it)
			}
			if it.Chart != nil {
				chartCounts(t, it.Chart, 0)
			}
		}
		if res.ValueChart != nil {
			chartCounts(t, res.ValueChart, 0)
		}
	}
}

func validUTF8(v any) bool {
	switch v := v.(type) {
	case string:
		return utf8.ValidString(v)
	case map[string]any:
		for k, e := range v {
			if !utf8.ValidString(k) || !validUTF8(e) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !validUTF8(e) {
				return false
			}
		}
	}
	return true
}

func FuzzHandleFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkHandleFrame(t, data)
	})
}

func TestArgv(t *testing.T) {
	base := []string{"python3", "-s", "-c", kernelBoot, "/run/jailcell", "--connect", "/run/jailcell/host.sock"}
	cases := []struct {
		name    string
		ctl     string
		preload []string
		want    []string
	}{
		{"no preload", "/run/jailcell", nil, base},
		{"trailing slash", "/run/jailcell/", nil, base},
		{"preload", "/run/jailcell", []string{"numpy", "pandas", "matplotlib.pyplot"},
			append(append([]string{}, base...), "--preload", "numpy,pandas,matplotlib.pyplot")},
		{"invalid names skipped", "/run/jailcell", []string{"numpy", "a,b", "", "x..y", "1abc", "os.path", "-c"},
			append(append([]string{}, base...), "--preload", "numpy,os.path")},
		{"all invalid", "/run/jailcell", []string{"--evil"}, base},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Argv(tc.ctl, tc.preload); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Argv = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, SocketName)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v, want a socket with 0666", fi.Mode())
	}
	// A stale socket left by a crashed host (no unlink on close) is replaced.
	l.SetUnlinkOnClose(false)
	l.Close()
	l2, err := Listen(dir)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	l2.Close()

	// Anything else in its place is not ours to delete.
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(dir); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatal("regular file was modified")
	}
}

// TestAcceptRejectsBadHello connects from the test as something that is not
// a kernel, then as a kernel: Accept must skip the first.
func TestAcceptRejectsBadHello(t *testing.T) {
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := filepath.Join(dir, SocketName)
	bad := []any{
		map[string]any{"t": "result", "id": "x", "status": "ok"},
		map[string]any{"t": "hello", "pid": "1"},
		map[string]any{"t": "hello", "pid": 0},
		map[string]any{"t": "hello", "pid": 2, "python": strings.Repeat("3", 100)},
	}
	done := make(chan error, 1)
	go func() {
		for _, v := range bad {
			c, err := net.Dial("unix", addr)
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			if err := WriteFrame(c, v); err != nil {
				done <- err
				return
			}
		}
		c, err := net.Dial("unix", addr)
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		if err := WriteFrame(c, map[string]any{"t": "hello", "pid": 7, "python": "3.11.2", "cells": 4, "busy": true}); err != nil {
			done <- err
			return
		}
		// Hold the connection until Accept is done with it.
		done <- nil
		<-ctx.Done()
	}()
	c, err := Accept(ctx, l, 0, AnyUID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := (Hello{PID: 7, Python: "3.11.2", Cells: 4, Busy: true}); c.Hello() != want {
		t.Errorf("hello %+v, want %+v", c.Hello(), want)
	}
}

func TestAcceptContext(t *testing.T) {
	l, err := Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Accept(ctx, l, 0, AnyUID); !errors.Is(err, context.Canceled) {
		t.Fatalf("Accept with a cancelled context: %v, want context.Canceled", err)
	}
	// The cancelled call must not leave the listener unusable.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	go func() {
		if c, err := net.Dial("unix", l.Addr().String()); err == nil {
			WriteFrame(c, map[string]any{"t": "hello", "pid": 2, "python": "3.11.2"})
			<-ctx2.Done()
			c.Close()
		}
	}()
	c, err := Accept(ctx2, l, 0, AnyUID)
	if err != nil {
		t.Fatalf("Accept after a cancelled one: %v", err)
	}
	c.Close()
}

func TestExecBadRequest(t *testing.T) {
	c := &Conn{sem: make(chan struct{}, 1)}
	if _, err := c.Exec(ExecRequest{Code: "1"}, nil); err == nil {
		t.Error("Exec with an empty id succeeded")
	}
	if _, err := c.Exec(ExecRequest{ID: "c1", Code: "1", MaxOutput: -1}, nil); err == nil {
		t.Error("Exec with a negative MaxOutput succeeded")
	}
}

// TestExecKernelDiesMidCell: a kernel killed after it printed (the OOM
// killer, os._exit) leaves its output in the error's partial Result, with
// no status: the host's verdict decides that.
func TestExecKernelDiesMidCell(t *testing.T) {
	host, kernel := unixPair(t)
	go func() {
		defer kernel.Close()
		if WriteFrame(kernel, map[string]any{"t": "hello", "pid": 2, "python": "3.11.2", "acks": true}) != nil {
			return
		}
		if _, err := ReadFrame(kernel, 0); err != nil {
			return
		}
		for _, f := range []string{
			`{"t":"started","id":"c1"}`,
			`{"t":"stream","id":"c1","name":"stdout","text":"tok=1\n"}`,
			`{"t":"stream","id":"c1","name":"stderr","text":"warn"}`,
		} {
			if _, err := kernel.Write(rawFrame([]byte(f))); err != nil {
				return
			}
		}
	}()
	c := handshakeT(t, host)
	var streamed string
	r, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10}, func(_, text string) { streamed += text })
	if err == nil || errors.Is(err, ErrNotStarted) {
		t.Fatalf("err %v, want a broken link after the cell started", err)
	}
	if r == nil || r.Stdout != "tok=1\n" || r.Stderr != "warn" || r.Status != "" || r.ExecutionCount != 1 {
		t.Fatalf("partial result %+v, want the output so far, no status and count 1", r)
	}
	if streamed != "tok=1\nwarn" {
		t.Errorf("streamed %q", streamed)
	}
	if _, err := c.Exec(ExecRequest{ID: "c2", Code: "y", MaxOutput: 1 << 10}, nil); err == nil {
		t.Error("the broken Conn ran another cell")
	}
}

// TestHostileStrangerCannotBeTheKernel: the kernel's socket is 0666 (the
// sandbox's root is an unprivileged host uid), so any local user who finds
// it can connect, and one who won the race against the kernel got the
// session's envs and every cell's code and answered with forged results.
// A peer outside the sandbox's uids is now closed unread; one inside is
// the kernel.
func TestHostileStrangerCannotBeTheKernel(t *testing.T) {
	l, err := Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	me := os.Getuid()
	hello := func(ctx context.Context) {
		if c, err := net.Dial("unix", l.Addr().String()); err == nil {
			WriteFrame(c, map[string]any{"t": "hello", "pid": 2, "python": "3.11.2"})
			<-ctx.Done()
			c.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go hello(ctx)
	_, err = Accept(ctx, l, 0, UIDs{me + 1, me + 2})
	if err == nil || !strings.Contains(err.Error(), "is not the sandbox's") {
		t.Fatalf("a stranger's valid hello: %v, want it refused for its uid", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	go hello(ctx2)
	c, err := Accept(ctx2, l, 0, UIDs{me, me + 1})
	if err != nil {
		t.Fatalf("a peer of the sandbox's uids: %v", err)
	}
	c.Close()
}
