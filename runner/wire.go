package runner

import "encoding/json"

// Hello is what the kernel says after each connect. It is untrusted: the
// counts are for display and diagnostics, not for decisions.
type Hello struct {
	// PID is the kernel's pid inside the sandbox's pid namespace.
	PID int `json:"pid"`
	// Python is the interpreter version, e.g. "3.11.2".
	Python string `json:"python"`
	// Cells counts the cells run since the kernel started, across
	// reconnects.
	Cells int `json:"cells"`
	// Busy is true if a cell was still running when the kernel connected
	// (the host restarted during a cell). Its result goes to the old id and
	// is ignored.
	Busy bool `json:"busy"`
	// Acks is true if the kernel sends a "started" frame before each
	// cell's code runs (see ErrNotStarted); older kernels do not.
	Acks bool `json:"acks"`
}

// ExecRequest is one cell to run.
type ExecRequest struct {
	// ID names the cell on the wire; frames with other ids are ignored. It
	// must not be empty, and must be unique over the kernel's life, across
	// reconnects: a cell orphaned by a host restart still sends its result
	// under its id, and a reused id would take it for its own.
	ID string
	// Code is the cell's Python source.
	Code string
	// MaxOutput caps the bytes kept per stream (stdout, stderr). The kernel
	// stops forwarding past it, and the host cuts there regardless.
	MaxOutput int64
	// Context names the kernel's namespace the cell runs in: "" is the
	// main one; another name is a dict of globals of its own, made by its
	// first cell. Cwd is where a new one starts (its cells keep their own
	// working directory). Reset drops the namespace first; with empty
	// Code, nothing runs and none is made again.
	Context string
	Cwd     string
	Reset   bool
	// OnDisplay, if set, gets each display item (a figure, a display()
	// call) as the cell shows it, before the result. A forged stream of
	// them is held to the result's own display budget: at most
	// maxDisplayItems items and maxRichBytes of JSON per cell; past it
	// items are not passed on (the result's list ends with its note).
	OnDisplay func(DisplayItem)
	// OnClearOutput, if set, gets each IPython clear_output() of the cell
	// (wait: clear when the next output comes, not now), in its place
	// among the streams and display items; at most maxClearOutputs per
	// cell.
	OnClearOutput func(wait bool)
}

// Result is the outcome of one cell. Everything but Stdout, Stderr and their
// truncation flags is the kernel's report, validated but untrusted.
type Result struct {
	// Status is "ok" or "error", as the kernel reported.
	Status string `json:"status"`
	// Stdout and Stderr are what the host received for the cell, at most
	// MaxOutput bytes each, cut at a UTF-8 boundary.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutTruncated and StderrTruncated are set if the kernel or the host
	// dropped output past MaxOutput.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// Value is the MIME bundle of the cell's trailing expression (always
	// with "text/plain"), or nil if there was none or it was None.
	Value map[string]any `json:"value,omitempty"`
	// ValueChart is the chart data of Value when the value is a matplotlib
	// Figure (see Chart).
	ValueChart *Chart `json:"value_chart,omitempty"`
	// ValueTable is Value's columns when the value is a pandas DataFrame
	// of at most 10000 cells: {"name": [values]} in column order, E2B's
	// Result.data (see decodeTable).
	ValueTable json.RawMessage `json:"value_table,omitempty"`
	// Display lists what the cell showed: display() calls and matplotlib
	// figures, in order.
	Display []DisplayItem `json:"display,omitempty"`
	// Error describes the exception that ended the cell, if Status is
	// "error".
	Error *CellError `json:"error,omitempty"`
	// Interrupted is set if a SIGINT (the host's timeout) reached the cell.
	Interrupted bool `json:"interrupted,omitempty"`
	// ExecutionCount is the cell's number in its kernel (1, 2, ...), as
	// Jupyter's: the N of "<cell-N>" in tracebacks and of Out[N]. The host
	// counts it (Conn.Cells), starting from the hello's count, so a
	// restored checkpoint goes on from where it was dumped.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// DisplayItem is one rich output.
type DisplayItem struct {
	// MIME is the preferred type of the item: image/png, image/svg+xml,
	// text/html, text/markdown, application/json, then text/plain.
	MIME string `json:"mime"`
	// Data is the item in that type: text, or base64 for binary types.
	Data string `json:"data"`
	// Bundle holds every representation the object offered, keyed by MIME
	// type, binary ones in base64.
	Bundle map[string]any `json:"bundle,omitempty"`
	// Pager marks text IPython sent to its pager (%quickref, obj?, %pdoc,
	// %prun): what Jupyter carries as a `page` payload, kept out of stdout.
	Pager bool `json:"pager,omitempty"`
	// Chart is the data a matplotlib figure drew, beside its PNG (see
	// Chart); nil for anything else.
	Chart *Chart `json:"chart,omitempty"`
	// Table is a pandas DataFrame's columns, beside its bundle (see
	// decodeTable); nil for anything else.
	Table json.RawMessage `json:"table,omitempty"`
}

// CellError is an exception raised by a cell.
type CellError struct {
	// Type is the exception's class, e.g. "ZeroDivisionError"; qualified by
	// module unless builtin or defined in a cell.
	Type string `json:"type"`
	// Message is str() of the exception (for SyntaxError, its msg).
	Message string `json:"message"`
	// Traceback is formatted as Python does, without the kernel's frames.
	Traceback string `json:"traceback"`
	// Frames is the stack from the cell down to the raise. Cell code has
	// file "<cell-N>", N counting cells from 1.
	Frames []Frame `json:"frames"`
	// ExitCode is a failed shell command's exit status (`!cmd`, %pip;
	// negative: the signal that killed it), nil for other errors.
	ExitCode *int `json:"exit_code,omitempty"`
}

// Frame is one stack frame of a CellError.
type Frame struct {
	// File is the code's file name: "<cell-N>" for cell code.
	File string `json:"file"`
	// Line is the 1-based line number in File, 0 if unknown.
	Line int `json:"line"`
	// Name is the function, "<module>" for a cell's top level.
	Name string `json:"name"`
	// Code is the source line, stripped, or "" if unavailable.
	Code string `json:"code"`
}
