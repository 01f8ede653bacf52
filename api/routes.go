package api

import "net/http"

// Routes. Paths are split on their escaped form, so "%2F" inside a
// segment never moves a route boundary, and nothing is cleaned or
// redirected: a file path goes to the manager as sent, which confines it.
const (
	routeHealthz  = "healthz"
	routeReadyz   = "readyz"
	routeMetrics  = "metrics"
	routeSessions = "sessions"        // /v1/sessions
	routeSession  = "session"         // /v1/sessions/{id}
	routeExec     = "session_exec"    // /v1/sessions/{id}/exec
	routeOneShot  = "exec"            // /v1/exec
	routeFiles    = "files"           // /v1/sessions/{id}/files
	routeFile     = "file"            // /v1/sessions/{id}/files/{path...}
	routeLife     = "session_op"      // /v1/sessions/{id}/{hibernate,restore,fork,snapshot,rollback,interrupt}
	routeAssist   = "session_assist"  // /v1/sessions/{id}/{complete,inspect,is_complete}
	routeCommand  = "session_command" // /v1/sessions/{id}/commands
	routeTimeout  = "session_timeout" // /v1/sessions/{id}/timeout
	routeMetricsS = "session_metrics" // /v1/sessions/{id}/metrics
	routeWatch    = "session_watch"   // /v1/sessions/{id}/watch
	routeStat     = "stat"            // /v1/sessions/{id}/stat/{path...}
	routeDir      = "dir"             // /v1/sessions/{id}/dirs/{path...}
	routeOpenAPI  = "openapi"         // /v1/openapi.json
	routeUnknown  = "unknown"
	routeMCP      = "mcp" // /mcp, served by mcp.go
)

// RouteSpec is one HTTP path the server answers: its OpenAPI pattern,
// the methods it takes, the route name the metrics and logs carry, and
// for a session op with a path of its own, the op it runs.
type RouteSpec struct {
	Path    string   // OpenAPI pattern, as in openapi.json's paths
	Methods []string // the methods answered; others get 405 with Allow
	Name    string   // route name in metrics and logs
	Op      string   // the op a one-op route runs (lifecycle and assist routes)
	// Ops names the JSON-lines op each method runs, which is how the
	// clients map an op to this path; a method absent here (HEAD, a
	// probe) runs no op of its own.
	Ops map[string]string
}

// Routes is the one table of the HTTP transport's paths. The mux reads
// its methods and per-path ops from it, and tests check openapi.json and
// the clients' route tables against it: adding a path starts here (see
// the "adding an op" recipe in docs/recipes.md).
var Routes = []RouteSpec{
	{Path: "/healthz", Methods: []string{http.MethodGet, http.MethodHead}, Name: routeHealthz, Ops: map[string]string{http.MethodGet: OpPing}},
	{Path: "/readyz", Methods: []string{http.MethodGet, http.MethodHead}, Name: routeReadyz},
	{Path: "/metrics", Methods: []string{http.MethodGet, http.MethodHead}, Name: routeMetrics},
	{Path: "/v1/openapi.json", Methods: []string{http.MethodGet, http.MethodHead}, Name: routeOpenAPI},
	{Path: "/v1/exec", Methods: []string{http.MethodPost}, Name: routeOneShot, Ops: map[string]string{http.MethodPost: OpExec}},
	{Path: "/v1/sessions", Methods: []string{http.MethodGet, http.MethodHead, http.MethodPost}, Name: routeSessions, Ops: map[string]string{http.MethodGet: OpSessions, http.MethodPost: OpCreate}},
	{Path: "/v1/sessions/{id}", Methods: []string{http.MethodGet, http.MethodDelete}, Name: routeSession, Ops: map[string]string{http.MethodGet: OpInfo, http.MethodDelete: OpClose}},
	{Path: "/v1/sessions/{id}/exec", Methods: []string{http.MethodPost}, Name: routeExec, Ops: map[string]string{http.MethodPost: OpExec}},
	{Path: "/v1/sessions/{id}/files", Methods: []string{http.MethodGet, http.MethodHead}, Name: routeFiles, Ops: map[string]string{http.MethodGet: OpFiles}},
	{Path: "/v1/sessions/{id}/files/{path}", Methods: []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete}, Name: routeFile, Ops: map[string]string{http.MethodGet: OpDownload, http.MethodPut: OpUpload, http.MethodDelete: OpRemove}},
	{Path: "/v1/sessions/{id}/hibernate", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpHibernate, Ops: map[string]string{http.MethodPost: OpHibernate}},
	{Path: "/v1/sessions/{id}/restore", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpRestore, Ops: map[string]string{http.MethodPost: OpRestore}},
	{Path: "/v1/sessions/{id}/fork", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpFork, Ops: map[string]string{http.MethodPost: OpFork}},
	{Path: "/v1/sessions/{id}/snapshot", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpSnapshot, Ops: map[string]string{http.MethodPost: OpSnapshot}},
	{Path: "/v1/sessions/{id}/rollback", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpRollback, Ops: map[string]string{http.MethodPost: OpRollback}},
	{Path: "/v1/sessions/{id}/interrupt", Methods: []string{http.MethodPost}, Name: routeLife, Op: OpInterrupt, Ops: map[string]string{http.MethodPost: OpInterrupt}},
	{Path: "/v1/sessions/{id}/complete", Methods: []string{http.MethodPost}, Name: routeAssist, Op: OpComplete, Ops: map[string]string{http.MethodPost: OpComplete}},
	{Path: "/v1/sessions/{id}/inspect", Methods: []string{http.MethodPost}, Name: routeAssist, Op: OpInspect, Ops: map[string]string{http.MethodPost: OpInspect}},
	{Path: "/v1/sessions/{id}/is_complete", Methods: []string{http.MethodPost}, Name: routeAssist, Op: OpIsComplete, Ops: map[string]string{http.MethodPost: OpIsComplete}},
	{Path: "/v1/sessions/{id}/commands", Methods: []string{http.MethodPost}, Name: routeCommand, Ops: map[string]string{http.MethodPost: OpCommand}},
	{Path: "/v1/sessions/{id}/timeout", Methods: []string{http.MethodPost}, Name: routeTimeout, Ops: map[string]string{http.MethodPost: OpSetTimeout}},
	{Path: "/v1/sessions/{id}/metrics", Methods: []string{http.MethodGet}, Name: routeMetricsS, Ops: map[string]string{http.MethodGet: OpMetrics}},
	{Path: "/v1/sessions/{id}/watch", Methods: []string{http.MethodPost}, Name: routeWatch, Ops: map[string]string{http.MethodPost: OpWatch}},
	{Path: "/v1/sessions/{id}/stat/{path}", Methods: []string{http.MethodGet}, Name: routeStat, Ops: map[string]string{http.MethodGet: OpStat}},
	{Path: "/v1/sessions/{id}/dirs/{path}", Methods: []string{http.MethodPut}, Name: routeDir, Ops: map[string]string{http.MethodPut: OpMkdir}},
	{Path: mcpPath, Methods: mcpMethods, Name: routeMCP},
}

// routeMethods lists the methods each route name answers, from Routes.
var routeMethods = func() map[string][]string {
	m := map[string][]string{}
	for _, r := range Routes {
		if r.Name != routeMCP {
			m[r.Name] = r.Methods
		}
	}
	return m
}()

// routeOps maps the last segment of a one-op session route to its op,
// from Routes, for the route name given.
func routeOps(name string) map[string]string {
	m := map[string]string{}
	for _, r := range Routes {
		if r.Name == name {
			m[r.Path[len("/v1/sessions/{id}/"):]] = r.Op
		}
	}
	return m
}

// lifeOps are the session operations with a route of their own, no body.
var lifeOps = routeOps(routeLife)

// assistOps are Jupyter's editing helpers, each with a route of its own
// and a JSON body (code, cursor_pos, detail_level).
var assistOps = routeOps(routeAssist)
