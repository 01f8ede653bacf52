package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jailcell/jailcell/runner"
)

var assistSeq atomic.Uint64

// Assist answers a complete, inspect or is_complete request from session
// id's kernel, between cells: a cell running makes it ErrBusy, as an exec
// would be (a Jupyter kernel answers its shell requests in order, so a
// client never sees that). A session without a live kernel (hibernated,
// or starting one) gets an empty answer: completing a name is not worth a
// restore. Nothing runs as a cell: no execution count, no files.
func (m *Manager) Assist(ctx context.Context, owner int, id string, req AssistRequest) (*Assistance, error) {
	switch req.Kind {
	case AssistComplete, AssistInspect, AssistIsComplete:
	default:
		return nil, fmt.Errorf("%w: kind %q: allowed %s, %s, %s", ErrBadRequest, req.Kind, AssistComplete, AssistInspect, AssistIsComplete)
	}
	points := utf8.RuneCountInString(req.Code)
	cursor := points
	if req.CursorPos != nil {
		cursor = *req.CursorPos
	}
	if cursor < 0 || cursor > points {
		return nil, fmt.Errorf("%w: cursor_pos = %d: must be 0 to the code's length in characters (%d)", ErrBadRequest, cursor, points)
	}
	if req.DetailLevel != 0 && req.DetailLevel != 1 {
		return nil, fmt.Errorf("%w: detail_level = %d: allowed 0 or 1", ErrBadRequest, req.DetailLevel)
	}
	s, err := m.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer s.run.Unlock()
	s.mu.Lock()
	closed, k := s.closed, s.k
	if !closed {
		s.lastUsed = time.Now()
	}
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, id)
	}
	var r *runner.AssistReply
	if k != nil {
		actx, cancel := context.WithTimeout(ctx, AssistTimeout)
		defer cancel()
		r, err = k.conn.Assist(actx, runner.AssistRequest{
			ID:          m.nonce + "-assist-" + strconv.FormatUint(assistSeq.Add(1), 10),
			Kind:        req.Kind,
			Code:        req.Code,
			CursorPos:   cursor,
			DetailLevel: req.DetailLevel,
		})
		if err != nil {
			// The connection is broken: the next cell finds it so and
			// starts a kernel, with its verdict saying the state was lost.
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil, fmt.Errorf("%s in session %s: %w", req.Kind, id, context.Cause(ctx))
			}
			return nil, fmt.Errorf("%w: %s in session %s: the kernel did not answer: %v", ErrUnavailable, req.Kind, id, err)
		}
	} else {
		r = &runner.AssistReply{CursorStart: cursor, CursorEnd: cursor, Status: "unknown"}
	}
	switch req.Kind {
	case AssistComplete:
		matches := r.Matches
		if matches == nil {
			matches = []string{}
		}
		return &Assistance{Completion: &Completion{Matches: matches, CursorStart: r.CursorStart, CursorEnd: r.CursorEnd}}, nil
	case AssistInspect:
		data := r.Data
		if data == nil {
			data = map[string]string{}
		}
		return &Assistance{Inspection: &Inspection{Found: r.Found, Data: data}}, nil
	}
	return &Assistance{Completeness: &Completeness{Status: r.Status, Indent: r.Indent}}, nil
}
