package runner

import "fmt"

// IPython's clear_output() comes from the kernel as a display frame whose
// item is {"clear": true, "wait": BOOL}, on the display path so that it
// keeps its place among the cell's streams and displays. It is passed on
// to ExecRequest.OnClearOutput only; it is no output, so it is never part
// of a result's display list.

// maxClearOutputs caps the clear_output calls of one cell passed on to
// OnClearOutput. A cell that clears in a loop (a progress display) would
// otherwise make the host forward one event per call for as long as it
// runs, each nearly free for the cell to send; past the cap they are
// dropped, and a front end only shows more of the cell's output.
const maxClearOutputs = 10000

// clearItem reads a display item as a clear_output: clear says whether it
// is one, wait is IPython's flag. Both members must be booleans (or null)
// if present, as the kernel forges them at will; a clear item's other
// members are ignored, so it carries nothing to the front end but wait.
func clearItem(obj []byte) (clear, wait bool, err error) {
	err = eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"clear"`:
			return boolField(&clear, k, v)
		case `"wait"`:
			return boolField(&wait, k, v)
		}
		return nil
	})
	if err != nil {
		return false, false, fmt.Errorf("decode display frame's clear item: %w", err)
	}
	return clear, clear && wait, nil
}

// clearOutput passes on one clear_output of the running cell, up to
// maxClearOutputs of them.
func (s *execState) clearOutput(wait bool) {
	if s.clears >= maxClearOutputs {
		return
	}
	s.clears++
	if s.req.OnClearOutput != nil {
		s.req.OnClearOutput(wait)
	}
}
