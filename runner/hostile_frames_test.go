package runner

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// rawFrame is payload with its length header, written as it is: a forged
// frame need not be JSON the kernel would write.
func rawFrame(payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// repeatJoin is n copies of item separated by commas.
func repeatJoin(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// socketConn is a Conn over a real socketpair whose other end is a fake
// kernel: it says hello, and answers each exec with the frames reply gives.
func socketConn(t *testing.T, reply func(n int) [][]byte) *Conn {
	t.Helper()
	host, kernel := unixPair(t)
	go func() {
		if WriteFrame(kernel, map[string]any{"t": "hello", "pid": 2, "python": "3.11.2", "acks": true}) != nil {
			return
		}
		for n := 0; ; n++ {
			if _, err := ReadFrame(kernel, 0); err != nil {
				return
			}
			for _, f := range reply(n) {
				if _, err := kernel.Write(f); err != nil {
					return
				}
			}
		}
	}()
	return handshakeT(t, host)
}

// handshakeT is handshake on the host's end, failing t.
func handshakeT(t *testing.T, host *net.UnixConn) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := handshake(ctx, host, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unixPair is a connected socketpair: the host's end and the fake
// kernel's, both closed when t ends.
func unixPair(t *testing.T) (host, kernel *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	host, kernel = conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { host.Close(); kernel.Close() })
	return host, kernel
}

// TestHostileForgedResultFrames forges frames over a real socket, each
// under the 64 MiB frame limit, that cost the daemon GiBs when result
// frames were unmarshalled whole (22M empty traceback frames: +7.1 GiB and
// a 650 MiB response line through `jailcell json`). Each must come out of
// Exec within MaxResultJSON encoded, with the daemon allocating no more
// than twice what it read plus twice that bound, and the connection must
// still run the next cell.
func TestHostileForgedResultFrames(t *testing.T) {
	const maxOutput = 64 << 10
	res := func(id, rest string) []byte {
		return rawFrame([]byte(`{"t":"result","id":"` + id + `","status":"error",` + rest + `}`))
	}
	errRes := func(id, e string) []byte { return res(id, `"error":`+e) }
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	cases := []struct {
		name   string
		frames func(id string) [][]byte
		check  func(t *testing.T, r *Result)
	}{
		{"traceback frame list bomb", func(id string) [][]byte {
			return [][]byte{errRes(id, `{"type":"X","message":"m","traceback":"","frames":[`+repeatJoin("{}", 22_000_000)+`]}`)}
		}, func(t *testing.T, r *Result) {
			if n := len(r.Error.Frames); n != maxFrames+1 || !strings.Contains(r.Error.Frames[maxFrames/2].Name, "21999800 frames left out") {
				t.Errorf("%d frames, middle %+v; want %d and one note", n, r.Error.Frames[min(n-1, maxFrames/2)], maxFrames+1)
			}
		}},
		{"display list bomb after a value near the budget", func(id string) [][]byte {
			value := `"value":{"text/plain":"` + strings.Repeat("v", maxRichBytes-1000) + `"}`
			return [][]byte{res(id, value+`,"display":[`+repeatJoin(`{"mime":"a","data":""}`, 1_300_000)+`]`)}
		}, func(t *testing.T, r *Result) {
			if n := len(r.Display); n == 0 || n > maxDisplayItems+1 || !strings.Contains(r.Display[n-1].Data, "display items dropped") {
				t.Errorf("%d display items, last %+v; want at most %d and one note", n, r.Display[max(n-1, 0)], maxDisplayItems+1)
			}
		}},
		{"empty display items", func(id string) [][]byte {
			return [][]byte{res(id, `"display":[`+repeatJoin("{}", 20_000_000)+`]`)}
		}, func(t *testing.T, r *Result) {
			if len(r.Display) != 0 {
				t.Errorf("%d display items from items without a MIME type", len(r.Display))
			}
		}},
		{"bundle map bomb", func(id string) [][]byte {
			var b strings.Builder
			for i := range 3_000_000 {
				fmt.Fprintf(&b, `"k%d":"",`, i)
			}
			return [][]byte{res(id, `"display":[{"mime":"text/plain","data":"x","bundle":{`+strings.TrimSuffix(b.String(), ",")+`}}]`)}
		}, func(t *testing.T, r *Result) {
			if len(r.Display) != 1 || len(r.Display[0].Bundle) > maxBundleEntries {
				t.Errorf("display %d items, bundle of %d entries; want 1 of at most %d", len(r.Display), len(r.Display[0].Bundle), maxBundleEntries)
			}
		}},
		{"empty arrays in a bundle value", func(id string) [][]byte {
			return [][]byte{res(id, `"value":{"text/plain":"x","application/json":[`+repeatJoin("[]", 20_000_000)+`]}`)}
		}, func(t *testing.T, r *Result) {
			if _, ok := r.Value["application/json"].(json.RawMessage); ok {
				t.Errorf("a 60 MB bundle value kept, over the %d-byte budget", maxRichBytes)
			}
		}},
		{"deep nesting in a bundle value", func(id string) [][]byte {
			return [][]byte{res(id, `"display":[{"mime":"application/json","data":"x","bundle":{"application/json":`+deep+`}},{"mime":"text/plain","data":"ok"}]`)}
		}, func(t *testing.T, r *Result) {
			if len(r.Display) != 2 || r.Display[0].Data != "ok" || !strings.Contains(r.Display[1].Data, "1 display items dropped") {
				t.Errorf("display %.300v, want the deep item dropped with a note", r.Display)
			}
		}},
		{"huge escaped strings in the error", func(id string) [][]byte {
			esc := strings.Repeat(`\u0001`, 2_500_000)
			return [][]byte{errRes(id, `{"type":"`+esc+`","message":"`+esc+`","traceback":"`+esc+`","frames":[{"file":"`+esc+`","line":1e400,"name":"\ud800","code":"`+strings.Repeat("\xff", 1<<20)+`"}]}`)}
		}, func(t *testing.T, r *Result) {
			e := r.Error
			if len(e.Type) > maxErrorType || !strings.Contains(e.Message, "cut by the host") || !strings.Contains(e.Traceback, "cut by the host") {
				t.Errorf("error type %d bytes, message %.80q..., traceback %.80q...", len(e.Type), e.Message, e.Traceback)
			}
			if len(e.Frames) != 1 || e.Frames[0].Line != 0 || e.Frames[0].Name != "\uFFFD" || !utf8.ValidString(e.Frames[0].Code) {
				t.Errorf("frame %.200v", e.Frames)
			}
		}},
		{"stream flood", func(id string) [][]byte {
			var fs [][]byte
			chunk := `"text":"` + strings.Repeat(`\u0002`, 1000) + `"}`
			for i := range 20_000 {
				fid := id
				if i%2 == 1 {
					fid = "other"
				}
				fs = append(fs, rawFrame([]byte(`{"t":"stream","id":"`+fid+`","name":"stdout",`+chunk)))
			}
			return append(fs, res(id, `"status":"ok"`))
		}, func(t *testing.T, r *Result) {
			if len(r.Stdout) != maxOutput || !r.StdoutTruncated {
				t.Errorf("stdout %d bytes, truncated %v; want %d and truncated", len(r.Stdout), r.StdoutTruncated, maxOutput)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frames := tc.frames("c1")
			read := 0
			for _, f := range frames {
				if len(f)-4 > DefaultMaxFrame {
					t.Fatalf("test frame of %d bytes is over the frame limit", len(f)-4)
				}
				read += len(f)
			}
			c := socketConn(t, func(n int) [][]byte {
				if n == 0 {
					return frames
				}
				return [][]byte{rawFrame([]byte(`{"t":"result","id":"c2","status":"ok","value":{"text/plain":"fine"}}`))}
			})
			defer c.Close()
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			r, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: maxOutput}, nil)
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			frames = nil
			enc, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			bound := MaxResultJSON(maxOutput)
			if int64(len(enc)) > bound {
				t.Errorf("result is %d bytes encoded, over MaxResultJSON %d", len(enc), bound)
			}
			alloc := m1.TotalAlloc - m0.TotalAlloc
			if limit := uint64(2*read) + uint64(2*bound); alloc > limit {
				t.Errorf("Exec allocated %d MiB for %d MiB of frames, over %d MiB", alloc>>20, read>>20, limit>>20)
			}
			t.Logf("%d MiB of frames: allocated %d MiB, result %d KiB encoded", read>>20, alloc>>20, len(enc)>>10)
			tc.check(t, r)
			if r2, err := c.Exec(ExecRequest{ID: "c2", Code: "y", MaxOutput: maxOutput}, nil); err != nil || r2.Value["text/plain"] != "fine" {
				t.Errorf("next cell: %+v, %v", r2, err)
			}
		})
	}
}

// TestHostileForgedHello: whatever connects first may send a 64 MiB hello;
// Accept reads it within the frame limit and decodes none of its bulk.
func TestHostileForgedHello(t *testing.T) {
	big := []byte(`{"t":"hello","pid":2,"python":"` + strings.Repeat(`\u0001`, 10<<20) + `","junk":[` + repeatJoin("{}", 1_000_000) + `]}`)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := decodeHello(big)
	runtime.ReadMemStats(&m1)
	if err == nil {
		t.Fatal("a hello with a 60 MB version string was accepted")
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 1<<20 {
		t.Errorf("decoding a hostile hello allocated %d KiB", alloc>>10)
	}
}

// TestScanStringMatchesEncodingJSON: the bounded decoder reads strings as
// encoding/json does, and counts their encoding as the API writes it.
func TestScanStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range scanSeeds {
		checkScanString(t, []byte(s))
	}
}

var scanSeeds = []string{
	`""`, `"plain"`, `"\u0001\b\f\n\r\t\"\\\/"`, `"\ud83d\ude00 \ud800 \udc00x \ud800\u0041"`,
	"\"\xff\xfe\xc3\"", `"<>&  é 😀"`, `"\u00e9\u0000"`,
}

func checkScanString(t *testing.T, raw []byte) {
	t.Helper()
	var want string
	raw = bytes.TrimSpace(raw) // callers pass values without the space around them
	if !json.Valid(raw) || raw[0] != '"' || json.Unmarshal(raw, &want) != nil {
		return
	}
	got, enc, cut := unquote(raw, maxInt)
	if cut || got != want {
		t.Fatalf("unquote(%q) = %q (cut %v), encoding/json gives %q", raw, got, cut, want)
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	e.Encode(want)
	if wantEnc := buf.Len() - 3; enc != wantEnc { // quotes and newline
		t.Fatalf("encoded size of %q = %d, encoding/json writes %d", raw, enc, wantEnc)
	}
	tr, _, _, _ := scanString(nil, raw, maxInt, maxInt, transcode)
	if string(tr) != buf.String()[1:buf.Len()-2] {
		t.Fatalf("transcode(%q) = %q, encoding/json writes %q", raw, tr, buf.String())
	}
	for n := 0; n <= enc; n++ {
		part, penc, cut := unquote(raw, n)
		if penc > n || !strings.HasPrefix(want, part) || !utf8.ValidString(part) || cut != (penc < enc) {
			t.Fatalf("unquote(%q, %d) = %q, %d bytes, cut %v", raw, n, part, penc, cut)
		}
	}
	canon, ok := canonical(raw, maxInt, 1)
	if !ok || string(canon) != buf.String()[:buf.Len()-1] {
		t.Fatalf("appendCanonical(%q) = %q, want %q", raw, canon, buf.String())
	}
}

func FuzzScanString(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkScanString)
}

// TestKernelDisplayLimit: the kernel keeps DISPLAY_LIMIT items and says in
// one note how many it dropped, so the host's cap never cuts a real item.
func TestKernelDisplayLimit(t *testing.T) {
	k := startKernel(t)
	r := k.exec("for i in range(1500):\n    display(i)")
	if len(r.Display) != maxDisplayItems || r.Display[998].Data != "998" || !strings.Contains(r.Display[999].Data, "[501 display items dropped") {
		t.Fatalf("%d display items, last %+v", len(r.Display), r.Display[len(r.Display)-1])
	}
}

// TestHostileForgedDisplayFrames: a cell can write display frames of its
// own, as many as it likes. Those passed to OnDisplay stay within the
// result's display budget (maxDisplayItems items, maxRichBytes of JSON)
// however many come, frames of other cells are not passed on, a frame of
// the wrong shape breaks the link as any other, and the next cell runs.
func TestHostileForgedDisplayFrames(t *testing.T) {
	disp := func(id, item string) []byte {
		return rawFrame([]byte(`{"t":"display","id":"` + id + `","item":` + item + `}`))
	}
	big := `{"mime":"text/plain","data":"` + strings.Repeat(`\u0003`, 8<<20/6) + `"}`
	cases := []struct {
		name      string
		frames    func() [][]byte
		wantItems int   // exactly, or -1 for "within the caps"
		wantBytes int64 // at most, summed JSON of the items passed on
		wantErr   bool
	}{
		{"item count flood", func() [][]byte {
			var fs [][]byte
			for range 50_000 {
				fs = append(fs, disp("c1", `{"mime":"text/plain","data":"x"}`))
			}
			return fs
		}, maxDisplayItems, maxRichBytes, false},
		{"byte flood", func() [][]byte {
			var fs [][]byte
			for range 40 { // 40 frames of 8 MiB of escapes: 320 MiB read
				fs = append(fs, disp("c1", big))
			}
			return fs
		}, -1, maxRichBytes, false},
		{"other cells and junk items", func() [][]byte {
			return [][]byte{
				disp("other", `{"mime":"text/plain","data":"not mine"}`),
				disp("c1", `{}`),
				disp("c1", `null`),
				disp("c1", `{"mime":"","data":"no type"}`),
				disp("c1", `{"mime":"text/plain","data":"mine"}`),
			}
		}, 1, 1 << 10, false},
		{"item of the wrong type", func() [][]byte {
			return [][]byte{disp("c1", `"a string"`)}
		}, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frames := append(tc.frames(), rawFrame([]byte(`{"t":"result","id":"c1","status":"ok"}`)))
			c := socketConn(t, func(n int) [][]byte {
				if n == 0 {
					return frames
				}
				return [][]byte{rawFrame([]byte(`{"t":"result","id":"c2","status":"ok","value":{"text/plain":"fine"}}`))}
			})
			defer c.Close()
			var items int
			var bytes int64
			_, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10, OnDisplay: func(d DisplayItem) {
				b, _ := json.Marshal(d)
				items++
				bytes += int64(len(b))
			}}, nil)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "not an object") {
					t.Fatalf("exec err %v, want a protocol error naming the item", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if tc.wantItems >= 0 && items != tc.wantItems {
				t.Errorf("%d display items passed on, want %d", items, tc.wantItems)
			}
			if items > maxDisplayItems || bytes > tc.wantBytes {
				t.Errorf("%d items, %d bytes passed on; caps %d items, %d bytes", items, bytes, maxDisplayItems, tc.wantBytes)
			}
			t.Logf("%d items, %d KiB passed on", items, bytes>>10)
			if r2, err := c.Exec(ExecRequest{ID: "c2", Code: "y", MaxOutput: 1 << 10}, nil); err != nil || r2.Value["text/plain"] != "fine" {
				t.Errorf("next cell: %+v, %v", r2, err)
			}
		})
	}
}

// TestRequestToAKernelThatStopsReading: a command's input written to a
// kernel that no longer reads (a cell holding the GIL) ends at the
// request's deadline, breaking the connection, instead of blocking the
// write, and the session, for good.
func TestRequestToAKernelThatStopsReading(t *testing.T) {
	host, kernel := unixPair(t)
	go func() {
		_ = WriteFrame(kernel, map[string]any{"t": "hello", "pid": 2, "python": "3.11.2", "acks": true})
		// Then nothing is read: the socket's buffers fill.
	}()
	c := handshakeT(t, host)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Command(ctx, CommandRequest{ID: "in1", Action: CommandInput, Job: "job-1", Input: strings.Repeat("x", MaxCommandInput)}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("input to a kernel that reads nothing was answered")
		}
		t.Logf("ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the write to a kernel that stopped reading is still blocked 15 s after its 200 ms deadline")
	}
}
