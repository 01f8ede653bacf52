package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jailcell/jailcell/api"
)

// The sandbox ports E2B's SDKs address, and the envd version this door
// answers as: the SDKs choose their wire by it (0.5.7: a file upload is
// the raw body, not multipart; stdin may be refused; CloseStdin exists;
// 0.6.2: uploads carry metadata; 0.6.3: watch events may carry their
// entry; 0.6.4: a watch may allow network mounts, of which a sandbox has
// none).
const (
	EnvdPort        = 49983
	InterpreterPort = 49999
	EnvdVersion     = "0.6.4"
)

// DefaultTemplates maps the templates E2B's SDKs ask for by default to
// jailcell's default policy.
var DefaultTemplates = map[string]string{"base": "", "code-interpreter-v1": ""}

// Options configure a Door.
type Options struct {
	// Keys maps an X-API-KEY to its owner uid; nil admits no one to the
	// control plane.
	Keys func(key string) (owner uint32, ok bool)
	// Secret signs the sandboxes' access tokens: 32 bytes or more, kept
	// across restarts so the tokens handed out stay good.
	Secret []byte
	// Domain, if set, routes PORT-ID.DOMAIN hosts to a sandbox (the SDKs'
	// E2B_DOMAIN) and is reported as each sandbox's domain.
	Domain string
	// Templates maps an E2B template name or id to a configured policy
	// name ("": the default policy); nil means DefaultTemplates.
	Templates map[string]string
	// StateDir keeps each sandbox's record (template, metadata) across
	// restarts; "" keeps them in memory only.
	StateDir string
	// Logger receives what the door refuses that a caller cannot see.
	Logger *slog.Logger
	// MaxInFlight and MaxInFlightBytes bound the requests running at
	// once, and MaxInFlightPerOwner one owner's share (0: the defaults).
	MaxInFlight         int
	MaxInFlightBytes    int64
	MaxInFlightPerOwner int
	// BodyTimeout is how long a client has to send a request's body once
	// admitted (0: DefaultBodyTimeout).
	BodyTimeout time.Duration
	// PublicPorts lets a request without the sandbox's token reach a
	// server a sandbox runs (any port but envd's and the interpreter's)
	// when the sandbox was made through this door without
	// network.allowPublicTraffic false, as E2B's sandboxes are. Off, every
	// port needs the token: a sandbox's id is no secret on its host (its
	// cgroup is named after it), so a public port is open to every local
	// user who can reach the door.
	PublicPorts bool
}

// DefaultBodyTimeout is Options.BodyTimeout's default: the largest upload
// at 1 MB/s.
const DefaultBodyTimeout = 5 * time.Minute

// Door serves E2B's protocol over an api.Handler. Safe for concurrent use.
type Door struct {
	h       api.Handler
	o       Options
	log     *slog.Logger
	budget  *api.Budget
	control *http.ServeMux
	envd    *http.ServeMux
	interp  *http.ServeMux
	records *records
	procs   *processes
	seq     atomic.Uint64
}

// New returns a Door that carries E2B's calls out through h.
func New(h api.Handler, o Options) (*Door, error) {
	if len(o.Secret) < 32 {
		return nil, fmt.Errorf("e2b: the access-token secret has %d bytes, want 32 or more", len(o.Secret))
	}
	if o.Templates == nil {
		o.Templates = DefaultTemplates
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	b, log := api.NewBudget(o.MaxInFlight, o.MaxInFlightBytes, o.Logger)
	per := o.MaxInFlightPerOwner
	if per == 0 {
		per = max(1, b.MaxCount()/4)
	}
	b.Share(per, b.MaxWeight()/2)
	recs, err := newRecords(o.StateDir)
	if err != nil {
		return nil, err
	}
	d := &Door{h: h, o: o, log: log, budget: b, control: http.NewServeMux(), envd: http.NewServeMux(),
		interp: http.NewServeMux(), records: recs, procs: newProcesses()}
	d.routeControl()
	d.routeEnvd()
	d.routeInterpreter()
	return d, nil
}

// target is the sandbox a request is for and the owner its token names.
type target struct {
	owner int
	id    string
	place *api.Place // the request's in the budget, which a stream grows
}

type targetKey struct{}

// targetOf is the sandbox of a request that reached envd or the
// interpreter (always set there).
func targetOf(ctx context.Context) target {
	t, _ := ctx.Value(targetKey{}).(target)
	return t
}

// ServeHTTP routes r to the control plane or to a sandbox's service.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, ok, err := d.sandboxOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !ok {
		if sid, found := d.signedSandbox(r); found {
			id, port, ok = sid, EnvdPort, true
		}
	}
	var owner int
	budgetKey := 0
	if ok {
		owner, err = d.sandboxOwner(r, id)
		if err != nil && port != EnvdPort && port != InterpreterPort && !sentToken(r) {
			// A public port's traffic takes its places in a share of its
			// own: clients without the token cannot crowd the owner's
			// own calls out of the owner's share.
			owner, err = d.publicOwner(id)
			budgetKey = -1 - owner
		} else {
			budgetKey = owner
		}
	} else {
		owner, err = d.apiOwner(r)
		budgetKey = owner
	}
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	// A declared length over the route's bound is refused before it is
	// admitted (one Content-Length of 2^62 was admitted alone into an
	// empty budget and then held every other owner's request waiting, its
	// body never coming). A body is weighed at its declared length (a chunked
	// or compressed one, which weighed one byte whatever it held, at the
	// bound) and at most an eighth of the budget's bytes, and its place
	// grows by what is read past that: weighed at more (an upload's bound
	// is over an owner's share) it would wait for the owner's other
	// requests to end, an open watch of the SDK's holding its writes off
	// for good, and one admitted alone that never came held the whole
	// budget.
	bound := bodyBound(r)
	if ok && port != EnvdPort && port != InterpreterPort {
		bound = maxPortBody // an app's own uploads: streamed through, never held
	}
	if r.ContentLength > bound {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is %d bytes, over this route's %d", r.ContentLength, bound))
		return
	}
	weight := r.ContentLength
	if enc := r.Header.Get("Content-Encoding"); weight < 0 || (enc != "" && enc != "identity") {
		weight = bound
	}
	weight = max(min(weight, d.budget.MaxWeight()/8), 1)
	place, err := d.budget.TakeFor(r.Context(), budgetKey, weight)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "the service is at its bound of requests in flight: "+err.Error())
		return
	}
	defer place.Release()
	if r.ContentLength != 0 {
		// A sender too slow or silent ends within the body timeout, never
		// holding its place (slowloris on the body).
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(d.o.BodyTimeout))
		body := http.MaxBytesReader(w, r.Body, bound)
		r.Body = &admittedBody{Closer: body, r: place.Reader(body, weight), raw: body, rc: rc}
	}
	if !ok {
		d.control.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target{owner: owner})))
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), targetKey{}, target{owner: owner, id: id, place: place}))
	switch port {
	case EnvdPort:
		d.envd.ServeHTTP(w, r)
	case InterpreterPort:
		d.interp.ServeHTTP(w, r)
	default:
		d.proxyPort(w, r, port)
	}
}

// bodyBound is the most a request's body may hold on its route, inflated:
// an upload's, or a JSON or Connect message's.
func bodyBound(r *http.Request) int64 {
	if r.Method == http.MethodPost && r.URL.Path == "/files" {
		return maxUploadBody
	}
	return maxJSONBody
}

// admittedBody is an admitted request's body: what is read past the
// place's weight grows the place (Place.Reader; a compressed body's bytes
// are counted as they come), and the body's read deadline is lifted once
// it has been read to its end: the deadline bounds the sender, not the
// answer, and Go's server reads the connection after a body's end to see
// a client leave, a read that a stale deadline would fail, cancelling a
// long stream. A body that failed keeps it: the server then reads what is
// left of the body before answering, and would wait on a stalled sender.
type admittedBody struct {
	io.Closer
	r    io.Reader
	raw  io.Reader // the body without the place's growth, for a streamed upload
	rc   *http.ResponseController
	done bool
}

func (b *admittedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// sandboxOf finds the sandbox a request is for: the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers (E2B_SANDBOX_URL), or a PORT-ID.DOMAIN host
// (E2B_DOMAIN). ok is false for the control plane.
func (d *Door) sandboxOf(r *http.Request) (id string, port int, ok bool, err error) {
	if id = r.Header.Get("E2b-Sandbox-Id"); id != "" {
		p := r.Header.Get("E2b-Sandbox-Port")
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return "", 0, false, fmt.Errorf("E2b-Sandbox-Port %q: want a port number beside E2b-Sandbox-Id", p)
		}
		return id, port, true, nil
	}
	if d.o.Domain == "" {
		return "", 0, false, nil
	}
	host := r.Host
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	sub, found := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(d.o.Domain))
	if !found || strings.Contains(sub, ".") {
		return "", 0, false, nil
	}
	p, id, found := strings.Cut(sub, "-")
	if !found || id == "" {
		return "", 0, false, fmt.Errorf("host %q: want PORT-SANDBOXID.%s", r.Host, d.o.Domain)
	}
	if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
		return "", 0, false, fmt.Errorf("host %q: %q is not a port number", r.Host, p)
	}
	return id, port, true, nil
}

// apiOwner admits a control-plane request by its X-API-KEY.
func (d *Door) apiOwner(r *http.Request) (int, error) {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		return 0, errors.New("no X-API-KEY: set E2B_API_KEY to a token of this node's auth.tokens_file")
	}
	if d.o.Keys == nil {
		return 0, errors.New("this node admits no API keys: auth.tokens_file is not set")
	}
	owner, ok := d.o.Keys(key)
	if !ok {
		return 0, errors.New("the X-API-KEY is not one of this node's tokens")
	}
	return int(owner), nil
}

// sandboxOwner admits a request to a sandbox by its access token, sent as
// X-Access-Token (envd, /execute) or E2B-Traffic-Access-Token (the
// interpreter's /contexts): both are the same token here.
func (d *Door) sandboxOwner(r *http.Request, id string) (int, error) {
	tok := r.Header.Get("X-Access-Token")
	if tok == "" {
		tok = r.Header.Get("E2B-Traffic-Access-Token")
	}
	if tok == "" && r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		return d.signedOwner(r, id)
	}
	if tok == "" {
		return 0, fmt.Errorf("sandbox %s: no X-Access-Token: use the envdAccessToken that create or connect returned", id)
	}
	owner, ok := d.verifyToken(tok, id)
	if !ok {
		return 0, fmt.Errorf("sandbox %s: the access token is not this sandbox's", id)
	}
	return owner, nil
}

// signedOwner admits a /files request by its signature, as envd does for
// the SDKs' downloadUrl and uploadUrl (a link handed to a browser or
// another program, which sends no header): "v1_" and the unpadded base64
// of SHA-256 over "PATH:OPERATION:USERNAME:TOKEN[:EXPIRATION]", with the
// path and username as the query names them, the operation "read" for GET
// and "write" for POST, and TOKEN the sandbox's access token. The owner
// comes from the door's record of the sandbox (the token names it); a
// sandbox this door did not make has no signed URLs. Signatures are
// compared in constant time; an expired one is refused even if it
// matches, as envd refuses it.
func (d *Door) signedOwner(r *http.Request, id string) (int, error) {
	q := r.URL.Query()
	// One answer whether or not the door holds the sandbox: a caller with
	// no credentials must not learn which ids exist.
	refused := errors.New("invalid signature: a signed URL is admitted only with a valid signature for a sandbox made through this door; otherwise send X-Access-Token")
	rec, ok := d.records.get(id)
	if !ok {
		return 0, refused
	}
	want, exp, err := d.signature(r, rec.Owner, id)
	if err != nil {
		return 0, err
	}
	if want == "" || !hmac.Equal([]byte(q.Get("signature")), []byte(want)) {
		return 0, refused
	}
	if exp != nil && *exp < time.Now().Unix() {
		return 0, errors.New("signature is already expired")
	}
	return rec.Owner, nil
}

// signature is what r's signature must be for sandbox id of owner, and
// the expiration it names; "" for a method that has no operation.
func (d *Door) signature(r *http.Request, owner int, id string) (string, *int64, error) {
	q := r.URL.Query()
	op := map[string]string{http.MethodGet: "read", http.MethodPost: "write"}[r.Method]
	if op == "" {
		return "", nil, nil
	}
	parts := []string{q.Get("path"), op, q.Get("username"), d.accessToken(owner, id)}
	var exp *int64
	if e := q.Get("signature_expiration"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return "", nil, fmt.Errorf("signature_expiration %q: want a Unix time in seconds", e)
		}
		exp = &n
		parts = append(parts, e)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:]), exp, nil
}

// signedSandbox finds the sandbox a signed /files URL is for when nothing
// in the request names one: with E2B_SANDBOX_URL the SDKs' downloadUrl and
// uploadUrl are that URL with a path and a signature only, for a browser
// or another program to fetch. The signature names its sandbox, being
// made with its token: each sandbox made through this door is tried. The
// cost an unauthenticated caller can ask is two SHA-256 per such sandbox
// (the records: each owner's sandboxes alive at its last create or list,
// so bounded by sessions.max per owner; and by the door's request
// budget); a match
// identifies one sandbox only, and signedOwner then checks it again,
// expiry included.
func (d *Door) signedSandbox(r *http.Request) (string, bool) {
	q := r.URL.Query()
	sig := q.Get("signature")
	if r.URL.Path != "/files" || sig == "" {
		return "", false
	}
	for id, owner := range d.records.owners() {
		if want, _, err := d.signature(r, owner, id); err == nil && want != "" && hmac.Equal([]byte(sig), []byte(want)) {
			return id, true
		}
	}
	return "", false
}

// accessToken is sandbox id's token for owner: "jc1.OWNER.MAC". It names
// its owner so that no table is needed to admit it, and the MAC binds the
// owner to the sandbox, so neither can be changed.
func (d *Door) accessToken(owner int, id string) string {
	return "jc1." + strconv.Itoa(owner) + "." + d.mac(owner, id)
}

func (d *Door) mac(owner int, id string) string {
	m := hmac.New(sha256.New, d.o.Secret)
	fmt.Fprintf(m, "e2b-access-token\x00%d\x00%s", owner, id)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verifyToken checks tok against sandbox id and returns its owner. The
// MACs are compared in constant time.
func (d *Door) verifyToken(tok, id string) (int, bool) {
	rest, ok := strings.CutPrefix(tok, "jc1.")
	if !ok {
		return 0, false
	}
	o, mac, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	owner, err := strconv.ParseUint(o, 10, 32)
	if err != nil {
		return 0, false
	}
	want := d.mac(int(owner), id)
	return int(owner), hmac.Equal([]byte(mac), []byte(want))
}

// busyWait bounds how long call retries a sandbox that is busy with
// another request. jailcell runs one request at a time per session and
// answers the next "busy"; E2B's envd and Jupyter queue them instead, and
// programs written for E2B run a cell while a background command streams
// (its output is polled by short waits on the same session). So the door
// queues for them, as long as a cell may reasonably wait behind another.
const busyWait = 30 * time.Second

// call sends one wire request through the handler and returns its answer,
// or its error; a busy sandbox is retried for up to busyWait.
func (d *Door) call(ctx context.Context, owner int, req *api.Request, emit func(api.Event)) (*api.Response, *api.Error) {
	deadline := time.Now().Add(busyWait)
	pause := 5 * time.Millisecond
	for {
		resp, e := d.callOnce(ctx, owner, req, emit)
		if e == nil || e.Code != api.CodeBusy || !time.Now().Add(pause).Before(deadline) {
			return resp, e
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, e
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

func (d *Door) callOnce(ctx context.Context, owner int, req *api.Request, emit func(api.Event)) (*api.Response, *api.Error) {
	req.ID = json.RawMessage(strconv.FormatUint(d.seq.Add(1), 10))
	resp := d.h.Handle(ctx, owner, req, emit)
	if resp == nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: "no response"}
	}
	if !resp.OK {
		if resp.Error == nil {
			return nil, &api.Error{Code: api.CodeInternal, Message: "failed without an error"}
		}
		return nil, resp.Error
	}
	return resp, nil
}

// statusOf maps a wire error to the HTTP status E2B's SDKs act on.
func statusOf(e *api.Error) int {
	switch e.Code {
	case api.CodeBadRequest:
		return http.StatusBadRequest
	case api.CodeNotFound, api.CodeExpired:
		return http.StatusNotFound
	case api.CodeLimit:
		return http.StatusTooManyRequests
	case api.CodeBusy:
		return http.StatusConflict
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	case "forbidden":
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// writeError answers E2B's error shape, {"code": status, "message": ...}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// writeAPIError answers a wire error in E2B's error shape.
func writeAPIError(w http.ResponseWriter, e *api.Error) {
	writeError(w, statusOf(e), e.Code+": "+e.Message)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// maxJSONBody bounds a JSON request body on every route but uploads.
const maxJSONBody = 1 << 20

// readJSON decodes r's body into v (an empty body leaves v as it is),
// refusing more than maxJSONBody bytes and unknown types.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("the request body is over %d bytes", maxJSONBody)
		}
		return fmt.Errorf("the request body is not the JSON this route takes: %v", err)
	}
	return nil
}
