// Package hostfeatures declares what a host can give a sandbox (Features)
// and the kinds of missing features (Problem), as isolate's probe finds
// them and the API shows them. It sits below both, so that isolate, which
// fills it in, and session/seam, which carries it to the API, share one
// type without isolate knowing anything above it.
//
// It must never import anything of jailcell's nor probe anything itself:
// it is a declaration only.
package hostfeatures
