package e2b

import (
	"net/http"

	"github.com/jailcell/jailcell/api"
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

// health answers 204 while the sandbox exists and 502 when it does not,
// as E2B's proxy does for a sandbox that is gone (the SDKs' isRunning).
func (d *Door) health(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: t.id}, nil); e != nil {
		if e.Code == api.CodeNotFound || e.Code == api.CodeExpired {
			writeError(w, http.StatusBadGateway, "sandbox "+t.id+" is not running: "+e.Message)
			return
		}
		writeAPIError(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
