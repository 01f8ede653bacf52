package e2b

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// The control plane: E2B's /sandboxes routes, each one or more wire
// requests on the caller's sessions. docs/e2b.md lists them.

func (d *Door) routeControl() {
	m := d.control
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"message": "ok"})
	})
	m.HandleFunc("POST /sandboxes", d.create)
	m.HandleFunc("POST /v2/sandboxes", d.create)
	m.HandleFunc("GET /sandboxes", d.list)
	m.HandleFunc("GET /v2/sandboxes", d.list)
	m.HandleFunc("GET /sandboxes/{id}", d.detail)
	m.HandleFunc("DELETE /sandboxes/{id}", d.kill)
	m.HandleFunc("POST /sandboxes/{id}/timeout", d.setTimeout)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", d.refresh)
	m.HandleFunc("POST /sandboxes/{id}/connect", d.connect)
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", d.connect)
	m.HandleFunc("POST /sandboxes/{id}/resume", d.connect)
	m.HandleFunc("POST /sandboxes/{id}/pause", d.pause)
	m.HandleFunc("POST /sandboxes/{id}/fork", d.fork)
	m.HandleFunc("GET /sandboxes/{id}/metrics", d.metrics)
	m.HandleFunc("GET /sandboxes/{id}/logs", d.logs)
	m.HandleFunc("GET /v2/sandboxes/{id}/logs", d.logs)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not a route of jailcell's E2B control plane (docs/e2b.md lists them)", r.Method, r.URL.Path))
	})
}

// Bounds on what create takes: E2B's own are not published; these keep a
// record small (records.go reads at most 64 KiB back).
const (
	maxMetadata      = 64
	maxMetadataBytes = 16 << 10
)

// newSandbox is E2B's NewSandbox body, the fields jailcell acts on and
// the ones it must refuse rather than ignore.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             map[string]any    `json:"network"`
	Mcp                 map[string]any    `json:"mcp"`
	VolumeMounts        []any             `json:"volumeMounts"`
	Iam                 map[string]any    `json:"iam"`
}

// autoResume is E2B's SandboxAutoResumeConfig.
type autoResume struct {
	Enabled bool `json:"enabled"`
}

// lifecycle is E2B's SandboxLifecycle, in a sandbox's detail.
type lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"` // kill | pause
}

// sandbox is E2B's Sandbox answer.
type sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listed is E2B's ListedSandbox and, with the access token, SandboxDetail.
type listed struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain,omitempty"`
	Lifecycle       *lifecycle        `json:"lifecycle,omitempty"`
}

// clientID is E2B's deprecated, required clientID: the node's name would
// do, but nothing reads it.
const clientID = "jailcell"

func (d *Door) templateNames() string {
	names := slices.Sorted(maps.Keys(d.o.Templates))
	return strings.Join(names, ", ")
}

func (d *Door) create(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var body newSandbox
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tmpl := body.TemplateID
	if tmpl == "" {
		tmpl = "base"
	}
	pol, ok := d.o.Templates[tmpl]
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("templateID %q: not a template of this node; it has %s (configured in e2b.templates)", tmpl, d.templateNames()))
		return
	}
	if msg := refusedCreate(&body); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	// E2B's sandboxes start in the user's home; a jailcell sandbox's is
	// its workspace under that name.
	// autoPause: the timeout hibernates the session (E2B's pause) rather
	// than ending it.
	pause := body.AutoPause != nil && *body.AutoPause
	d.pruneRecords(r, t.owner)
	req := &api.Request{Op: api.OpCreate, Policy: pol, Envs: body.EnvVars, Cwd: seam.HomeDir, HibernateOnIdle: pause}
	if body.Timeout != nil && *body.Timeout > 0 {
		req.TTLS = float64(*body.Timeout)
	}
	resp, e := d.call(r.Context(), t.owner, req, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	id := resp.Info.ID
	envs := body.EnvVars
	if envs == nil {
		envs = map[string]string{}
	}
	d.records.put(id, record{Owner: t.owner, Template: tmpl, Metadata: body.Metadata, Started: resp.Info.CreatedAt, Envs: envs,
		AutoResume: body.AutoResume != nil && body.AutoResume.Enabled, PrivatePorts: body.Network["allowPublicTraffic"] == false})
	writeJSON(w, http.StatusCreated, d.sandboxAnswer(t.owner, id, tmpl))
}

// pruneRecords drops the records of owner's sandboxes that have ended
// (by their timeout, or through another door), as a list does: each
// create prunes its owner's, so the records stay bounded by the sessions
// each owner had alive (they were kept for good, and an unauthenticated
// signed URL tries every record).
func (d *Door) pruneRecords(r *http.Request, owner int) {
	resp, e := d.call(r.Context(), owner, &api.Request{Op: api.OpSessions}, nil)
	if e != nil {
		return // kept: a record is dropped only for a session known gone
	}
	d.records.keepOnly(owner, liveOf(resp.Sessions))
}

// liveOf is the set of the sessions' ids.
func liveOf(infos []seam.Info) map[string]bool {
	live := make(map[string]bool, len(infos))
	for _, info := range infos {
		live[info.ID] = true
	}
	return live
}

// networkRefused names what of a create's network config jailcell cannot
// honour. allowPublicTraffic is the one rule it can: envd and the
// interpreter always need the sandbox's access token (the SDKs send it
// either way), and the sandbox's own ports do too unless the door lets
// ports be public (Options.PublicPorts) and this is not false. Egress rules (allowOut, denyOut, rules, egressProxy,
// maskRequestHost) are refused: a sandbox's egress is its policy's, and
// an allow would be looser than that policy, a deny a promise the door
// does not enforce.
func networkRefused(n map[string]any) string {
	for _, k := range slices.Sorted(maps.Keys(n)) {
		v := n[k]
		if k == "allowPublicTraffic" {
			if _, ok := v.(bool); !ok && v != nil {
				return "network.allowPublicTraffic: not a boolean"
			}
			continue
		}
		return fmt.Sprintf("network.%s: a jailcell sandbox's egress is its policy's (no network, or the policy's allowlist) and cannot be set per sandbox; only network.allowPublicTraffic is accepted (whether its ports need its access token)", k)
	}
	return ""
}

// refusedCreate names what a create asks that jailcell would have to
// ignore to serve: a sandbox is never made looser, or other, than asked
// without the caller knowing.
func refusedCreate(b *newSandbox) string {
	switch {
	case b.AllowInternetAccess != nil && *b.AllowInternetAccess:
		return "allow_internet_access: true: a jailcell sandbox reaches only what its policy allows (no network, or the policy's allowlist); leave it unset or false and choose a template whose policy has the network it needs"
	case networkRefused(b.Network) != "":
		return networkRefused(b.Network)
	case len(b.Mcp) > 0:
		return "mcp: jailcell does not run E2B's MCP gateway in a sandbox; leave it unset"
	case len(b.VolumeMounts) > 0:
		return "volumeMounts: jailcell has no volumes; a session's files persist with it (and with persist, docs/persistence.md)"
	case len(b.Iam) > 0:
		return "iam: jailcell has no workload identity tokens; leave it unset"
	case b.AutoPauseMemory != nil && !*b.AutoPauseMemory:
		// A filesystem-only pause would drop the kernel's state at every
		// timeout; jailcell's hibernation keeps it, and never drops it
		// unasked.
		return "autoPauseMemory: false: jailcell pauses a sandbox with its memory (its variables and processes), never its files alone; leave it unset or true"
	case b.AutoResume != nil && b.AutoResume.Enabled && (b.AutoPause == nil || !*b.AutoPause):
		return "autoResume.enabled: true needs autoPause: true (lifecycle onTimeout \"pause\"): only a paused sandbox resumes"
	case len(b.Metadata) > maxMetadata:
		return fmt.Sprintf("metadata: %d keys, at most %d", len(b.Metadata), maxMetadata)
	}
	n := 0
	for k, v := range b.Metadata {
		n += len(k) + len(v)
	}
	if n > maxMetadataBytes {
		return fmt.Sprintf("metadata: %d bytes of keys and values, at most %d", n, maxMetadataBytes)
	}
	return ""
}

func (d *Door) sandboxAnswer(owner int, id, tmpl string) sandbox {
	tok := d.accessToken(owner, id)
	s := sandbox{TemplateID: tmpl, SandboxID: id, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: tok, TrafficAccessToken: tok}
	if d.o.Domain != "" {
		s.Domain = &d.o.Domain
	}
	return s
}

func (d *Door) templateOf(id string) string {
	if rec, ok := d.records.get(id); ok {
		return rec.Template
	}
	return "base"
}

// listedOf describes a session as E2B lists a sandbox, its sizes from
// the session's metrics (the policy's limits).
func (d *Door) listedOf(r *http.Request, owner int, info seam.Info) listed {
	rec, _ := d.records.get(info.ID)
	if rec.Template == "" {
		rec.Template = "base"
	}
	l := listed{TemplateID: rec.Template, SandboxID: info.ID, ClientID: clientID, StartedAt: info.CreatedAt,
		EndAt: info.ExpiresAt, Metadata: rec.Metadata, State: "running", EnvdVersion: EnvdVersion}
	if l.Metadata == nil {
		l.Metadata = map[string]string{}
	}
	if info.State == "hibernated" {
		l.State = "paused"
	}
	l.Lifecycle = &lifecycle{OnTimeout: "kill", AutoResume: rec.AutoResume}
	if info.HibernateOnIdle {
		l.Lifecycle.OnTimeout = "pause"
	}
	if resp, e := d.call(r.Context(), owner, &api.Request{Op: api.OpMetrics, Session: info.ID}, nil); e == nil && resp.Metrics != nil {
		l.CPUCount = max(1, int(resp.Metrics.CPUCount+0.5))
		l.MemoryMB = resp.Metrics.MemTotal / (1 << 20)
		l.DiskSizeMB = resp.Metrics.DiskTotal / (1 << 20)
	}
	return l
}

func (d *Door) detail(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: id}, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	l := d.listedOf(r, t.owner, *resp.Info)
	l.EnvdAccessToken = d.accessToken(t.owner, id)
	if d.o.Domain != "" {
		l.Domain = &d.o.Domain
	}
	writeJSON(w, http.StatusOK, l)
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (d *Door) kill(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpClose, Session: id}, nil); e != nil {
		writeAPIError(w, e)
		return
	}
	d.records.drop(id)
	d.procs.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

func (d *Door) setTimeout(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var body struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.Timeout == nil || *body.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout: want the seconds from now after which the sandbox ends, 0 or more")
		return
	}
	if e := d.extend(r, t.owner, id, *body.Timeout); e != nil {
		writeAPIError(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// extend sets the session's timeout to s seconds from now (0: end at
// once, as E2B's does).
func (d *Door) extend(r *http.Request, owner int, id string, s int64) *api.Error {
	if s == 0 {
		_, e := d.call(r.Context(), owner, &api.Request{Op: api.OpClose, Session: id}, nil)
		if e == nil {
			d.records.drop(id)
		}
		return e
	}
	_, e := d.call(r.Context(), owner, &api.Request{Op: api.OpSetTimeout, Session: id, TimeoutS: float64(s)}, nil)
	return e
}

func (d *Door) refresh(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var body struct {
		Duration *int64 `json:"duration"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s := int64(15)
	if body.Duration != nil {
		s = *body.Duration
	}
	if s < 0 || s > 3600 {
		writeError(w, http.StatusBadRequest, "duration: want 0 to 3600 seconds")
		return
	}
	if s > 0 {
		if e := d.extend(r, t.owner, id, s); e != nil {
			writeAPIError(w, e)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect resumes a paused sandbox (restore) and, with a timeout, sets
// its end that far from now, as E2B's connect does: it only ever moves a
// running sandbox's end later.
func (d *Door) connect(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var body struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.Memory != nil && !*body.Memory {
		writeError(w, http.StatusBadRequest, "memory: false: jailcell resumes a paused sandbox with its memory, or not at all")
		return
	}
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: id}, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	status := http.StatusOK
	info := resp.Info
	if info.State == "hibernated" {
		if resp, e = d.call(r.Context(), t.owner, &api.Request{Op: api.OpRestore, Session: id}, nil); e != nil {
			writeAPIError(w, e)
			return
		}
		info, status = resp.Info, http.StatusCreated
	}
	if body.Timeout != nil && *body.Timeout > 0 && time.Until(info.ExpiresAt) < time.Duration(*body.Timeout)*time.Second {
		if e := d.extend(r, t.owner, id, *body.Timeout); e != nil {
			writeAPIError(w, e)
			return
		}
	}
	writeJSON(w, status, d.sandboxAnswer(t.owner, id, d.templateOf(id)))
}

func (d *Door) pause(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.Memory != nil && !*body.Memory {
		writeError(w, http.StatusBadRequest, "memory: false: jailcell pauses a sandbox with its memory (hibernate), never its files alone")
		return
	}
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: id}, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if resp.Info.State == "hibernated" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already paused", id))
		return
	}
	if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpHibernate, Session: id}, nil); e != nil {
		writeAPIError(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxForks is E2B's bound on one fork's count.
const maxForks = 100

// fork makes count sandboxes from a live one, each a jailcell fork, each
// answered on its own (a sandbox or an error), as E2B's fork is.
func (d *Door) fork(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var body struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := readJSON(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > maxForks {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("count %d: want 1 to %d", count, maxForks))
		return
	}
	if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: id}, nil); e != nil {
		writeAPIError(w, e)
		return
	}
	type forkErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	type result struct {
		Sandbox *sandbox `json:"sandbox,omitempty"`
		Error   *forkErr `json:"error,omitempty"`
	}
	rec, _ := d.records.get(id)
	out := make([]result, 0, count)
	for range count {
		resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpFork, Session: id}, nil)
		if e == nil && body.Timeout != nil && *body.Timeout > 0 {
			e = d.extend(r, t.owner, resp.Info.ID, *body.Timeout)
		}
		if e != nil {
			out = append(out, result{Error: &forkErr{Code: statusOf(e), Message: e.Code + ": " + e.Message}})
			continue
		}
		child := resp.Info.ID
		// The child's kernel is a copy of the parent's, contexts and all.
		d.records.put(child, record{Owner: t.owner, Template: d.templateOf(id), Metadata: rec.Metadata, Started: resp.Info.CreatedAt, Envs: rec.Envs, Contexts: rec.Contexts, AutoResume: rec.AutoResume})
		s := d.sandboxAnswer(t.owner, child, d.templateOf(id))
		out = append(out, result{Sandbox: &s})
	}
	writeJSON(w, http.StatusCreated, out)
}

// metric is E2B's SandboxMetric.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// metrics answers one sample, now: jailcell keeps no history of a
// session's figures (E2B's answers one per 5 s of the range asked).
// metricsStep is E2B's metrics collection interval: a sample stands for
// the 5 s before it.
const metricsStep = 5 * time.Second

func (d *Door) metrics(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	var bound [2]*time.Time
	for i, name := range []string{"start", "end"} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a Unix time in seconds", name, v))
			return
		}
		at := time.Unix(n, 0)
		bound[i] = &at
	}
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpMetrics, Session: id}, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	m := resp.Metrics
	// jailcell keeps no history: its one sample is now. It is in a range
	// that reaches now within E2B's collection step (the SDKs send whole
	// seconds, so an end of "now" is up to a second before the sample);
	// a range wholly in the past has no sample, as on E2B.
	if (bound[0] != nil && bound[0].After(m.Timestamp)) || (bound[1] != nil && bound[1].Before(m.Timestamp.Add(-metricsStep))) {
		writeJSON(w, http.StatusOK, []metric{})
		return
	}
	writeJSON(w, http.StatusOK, []metric{{Timestamp: m.Timestamp.UTC(), TimestampUnix: m.Timestamp.Unix(),
		CPUCount: max(1, int(m.CPUCount+0.5)), CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}})
}

// logs answers no lines: a jailcell sandbox has no system log of its own
// (a cell's and a command's output come back with them). The session must
// exist.
func (d *Door) logs(w http.ResponseWriter, r *http.Request) {
	t, id := targetOf(r.Context()), r.PathValue("id")
	if _, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpInfo, Session: id}, nil); e != nil {
		writeAPIError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": []any{}, "logEntries": []any{}})
}
