package jupyter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJupyterSignature: a message is accepted only with the HMAC-SHA256 of
// its four dicts under the key; anything else is refused with a reason.
func TestJupyterSignature(t *testing.T) {
	s := signer{key: []byte("secret")}
	frames, err := s.encode([][]byte{[]byte("peer")}, jheader{MsgID: "1", MsgType: "execute_request", Version: "5.3"}, nil, map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.decode(frames)
	if err != nil {
		t.Fatalf("a signed message was refused: %v", err)
	}
	if m.header.MsgType != "execute_request" || string(m.ids[0]) != "peer" || !bytes.Contains(m.content, []byte(`"code":"1"`)) {
		t.Errorf("decoded %+v", m)
	}
	clone := func() [][]byte {
		c := make([][]byte, len(frames))
		for i, f := range frames {
			c[i] = bytes.Clone(f)
		}
		return c
	}
	sig := 2 // after the routing id and the delimiter
	for name, mutate := range map[string]func([][]byte) [][]byte{
		"empty signature": func(f [][]byte) [][]byte { f[sig] = nil; return f },
		"other key": func(f [][]byte) [][]byte {
			f[sig] = signer{key: []byte("guess")}.sign(f[3], f[4], f[5], f[6])
			return f
		},
		"content changed": func(f [][]byte) [][]byte { f[6] = []byte(`{"code":"2"}`); return f },
		"header changed": func(f [][]byte) [][]byte {
			f[3] = bytes.Replace(f[3], []byte("execute"), []byte("shutdown"), 1)
			return f
		},
		"upper-case hex":  func(f [][]byte) [][]byte { f[sig] = bytes.ToUpper(f[sig]); return f },
		"no delimiter":    func(f [][]byte) [][]byte { return append(f[:1], f[2:]...) },
		"too few frames":  func(f [][]byte) [][]byte { return f[:6] },
		"header not JSON": func(f [][]byte) [][]byte { f[3] = []byte("x"); f[sig] = s.sign(f[3], f[4], f[5], f[6]); return f },
		"header without type": func(f [][]byte) [][]byte {
			f[3] = []byte(`{"msg_id":"1"}`)
			f[sig] = s.sign(f[3], f[4], f[5], f[6])
			return f
		},
	} {
		if _, err := s.decode(mutate(clone())); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestReadJupyterConnection: only a loopback, keyed, hmac-sha256 TCP
// connection file is accepted; each refusal names the field and what is
// allowed.
func TestReadJupyterConnection(t *testing.T) {
	good := map[string]any{"transport": "tcp", "ip": "127.0.0.1", "shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003,
		"control_port": 5004, "hb_port": 5005, "key": "k", "signature_scheme": "hmac-sha256", "kernel_name": "jailcell"}
	write := func(change map[string]any) string {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		for k, v := range change {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		p := filepath.Join(t.TempDir(), "kernel.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if c, err := ReadConnection(write(nil)); err != nil || c.endpoint("jailcell-tcp", c.ShellPort) != "jailcell-tcp://127.0.0.1:5001" {
		t.Fatalf("good file: %+v, %v", c, err)
	}
	if _, err := ReadConnection(write(map[string]any{"ip": "::1"})); err != nil {
		t.Errorf("::1: %v", err)
	}
	// Jupyter's ipc: the ip is a path prefix, the sockets IP-PORT.
	if c, err := ReadConnection(write(map[string]any{"transport": "ipc", "ip": "/run/user/1/jupyter/kernel-1-ipc", "shell_port": 1})); err != nil || c.endpoint("x", 1) != "x:///run/user/1/jupyter/kernel-1-ipc-1" {
		t.Errorf("ipc: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		change map[string]any
		want   string
	}{
		{map[string]any{"key": ""}, "key is empty: refusing to run unauthenticated"},
		{map[string]any{"ip": "0.0.0.0"}, `ip "0.0.0.0": must be a loopback address`},
		{map[string]any{"ip": "10.0.0.1"}, `ip "10.0.0.1": must be a loopback address`},
		{map[string]any{"transport": "udp"}, `transport "udp": only "tcp" and "ipc"`},
		{map[string]any{"transport": "ipc", "ip": ""}, `ip "": with transport "ipc" it must be the sockets' path prefix`},
		{map[string]any{"signature_scheme": "hmac-md5"}, `signature_scheme "hmac-md5": only "hmac-sha256"`},
		{map[string]any{"hb_port": 0}, "hb_port 0: must be a port (tcp) or socket number (ipc), 1-65535"},
		{map[string]any{"shell_port": "5001"}, "is not a Jupyter connection file"},
	} {
		_, err := ReadConnection(write(tc.change))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.change, err, tc.want)
		}
	}
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), maxConnectionFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConnection(big); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("oversized file: %v", err)
	}
}

// zmtpFrame is one ZMTP 3 frame as a peer sends it.
func zmtpFrame(body []byte, more, long bool) []byte {
	flags := byte(0)
	if more {
		flags |= 0x01
	}
	if long || len(body) > 255 {
		var h [9]byte
		h[0] = flags | 0x02
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h[:], body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// guardCases are streams after the 64-byte greeting, and whether the
// guard must refuse them. They seed FuzzZMTPGuard.
var guardCases = []struct {
	name   string
	stream []byte
	refuse bool
}{
	{"small message", append(zmtpFrame([]byte("a"), true, false), zmtpFrame([]byte("bb"), false, false)...), false},
	{"long header, small body", zmtpFrame([]byte("abc"), false, true), false},
	{"frame at the limit", zmtpFrame(make([]byte, 1024), false, false), false},
	{"claims an exabyte", []byte{0x02, 0x10, 0, 0, 0, 0, 0, 0, 0}, true},
	{"claims 2^64-1", []byte{0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
	{"too many frames", bytes.Repeat(zmtpFrame([]byte("x"), true, false), 9), true},
	{"many messages, each small", bytes.Repeat(zmtpFrame([]byte("x"), false, false), 100), false},
	{"parts over the total", append(zmtpFrame(make([]byte, 700), true, false), zmtpFrame(make([]byte, 700), false, false)...), true},
}

// newTestGuard bounds messages to 1 KiB and 8 frames.
func newTestGuard() *zmtpGuard {
	return &zmtpGuard{greeting: 64, maxMessage: 1024, maxFrames: 8}
}

// TestZMTPGuard: the guard refuses a header promising more than the
// bounds before its body is read, whatever the chunking of the reads.
func TestZMTPGuard(t *testing.T) {
	for _, tc := range guardCases {
		stream := append(make([]byte, 64), tc.stream...)
		for _, chunk := range []int{1, 3, 64, len(stream)} {
			g := newTestGuard()
			var err error
			for i := 0; i < len(stream) && err == nil; i += chunk {
				err = g.scan(stream[i:min(i+chunk, len(stream))])
			}
			if (err != nil) != tc.refuse {
				t.Errorf("%s, reads of %d: error %v, want refused %v", tc.name, chunk, err, tc.refuse)
			}
		}
	}
}

// FuzzZMTPGuard: whatever a peer sends, the guard never lets a frame
// through that promises more than the bounds, and never panics.
func FuzzZMTPGuard(f *testing.F) {
	for _, tc := range guardCases {
		f.Add(tc.stream)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		g := newTestGuard()
		if err := g.scan(append(make([]byte, 64), stream...)); err != nil {
			return
		}
		if g.body > g.maxMessage || g.msgBytes > g.maxMessage || g.msgFrames > g.maxFrames {
			t.Fatalf("accepted a stream leaving %+v", g)
		}
	})
}
