package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// WriteFrame writes v as one frame: a 4-byte big-endian length, then v as
// JSON. It refuses values whose JSON exceeds DefaultMaxFrame, which the
// kernel would refuse, and writes the frame with a single Write.
func WriteFrame(w io.Writer, v any) error {
	var buf bytes.Buffer
	buf.Write([]byte{0, 0, 0, 0})
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // cell code is full of < and &; keep it compact
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	n := len(b) - 4
	if n > DefaultMaxFrame {
		return fmt.Errorf("write frame of %d bytes, limit %d: %w", n, DefaultMaxFrame, ErrFrameTooLarge)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// smallFrame is allocated in one piece; larger frames grow as their bytes
// arrive, so a forged length alone cannot make the host allocate max.
const smallFrame = 64 << 10

// ReadFrame reads one frame and returns its payload, at most max bytes (max
// <= 0 means DefaultMaxFrame). A longer frame yields ErrFrameTooLarge without
// reading its payload. A clean end of stream before a frame yields io.EOF;
// one inside a frame yields io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("read frame of %d bytes, limit %d: %w", n, max, ErrFrameTooLarge)
	}
	if n <= smallFrame {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("read frame payload: %w", unexpected(err))
		}
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(smallFrame)
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, fmt.Errorf("read frame payload: %w", unexpected(err))
	}
	return buf.Bytes(), nil
}

// unexpected turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
