package session

import (
	"errors"
	"fmt"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/session/seam"
)

// Features is what this host can give a sandbox, as isolate's probe found
// it; the API shows it without reaching below session.
type Features = isolate.Features

// Probe inspects the host, for a caller without a Manager.
func Probe() Features { return isolate.Probe() }

// sentinels are the session sentinels (seam's types.go), in the order
// Sentinel tries them.
var sentinels = seam.Sentinels()

// Sentinels returns the session sentinels every error of a session
// operation is one of (an ErrStateQuota is an ErrLimit), or an internal
// error: for the API's table of wire codes and its test.
func Sentinels() []error { return append([]error(nil), sentinels...) }

// hostSentinels maps every isolate sentinel a session operation can pass
// on to the one session sentinel it is: one condition, one sentinel, so
// one wire code (running out of sandbox slots used to be "unavailable"
// through NewDisk and "limit" through ReplaceDisk).
var hostSentinels = []struct{ host, session error }{
	{isolate.ErrExhausted, ErrLimit}, // sandbox slots: Config.Slots is a ceiling
	{isolate.ErrCopyBudget, ErrLimit},
	{isolate.ErrUnsupported, ErrUnavailable},
	{isolate.ErrTimeout, ErrUnavailable},  // criu passed its bound
	{isolate.ErrBusy, ErrUnavailable},     // another criu ran (templates import instead: never seen)
	{isolate.ErrNotFound, ErrUnavailable}, // and ErrNotMounted: a sandbox's disk is gone
	{isolate.ErrPosture, ErrUnavailable},  // a restore's images asked for less confinement: refused, destroyed
}

// Sentinel returns the session sentinel err is: the one it carries, else
// the one its isolate sentinel maps to; nil for neither.
func Sentinel(err error) error { return seam.Sentinel(err) }

// hostErr is err, from isolate, as a session error: wrapped in the session
// sentinel its isolate sentinel maps to, else in fallback; left as it is
// if it already carries a session sentinel. The isolate error stays in
// the chain for session's own checks.
func hostErr(fallback, err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	s := fallback
	for _, m := range hostSentinels {
		if errors.Is(err, m.host) {
			s = m.session
			break
		}
	}
	return fmt.Errorf("%w: %w", s, err)
}
