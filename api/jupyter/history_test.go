package jupyter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// historyOf is a history holding cells (line, input, output text or ""
// for none), as a kernel records them.
func historyOf(cells ...histEntry) *jhistory {
	h := newHistory()
	for _, c := range cells {
		h.add(c.line, c.input)
		if c.output != nil {
			h.setOutput(c.line, map[string]any{"text/plain": *c.output})
		}
	}
	return h
}

func cell(line int, input string, out ...string) histEntry {
	e := histEntry{line: line, input: input}
	if len(out) > 0 {
		e.output = &out[0]
	}
	return e
}

// ask runs one history_request content and returns the reply's history
// as JSON, as the kernel sends it.
func ask(t *testing.T, h *jhistory, content string) string {
	t.Helper()
	got, err := h.query(json.RawMessage(content))
	if err != nil {
		t.Fatalf("%s: %v", content, err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJupyterHistory: tail, range and search answer as IPython's
// HistoryManager does for ipykernel: tail n (10 by default, all for a
// negative n), range by session, start and stop (negative ones counting
// back, stop 0 meaning the end, entries labelled with the session as
// asked), search with a glob over the input, unique keeping the latest of
// each input, n the last n matches; output pairs each input with its
// execute_result text or null; raw changes nothing.
func TestJupyterHistory(t *testing.T) {
	h := historyOf(
		cell(1, "1+2+3", "6"),
		cell(2, "[n*n for n in range(1, 4)]", "[1, 4, 9]"),
		cell(3, "x = 1"),
		cell(4, "1+2+3", "6"),
		cell(5, "print('1?2')"),
		cell(7, "%time 1"), // 6 was a cell with store_history false
		cell(8, "1+2+3", "6"),
	)
	for _, tc := range []struct{ name, req, want string }{
		{"tail n", `{"hist_access_type":"tail","n":2,"output":false,"raw":true}`,
			`[[1,7,"%time 1"],[1,8,"1+2+3"]]`},
		{"tail output", `{"hist_access_type":"tail","n":3,"output":true,"raw":true}`,
			`[[1,5,["print('1?2')",null]],[1,7,["%time 1",null]],[1,8,["1+2+3","6"]]]`},
		{"tail raw false: the input as typed", `{"hist_access_type":"tail","n":1,"output":false,"raw":false}`,
			`[[1,8,"1+2+3"]]`},
		{"tail n 0", `{"hist_access_type":"tail","n":0,"output":false,"raw":true}`, `[]`},
		{"tail n past the history", `{"hist_access_type":"tail","n":100,"output":false,"raw":true}`,
			`[[1,1,"1+2+3"],[1,2,"[n*n for n in range(1, 4)]"],[1,3,"x = 1"],[1,4,"1+2+3"],[1,5,"print('1?2')"],[1,7,"%time 1"],[1,8,"1+2+3"]]`},
		{"tail negative n: all", `{"hist_access_type":"tail","n":-1,"output":false,"raw":true}`,
			`[[1,1,"1+2+3"],[1,2,"[n*n for n in range(1, 4)]"],[1,3,"x = 1"],[1,4,"1+2+3"],[1,5,"print('1?2')"],[1,7,"%time 1"],[1,8,"1+2+3"]]`},
		{"range of the session a tail gave", `{"hist_access_type":"range","session":1,"start":2,"stop":3,"output":false,"raw":true}`,
			`[[1,2,"[n*n for n in range(1, 4)]"]]`},
		{"range of session 0: the current one, labelled 0", `{"hist_access_type":"range","session":0,"start":4,"stop":6,"output":true,"raw":true}`,
			`[[0,4,["1+2+3","6"]],[0,5,["print('1?2')",null]]]`},
		{"range to the end", `{"hist_access_type":"range","start":6,"output":false,"raw":true}`,
			`[[0,7,"%time 1"],[0,8,"1+2+3"]]`},
		{"range stop 0 is the end", `{"hist_access_type":"range","start":8,"stop":0,"output":false,"raw":true}`,
			`[[0,8,"1+2+3"]]`},
		{"range counting back", `{"hist_access_type":"range","start":-2,"stop":-1,"output":false,"raw":true}`,
			`[[0,7,"%time 1"]]`},
		{"range of an earlier session: none kept", `{"hist_access_type":"range","session":-1,"start":1,"output":false,"raw":true}`, `[]`},
		{"range of another session number", `{"hist_access_type":"range","session":7,"start":1,"output":false,"raw":true}`, `[]`},
		{"search glob", `{"hist_access_type":"search","pattern":"1?2*","output":false,"raw":true}`,
			`[[1,1,"1+2+3"],[1,4,"1+2+3"],[1,8,"1+2+3"]]`},
		{"search unique: the latest of each", `{"hist_access_type":"search","pattern":"*","unique":true,"output":false,"raw":true}`,
			`[[1,2,"[n*n for n in range(1, 4)]"],[1,3,"x = 1"],[1,5,"print('1?2')"],[1,7,"%time 1"],[1,8,"1+2+3"]]`},
		{"search n: the last n", `{"hist_access_type":"search","pattern":"1?2*","n":2,"output":false,"raw":true}`,
			`[[1,4,"1+2+3"],[1,8,"1+2+3"]]`},
		{"search unique and n", `{"hist_access_type":"search","pattern":"*","unique":true,"n":2,"output":false,"raw":true}`,
			`[[1,7,"%time 1"],[1,8,"1+2+3"]]`},
		{"search output", `{"hist_access_type":"search","pattern":"[[]*","output":true,"raw":true}`,
			`[[1,2,["[n*n for n in range(1, 4)]","[1, 4, 9]"]]]`},
		{"search default pattern: all", `{"hist_access_type":"search","n":1,"output":false,"raw":true}`,
			`[[1,8,"1+2+3"]]`},
		{"search no match", `{"hist_access_type":"search","pattern":"import*","output":false,"raw":true}`, `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ask(t, h, tc.req); got != tc.want {
				t.Errorf("%s\n got %s\nwant %s", tc.req, got, tc.want)
			}
		})
	}
	if got := ask(t, newHistory(), `{"hist_access_type":"tail","n":5,"output":false,"raw":true}`); got != `[]` {
		t.Errorf("empty history's tail: %s", got)
	}
	if got := ask(t, newHistory(), `{"hist_access_type":"range","start":-3,"output":false,"raw":true}`); got != `[]` {
		t.Errorf("empty history's range: %s", got)
	}
	// No n: a tail of IPython's default, 10.
	many := newHistory()
	for i := 1; i <= 25; i++ {
		many.add(i, fmt.Sprint("x = ", i))
	}
	if got := ask(t, many, `{"hist_access_type":"tail","output":false,"raw":true}`); !strings.HasPrefix(got, `[[1,16,"x = 16"]`) || strings.Count(got, "x = ") != 10 {
		t.Errorf("tail without n: %s", got)
	}
}

// TestJupyterHistoryGlob: SQLite's GLOB, which IPython's search runs:
// whole-text, case-sensitive matching where * spans newlines too.
func TestJupyterHistoryGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "a\nb", true},
		{"", "", true},
		{"", "a", false},
		{"a", "a", true},
		{"a", "A", false},
		{"a*", "abc", true},
		{"*c", "abc", true},
		{"a*c", "a\n/c", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"?", "é", true}, // one character, two bytes
		{"1?2*", "1+2+3", true},
		{"1?2*", "12+3", false},
		{"[ab]x", "bx", true},
		{"[ab]x", "cx", false},
		{"[a-c]", "b", true},
		{"[^a-c]", "b", false},
		{"[^a-c]", "d", true},
		{"[]]", "]", true},
		{"[^]]", "]", false},
		{"[a-]", "-", true},
		{"[*]", "*", true},
		{"[*]", "a", false},
		{"x[?]", "x?", true},
		{"**a**", "bab", true},
		{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 1<<16), false},
		{"*x", "\xff\xfex", true},
		{"?x", "\xffx", true},
	} {
		g, err := compileGlob(tc.pattern)
		if err != nil {
			t.Errorf("compile %q: %v", tc.pattern, err)
			continue
		}
		if got := g.match(tc.s); got != tc.want {
			t.Errorf("%q matches %.40q: %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// TestJupyterHistoryBadRequest: a history_request the kernel cannot
// answer gets an error naming what is wrong and what is allowed.
func TestJupyterHistoryBadRequest(t *testing.T) {
	h := historyOf(cell(1, "1"))
	for _, tc := range []struct{ req, want string }{
		{`{"hist_access_type":"last","output":false,"raw":true}`, `hist_access_type "last" is not one of tail, range, search`},
		{`{"output":false,"raw":true}`, `hist_access_type "" is not one of tail, range, search`},
		{`{"hist_access_type":"search","pattern":"[ab","output":false,"raw":true}`, "has a [ without its ]"},
		{`{"hist_access_type":"search","pattern":"` + strings.Repeat("*", maxHistoryPattern+1) + `","output":false,"raw":true}`, "over the limit of 4096"},
		{`{"hist_access_type":"tail","n":"3","output":false,"raw":true}`, "history_request content"},
		{`{"hist_access_type":"tail","n":1.5,"output":false,"raw":true}`, "history_request content"},
		{`[1]`, "history_request content"},
	} {
		_, err := h.query(json.RawMessage(tc.req))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s: error %v, want one containing %q", tc.req, err, tc.want)
		}
	}
}

// TestJupyterHistoryBound: the history keeps at most maxCells cells and
// maxBytes of inputs and outputs, dropping the oldest; an output from the
// sandbox is kept only as a string and cut to maxHistoryOutput, never
// inside a character; a forged output for a cell that is not the last
// one is ignored.
func TestJupyterHistoryBound(t *testing.T) {
	h := newHistory()
	h.maxCells = 5
	for i := 1; i <= 12; i++ {
		h.add(i, fmt.Sprint("c", i))
	}
	if got := ask(t, h, `{"hist_access_type":"tail","n":-1,"output":false,"raw":true}`); got != `[[1,8,"c8"],[1,9,"c9"],[1,10,"c10"],[1,11,"c11"],[1,12,"c12"]]` {
		t.Errorf("count bound: %s", got)
	}
	if got := ask(t, h, `{"hist_access_type":"range","start":1,"stop":9,"output":false,"raw":true}`); got != `[[0,8,"c8"]]` {
		t.Errorf("range over dropped cells: %s", got)
	}

	h = newHistory()
	h.maxBytes = 100
	for i := 1; i <= 10; i++ {
		h.add(i, strings.Repeat("x", 30))
	}
	if n := len(h.entries); n != 3 || h.bytes != 90 || h.entries[0].line != 8 {
		t.Errorf("byte bound: %d cells of %d bytes, first %d; want 3 of 90, first 8", n, h.bytes, h.entries[0].line)
	}
	h.setOutput(10, map[string]any{"text/plain": strings.Repeat("y", 50)})
	if n := len(h.entries); n != 1 || h.bytes != 80 || h.entries[0].line != 10 {
		t.Errorf("an output counts too: %d cells of %d bytes", n, h.bytes)
	}
	// One cell over the bound is still kept: the newest always is.
	h.add(11, strings.Repeat("z", 500))
	if n := len(h.entries); n != 1 || h.entries[0].line != 11 {
		t.Errorf("a cell over the bound alone: %d cells", n)
	}

	h = newHistory()
	h.add(1, "big")
	h.setOutput(1, map[string]any{"text/plain": "a" + strings.Repeat("é", maxHistoryOutput)})
	out := *h.entries[0].output
	if len(out) > maxHistoryOutput || !utf8.ValidString(out) || !strings.HasPrefix(out, "aé") {
		t.Errorf("output kept: %d bytes, valid UTF-8 %v", len(out), utf8.ValidString(out))
	}
	h.add(2, "forged")
	h.setOutput(2, map[string]any{"text/plain": []any{"not", "text"}})
	h.setOutput(1, map[string]any{"text/plain": "late"})
	h.setOutput(2, map[string]any{"image/png": "AAAA"})
	if h.entries[1].output != nil || *h.entries[0].output != out {
		t.Errorf("forged outputs were kept: %+v", h.entries)
	}
	h.setOutput(2, map[string]any{"text/plain": "2"})
	h.setOutput(2, map[string]any{"text/plain": "again"})
	if got := ask(t, h, `{"hist_access_type":"tail","n":1,"output":true,"raw":true}`); got != `[[1,2,["forged","2"]]]` {
		t.Errorf("one output per cell: %s", got)
	}
}

// FuzzHistoryGlob: compiling and matching any pattern against any text
// never panics, and agrees with a plain recursive matcher of the same
// rules.
func FuzzHistoryGlob(f *testing.F) {
	for _, s := range [][2]string{{"1?2*", "1+2+3"}, {"[^a-c]x", "dx"}, {"[]]*", "]]"}, {"*a*b", "aab"}, {"[a-", "a"}, {"?", "\xff"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 256 {
			return
		}
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		if got, want := g.match(s), refMatch(g, []rune(s)); got != want {
			t.Errorf("%q matches %q: %v, the reference says %v", pattern, s, got, want)
		}
	})
}

// refMatch is the exponential textbook matcher, for small inputs.
func refMatch(g glob, s []rune) bool {
	if len(g) == 0 {
		return len(s) == 0
	}
	if g[0].kind == '*' {
		for i := 0; i <= len(s); i++ {
			if refMatch(g[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return len(s) > 0 && g[0].matches(s[0]) && refMatch(g[1:], s[1:])
}
