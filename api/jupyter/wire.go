package jupyter

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Jupyter's wire protocol (messaging spec 5.3) over ZMQ: the connection
// file, the signed multipart message, and the frame guard that bounds what
// a peer may make this process allocate (the transports that use it are in
// transport.go).

// JupyterProtocolVersion is the messaging protocol this kernel speaks.
const JupyterProtocolVersion = "5.3"

// Bounds on what a peer of the kernel's ports may send. go-zeromq
// allocates each frame at the length its header claims, so without them
// any local user able to reach a port could make the kernel allocate an
// exabyte with a 9-byte header.
const (
	// JupyterMaxMessage caps one incoming message, all frames together: a
	// cell's code, as large as an exec request may be.
	JupyterMaxMessage = 32 << 20
	// jupyterMaxFrames caps the frames of one message: routing ids, the
	// delimiter, the signature, four dicts and a few buffers.
	jupyterMaxFrames = 64
	// maxConnectionFile caps the connection file read.
	maxConnectionFile = 64 << 10
)

// Connection is a kernel's connection file, as Jupyter writes it.
type Connection struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name,omitempty"`
}

// ReadConnection reads and checks a connection file. The kernel
// refuses to run unauthenticated (an empty key: any local user could run
// cells in this user's session) and listens on loopback only (tcp) or on
// Unix sockets (ipc, Jupyter's "transport": "ipc").
func ReadConnection(path string) (*Connection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read connection file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConnectionFile+1))
	if err != nil {
		return nil, fmt.Errorf("read connection file %s: %w", path, err)
	}
	if len(b) > maxConnectionFile {
		return nil, fmt.Errorf("connection file %s is over %d bytes", path, maxConnectionFile)
	}
	var c Connection
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("connection file %s is not a Jupyter connection file: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("connection file %s: %w", path, err)
	}
	return &c, nil
}

func (c *Connection) check() error {
	switch c.Transport {
	case "tcp":
		ip, err := netip.ParseAddr(c.IP)
		if err != nil || !ip.IsLoopback() {
			return fmt.Errorf("ip %q: must be a loopback address (127.0.0.1 or ::1): the ports take cells to run as you", c.IP)
		}
	case "ipc":
		// Jupyter's ipc "ip" is a path prefix, the sockets IP-PORT: in the
		// runtime directory for a Jupyter server, "kernel-ipc" in the
		// working directory for a bare KernelManager. Where they may be
		// made is the transport's check (a private directory).
		if c.IP == "" || strings.ContainsRune(c.IP, 0) {
			return fmt.Errorf(`ip %q: with transport "ipc" it must be the sockets' path prefix (Jupyter's is the connection file's path without ".json", plus "-ipc")`, c.IP)
		}
	default:
		return fmt.Errorf(`transport %q: only "tcp" and "ipc" are supported`, c.Transport)
	}
	if c.SignatureScheme != "hmac-sha256" {
		return fmt.Errorf(`signature_scheme %q: only "hmac-sha256" is supported`, c.SignatureScheme)
	}
	if c.Key == "" {
		return errors.New(`key is empty: refusing to run unauthenticated (any local user could run cells as you); let Jupyter write a key`)
	}
	for name, p := range map[string]int{"shell_port": c.ShellPort, "iopub_port": c.IOPubPort, "stdin_port": c.StdinPort, "control_port": c.ControlPort, "hb_port": c.HBPort} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("%s %d: must be a port (tcp) or socket number (ipc), 1-65535", name, p)
		}
	}
	return nil
}

// endpoint is the ZMQ endpoint of port through the transport registered
// as name: host:port for tcp, Jupyter's IP-PORT path for ipc.
func (c *Connection) endpoint(name string, port int) string {
	if c.Transport == "ipc" {
		return name + "://" + c.IP + "-" + strconv.Itoa(port)
	}
	return name + "://" + net.JoinHostPort(c.IP, strconv.Itoa(port))
}

// zmtpGuard follows ZMTP 3 framing over the bytes read and fails before a
// frame header promising too much reaches the library: a 64-byte
// greeting, then frames of a flags byte, a 1- or 8-byte length and the
// body. Commands (the handshake) count like messages.
type zmtpGuard struct {
	greeting   int // greeting bytes still to pass
	hdr        [9]byte
	hdrHave    int
	body       uint64 // body bytes still to pass
	msgBytes   uint64
	msgFrames  int
	maxMessage uint64
	maxFrames  int
	inCmd      bool // the body being passed is a command's
	commands   int  // command frames passed whole (the handshake's READY is the first)
}

// errTooLarge is a peer's message over the bounds.
var errTooLarge = errors.New("jupyter: incoming ZMQ message over the kernel's size bounds; connection dropped")

func (g *zmtpGuard) scan(p []byte) error {
	for len(p) > 0 {
		switch {
		case g.greeting > 0:
			n := min(g.greeting, len(p))
			g.greeting -= n
			p = p[n:]
		case g.body > 0:
			n := min(g.body, uint64(len(p)))
			g.body -= n
			p = p[n:]
			if g.body == 0 && g.inCmd {
				g.commands++
			}
		default:
			g.hdr[g.hdrHave] = p[0]
			g.hdrHave++
			p = p[1:]
			need := 2
			if g.hdr[0]&0x02 != 0 { // long frame
				need = 9
			}
			if g.hdrHave < need {
				continue
			}
			size := uint64(g.hdr[1])
			if need == 9 {
				size = binary.BigEndian.Uint64(g.hdr[1:9])
			}
			more := g.hdr[0]&0x01 != 0
			g.hdrHave = 0
			g.msgFrames++
			g.msgBytes += min(size, g.maxMessage+1)
			if size > g.maxMessage || g.msgBytes > g.maxMessage || g.msgFrames > g.maxFrames {
				return errTooLarge
			}
			g.body = size
			g.inCmd = g.hdr[0]&0x04 != 0
			if g.inCmd && size == 0 {
				g.commands++
			}
			if !more {
				g.msgBytes, g.msgFrames = 0, 0
			}
		}
	}
	return nil
}

// jupyterDelim separates routing ids from the message proper.
var jupyterDelim = []byte("<IDS|MSG>")

// jmsg is one Jupyter message. Header and parent stay raw: a reply's
// parent is the request's header, byte for byte.
type jmsg struct {
	ids      [][]byte
	header   jheader
	rawHdr   json.RawMessage
	parent   json.RawMessage
	metadata json.RawMessage
	content  json.RawMessage
}

type jheader struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// signer signs and checks messages with the connection's key.
type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write(p)
	}
	sum := m.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// decode splits a received multipart message and checks its signature in
// constant time. Every error means the message is dropped unanswered.
func (s signer) decode(frames [][]byte) (*jmsg, error) {
	i := 0
	for i < len(frames) && string(frames[i]) != string(jupyterDelim) {
		i++
	}
	if i == len(frames) {
		return nil, errors.New("no <IDS|MSG> delimiter")
	}
	rest := frames[i+1:]
	if len(rest) < 5 {
		return nil, fmt.Errorf("%d frames after the delimiter, want at least 5 (signature, header, parent, metadata, content)", len(rest))
	}
	want := s.sign(rest[1], rest[2], rest[3], rest[4])
	if !hmac.Equal(rest[0], want) {
		return nil, errors.New("bad or missing HMAC signature")
	}
	m := &jmsg{ids: frames[:i], rawHdr: rest[1], parent: rest[2], metadata: rest[3], content: rest[4]}
	if err := json.Unmarshal(rest[1], &m.header); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	}
	if m.header.MsgType == "" {
		return nil, errors.New("header without msg_type")
	}
	if len(m.content) == 0 || m.content[0] != '{' {
		m.content = json.RawMessage("{}")
	}
	return m, nil
}

// encode builds a signed multipart message; parent may be nil (none).
func (s signer) encode(ids [][]byte, hdr jheader, parent json.RawMessage, content any) ([][]byte, error) {
	h, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	if len(parent) == 0 {
		parent = json.RawMessage("{}")
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encode %s content: %w", hdr.MsgType, err)
	}
	meta := []byte("{}")
	frames := make([][]byte, 0, len(ids)+6)
	frames = append(frames, ids...)
	frames = append(frames, jupyterDelim, s.sign(h, parent, meta, c), h, parent, meta, c)
	return frames, nil
}
