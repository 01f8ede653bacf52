package runner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// fuzzMaxFrame is the frame limit the ReadFrame seeds are written against.
const fuzzMaxFrame = 1024

// readSeedCorpus returns the []byte seeds of a fuzz target, by file name,
// from testdata/fuzz/<target>: the corpus the fuzzer starts from is the one
// the unit tests check.
func readSeedCorpus(t *testing.T, target string) map[string][]byte {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read seed corpus: %v", err)
	}
	seeds := make(map[string][]byte)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("seed %s: not a go fuzz v1 corpus file", e.Name())
		}
		arg := strings.TrimSpace(lines[1])
		if !strings.HasPrefix(arg, "[]byte(") || !strings.HasSuffix(arg, ")") {
			t.Fatalf("seed %s: want one []byte value, got %q", e.Name(), arg)
		}
		s, err := strconv.Unquote(arg[len("[]byte(") : len(arg)-1])
		if err != nil {
			t.Fatalf("seed %s: %v", e.Name(), err)
		}
		seeds[e.Name()] = []byte(s)
	}
	return seeds
}

func TestWriteFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	v := map[string]string{"t": "exec", "id": "c1", "code": "print('<a & b>')\n"}
	if err := WriteFrame(&buf, v); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFrame(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"print('<a & b>')\n","id":"c1","t":"exec"}`
	if string(b) != want {
		t.Fatalf("payload %s, want %s", b, want)
	}
	if buf.Len() != 0 {
		t.Fatalf("%d bytes left after one frame", buf.Len())
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	var buf bytes.Buffer
	err := WriteFrame(&buf, strings.Repeat("x", DefaultMaxFrame))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %d bytes of a refused frame", buf.Len())
	}
}

// TestReadFrame runs the seed corpus of FuzzReadFrame with the outcome
// expected of each seed.
func TestReadFrame(t *testing.T) {
	type want struct {
		frames []string // payloads, in order
		err    error    // ending the stream
	}
	cases := map[string]want{
		"empty":                {nil, io.EOF},
		"hello":                {[]string{`{"t":"hello","pid":2,"python":"3.11.2","cells":0,"busy":false}`}, io.EOF},
		"two-frames":           {[]string{`{"t":"stream","id":"c1","name":"stdout","text":"hi\n"}`, `{"t":"result","id":"c1","status":"ok"}`}, io.EOF},
		"zero-length":          {[]string{""}, io.EOF},
		"short-header":         {nil, io.ErrUnexpectedEOF},
		"short-payload":        {nil, io.ErrUnexpectedEOF},
		"too-large":            {nil, ErrFrameTooLarge},
		"huge-header":          {nil, ErrFrameTooLarge},
		"exactly-max":          {[]string{strings.Repeat("a", fuzzMaxFrame)}, io.EOF},
		"frame-then-too-large": {[]string{`{}`}, ErrFrameTooLarge},
	}
	seeds := readSeedCorpus(t, "FuzzReadFrame")
	names := make([]string, 0, len(seeds))
	for name := range seeds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			w, ok := cases[name]
			if !ok {
				t.Fatalf("seed %s has no expected outcome in this table", name)
			}
			r := bytes.NewReader(seeds[name])
			var got []string
			var err error
			for {
				var b []byte
				if b, err = ReadFrame(r, fuzzMaxFrame); err != nil {
					break
				}
				got = append(got, string(b))
			}
			if !errors.Is(err, w.err) {
				t.Errorf("stream ended with %v, want %v", err, w.err)
			}
			if strings.Join(got, "\x00") != strings.Join(w.frames, "\x00") || len(got) != len(w.frames) {
				t.Errorf("frames %q, want %q", got, w.frames)
			}
			checkReadFrame(t, seeds[name])
		})
	}
	for name := range cases {
		if _, ok := seeds[name]; !ok {
			t.Errorf("case %s has no seed file in testdata/fuzz/FuzzReadFrame", name)
		}
	}
}

// checkReadFrame reads data frame by frame and checks the decoder's
// invariants: payloads are exactly what the headers say and never over the
// limit, and every error is explained by the input.
func checkReadFrame(t *testing.T, data []byte) {
	t.Helper()
	r := bytes.NewReader(data)
	off := 0
	for {
		b, err := ReadFrame(r, fuzzMaxFrame)
		rest := data[off:]
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			if len(rest) != 0 {
				t.Fatalf("io.EOF with %d bytes left", len(rest))
			}
			return
		case errors.Is(err, io.ErrUnexpectedEOF):
			if len(rest) >= 4 && int(binary.BigEndian.Uint32(rest)) <= len(rest)-4 {
				t.Fatalf("unexpected EOF although the frame is complete")
			}
			return
		case errors.Is(err, ErrFrameTooLarge):
			if len(rest) < 4 || binary.BigEndian.Uint32(rest) <= fuzzMaxFrame {
				t.Fatalf("ErrFrameTooLarge for a frame within the limit")
			}
			return
		default:
			t.Fatalf("unexpected error %v", err)
		}
		if len(b) > fuzzMaxFrame {
			t.Fatalf("payload of %d bytes over the limit %d", len(b), fuzzMaxFrame)
		}
		if n := int(binary.BigEndian.Uint32(rest)); n != len(b) || !bytes.Equal(rest[4:4+n], b) {
			t.Fatalf("payload does not match its frame")
		}
		off += 4 + len(b)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkReadFrame(t, data)
	})
}

// A control directory deeper than sun_path's 107 bytes still gets its
// socket, at the directory's own path.
func TestListenLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 120 {
		dir = filepath.Join(dir, "deeper-directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(dir)
	if err != nil {
		t.Fatalf("Listen(%d-byte dir): %v", len(dir), err)
	}
	defer l.Close()
	fi, err := os.Lstat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket at the long path: %v %v", fi, err)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	// A client reaches it through the same short-alias trick.
	d, _ := os.Open(dir)
	defer d.Close()
	c, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), SocketName))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
}
