package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// frameHead checks that b is a JSON object and finds its type (one of the
// kernel's in frameTypes, or "" for any other or none) and its id, raw (nil
// if absent). err is set only if the frame is not a JSON object at all.
func frameHead(b []byte) (obj []byte, t frameType, id []byte, err error) {
	obj, err = validObject(b)
	if err != nil {
		return nil, "", nil, err
	}
	var raw []byte
	eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"t"`:
			raw = v
		case `"id"`:
			id = v
		}
		return nil
	})
	return obj, receivedType(raw), id, nil
}

// Budgets of one result, in bytes of its JSON as the API encodes it
// (compact, no HTML escaping), so that the response a cell can cause has a
// bound MaxResultJSON states. Everything in a result frame counts: text is
// charged after UTF-8 repair and escaping, so "\u0001" costs its 6 bytes
// and a lone surrogate its U+FFFD. Lists are capped in count too, because
// a Go value costs more than its JSON when the elements are tiny.
const (
	// maxRichBytes caps a result's value and display items together: the
	// kernel's RICH_BUDGET, which it measures the same way or larger.
	maxRichBytes = 32 << 20
	// maxDisplayItems caps the display list (the kernel keeps one fewer and
	// ends with its own note of what it dropped). Items past it, or past
	// maxRichBytes, are dropped and summed up in one note.
	maxDisplayItems = 1000
	// maxBundleEntries caps the MIME types of one bundle; IPython's
	// formatters offer 8. Later entries are left out.
	maxBundleEntries = 32
	// maxMIMEBytes caps a MIME type name.
	maxMIMEBytes = 256
	// maxJSONDepth caps the nesting of a JSON value in a bundle: clients
	// parse responses with recursive decoders.
	maxJSONDepth = 64
	// Error fields, cut past these sizes. The kernel keeps 64 KiB of
	// message, 1 MiB of traceback and 1 KiB of each frame's code, in UTF-8.
	maxErrorType    = 1 << 10
	maxErrorMessage = 256 << 10
	maxTraceback    = 2 << 20
	// maxFrames caps the structured stack; as the kernel does, the first
	// and last halves are kept, with one frame in between saying how many
	// were left out.
	maxFrames    = 200
	maxFrameFile = 1 << 10
	maxFrameName = 256
	maxFrameCode = 2 << 10
	// noteBytes bounds the JSON of each note the host adds.
	noteBytes = 256

	// JSON around the fields, generously: {"mime":"","data":"","bundle":{},"pager":true},
	itemOverhead  = 48
	entryOverhead = 4 // "":,
	frameOverhead = 64
	resultFixed   = 512
	maxErrorJSON  = 128 + maxErrorType + maxErrorMessage + maxTraceback + 2*noteBytes +
		(maxFrames+1)*(frameOverhead+maxFrameFile+maxFrameName+maxFrameCode+noteBytes)
)

// MaxResultJSON is the most bytes a Result of a cell run with this
// MaxOutput takes encoded as the API encodes it (encoding/json, no HTML
// escaping), whatever the kernel sent: each stream at most 6 bytes per byte
// kept (a control character is escaped as \u00XX), the rich budget, the
// error's caps and the host's own notes. The daemon decodes a result into
// no more than that much text, plus at most maxDisplayItems items of at
// most maxBundleEntries entries and maxFrames+1 frames.
func MaxResultJSON(maxOutput int64) int64 {
	return resultFixed + 2*(6*maxOutput+2) + maxRichBytes + 2*(itemOverhead+2*noteBytes) + maxErrorJSON
}

// execState accumulates one cell's frames. It is the host's whole defence
// against a forged stream: it keeps only frames with the cell's id, counts
// output bytes itself and cuts at MaxOutput, and decodes the result within
// the budgets above, never materialising more of a frame than they allow.
type execState struct {
	req       ExecRequest
	onStream  func(name, text string)
	out       [2][]byte
	truncated [2]bool
	// started: the kernel said the cell's code is about to run. Any frame
	// of the cell counts: a kernel does not stream for a cell it has not
	// started.
	started bool
	// displayed and displayBudget: the display frames passed on so far,
	// and the bytes left for more, the result's own caps.
	displayed     int
	displayBudget int
	// clears: the clear_output items passed on so far (clear.go).
	clears int
}

var streamNames = [2]string{"stdout", "stderr"}

func newExecState(req ExecRequest, onStream func(name, text string)) *execState {
	return &execState{req: req, onStream: onStream, displayBudget: maxRichBytes}
}

// handle takes one frame. It returns the result once the cell's result frame
// arrived, or an error if the frame breaks the protocol.
func (s *execState) handle(b []byte) (*Result, error) {
	obj, t, id, err := frameHead(b)
	if err != nil {
		return nil, err
	}
	if !stringIs(id, s.req.ID) {
		return nil, nil // stale, forged or meant for another request
	}
	// Any frame of the cell counts as started, not only "started": a
	// kernel does not stream for a cell it has not started.
	s.started = true
	switch t {
	case frameStarted:
		return nil, nil
	case frameStream:
		return nil, s.stream(obj)
	case frameDisplay:
		return nil, s.display(obj)
	case frameResult:
		return s.result(obj)
	}
	return nil, nil // a type the host does not know: ignored
}

// display passes on one display frame's item, {"t":"display","id":...,
// "item":{"mime":...,"data":...,"bundle":{...}}}, decoded within what is
// left of the cell's display budget. Past the budget, or without a MIME
// type, an item is dropped: the result frame's list is the record, with
// its own note of what it left out.
func (s *execState) display(obj []byte) error {
	var raw []byte
	err := eachMember(obj, func(k, v []byte) error {
		if string(k) == `"item"` {
			raw = v
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decode display frame: %w", err)
	}
	switch kind(raw) {
	case 0, 'n':
		return nil
	case '{':
	default:
		return fmt.Errorf("decode display frame: item is not an object: %w", ErrProtocol)
	}
	clear, wait, err := clearItem(raw)
	if err != nil {
		return err
	}
	if clear {
		s.clearOutput(wait)
		return nil
	}
	if s.displayed >= maxDisplayItems || s.displayBudget <= 0 {
		return nil
	}
	item, cost, err := decodeItem(raw, s.displayBudget)
	if err != nil {
		return err
	}
	// Every item decoded counts, the dropped ones too: the work the host
	// does for a cell's display frames is bounded by their number.
	s.displayed++
	if cost == 0 || item.MIME == "" {
		return nil
	}
	s.displayBudget -= cost
	if s.req.OnDisplay != nil {
		s.req.OnDisplay(item)
	}
	return nil
}

// stringField checks that v, the value of key k, is a string or null.
func stringField(k, v []byte) error {
	if c := kind(v); c != '"' && c != 'n' {
		return fmt.Errorf("%s is not a string: %w", k, ErrProtocol)
	}
	return nil
}

func (s *execState) stream(obj []byte) error {
	var name, text []byte
	err := eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"name"`:
			name = v
		case `"text"`:
			text = v
		default:
			return nil
		}
		return stringField(k, v)
	})
	if err != nil {
		return fmt.Errorf("decode stream frame: %w", err)
	}
	i := 0
	switch {
	case stringIs(name, "stdout"):
	case stringIs(name, "stderr"):
		i = 1
	default:
		return nil
	}
	if s.truncated[i] || kind(text) != '"' || len(text) == 2 {
		// Once cut, a stream stays cut: later small pieces would otherwise
		// squeeze in after a gap.
		return nil
	}
	room := s.req.MaxOutput - int64(len(s.out[i]))
	start := len(s.out[i])
	var cut bool
	s.out[i], _, _, cut = scanString(s.out[i], text, int(min(room, int64(maxInt))), maxInt, decode)
	if cut {
		s.truncated[i] = true
	}
	if len(s.out[i]) > start && s.onStream != nil {
		s.onStream(streamNames[i], string(s.out[i][start:]))
	}
	return nil
}

// boolField sets *dst from v, a JSON boolean or null.
func boolField(dst *bool, k, v []byte) error {
	switch kind(v) {
	case 't':
		*dst = true
	case 'f', 'n':
		*dst = false
	default:
		return fmt.Errorf("%s is not a boolean: %w", k, ErrProtocol)
	}
	return nil
}

// partial is the output received so far, for a cell whose kernel went
// before its result frame: no status (the host's verdict decides it).
func (s *execState) partial() *Result {
	return &Result{
		Stdout:          string(s.out[0]),
		Stderr:          string(s.out[1]),
		StdoutTruncated: s.truncated[0],
		StderrTruncated: s.truncated[1],
	}
}

func (s *execState) result(obj []byte) (*Result, error) {
	var status, value, valueChart, valueTable, display, errv []byte
	var stdoutCut, stderrCut, interrupted bool
	err := eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"status"`:
			status = v
		case `"value"`:
			value = v
		case `"value_chart"`:
			valueChart = v
		case `"value_table"`:
			valueTable = v
		case `"display"`:
			display = v
		case `"error"`:
			errv = v
		case `"stdout_truncated"`:
			return boolField(&stdoutCut, k, v)
		case `"stderr_truncated"`:
			return boolField(&stderrCut, k, v)
		case `"interrupted"`:
			return boolField(&interrupted, k, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	res := &Result{
		Stdout:          string(s.out[0]),
		Stderr:          string(s.out[1]),
		StdoutTruncated: stdoutCut || s.truncated[0],
		StderrTruncated: stderrCut || s.truncated[1],
		Interrupted:     interrupted,
	}
	switch {
	case stringIs(status, "ok"):
		res.Status = "ok"
	case stringIs(status, "error"):
		res.Status = "error"
	default:
		if len(status) > 64 {
			status = status[:64]
		}
		return nil, fmt.Errorf("result status %q: %w", status, ErrProtocol)
	}
	budget := maxRichBytes
	if value != nil && kind(value) != 'n' {
		if kind(value) != '{' {
			return nil, fmt.Errorf("decode result value: not an object: %w", ErrProtocol)
		}
		v, cost := decodeBundle(value, budget)
		if v == nil {
			v = map[string]any{"text/plain": fmt.Sprintf("[value dropped: over the %d MiB limit for one result]", maxRichBytes>>20)}
		} else {
			budget -= cost
		}
		res.Value = v
	}
	if res.Value != nil && kind(valueChart) != 0 && kind(valueChart) != 'n' {
		c, n, err := decodeChart(valueChart)
		if err != nil {
			c = refusedChart(err)
			b, _ := json.Marshal(c)
			n = len(b)
		}
		if n += len(`,"value_chart":`); n <= budget {
			res.ValueChart = c
			budget -= n
		}
	}
	if res.Value != nil && kind(valueTable) == '{' {
		if tb := decodeTable(valueTable); tb != nil && len(tb)+len(`,"value_table":`) <= budget {
			res.ValueTable = tb
			budget -= len(tb) + len(`,"value_table":`)
		}
	}
	if res.Display, err = decodeDisplay(display, budget); err != nil {
		return nil, err
	}
	switch {
	case res.Status == "ok":
	case errv == nil || kind(errv) == 'n':
		res.Error = &CellError{Type: "Error", Message: "the kernel reported an error without details"}
	case kind(errv) != '{':
		return nil, fmt.Errorf("decode result error: not an object: %w", ErrProtocol)
	default:
		if res.Error, err = decodeError(errv); err != nil {
			return nil, fmt.Errorf("decode result error: %w", err)
		}
	}
	return res, nil
}

// decodeBundle decodes a MIME bundle (a JSON object) whose JSON may take at
// most budget bytes. It returns the bundle and what it cost, or nil if it
// does not fit. Strings stay strings; other JSON values are kept as
// canonical json.RawMessage, never as trees of Go values, which cost many
// times their JSON when small and nested ("[[],[],...]").
func decodeBundle(obj []byte, budget int) (map[string]any, int) {
	m := map[string]any{}
	cost := 2
	over := errors.New("over")
	err := eachMember(obj, func(k, v []byte) error {
		if len(m) >= maxBundleEntries {
			return nil
		}
		key, kenc, cut := unquote(k, maxMIMEBytes)
		if cut || key == "" {
			return nil
		}
		c := cost + entryOverhead + kenc
		if c > budget {
			return over
		}
		if kind(v) == '"' {
			text, enc, cut := unquote(v, budget-c)
			if cut {
				return over
			}
			m[key] = text
			cost = c + enc
			return nil
		}
		canon, ok := canonical(v, budget-c, maxJSONDepth)
		if !ok {
			return over
		}
		m[key] = json.RawMessage(canon)
		cost = c + len(canon)
		return nil
	})
	if err != nil {
		return nil, 0
	}
	return m, cost
}

// decodeDisplay decodes the display list within budget bytes: at most
// maxDisplayItems items, and one note at the end for all it dropped.
func decodeDisplay(arr []byte, budget int) ([]DisplayItem, error) {
	if arr == nil || kind(arr) == 'n' {
		return nil, nil
	}
	if kind(arr) != '[' {
		return nil, fmt.Errorf("decode display: not a list: %w", ErrProtocol)
	}
	var items []DisplayItem
	dropped, droppedBytes := 0, 0
	var err error
	eachElement(arr, func(raw []byte) bool {
		switch kind(raw) {
		case 'n':
			return true
		case '{':
		default:
			err = fmt.Errorf("decode display item: not an object: %w", ErrProtocol)
			return false
		}
		if len(items) < maxDisplayItems {
			var item DisplayItem
			var cost int
			item, cost, err = decodeItem(raw, budget)
			if err != nil {
				return false
			}
			if cost > 0 && item.MIME == "" {
				return true // nothing a client could render
			}
			if cost > 0 {
				budget -= cost
				items = append(items, item)
				return true
			}
		}
		dropped++
		droppedBytes += len(raw)
		return true
	})
	if err != nil {
		return nil, err
	}
	if dropped > 0 {
		note := fmt.Sprintf("[%d display items dropped (%d bytes): over the limit of %d items and %d MiB for one result]",
			dropped, droppedBytes, maxDisplayItems, maxRichBytes>>20)
		items = append(items, DisplayItem{MIME: "text/plain", Data: note})
	}
	return items, nil
}

// decodeItem decodes one display item whose JSON may take at most budget
// bytes. A cost of 0 means it does not fit.
func decodeItem(obj []byte, budget int) (DisplayItem, int, error) {
	var item DisplayItem
	var chart, table []byte
	cost := itemOverhead
	fits := true
	err := eachMember(obj, func(k, v []byte) error {
		if !fits {
			return nil
		}
		switch string(k) {
		case `"mime"`, `"data"`:
			if err := stringField(k, v); err != nil {
				return err
			}
			if kind(v) == 'n' {
				return nil
			}
			limit := budget - cost
			if k[1] == 'm' {
				limit = min(limit, maxMIMEBytes)
			}
			text, enc, cut := unquote(v, limit)
			if cut {
				fits = false
				return nil
			}
			if k[1] == 'm' {
				item.MIME = text
			} else {
				item.Data = text
			}
			cost += enc
		case `"bundle"`:
			switch kind(v) {
			case 'n':
				return nil
			case '{':
			default:
				return fmt.Errorf("bundle is not an object: %w", ErrProtocol)
			}
			b, c := decodeBundle(v, budget-cost)
			if b == nil {
				fits = false
				return nil
			}
			if len(b) > 0 {
				item.Bundle = b
			}
			cost += c
		case `"pager"`:
			return boolField(&item.Pager, k, v)
		case `"chart"`:
			chart = v
		case `"table"`:
			table = v
		}
		return nil
	})
	if err != nil {
		return item, 0, fmt.Errorf("decode display item: %w", err)
	}
	if fits && item.MIME == "" {
		// Nothing a client could render: dropped by the callers, so its
		// chart or table is never decoded (each cost the host a
		// millisecond of CPU for 3 KB the sandbox wrote, and none counted).
		return item, cost, nil
	}
	if fits && kind(chart) != 0 && kind(chart) != 'n' {
		// A chart the host refuses leaves the item PNG only, with the
		// reason in its place: it is the cell's own output, so it does
		// not break the connection.
		c, n, err := decodeChart(chart)
		if err != nil {
			c = refusedChart(err)
			b, _ := json.Marshal(c)
			n = len(b)
		}
		item.Chart = c
		// Charged at what it takes in the host's memory where that is
		// more than its JSON: an empty element "{}" is 2 bytes of JSON
		// and a 200-byte ChartElement (1000 items of 1000 of them held
		// 192 MiB for one 3 MB result).
		cost += len(`,"chart":`) + max(n, chartMemory(c))
	}
	if fits && kind(table) == '{' {
		// A table over its caps is left out; the bundle has the frame.
		if tb := decodeTable(table); tb != nil && cost+len(tb)+len(`,"table":`) <= budget {
			item.Table = tb
			cost += len(`,"table":`) + len(tb)
		}
	}
	if !fits || cost > budget {
		return DisplayItem{}, 0, nil
	}
	return item, cost, nil
}

// decodeError decodes a result's error object within the error caps.
func decodeError(obj []byte) (*CellError, error) {
	e := &CellError{}
	err := eachMember(obj, func(k, v []byte) error {
		var dst *string
		limit := 0
		switch string(k) {
		case `"type"`:
			dst, limit = &e.Type, maxErrorType
		case `"message"`:
			dst, limit = &e.Message, maxErrorMessage
		case `"traceback"`:
			dst, limit = &e.Traceback, maxTraceback
		case `"frames"`:
			var err error
			e.Frames, err = decodeFrames(v)
			return err
		case `"exit_code"`:
			switch kind(v) {
			case 'n':
			case '0':
				n, ok := exitCode(v)
				if !ok {
					return fmt.Errorf("exit_code %.20s is not an exit status: %w", v, ErrProtocol)
				}
				e.ExitCode = &n
			default:
				return fmt.Errorf("exit_code is not a number: %w", ErrProtocol)
			}
			return nil
		default:
			return nil
		}
		if err := stringField(k, v); err != nil {
			return err
		}
		if kind(v) == 'n' {
			*dst = ""
			return nil
		}
		text, _, cut := unquote(v, limit)
		if cut && dst != &e.Type {
			text += fmt.Sprintf("\n[%s cut by the host at %d bytes: %d bytes in the frame]", k[1:len(k)-1], limit, len(v))
		}
		*dst = text
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// decodeFrames decodes a traceback's frames: all of them up to maxFrames,
// else the first and last halves with one frame between saying how many
// were left out. The list is counted before any frame is decoded.
func decodeFrames(arr []byte) ([]Frame, error) {
	switch kind(arr) {
	case 'n':
		return nil, nil
	case '[':
	default:
		return nil, fmt.Errorf("frames is not a list: %w", ErrProtocol)
	}
	n := countElements(arr)
	half := maxFrames / 2
	var frames []Frame
	var err error
	i := 0
	eachElement(arr, func(raw []byte) bool {
		defer func() { i++ }()
		if n > maxFrames && i >= half && i < n-half {
			if i == half {
				frames = append(frames, Frame{File: "<jailcell>", Name: fmt.Sprintf("[%d frames left out: over the limit of %d]", n-2*half, maxFrames)})
			}
			return true
		}
		switch kind(raw) {
		case 'n':
			return true
		case '{':
		default:
			err = fmt.Errorf("frame is not an object: %w", ErrProtocol)
			return false
		}
		var f Frame
		f, err = decodeFrame(raw)
		frames = append(frames, f)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return frames, nil
}

func decodeFrame(obj []byte) (Frame, error) {
	var f Frame
	err := eachMember(obj, func(k, v []byte) error {
		var dst *string
		limit := 0
		switch string(k) {
		case `"file"`:
			dst, limit = &f.File, maxFrameFile
		case `"name"`:
			dst, limit = &f.Name, maxFrameName
		case `"code"`:
			dst, limit = &f.Code, maxFrameCode
		case `"line"`:
			switch kind(v) {
			case '0':
				f.Line = smallInt(v)
			case 'n':
			default:
				return fmt.Errorf("frame line is not a number: %w", ErrProtocol)
			}
			return nil
		default:
			return nil
		}
		if err := stringField(k, v); err != nil {
			return err
		}
		if kind(v) == '"' {
			*dst, _, _ = unquote(v, limit)
		}
		return nil
	})
	return f, err
}

// exitCode parses a JSON number as an exit status: 0 to 255, or minus a
// signal number (-1 to -128).
func exitCode(v []byte) (int, bool) {
	if len(v) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < -128 || n > 255 {
		return 0, false
	}
	return n, true
}

// smallInt parses a JSON number as a non-negative int32, or returns 0.
func smallInt(v []byte) int {
	if len(v) > 10 {
		return 0
	}
	n, err := strconv.ParseInt(string(v), 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int(n)
}
