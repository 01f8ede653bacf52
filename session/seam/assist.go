package seam

import (
	"time"

	"github.com/jailcell/jailcell/runner"
)

// Assist kinds, as Jupyter names the requests.
const (
	AssistComplete   = runner.AssistComplete
	AssistInspect    = runner.AssistInspect
	AssistIsComplete = runner.AssistIsComplete
)

// AssistTimeout bounds one assist: the first completion imports IPython and
// jedi in the kernel (about a second here, more under load).
const AssistTimeout = 30 * time.Second

// AssistRequest asks a session's kernel about code being written.
type AssistRequest struct {
	// Kind is AssistComplete, AssistInspect or AssistIsComplete.
	Kind string
	// Code is the text being edited.
	Code string
	// CursorPos is the cursor's offset in Code in code points; nil: the
	// end of Code.
	CursorPos *int
	// DetailLevel is inspect's 0 or 1.
	DetailLevel int
}

// Completion answers complete: the matches replace the code's code points
// [cursor_start, cursor_end).
type Completion struct {
	Matches     []string `json:"matches"`
	CursorStart int      `json:"cursor_start"`
	CursorEnd   int      `json:"cursor_end"`
}

// Inspection answers inspect: what the kernel knows of the name at the
// cursor, as a MIME bundle (text/plain).
type Inspection struct {
	Found bool              `json:"found"`
	Data  map[string]string `json:"data"`
}

// Completeness answers is_complete: "complete", "incomplete" (with the
// indent of the next line), "invalid" or "unknown".
type Completeness struct {
	Status string `json:"status"`
	Indent string `json:"indent,omitempty"`
}

// Assistance is the answer to one AssistRequest: the field of its kind.
type Assistance struct {
	Completion   *Completion
	Inspection   *Inspection
	Completeness *Completeness
}
