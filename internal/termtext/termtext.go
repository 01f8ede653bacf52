package termtext

import "strings"

const esc = 0x1b

// states of the machine.
const (
	text     = iota // plain text
	escape          // after ESC
	escInter        // ESC and intermediate bytes: waiting for the final byte
	csi             // inside a CSI sequence
	str             // inside an OSC/DCS/SOS/PM/APC string
	strEsc          // inside a string, after an ESC (ST is ESC '\')
)

// Cleaner cleans one stream of text written in pieces: the concatenation
// of what Write returns for each piece, then Flush, is Clean of the
// concatenated pieces. The zero value is ready to use. Not safe for
// concurrent use.
type Cleaner struct {
	state int
	// crs counts the "\r" bytes held back: whether they are shown depends
	// on the next byte of text (a "\n" drops them).
	crs int
}

// Clean returns s without escape sequences, with each run of "\r" before a
// "\n" dropped.
func Clean(s string) string {
	if !needsWork(s) {
		return s
	}
	var c Cleaner
	var b strings.Builder
	b.Grow(len(s))
	c.write(&b, s)
	c.flush(&b)
	return b.String()
}

// needsWork reports whether s has an ESC or a "\r": without either, s is
// its own cleaned text.
func needsWork(s string) bool {
	return strings.IndexByte(s, esc) >= 0 || strings.IndexByte(s, '\r') >= 0
}

// Write cleans the next piece of the stream and returns the text ready to
// show; "\r" bytes at its end are held back until the next piece says
// whether a "\n" follows.
func (c *Cleaner) Write(s string) string {
	if c.state == text && c.crs == 0 && !needsWork(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	c.write(&b, s)
	return b.String()
}

// Flush ends the stream: it returns the "\r" bytes held back, and drops
// an unterminated escape sequence. The Cleaner is then ready for a new
// stream.
func (c *Cleaner) Flush() string {
	var b strings.Builder
	c.flush(&b)
	return b.String()
}

func (c *Cleaner) flush(b *strings.Builder) {
	c.emitCRs(b)
	c.state = text
}

func (c *Cleaner) emitCRs(b *strings.Builder) {
	for ; c.crs > 0; c.crs-- {
		b.WriteByte('\r')
	}
}

func (c *Cleaner) write(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch c.state {
		case text:
			c.text(b, s, &i)
		case escape:
			switch {
			case ch == '[':
				c.state = csi
			case ch == ']' || ch == 'P' || ch == 'X' || ch == '^' || ch == '_':
				c.state = str
			case ch >= 0x20 && ch <= 0x2f:
				c.state = escInter
			case ch >= 0x30 && ch <= 0x7e:
				c.state = text
			default:
				// Not an escape after all: the ESC goes, the byte is text.
				c.state = text
				i--
			}
		case escInter:
			switch {
			case ch >= 0x20 && ch <= 0x2f:
			case ch >= 0x30 && ch <= 0x7e:
				c.state = text
			default:
				c.state = text
				i--
			}
		case csi:
			switch {
			case ch >= 0x20 && ch <= 0x3f:
			case ch >= 0x40 && ch <= 0x7e:
				c.state = text
			default:
				c.state = text
				i--
			}
		case str:
			// Skip to the terminator in one step: the string's bytes are
			// dropped, never held.
			j := i
			for j < len(s) && s[j] != 0x07 && s[j] != esc {
				j++
			}
			i = j
			if j == len(s) {
				break
			}
			if s[j] == 0x07 {
				c.state = text
			} else {
				c.state = strEsc
			}
		case strEsc:
			switch ch {
			case '\\':
				c.state = text
			case esc:
				// ESC ESC: still waiting for the '\' of ST.
			default:
				c.state = str
			}
		}
	}
}

// text copies plain text from s[*i:] to b up to the next ESC or "\r" it
// must act on, leaving *i on the last byte it consumed.
func (c *Cleaner) text(b *strings.Builder, s string, i *int) {
	for j := *i; j < len(s); j++ {
		switch s[j] {
		case esc:
			// "\r" bytes before an escape stay pending: the escape is
			// dropped, and what follows it decides.
			c.state = escape
			*i = j
			return
		case '\r':
			c.crs++
		case '\n':
			c.crs = 0
			b.WriteByte('\n')
		default:
			c.emitCRs(b)
			// The run of plain bytes up to the next byte of interest.
			k := j + 1
			for k < len(s) && s[k] != esc && s[k] != '\r' && s[k] != '\n' {
				k++
			}
			b.WriteString(s[j:k])
			j = k - 1
		}
	}
	*i = len(s) - 1
}
