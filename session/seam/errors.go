package seam

import "errors"

// sentinels are the session sentinels (types.go), in the order Sentinel
// tries them.
var sentinels = []error{ErrBadRequest, ErrNotFound, ErrExpired, ErrLimit, ErrBusy, ErrUnavailable, ErrShutdown}

// Sentinels returns the session sentinels every error of a session
// operation is one of (an ErrStateQuota is an ErrLimit), or an internal
// error: for the API's table of wire codes and its test.
func Sentinels() []error { return append([]error(nil), sentinels...) }

// HostSentinel is one error from below session (isolate's) and the session
// sentinel it is.
type HostSentinel struct{ Host, Is error }

// host is the table session registers (Register): this package never
// imports isolate, yet classes what session passes on from it.
var host struct {
	sentinels []HostSentinel
	probe     func() Features
}

// Register is called once, from session's init, with its table of host
// sentinels and the host's probe. Only session may call it; it is a
// registration rather than an import because this package must never
// import isolate.
func Register(sentinels []HostSentinel, probe func() Features) {
	host.sentinels = append([]HostSentinel(nil), sentinels...)
	host.probe = probe
}

// Sentinel returns the session sentinel err is: the one it carries, else
// the one its isolate sentinel maps to; nil for neither.
func Sentinel(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	for _, m := range host.sentinels {
		if errors.Is(err, m.Host) {
			return m.Is
		}
	}
	return nil
}
