package seam

import "github.com/jailcell/jailcell/internal/hostfeatures"

// Features, ProblemID and Problem are declared below isolate, in
// internal/hostfeatures: isolate's probe fills them in and the API shows
// them, and neither of those may import the other's side.
type (
	Features  = hostfeatures.Features
	ProblemID = hostfeatures.ProblemID
	Problem   = hostfeatures.Problem
)

// Probe inspects the host, for a caller without a Manager: the probe
// session registered (Register); the zero Features, which claims nothing,
// if session is not linked in.
func Probe() Features {
	if host.probe == nil {
		return Features{}
	}
	return host.probe()
}
