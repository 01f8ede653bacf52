package api

import "net/http"

// Routes. Paths are split on their escaped form, so "%2F" inside a
// segment never moves a route boundary, and nothing is cleaned or
// redirected: a file path goes to the manager as sent, which confines it.
const (
	RouteHealthz  = "healthz"
	RouteReadyz   = "readyz"
	RouteMetrics  = "metrics"
	RouteSessions = "sessions"        // /v1/sessions
	RouteSession  = "session"         // /v1/sessions/{id}
	RouteExec     = "session_exec"    // /v1/sessions/{id}/exec
	RouteOneShot  = "exec"            // /v1/exec
	RouteFiles    = "files"           // /v1/sessions/{id}/files
	RouteFile     = "file"            // /v1/sessions/{id}/files/{path...}
	RouteLife     = "session_op"      // /v1/sessions/{id}/{hibernate,restore,fork,snapshot,rollback,interrupt}
	RouteAssist   = "session_assist"  // /v1/sessions/{id}/{complete,inspect,is_complete}
	RouteCommand  = "session_command" // /v1/sessions/{id}/commands
	RouteTimeout  = "session_timeout" // /v1/sessions/{id}/timeout
	RouteMetricsS = "session_metrics" // /v1/sessions/{id}/metrics
	RouteWatch    = "session_watch"   // /v1/sessions/{id}/watch
	RouteStat     = "stat"            // /v1/sessions/{id}/stat/{path...}
	RouteDir      = "dir"             // /v1/sessions/{id}/dirs/{path...}
	RouteRename   = "rename"          // /v1/sessions/{id}/rename
	RouteOpenAPI  = "openapi"         // /v1/openapi.json
	RouteUnknown  = "unknown"
	RouteMCP      = "mcp" // /mcp, served by api/httpapi with api/mcp
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
	{Path: "/healthz", Methods: []string{http.MethodGet, http.MethodHead}, Name: RouteHealthz, Ops: map[string]string{http.MethodGet: OpPing}},
	{Path: "/readyz", Methods: []string{http.MethodGet, http.MethodHead}, Name: RouteReadyz},
	{Path: "/metrics", Methods: []string{http.MethodGet, http.MethodHead}, Name: RouteMetrics},
	{Path: "/v1/openapi.json", Methods: []string{http.MethodGet, http.MethodHead}, Name: RouteOpenAPI},
	{Path: "/v1/exec", Methods: []string{http.MethodPost}, Name: RouteOneShot, Ops: map[string]string{http.MethodPost: OpExec}},
	{Path: "/v1/sessions", Methods: []string{http.MethodGet, http.MethodHead, http.MethodPost}, Name: RouteSessions, Ops: map[string]string{http.MethodGet: OpSessions, http.MethodPost: OpCreate}},
	{Path: "/v1/sessions/{id}", Methods: []string{http.MethodGet, http.MethodDelete}, Name: RouteSession, Ops: map[string]string{http.MethodGet: OpInfo, http.MethodDelete: OpClose}},
	{Path: "/v1/sessions/{id}/exec", Methods: []string{http.MethodPost}, Name: RouteExec, Ops: map[string]string{http.MethodPost: OpExec}},
	{Path: "/v1/sessions/{id}/files", Methods: []string{http.MethodGet, http.MethodHead}, Name: RouteFiles, Ops: map[string]string{http.MethodGet: OpFiles}},
	{Path: "/v1/sessions/{id}/files/{path}", Methods: []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete}, Name: RouteFile, Ops: map[string]string{http.MethodGet: OpDownload, http.MethodPut: OpUpload, http.MethodDelete: OpRemove}},
	{Path: "/v1/sessions/{id}/hibernate", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpHibernate, Ops: map[string]string{http.MethodPost: OpHibernate}},
	{Path: "/v1/sessions/{id}/restore", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpRestore, Ops: map[string]string{http.MethodPost: OpRestore}},
	{Path: "/v1/sessions/{id}/fork", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpFork, Ops: map[string]string{http.MethodPost: OpFork}},
	{Path: "/v1/sessions/{id}/snapshot", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpSnapshot, Ops: map[string]string{http.MethodPost: OpSnapshot}},
	{Path: "/v1/sessions/{id}/rollback", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpRollback, Ops: map[string]string{http.MethodPost: OpRollback}},
	{Path: "/v1/sessions/{id}/interrupt", Methods: []string{http.MethodPost}, Name: RouteLife, Op: OpInterrupt, Ops: map[string]string{http.MethodPost: OpInterrupt}},
	{Path: "/v1/sessions/{id}/complete", Methods: []string{http.MethodPost}, Name: RouteAssist, Op: OpComplete, Ops: map[string]string{http.MethodPost: OpComplete}},
	{Path: "/v1/sessions/{id}/inspect", Methods: []string{http.MethodPost}, Name: RouteAssist, Op: OpInspect, Ops: map[string]string{http.MethodPost: OpInspect}},
	{Path: "/v1/sessions/{id}/is_complete", Methods: []string{http.MethodPost}, Name: RouteAssist, Op: OpIsComplete, Ops: map[string]string{http.MethodPost: OpIsComplete}},
	{Path: "/v1/sessions/{id}/commands", Methods: []string{http.MethodPost}, Name: RouteCommand, Ops: map[string]string{http.MethodPost: OpCommand}},
	{Path: "/v1/sessions/{id}/timeout", Methods: []string{http.MethodPost}, Name: RouteTimeout, Ops: map[string]string{http.MethodPost: OpSetTimeout}},
	{Path: "/v1/sessions/{id}/metrics", Methods: []string{http.MethodGet}, Name: RouteMetricsS, Ops: map[string]string{http.MethodGet: OpMetrics}},
	{Path: "/v1/sessions/{id}/watch", Methods: []string{http.MethodPost}, Name: RouteWatch, Ops: map[string]string{http.MethodPost: OpWatch}},
	{Path: "/v1/sessions/{id}/stat/{path}", Methods: []string{http.MethodGet}, Name: RouteStat, Ops: map[string]string{http.MethodGet: OpStat}},
	{Path: "/v1/sessions/{id}/dirs/{path}", Methods: []string{http.MethodPut}, Name: RouteDir, Ops: map[string]string{http.MethodPut: OpMkdir}},
	{Path: "/v1/sessions/{id}/rename", Methods: []string{http.MethodPost}, Name: RouteRename, Ops: map[string]string{http.MethodPost: OpRename}},
	{Path: MCPPath, Methods: MCPMethods, Name: RouteMCP},
}

// RouteMethods lists the methods each route name answers, from Routes.
var RouteMethods = func() map[string][]string {
	m := map[string][]string{}
	for _, r := range Routes {
		if r.Name != RouteMCP {
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

// LifeOps are the session operations with a route of their own, no body.
var LifeOps = routeOps(RouteLife)

// AssistOps are Jupyter's editing helpers, each with a route of its own
// and a JSON body (code, cursor_pos, detail_level).
var AssistOps = routeOps(RouteAssist)

// MCPPath is where the service speaks MCP over Streamable HTTP, with the
// methods that transport uses (api/openapi.json lists them).
const MCPPath = "/mcp"

var MCPMethods = []string{http.MethodPost, http.MethodGet, http.MethodDelete}
