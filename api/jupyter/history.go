package jupyter

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"
)

// The kernel's history (history_request), as ipykernel answers it from
// IPython's HistoryManager: the cells' inputs by execution count, and the
// text/plain of each cell's execute_result. It lives in the kernel
// process's memory, one history session per kernel: the sandbox keeps no
// history database (the kernel turns IPython's off), and a restart is a new
// kernel with a new history, where IPython's sqlite file outlives it.
//
// Inputs are what the client sent; outputs come from the sandbox and are
// untrusted: only a string is kept, cut to maxHistoryOutput.

const (
	// maxHistoryCells caps the cells kept; the oldest go first. Jupyter's
	// console asks for the last 1000 at start (history_load_length).
	maxHistoryCells = 10000
	// maxHistoryBytes caps inputs and outputs kept together, so that the
	// kernel's history takes at most this much memory (and a reply at
	// most this much text). It is JupyterMaxMessage: any cell a client
	// can send fits, alone if need be.
	maxHistoryBytes = JupyterMaxMessage
	// maxHistoryOutput caps one cell's output kept: the kernel's own
	// text/plain limit (TEXT_PLAIN_LIMIT), which a forged value may pass.
	maxHistoryOutput = 64 << 10
	// maxHistoryPattern caps a search pattern. Matching costs at most
	// its length times the text's, per cell.
	maxHistoryPattern = 4 << 10
	// historySession is the kernel's history session number.
	historySession = 1
	// historyTailDefault is n of a tail that gives none, as IPython's
	// get_tail.
	historyTailDefault = 10
)

// histEntry is one cell of the history.
type histEntry struct {
	line   int
	input  string
	output *string // text/plain of its execute_result; nil if none
}

func (e *histEntry) size() int {
	n := len(e.input)
	if e.output != nil {
		n += len(*e.output)
	}
	return n
}

// jhistory is a kernel's cells, oldest first, within its bounds.
type jhistory struct {
	mu       sync.Mutex
	entries  []histEntry
	bytes    int
	maxCells int
	maxBytes int
}

func newHistory() *jhistory {
	return &jhistory{maxCells: maxHistoryCells, maxBytes: maxHistoryBytes}
}

// add records a cell's input under its execution count, before it runs,
// as IPython does: a cell that fails is in the history too.
func (h *jhistory) add(line int, input string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = append(h.entries, histEntry{line: line, input: input})
	h.bytes += len(input)
	h.evict()
}

// setOutput records the text/plain of cell line's execute_result; value
// is the bundle from the sandbox.
func (h *jhistory) setOutput(line int, value map[string]any) {
	text, ok := value["text/plain"].(string)
	if !ok {
		return
	}
	if len(text) > maxHistoryOutput {
		text = cutUTF8(text, maxHistoryOutput)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.entries); n > 0 && h.entries[n-1].line == line && h.entries[n-1].output == nil {
		h.entries[n-1].output = &text
		h.bytes += len(text)
		h.evict()
	}
}

// evict drops the oldest cells while over a bound; the newest stays.
func (h *jhistory) evict() {
	drop := 0
	for len(h.entries)-drop > 1 && (len(h.entries)-drop > h.maxCells || h.bytes > h.maxBytes) {
		h.bytes -= h.entries[drop].size()
		drop++
	}
	if drop > 0 {
		h.entries = slices.Delete(h.entries, 0, drop)
	}
}

// cutUTF8 is s cut to at most n bytes, not inside a character.
func cutUTF8(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// historyRequest is a history_request's content (protocol 5.3).
type historyRequest struct {
	Output         bool    `json:"output"`
	Raw            bool    `json:"raw"`
	HistAccessType string  `json:"hist_access_type"`
	Session        int     `json:"session"`
	Start          int     `json:"start"`
	Stop           *int    `json:"stop"`
	N              *int    `json:"n"`
	Pattern        *string `json:"pattern"`
	Unique         bool    `json:"unique"`
}

// query answers a history_request's content with its history list:
// [session, line, input], or [session, line, [input, output]] with
// output. raw is accepted and changes nothing: the kernel keeps the
// input as typed, not IPython's translation of its magics.
func (h *jhistory) query(content json.RawMessage) ([]any, error) {
	var q historyRequest
	if err := json.Unmarshal(content, &q); err != nil {
		return nil, fmt.Errorf("history_request content: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var picked []histEntry
	session := historySession
	switch q.HistAccessType {
	case "tail":
		n := historyTailDefault
		if q.N != nil {
			n = *q.N
		}
		picked = last(h.entries, n)
	case "range":
		picked, session = h.rangeOf(q)
	case "search":
		pattern := "*"
		if q.Pattern != nil {
			pattern = *q.Pattern
		}
		g, err := compileGlob(pattern)
		if err != nil {
			return nil, err
		}
		for _, e := range h.entries {
			if g.match(e.input) {
				picked = append(picked, e)
			}
		}
		if q.Unique {
			picked = latestOfEach(picked)
		}
		if q.N != nil {
			picked = last(picked, *q.N)
		}
	default:
		return nil, fmt.Errorf("history_request: hist_access_type %q is not one of tail, range, search", q.HistAccessType)
	}
	out := make([]any, 0, len(picked))
	for _, e := range picked {
		var item any = e.input
		if q.Output {
			var o any // JSON null: no execute_result
			if e.output != nil {
				o = *e.output
			}
			item = []any{e.input, o}
		}
		out = append(out, []any{session, e.line, item})
	}
	return out, nil
}

// last is the last n of entries, all of them if n < 0 (SQLite's LIMIT,
// which IPython's tail and search use).
func last(entries []histEntry, n int) []histEntry {
	if n < 0 || n >= len(entries) {
		return entries
	}
	return entries[len(entries)-n:]
}

// latestOfEach keeps the latest cell of each input, in order.
func latestOfEach(entries []histEntry) []histEntry {
	seen := make(map[string]bool, len(entries))
	var keep []histEntry
	for i := len(entries) - 1; i >= 0; i-- {
		if !seen[entries[i].input] {
			seen[entries[i].input] = true
			keep = append(keep, entries[i])
		}
	}
	slices.Reverse(keep)
	return keep
}

// rangeOf is IPython's get_range on the kernel's one session: session 0
// (or absent) is the current one, a negative one counts back (there are
// none); lines start <= line < stop, where a negative start or stop counts
// back from the next line and stop 0 or absent means to the end. Entries
// carry the session number as asked: 0 for the current session, as
// IPython's do, or the number a tail or search gave.
func (h *jhistory) rangeOf(q historyRequest) ([]histEntry, int) {
	if q.Session != 0 && q.Session != historySession {
		return nil, q.Session
	}
	next := 1
	if n := len(h.entries); n > 0 {
		next = h.entries[n-1].line + 1
	}
	start := q.Start
	if start < 0 {
		start += next
	}
	stop := next
	if q.Stop != nil && *q.Stop != 0 && *q.Stop <= next {
		stop = *q.Stop
		if stop < 0 {
			stop += next
		}
	}
	var picked []histEntry
	for _, e := range h.entries {
		if e.line >= start && e.line < stop {
			picked = append(picked, e)
		}
	}
	return picked, q.Session
}

// glob is a compiled SQLite GLOB pattern, what IPython's search runs:
// * is any text (newlines included), ? one character, [abc], [a-z] and
// [^...] a set (a ] first in the set is literal); case-sensitive; no
// escapes.
type glob []globToken

type globToken struct {
	kind   byte // '*', '?', '[' or 0 (a literal)
	r      rune
	ranges [][2]rune // a set's ranges
	negate bool
}

func compileGlob(p string) (glob, error) {
	if len(p) > maxHistoryPattern {
		return nil, fmt.Errorf("history_request: pattern is %d bytes, over the limit of %d", len(p), maxHistoryPattern)
	}
	if !utf8.ValidString(p) {
		return nil, fmt.Errorf("history_request: pattern is not valid UTF-8")
	}
	rs := []rune(p)
	var g glob
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			if len(g) == 0 || g[len(g)-1].kind != '*' {
				g = append(g, globToken{kind: '*'})
			}
		case '?':
			g = append(g, globToken{kind: '?'})
		case '[':
			t := globToken{kind: '['}
			j := i + 1
			if j < len(rs) && rs[j] == '^' {
				t.negate = true
				j++
			}
			first := true
			for ; j < len(rs) && (rs[j] != ']' || first); j++ {
				first = false
				lo := rs[j]
				if j+2 < len(rs) && rs[j+1] == '-' && rs[j+2] != ']' {
					t.ranges = append(t.ranges, [2]rune{lo, rs[j+2]})
					j += 2
					continue
				}
				t.ranges = append(t.ranges, [2]rune{lo, lo})
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("history_request: pattern %q has a [ without its ] (a glob: *, ?, [set], [^set])", clip(p, 80))
			}
			g = append(g, t)
			i = j
		default:
			g = append(g, globToken{r: c})
		}
	}
	return g, nil
}

func (t *globToken) matches(r rune) bool {
	switch t.kind {
	case '?':
		return true
	case '[':
		in := false
		for _, rg := range t.ranges {
			if r >= rg[0] && r <= rg[1] {
				in = true
				break
			}
		}
		return in != t.negate
	}
	return r == t.r
}

// match reports whether all of s matches, reading it rune by rune (an
// invalid byte is one U+FFFD, as it shows in the reply). A star
// backtracks only to the last star seen, so the cost is at most len(g)
// times len(s), with no exponential blow-up on patterns like *a*a*a*b,
// and no copy of s.
func (g glob) match(s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		r, w := utf8.DecodeRuneInString(s[si:])
		switch {
		case pi < len(g) && g[pi].kind == '*':
			star, mark = pi, si
			pi++
		case pi < len(g) && g[pi].matches(r):
			pi++
			si += w
		case star >= 0:
			_, mw := utf8.DecodeRuneInString(s[mark:])
			mark += mw
			si = mark
			pi = star + 1
		default:
			return false
		}
	}
	for pi < len(g) && g[pi].kind == '*' {
		pi++
	}
	return pi == len(g)
}

// clip shortens s to n bytes for an error message (the HTTP door has its own).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
