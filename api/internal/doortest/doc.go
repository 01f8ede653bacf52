// Package doortest holds what the front doors' tests share: a Dispatcher
// without a manager, a JSON-lines client over pipes, and small waits and
// readers, so each door's tests do not carry a copy.
//
// It is for tests only: it must never be imported by a package the
// jailcell binary links, and like api it never imports session or
// isolate (a test that needs a real manager takes internal/sessiontest).
package doortest
