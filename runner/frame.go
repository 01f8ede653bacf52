package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
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
	// Grow by doubling, but never past n: a frame costs at most 1.5 times
	// its size while it arrives (the old buffer and the new), not the 3
	// times of an unbounded bytes.Buffer.
	b := make([]byte, 0, smallFrame)
	for len(b) < int(n) {
		if len(b) == cap(b) {
			b = append(make([]byte, 0, min(2*cap(b), int(n))), b...)
		}
		k, err := r.Read(b[len(b):min(cap(b), int(n))])
		b = b[:len(b)+k]
		if err != nil && len(b) < int(n) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("read frame payload: %w", err)
		}
	}
	return b, nil
}

// unexpected turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Decoding a frame's JSON.
//
// A frame is at most maxFrame bytes, but json.Unmarshal of those bytes is
// not bounded by them: 22 million "{}" in a 64 MiB frame become 22 million
// structs (over a GiB), and a string of "\u0001" escapes re-encodes larger
// than it arrived. So frames are never unmarshalled whole. json.Valid checks
// the frame once (it allocates nothing and stops at 10,000 levels of
// nesting); then the walkers below find each field as a subslice of the
// frame, and a field is materialised only up to the budget its caller gives
// it: a list is counted before any element is decoded, a string is decoded
// only up to its limit.

// validObject checks that b is one valid JSON object, and returns it without
// surrounding whitespace.
func validObject(b []byte) ([]byte, error) {
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: frame is not valid JSON", ErrProtocol)
	}
	b = bytes.TrimSpace(b)
	if b[0] != '{' {
		return nil, fmt.Errorf("%w: frame is not a JSON object", ErrProtocol)
	}
	return b, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i] (a
// quote). b is valid JSON, so every backslash escapes the next byte.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value that starts at b[i]. b is
// valid JSON: a depth counter suffices, with no stack to grow.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// eachMember calls fn with the raw key (quotes included) and raw value of
// each member of obj, a valid JSON object, in order, until fn fails.
func eachMember(obj []byte, fn func(key, val []byte) error) error {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		k := skipString(obj, i)
		key := obj[i:k]
		i = skipSpace(obj, skipSpace(obj, k)+1) // past ':'
		v := skipValue(obj, i)
		if err := fn(key, obj[i:v]); err != nil {
			return err
		}
		i = skipSpace(obj, v)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return nil
}

// eachElement calls fn with each raw element of arr, a valid JSON array, in
// order, until fn returns false.
func eachElement(arr []byte, fn func(val []byte) bool) {
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		v := skipValue(arr, i)
		if !fn(arr[i:v]) {
			return
		}
		i = skipSpace(arr, v)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

// countElements counts the elements of arr, a valid JSON array, without
// decoding any.
func countElements(arr []byte) int {
	n := 0
	eachElement(arr, func([]byte) bool { n++; return true })
	return n
}

// kind is the JSON type of a raw value: '"', '{', '[', 'n' (null), 't' or
// 'f' (booleans), '0' for a number, or 0 if v is empty (the field was
// absent).
func kind(v []byte) byte {
	if len(v) == 0 {
		return 0 // absent
	}
	switch c := v[0]; c {
	case '"', '{', '[', 'n', 't', 'f':
		return c
	}
	return '0'
}

// stringRune decodes the character at s[i:], inside the body of a valid JSON
// string, and returns it with the index after it. Like encoding/json, it
// turns each invalid UTF-8 byte and each unpaired surrogate into U+FFFD, so
// whatever is decoded is valid UTF-8.
func stringRune(s []byte, i int) (rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		if c != '\\' {
			return rune(c), i + 1
		}
		switch s[i+1] {
		case 'b':
			return '\b', i + 2
		case 'f':
			return '\f', i + 2
		case 'n':
			return '\n', i + 2
		case 'r':
			return '\r', i + 2
		case 't':
			return '\t', i + 2
		case 'u':
			r := hex4(s[i+2:])
			if !utf16.IsSurrogate(r) {
				return r, i + 6
			}
			if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if d := utf16.DecodeRune(r, hex4(s[i+8:])); d != unicode.ReplacementChar {
					return d, i + 12
				}
			}
			return unicode.ReplacementChar, i + 6
		}
		return rune(s[i+1]), i + 2 // \" \\ \/
	}
	r, n := utf8.DecodeRune(s[i:])
	return r, i + n
}

func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// encodedLen is how many bytes r takes inside a JSON string as the API
// encodes responses (encoding/json without HTML escaping): a control
// character can take 6 bytes for its 1.
func encodedLen(r rune) int {
	switch {
	case r == '"' || r == '\\':
		return 2
	case r < 0x20:
		switch r {
		case '\b', '\f', '\n', '\r', '\t':
			return 2
		}
		return 6
	case r < utf8.RuneSelf:
		return 1
	case r == '\u2028' || r == '\u2029':
		return 6
	}
	return utf8.RuneLen(r)
}

// appendEncoded appends r as encodedLen counts it.
func appendEncoded(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	switch n := encodedLen(r); {
	case n == 1 || r >= utf8.RuneSelf && n < 6:
		return utf8.AppendRune(dst, r)
	case n == 2:
		switch r {
		case '\b':
			r = 'b'
		case '\f':
			r = 'f'
		case '\n':
			r = 'n'
		case '\r':
			r = 'r'
		case '\t':
			r = 't'
		}
		return append(dst, '\\', byte(r))
	}
	return append(dst, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}

// Modes of scanString.
const (
	measure   = iota // count only
	decode           // append the decoded UTF-8 text
	transcode        // append the text JSON-encoded, as a response carries it
)

// scanString reads the JSON string raw (quotes included, from a valid frame)
// up to the first character that would take the decoded text past maxDec
// bytes or its encoding past maxEnc bytes (quotes not counted), appending it
// to dst as mode says. It returns dst, the decoded and encoded sizes of what
// it took, and whether it stopped before the end. It never reads or appends
// past those limits, whatever the string's length.
func scanString(dst, raw []byte, maxDec, maxEnc, mode int) (out []byte, dec, enc int, cut bool) {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		// Fast path: a run of plain ASCII is 1 byte decoded and encoded.
		end := min(len(s), i+maxDec-dec, i+maxEnc-enc)
		j := i
		for j < end && plainASCII[s[j]] {
			j++
		}
		if j > i {
			if mode != measure {
				dst = append(dst, s[i:j]...)
			}
			dec += j - i
			enc += j - i
			i = j
			continue
		}
		r, next := stringRune(s, i)
		d, e := utf8.RuneLen(r), encodedLen(r)
		if dec+d > maxDec || enc+e > maxEnc {
			return dst, dec, enc, true
		}
		switch mode {
		case decode:
			dst = utf8.AppendRune(dst, r)
		case transcode:
			dst = appendEncoded(dst, r)
		}
		dec += d
		enc += e
		i = next
	}
	return dst, dec, enc, false
}

// plainASCII marks the bytes that stand for themselves in a JSON string,
// both in a frame and in a response.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unquote decodes the JSON string raw, cut to at most maxEnc bytes encoded.
// It measures first, so the text is allocated once, at its size.
func unquote(raw []byte, maxEnc int) (s string, enc int, cut bool) {
	maxEnc = max(maxEnc, 0)
	_, dec, _, _ := scanString(nil, raw, maxInt, maxEnc, measure)
	if dec == 0 {
		_, _, enc, cut = scanString(nil, raw, maxInt, maxEnc, measure)
		return "", enc, cut
	}
	b, _, enc, cut := scanString(make([]byte, 0, dec), raw, maxInt, maxEnc, decode)
	// As strings.Builder does: b is never written again.
	return unsafe.String(unsafe.SliceData(b), len(b)), enc, cut
}

const maxInt = int(^uint(0) >> 1)

// stringIs reports whether raw is a JSON string whose text is want, without
// decoding more of it than want's length.
func stringIs(raw []byte, want string) bool {
	if len(raw) == 0 || raw[0] != '"' {
		return false
	}
	// Fast path: what the kernel sends, with nothing escaped.
	if len(raw) == len(want)+2 && string(raw[1:len(raw)-1]) == want {
		return true
	}
	var buf [64]byte
	b, _, _, cut := scanString(buf[:0], raw, len(want), maxInt, decode)
	return !cut && string(b) == want
}

// canonical returns raw, a valid JSON value, as a response will carry it:
// compact, strings re-encoded the way encoding/json encodes them. It fails,
// allocating nothing, if the result would be longer than max bytes or nest
// deeper than maxDepth: the output goes to clients whose parsers may
// recurse.
func canonical(raw []byte, max, maxDepth int) ([]byte, bool) {
	_, n, ok := appendCanonical(nil, raw, max, maxDepth, measure)
	if !ok {
		return nil, false
	}
	out, _, _ := appendCanonical(make([]byte, 0, n), raw, max, maxDepth, transcode)
	return out, true
}

// appendCanonical appends the canonical form of raw to dst (mode transcode)
// or only counts it (mode measure), returning dst and its new length.
func appendCanonical(dst, raw []byte, max, maxDepth, mode int) ([]byte, int, bool) {
	n := len(dst)
	limit := n + max
	depth := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case isSpace(c):
			i++
			continue
		case c == '"':
			j := skipString(raw, i)
			var enc int
			var cut bool
			if mode == transcode {
				dst = append(dst, '"')
				dst, _, enc, cut = scanString(dst, raw[i:j], maxInt, limit-n-2, transcode)
				dst = append(dst, '"')
			} else {
				_, _, enc, cut = scanString(nil, raw[i:j], maxInt, limit-n-2, measure)
			}
			if cut {
				return dst, n, false
			}
			n += enc + 2
			i = j
			continue
		case c == '{' || c == '[':
			if depth++; depth > maxDepth {
				return dst, n, false
			}
		case c == '}' || c == ']':
			depth--
		}
		if n >= limit {
			return dst, n, false
		}
		if mode == transcode {
			dst = append(dst, c)
		}
		n++
		i++
	}
	return dst, n, n <= limit
}
