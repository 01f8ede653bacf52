package e2b

import (
	"context"
	"net/http"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// envd's HTTP routes and its two Connect services, on a sandbox's port
// 49983.

func (d *Door) routeEnvd() {
	m := d.envd
	m.HandleFunc("GET /health", d.health)
	d.routeProcess(m)
	d.routeFilesystem(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.Method+" "+r.URL.Path+" is not a route of jailcell's envd (docs/e2b.md lists them)")
	})
}

// health answers 204 while the sandbox runs, and 502 when it does not
// exist or is paused, as E2B's proxy answers for a sandbox with no
// running VM behind it: the SDKs' isRunning is false for both.
func (d *Door) health(w http.ResponseWriter, r *http.Request) {
	if d.running(w, r) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// running says whether the request's sandbox runs, having answered 502 if
// it does not exist or is paused (a paused one is not resumed: Info leaves
// it as it is), unless it was made to resume on traffic (autoResume).
func (d *Door) running(w http.ResponseWriter, r *http.Request) bool {
	info, ok := d.lookup(w, r)
	if ok && info != nil && info.State == "hibernated" {
		t := targetOf(r.Context())
		if rec, _ := d.records.get(t.id); rec.AutoResume {
			if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpRestore, Session: t.id}, nil); e != nil {
				writeError(w, http.StatusBadGateway, "sandbox "+t.id+" is paused and did not resume: "+e.Message)
				return false
			}
			return true
		}
		writeError(w, http.StatusBadGateway, "sandbox "+t.id+" is paused: connect to it (or resume it) to run it again")
		return false
	}
	return ok
}

// lookup is the request's sandbox's info, running or paused; false, having
// written the answer, if it is not there: 502, as E2B's proxy answers for a
// sandbox that is gone (the SDKs raise their TimeoutError for it).
func (d *Door) lookup(w http.ResponseWriter, r *http.Request) (*seam.Info, bool) {
	t := targetOf(r.Context())
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: t.id}, nil)
	switch {
	case isGone(e):
		writeError(w, http.StatusBadGateway, "sandbox "+t.id+" is not running: "+e.Message)
		return nil, false
	case e != nil:
		writeAPIError(w, e)
		return nil, false
	}
	return resp.Info, true
}

// isGone: e says the sandbox is no more (killed, past its timeout).
func isGone(e *api.Error) bool {
	return e != nil && (e.Code == api.CodeNotFound || e.Code == api.CodeExpired)
}

// ended is why sandbox id is no more (killed, past its timeout), or nil
// while it exists, running or paused.
func (d *Door) ended(ctx context.Context, owner int, id string) *api.Error {
	if _, e := d.call(ctx, owner, &api.Request{Op: api.OpInfo, Session: id}, nil); isGone(e) {
		return e
	}
	return nil
}
