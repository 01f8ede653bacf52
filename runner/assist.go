package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Assist kinds: Jupyter's complete_request, inspect_request and
// is_complete_request, answered by the kernel between cells.
const (
	AssistComplete   = "complete"
	AssistInspect    = "inspect"
	AssistIsComplete = "is_complete"
)

// Bounds of an assist reply, in what the host keeps (the kernel keeps the
// same or less): a forged reply costs the daemon no more than these.
const (
	// MaxMatches caps the completions kept.
	MaxMatches = 1000
	// maxMatchBytes caps one completion, encoded; longer ones are dropped.
	maxMatchBytes = 4 << 10
	// MaxInspectBytes caps an inspection's text, encoded.
	MaxInspectBytes = 4 << 20
	// maxIndent caps is_complete's indent.
	maxIndent = 64
)

// inspectMIMEs are the types of an inspection kept, as ipykernel sends
// them (text/html only with its HTML pager, which jailcell does not have).
var inspectMIMEs = []string{"text/plain"}

// AssistRequest asks the kernel about code being written; none of it runs
// as a cell (completion and inspection may evaluate attribute lookups on
// live objects, as IPython's do).
type AssistRequest struct {
	// ID names the request on the wire, unique like a cell's.
	ID string
	// Kind is AssistComplete, AssistInspect or AssistIsComplete.
	Kind string
	// Code is the text being edited.
	Code string
	// CursorPos is the cursor's offset in Code, in Unicode code points (as
	// Jupyter counts it); ignored by is_complete.
	CursorPos int
	// DetailLevel is inspect's 0 (signature and docstring) or 1 (source
	// too).
	DetailLevel int
}

// AssistReply is the kernel's answer, bounded and checked, untrusted: it
// decides nothing but what the caller shows its user.
type AssistReply struct {
	// Matches, CursorStart and CursorEnd answer complete: the matches
	// replace Code's code points [CursorStart, CursorEnd).
	Matches     []string
	CursorStart int
	CursorEnd   int
	// Found and Data answer inspect: Data maps a MIME type (text/plain) to
	// the text shown.
	Found bool
	Data  map[string]string
	// Status ("complete", "incomplete", "invalid", "unknown") and Indent
	// answer is_complete.
	Status string
	Indent string
}

// Assist sends one assist request and waits for its reply, until ctx is
// done. Like a Ping it waits for a running Exec, and a failure, whatever
// its cause, breaks the Conn: an unanswered request leaves the stream out
// of step.
func (c *Conn) Assist(ctx context.Context, req AssistRequest) (*AssistReply, error) {
	switch req.Kind {
	case AssistComplete, AssistInspect, AssistIsComplete:
	default:
		return nil, fmt.Errorf("assist: kind %q: allowed %s, %s, %s", req.Kind, AssistComplete, AssistInspect, AssistIsComplete)
	}
	if req.ID == "" {
		return nil, errors.New("assist: empty id")
	}
	points := utf8.RuneCountInString(req.Code)
	if req.CursorPos < 0 || req.CursorPos > points {
		return nil, fmt.Errorf("assist: cursor_pos %d: must be within the code's %d characters", req.CursorPos, points)
	}
	what := req.Kind + " " + req.ID
	b, err := c.request(ctx, what, map[string]any{
		"t": frameAssist, "id": req.ID, "kind": req.Kind, "code": req.Code,
		"cursor_pos": req.CursorPos, "detail_level": req.DetailLevel,
	}, frameAssist, nil)
	if err != nil {
		return nil, err
	}
	obj, _, _, err := frameHead(b)
	if err == nil {
		var r *AssistReply
		if r, err = decodeAssist(obj, req.Kind, points); err == nil {
			return r, nil
		}
	}
	return nil, c.fail(fmt.Errorf("%s: %w", what, err))
}

// decodeAssist reads the fields of want (a kind) out of a reply within the bounds
// above; points is the length of the request's code, which bounds the
// cursors.
func decodeAssist(obj []byte, want string, points int) (*AssistReply, error) {
	r := &AssistReply{}
	var matches, data, status, indent []byte
	intField := func(dst *int, k, v []byte) error {
		n, err := strconv.Atoi(string(v))
		if kind(v) != '0' || len(v) > 20 || err != nil || n < 0 || n > points {
			return fmt.Errorf("assist %s %.40s is not a position in the code (0-%d): %w", k, v, points, ErrProtocol)
		}
		*dst = n
		return nil
	}
	err := eachMember(obj, func(k, v []byte) error {
		switch string(k) {
		case `"matches"`:
			matches = v
		case `"cursor_start"`:
			return intField(&r.CursorStart, k, v)
		case `"cursor_end"`:
			return intField(&r.CursorEnd, k, v)
		case `"found"`:
			return boolField(&r.Found, k, v)
		case `"data"`:
			data = v
		case `"status"`:
			status = v
		case `"indent"`:
			indent = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode assist reply: %w", err)
	}
	switch want {
	case AssistComplete:
		if r.CursorStart > r.CursorEnd {
			return nil, fmt.Errorf("assist cursor_start %d after cursor_end %d: %w", r.CursorStart, r.CursorEnd, ErrProtocol)
		}
		r.Matches = []string{}
		if kind(matches) == '[' {
			eachElement(matches, func(v []byte) bool {
				if kind(v) != '"' {
					return true
				}
				s, _, cut := unquote(v, maxMatchBytes)
				if !cut && s != "" {
					r.Matches = append(r.Matches, s)
				}
				return len(r.Matches) < MaxMatches
			})
		}
	case AssistInspect:
		r.Data = map[string]string{}
		if kind(data) == '{' {
			eachMember(data, func(k, v []byte) error {
				for _, mime := range inspectMIMEs {
					if stringIs(k, mime) && kind(v) == '"' {
						s, _, _ := unquote(v, MaxInspectBytes)
						r.Data[mime] = s
					}
				}
				return nil
			})
		}
		r.Found = r.Found && len(r.Data) > 0
	case AssistIsComplete:
		r.Status = "unknown"
		for _, s := range []string{"complete", "incomplete", "invalid", "unknown"} {
			if stringIs(status, s) {
				r.Status = s
			}
		}
		if r.Status == "incomplete" && kind(indent) == '"' {
			s, _, _ := unquote(indent, maxIndent)
			for _, c := range s {
				if c != ' ' && c != '\t' {
					s = ""
					break
				}
			}
			r.Indent = s
		}
	}
	return r, nil
}
