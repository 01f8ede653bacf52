package workflow

import (
	"context"
	"fmt"
	"sort"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
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

// degradedAllowed reports whether the policy the request runs under allows
// the degraded run. err says why that policy cannot be known (the session
// ended or is not the caller's): then there is no degraded run.
func (r *Runner) degradedAllowed(ctx context.Context, req Request) (bool, error) {
	if req.Session != "" {
		p, err := r.m.PolicyOf(ctx, req.Owner, req.Session)
		if err != nil {
			return false, fmt.Errorf("the session's policy cannot be known: %w", err)
		}
		return p.Degraded == DegradedStateless, nil
	}
	p, ok := r.cfg.Policies[oneShotPolicy(req)]
	return ok && p.Degraded == DegradedStateless, nil
}

// scope is the policy req runs under, for failure memory: a session's
// effective policy (an unknown session, or one not the caller's, is the
// manager's not_found), or the named one-shot policy (unknown: bad_request).
func (r *Runner) scope(ctx context.Context, req Request) (scope, error) {
	if req.Session != "" {
		p, err := r.m.PolicyOf(ctx, req.Owner, req.Session)
		if err != nil {
			return scope{}, err
		}
		name := p.Name
		if name == "" {
			name = "default"
		}
		return scopeOf(p, name), nil
	}
	name := oneShotPolicy(req)
	p, ok := r.cfg.Policies[name]
	if !ok && r.cfg.Policies != nil {
		return scope{}, fmt.Errorf("%w: unknown policy %q, configured: %v", seam.ErrBadRequest, name, sortedNames(r.cfg.Policies))
	}
	if p.Name != "" {
		name = p.Name
	}
	return scopeOf(p, name), nil
}

func sortedNames(m map[string]policy.Policy) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// oneShotPolicy is the named policy a one-shot request runs under.
func oneShotPolicy(req Request) string {
	if req.Policy == "" {
		return "default"
	}
	return req.Policy
}

// degraded runs code once in a fresh one-shot sandbox under the policy the
// request ran under, standard library only: a session's effective policy
// (its named one as tightened at create: memory, timeout, allowlist), never
// the wider policy of the same name; refused when the session is gone or
// not the caller's, since its policy cannot then be known. It never runs
// outside a sandbox: if the Manager cannot build one, it fails.
func (r *Runner) degraded(ctx context.Context, req Request, code string) (*seam.Result, error) {
	er := seam.ExecRequest{Code: stdlibOnly + code, Timeout: req.Exec.Timeout, Files: req.Exec.Files, OnOutput: req.Exec.OnOutput, OnDisplay: req.Exec.OnDisplay, OnClearOutput: req.Exec.OnClearOutput, RawANSI: req.Exec.RawANSI}
	var res *seam.Result
	var err error
	if req.Session != "" {
		res, err = r.m.RunOnceAs(ctx, req.Owner, req.Session, er)
	} else {
		res, err = r.m.RunOnce(ctx, req.Owner, oneShotPolicy(req), er)
	}
	if err != nil {
		return nil, err
	}
	r.cfg.Logger.Info("degraded stateless run", "status", res.Status)
	return res, nil
}
