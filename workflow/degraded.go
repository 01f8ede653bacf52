package workflow

import (
	"context"

	"github.com/jailcell/jailcell/session"
)

// DegradedStateless is the policy.Policy.Degraded value that allows the
// degraded run.
const DegradedStateless = "stateless"

// stdlibOnly is put before a degraded cell, on one line so the cell's own
// line numbers move by exactly one. It gives `python3 -I -S` semantics in
// the already-started kernel: site-packages leave sys.path and every module
// loaded from them is forgotten, so only the standard library imports.
// This narrows what the cell can use; it is not the isolation boundary.
// The sandbox is, and it is built from the same policy as the normal run.
const stdlibOnly = `import sys as _jc_s; _jc_s.path[:] = [_p for _p in _jc_s.path if not ("site-packages" in _p or "dist-packages" in _p or _p in ("", "."))]; [_jc_s.modules.pop(_k, None) for _k, _v in list(_jc_s.modules.items()) if any(_d in (getattr(_v, "__file__", None) or "") for _d in ("site-packages", "dist-packages"))]; del _jc_s` + "\n"

// degradedAllowed reports whether the request's policy allows the degraded
// run.
func (r *Runner) degradedAllowed(req Request) bool {
	p, ok := r.cfg.Policies[r.policyName(req)]
	return ok && p.Degraded == DegradedStateless
}

// policyName is the policy the request runs under: the session's, or the
// one-shot's named one.
func (r *Runner) policyName(req Request) string {
	name := req.Policy
	if req.Session != "" {
		name = ""
		for _, in := range r.m.List(req.Owner) {
			if in.ID == req.Session {
				name = in.Policy
			}
		}
	}
	if name == "" {
		name = "default"
	}
	return name
}

// degraded runs code once in a fresh one-shot sandbox under the same named
// policy, standard library only. It never runs outside a sandbox: if the
// Manager cannot build one, it fails.
func (r *Runner) degraded(ctx context.Context, req Request, code string) (*session.Result, error) {
	er := session.ExecRequest{Code: stdlibOnly + code, Timeout: req.Exec.Timeout, Files: req.Exec.Files, OnOutput: req.Exec.OnOutput}
	res, err := r.m.RunOnce(ctx, req.Owner, r.policyName(req), er)
	if err != nil {
		return nil, err
	}
	r.cfg.Logger.Info("degraded stateless run", "status", res.Status)
	return res, nil
}
