package runner

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// clearRecorder records a cell's streams, display items and clears in
// the order the host passes them on.
type clearRecorder struct {
	mu     sync.Mutex
	events []string
}

func (c *clearRecorder) add(s string) {
	c.mu.Lock()
	c.events = append(c.events, s)
	c.mu.Unlock()
}

func (c *clearRecorder) request(id, code string) ExecRequest {
	return ExecRequest{ID: id, Code: code, MaxOutput: 1 << 20,
		OnDisplay: func(d DisplayItem) { c.add("display:" + d.MIME) },
		OnClearOutput: func(wait bool) {
			c.add(fmt.Sprint("clear:wait=", wait))
		}}
}

func (c *clearRecorder) stream(name, text string) { c.add(name + ":" + text) }

func (c *clearRecorder) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.events, "|")
}

// TestClearOutputFrames: a clear_output reaches the host as a display
// frame's item {"clear": true, "wait": BOOL}, forged at will by the
// kernel. It is passed on to OnClearOutput in its place among the
// streams and displays, carrying wait and nothing else (whatever else the
// item holds); it is never a display item nor part of the result; a
// clear or wait that is not a boolean is a protocol error; an item that
// is not a clear is a display as before.
func TestClearOutputFrames(t *testing.T) {
	frame := func(s string) []byte { return rawFrame([]byte(s)) }
	display := func(item string) []byte { return frame(`{"t":"display","id":"c1","item":` + item + `}`) }
	result := frame(`{"t":"result","id":"c1","status":"ok","display":[{"mime":"text/plain","data":"shown"},{"clear":true}]}`)
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   string
		err    bool
	}{
		{"clear now and wait, in order", [][]byte{
			frame(`{"t":"stream","id":"c1","name":"stdout","text":"a"}`),
			display(`{"clear":true,"wait":false}`),
			frame(`{"t":"stream","id":"c1","name":"stdout","text":"b"}`),
			display(`{"clear":true,"wait":true}`),
			display(`{"mime":"text/plain","data":"shown"}`),
			result,
		}, "stdout:a|clear:wait=false|stdout:b|clear:wait=true|display:text/plain", false},
		{"wait absent or null is false", [][]byte{display(`{"clear":true}`), display(`{"clear":true,"wait":null}`), result},
			"clear:wait=false|clear:wait=false", false},
		{"a clear carries nothing else", [][]byte{display(`{"clear":true,"wait":true,"mime":"text/html","data":"<script>x</script>","bundle":{"text/html":"x"}}`), result},
			"clear:wait=true", false},
		{"clear false is a display item", [][]byte{display(`{"clear":false,"wait":true,"mime":"text/plain","data":"x"}`), result},
			"display:text/plain", false},
		{"wait alone is not a clear", [][]byte{display(`{"wait":true}`), result}, "", false},
		{"another cell's clear is not passed on", [][]byte{frame(`{"t":"display","id":"c0","item":{"clear":true}}`), result}, "", false},
		{"clear not a boolean", [][]byte{display(`{"clear":"yes"}`), result}, "", true},
		{"clear an object", [][]byte{display(`{"clear":{"a":[1]}}`), result}, "", true},
		{"wait not a boolean", [][]byte{display(`{"clear":true,"wait":1}`), result}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec clearRecorder
			c := socketConn(t, func(int) [][]byte { return tc.frames })
			defer c.Close()
			r, err := c.Exec(rec.request("c1", "x"), rec.stream)
			if tc.err {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("err %v, want ErrProtocol", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.String(); got != tc.want {
				t.Errorf("events %q\nwant   %q", got, tc.want)
			}
			// The result's own list keeps its items; a clear in it is no item.
			if len(r.Display) != 1 || r.Display[0].Data != "shown" {
				t.Errorf("result display %+v, want the one item", r.Display)
			}
		})
	}
}

// TestClearOutputCap: a cell that clears without end gets at most
// maxClearOutputs clears passed on; its displays still are.
func TestClearOutputCap(t *testing.T) {
	frames := make([][]byte, 0, maxClearOutputs+12)
	for i := 0; i < maxClearOutputs+10; i++ {
		frames = append(frames, rawFrame([]byte(`{"t":"display","id":"c1","item":{"clear":true,"wait":true}}`)))
	}
	frames = append(frames, rawFrame([]byte(`{"t":"display","id":"c1","item":{"mime":"text/plain","data":"after"}}`)),
		rawFrame([]byte(`{"t":"result","id":"c1","status":"ok"}`)))
	c := socketConn(t, func(int) [][]byte { return frames })
	defer c.Close()
	clears, displays := 0, 0
	_, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10,
		OnClearOutput: func(bool) { clears++ },
		OnDisplay:     func(DisplayItem) { displays++ }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if clears != maxClearOutputs || displays != 1 {
		t.Errorf("%d clears and %d displays passed on, want %d and 1", clears, displays, maxClearOutputs)
	}
}

// TestKernelClearOutput: IPython.display.clear_output() in a cell, with
// wait false and true, reaches the host in its place: after what the
// cell printed before it (ipykernel flushes the streams first), before
// what comes after; the display_pub's clear_output too. It adds nothing
// to the result.
func TestKernelClearOutput(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	var rec clearRecorder
	code := "from IPython.display import clear_output\nimport sys\nprint('a')\nsys.stderr.write('e')\nclear_output()\n" +
		"print('b')\nclear_output(wait=True)\ndisplay('c')\nget_ipython().display_pub.clear_output(wait=False)\nprint('d', end='')"
	r, err := k.execReq(rec.request(k.nextID(), code), rec.stream)
	if err != nil {
		t.Fatalf("%v\n%s", err, k.logText())
	}
	requireOK(t, r)
	want := "stdout:a\n|stderr:e|clear:wait=false|stdout:b\n|clear:wait=true|display:text/plain|clear:wait=false|stdout:d"
	if got := rec.String(); got != want {
		t.Errorf("events %q\nwant   %q", got, want)
	}
	if len(r.Display) != 1 || r.Display[0].MIME != "text/plain" || r.Stdout != "a\nb\nd" {
		t.Errorf("result display %+v, stdout %q: want the one display item and all the text", r.Display, r.Stdout)
	}
}
