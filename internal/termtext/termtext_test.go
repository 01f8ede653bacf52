package termtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// cases is the table of the unit test and the seed corpus of the fuzz
// target.
var cases = []struct{ in, want string }{
	{"", ""},
	{"plain text\n", "plain text\n"},
	{"a\r\nb\r\n", "a\nb\n"},
	{"a\r\r\nb", "a\nb"}, // a "\r\n" through a pty's ONLCR
	{"10%\r20%\r100%\n", "10%\r20%\r100%\n"},
	{"trailing\r", "trailing\r"},
	{"\x1b[31mred\x1b[0m\n", "red\n"},
	{"\x1b[1;38;5;196mbold\x1b[m", "bold"},
	{"\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
	{"progress\r\x1b[K\n", "progress\n"}, // erase line between "\r" and "\n"
	{"\x1b]0;title\x07after", "after"},
	{"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\", "link"},
	{"\x1bP1$r0m\x1b\\dcs", "dcs"},
	{"\x1b(Bcharset", "charset"},
	{"\x1b7save\x1b8", "save"},
	{"\x1b", ""},
	{"\x1b[", ""},
	{"\x1b[31", ""},
	{"\x1b]unterminated title", ""},
	{"\x1b[31\nm", "\nm"},      // a newline ends a broken CSI and is kept
	{"\x1b[31é", "é"},          // so does a non-ASCII character
	{"\x1b\x1b[32mx", "x"},     // ESC ESC: the first is dropped
	{"\x1b]t\x1b\x1b\\y", "y"}, // ESC ESC inside a string, then ST
	{"\x1b]t\x1bq\x07z", "z"},  // ESC not followed by '\' stays in the string
	{"é\x1b[1mü\x1b[0m", "éü"},
	{"\x1b\n", "\n"},
	{"a\x1b\rb", "a\rb"},
	{"bell\x07 and \bback", "bell\x07 and \bback"},
	{"\u009b31mC1", "\u009b31mC1"},
	{"\r\x1b[2K\r\n", "\n"},
}

func TestClean(t *testing.T) {
	for _, c := range cases {
		if got := Clean(c.in); got != c.want {
			t.Errorf("Clean(%q) = %q, want %q", c.in, got, c.want)
		}
		checkPieces(t, c.in)
	}
}

// checkPieces cleans s as a stream cut at every offset and compares with
// Clean: a sequence or a "\r\n" split between two chunks of a cell's
// output is cleaned as if whole.
func checkPieces(t *testing.T, s string) {
	t.Helper()
	want := Clean(s)
	for cut := 0; cut <= len(s); cut++ {
		var c Cleaner
		got := c.Write(s[:cut]) + c.Write(s[cut:]) + c.Flush()
		if got != want {
			t.Fatalf("stream of %q cut at %d = %q, want %q", s, cut, got, want)
		}
	}
	var c Cleaner
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(c.Write(s[i : i+1]))
	}
	b.WriteString(c.Flush())
	if b.String() != want {
		t.Fatalf("stream of %q byte by byte = %q, want %q", s, b.String(), want)
	}
}

func TestCleanerFlushResets(t *testing.T) {
	var c Cleaner
	if got := c.Write("a\x1b]title"); got != "a" {
		t.Fatalf("Write = %q", got)
	}
	if got := c.Flush(); got != "" {
		t.Fatalf("Flush of an unterminated string = %q, want nothing", got)
	}
	if got := c.Write("next\r"); got != "next" {
		t.Fatalf("after Flush: %q, want the new stream's text", got)
	}
	if got := c.Flush(); got != "\r" {
		t.Fatalf("Flush = %q, want the held \\r", got)
	}
}

// Plain text is returned as it is, without a copy.
func TestCleanPlainAllocatesNothing(t *testing.T) {
	s := strings.Repeat("plain text line\n", 100)
	if n := testing.AllocsPerRun(10, func() { _ = Clean(s) }); n != 0 {
		t.Fatalf("Clean of plain text allocates %v times", n)
	}
}

func FuzzClean(f *testing.F) {
	for _, c := range cases {
		f.Add(c.in, len(c.in)/2)
	}
	f.Fuzz(func(t *testing.T, s string, cut int) {
		got := Clean(s)
		if strings.IndexByte(got, esc) >= 0 {
			t.Fatalf("Clean(%q) = %q keeps an ESC", s, got)
		}
		if strings.Contains(got, "\r\n") {
			t.Fatalf("Clean(%q) = %q keeps a \\r\\n", s, got)
		}
		if len(got) > len(s) {
			t.Fatalf("Clean(%q) = %q grew", s, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Clean(%q) = %q is not valid UTF-8", s, got)
		}
		if again := Clean(got); again != got {
			t.Fatalf("Clean is not idempotent on %q: %q then %q", s, got, again)
		}
		cut = int(uint(cut) % uint(len(s)+1))
		var c Cleaner
		if st := c.Write(s[:cut]) + c.Write(s[cut:]) + c.Flush(); st != got {
			t.Fatalf("stream of %q cut at %d = %q, Clean = %q", s, cut, st, got)
		}
	})
}
