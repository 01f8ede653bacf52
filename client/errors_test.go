package client

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorsIsAndAs: a jailcell error matches its code's sentinel and no
// other, also when wrapped, and errors.As gives its message.
func TestErrorsIsAndAs(t *testing.T) {
	sentinels := map[string]error{
		"bad_request": ErrBadRequest, "not_found": ErrNotFound, "expired": ErrExpired, "limit": ErrLimit, "busy": ErrBusy,
		"unavailable": ErrUnavailable, "internal": ErrInternal, "forbidden": ErrForbidden,
	}
	for code := range sentinels {
		err := fmt.Errorf("exec cell: %w", &Error{Status: 409, Code: code, Message: "m"})
		for other, s := range sentinels {
			if got := errors.Is(err, s); got != (other == code) {
				t.Errorf("errors.Is(%s error, %s sentinel) = %v", code, other, got)
			}
		}
		var e *Error
		if !errors.As(err, &e) || e.Message != "m" || e.Status != 409 || !IsCode(err, code) {
			t.Errorf("errors.As / IsCode on a wrapped %s error: %+v", code, e)
		}
	}
	if errors.Is(errors.New("jailcell: not_found: x"), ErrNotFound) {
		t.Error("a plain error with the same text matched a sentinel")
	}
}

// A busy session answers with its own code; callers wait and retry on
// ErrBusy, and read the message through errors.As.
func ExampleError() {
	err := fmt.Errorf("run cell: %w", &Error{Code: "busy", Message: "session 42 is running a cell"})
	if errors.Is(err, ErrBusy) {
		var e *Error
		errors.As(err, &e)
		fmt.Println("retry later:", e.Message)
	}
	// Output: retry later: session 42 is running a cell
}
