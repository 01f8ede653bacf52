// Package setupcell is the mark of the daemon's own cell (installing a
// session's requirements), which runs without the session's cell limits.
// It is internal to session so that only session can set the mark: a
// request that came through a front door must never carry it. It must
// never hold anything but the mark.
package setupcell
