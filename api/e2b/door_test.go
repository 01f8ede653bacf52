package e2b

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// fakeSessions answers the wire requests the control plane sends with
// canned sessions, and records them: the door's own logic (routing,
// trust, refusals, mapping) is tested here without sandboxes; the stock
// SDK tests in test/e2bsdk run it against a real serve.
type fakeSessions struct {
	mu    sync.Mutex
	calls []api.Request
	owner []int
	live  map[string]seam.Info
	// execOut is how many bytes of stdout an exec streams, in 1 MiB
	// events; execDone is closed when an exec has returned.
	execOut  int
	execDone chan struct{}
	seq      int    // of the sandboxes made, naming each
	download []byte // what a download answers, if set
}

func (f *fakeSessions) Handle(_ context.Context, owner int, req *api.Request, emit func(api.Event)) *api.Response {
	if req.Op == api.OpDownload && f.download != nil {
		return &api.Response{ID: req.ID, OK: true, Data: f.download}
	}
	if req.Op == api.OpExec {
		chunk := strings.Repeat("x", 1<<20)
		for range f.execOut >> 20 {
			emit(api.Event{Event: api.EventStdout, Text: chunk})
		}
		if f.execDone != nil {
			close(f.execDone)
		}
		return &api.Response{ID: req.ID, OK: true, Result: &seam.Result{Status: seam.StatusOK}}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, *req)
	f.owner = append(f.owner, owner)
	now := time.Now()
	switch req.Op {
	case api.OpCreate:
		f.seq++
		info := seam.Info{ID: fmt.Sprintf("n1-%032x", f.seq), State: "ready", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
		f.live[info.ID] = info
		return &api.Response{ID: req.ID, OK: true, Info: &info}
	case api.OpInfo:
		info, ok := f.live[req.Session]
		if !ok {
			return api.Fail(req.ID, &api.Error{Code: api.CodeNotFound, Message: "no session " + req.Session})
		}
		return &api.Response{ID: req.ID, OK: true, Info: &info}
	case api.OpSessions:
		out := []seam.Info{}
		for _, i := range f.live {
			out = append(out, i)
		}
		return &api.Response{ID: req.ID, OK: true, Sessions: out}
	case api.OpClose:
		if _, ok := f.live[req.Session]; !ok {
			return api.Fail(req.ID, &api.Error{Code: api.CodeNotFound, Message: "no session " + req.Session})
		}
		delete(f.live, req.Session)
		return &api.Response{ID: req.ID, OK: true}
	case api.OpMetrics:
		return &api.Response{ID: req.ID, OK: true, Metrics: &seam.SessionMetrics{Timestamp: now, CPUCount: 1, MemTotal: 256 << 20, DiskTotal: 64 << 20}}
	}
	return api.Fail(req.ID, &api.Error{Code: api.CodeBadRequest, Message: "fake: op " + req.Op})
}

const testKey = "door-test-key-0123456789abcdef0123456789"

func newTestDoor(t *testing.T, o Options) (*Door, *fakeSessions) {
	t.Helper()
	return newTestDoorOver(t, o, nil)
}

// newTestDoorOver is newTestDoor whose handler is wrap(f) (nil: f).
func newTestDoorOver(t *testing.T, o Options, wrap func(*fakeSessions) api.Handler) (*Door, *fakeSessions) {
	t.Helper()
	f := &fakeSessions{live: map[string]seam.Info{}}
	var h api.Handler = f
	if wrap != nil {
		h = wrap(f)
	}
	if o.Secret == nil {
		o.Secret = bytes.Repeat([]byte{7}, 32)
	}
	if o.Keys == nil {
		o.Keys = NewKeys(map[string]uint32{testKey: 1000}).Owner
	}
	d, err := New(h, o)
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

// makeSandbox creates a base sandbox through d as testKey's owner.
func makeSandbox(t *testing.T, d http.Handler) sandbox {
	t.Helper()
	w := do(d, "POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": testKey})
	var s sandbox
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatalf("create: %d %s: %v", w.Code, w.Body, err)
	}
	return s
}

func do(d http.Handler, method, target string, body string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	return w
}

func TestNewRefusesAShortSecret(t *testing.T) {
	if _, err := New(&fakeSessions{}, Options{Secret: make([]byte, 16)}); err == nil || !strings.Contains(err.Error(), "32 or more") {
		t.Fatalf("New with a 16-byte secret: %v, want a refusal naming 32 bytes", err)
	}
}

// TestAccessTokens: a token opens its own sandbox only, for its own owner;
// a changed owner, sandbox or MAC, or another node's secret, is refused.
func TestAccessTokens(t *testing.T) {
	d, _ := newTestDoor(t, Options{})
	tok := d.accessToken(1000, "n1-abc")
	if owner, ok := d.verifyToken(tok, "n1-abc"); !ok || owner != 1000 {
		t.Fatalf("own token: %d %v", owner, ok)
	}
	other, _ := newTestDoor(t, Options{Secret: bytes.Repeat([]byte{8}, 32)})
	for name, bad := range map[string]string{
		"other sandbox":     d.accessToken(1000, "n1-abd"),
		"owner changed":     strings.Replace(tok, "jc1.1000.", "jc1.0.", 1),
		"mac changed":       tok[:len(tok)-1] + map[bool]string{true: "A", false: "B"}[tok[len(tok)-1] != 'A'],
		"other node":        other.accessToken(1000, "n1-abc"),
		"no prefix":         strings.TrimPrefix(tok, "jc1."),
		"empty":             "",
		"owner not numeric": "jc1.x." + d.mac(1000, "n1-abc"),
	} {
		if _, ok := d.verifyToken(bad, "n1-abc"); ok {
			t.Errorf("%s: token %q admitted", name, bad)
		}
	}
}

// TestRouting: the headers or a PORT-ID.DOMAIN host pick a sandbox's
// service, whose token must then be its own; anything else is the
// control plane, which wants an API key.
func TestRouting(t *testing.T) {
	d, f := newTestDoor(t, Options{Domain: "sbx.example.org"})
	f.live["n1-abc"] = seam.Info{ID: "n1-abc"}
	tok := d.accessToken(1000, "n1-abc")
	cases := []struct {
		name   string
		target string
		hdr    map[string]string
		want   int
		msg    string
	}{
		{"envd by headers", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "49983", "X-Access-Token": tok}, 204, ""},
		{"envd by host", "http://49983-n1-abc.sbx.example.org/health", map[string]string{"X-Access-Token": tok}, 204, ""},
		{"no token", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "49983"}, 401, "no X-Access-Token"},
		{"another sandbox's token", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "49983", "X-Access-Token": d.accessToken(1000, "n1-abd")}, 401, "not this sandbox's"},
		{"traffic token header", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "49983", "E2B-Traffic-Access-Token": tok}, 204, ""},
		{"bad port header", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "x"}, 400, "E2b-Sandbox-Port"},
		{"other port", "/", map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": "8080", "X-Access-Token": tok}, 502, "only envd (49983) and the code interpreter (49999)"},
		{"gone sandbox", "/health", map[string]string{"E2b-Sandbox-Id": "n1-abd", "E2b-Sandbox-Port": "49983", "X-Access-Token": d.accessToken(1000, "n1-abd")}, 502, "not running"},
		{"bad host port", "http://x-n1-abc.sbx.example.org/health", nil, 400, "not a port number"},
		{"control without key", "/sandboxes", nil, 401, "no X-API-KEY"},
		{"control with a wrong key", "/sandboxes", map[string]string{"X-API-KEY": testKey + "x"}, 401, "not one of this node's tokens"},
		{"control with the key", "/sandboxes", map[string]string{"X-API-KEY": testKey}, 200, ""},
		{"host of another domain is control", "http://49983-n1-abc.other.org/sandboxes", map[string]string{"X-API-KEY": testKey}, 200, ""},
		{"unknown control route", "/templates", map[string]string{"X-API-KEY": testKey}, 404, "not a route"},
	}
	for _, c := range cases {
		w := do(d, "GET", c.target, "", c.hdr)
		if w.Code != c.want || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, w.Code, w.Body, c.want, c.msg)
		}
	}
}

// TestCreateRefusals: what jailcell would have to ignore to serve is
// refused, naming the field; nothing reaches the dispatcher.
func TestCreateRefusals(t *testing.T) {
	d, f := newTestDoor(t, Options{})
	key := map[string]string{"X-API-KEY": testKey}
	big := map[string]string{}
	for i := range maxMetadata + 1 {
		big[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
	}
	bigJSON, _ := json.Marshal(map[string]any{"templateID": "base", "metadata": big})
	for body, want := range map[string]string{
		`{"templateID":"nope"}`:                                                               `templateID \"nope\": not a template of this node; it has base, code-interpreter-v1`,
		`{"templateID":"base","allow_internet_access":true}`:                                  "allow_internet_access",
		`{"templateID":"base","network":{"denyOut":["0.0.0.0/0"]}}`:                           "network.denyOut: a jailcell sandbox's egress is its policy's",
		`{"templateID":"base","network":{"allowPublicTraffic":false,"allowOut":["1.1.1.1"]}}`: "network.allowOut",
		`{"templateID":"base","network":{"allowPublicTraffic":"no"}}`:                         "network.allowPublicTraffic: not a boolean",
		`{"templateID":"base","mcp":{"x":{}}}`:                                                "mcp",
		`{"templateID":"base","volumeMounts":[{"name":"v","path":"/v"}]}`:                     "volumeMounts",
		`{"templateID":"base","iam":{"tokens":{}}}`:                                           "",
		`{"templateID":"base","autoPause":true,"autoPauseMemory":false}`:                      "autoPauseMemory: false",
		`{"templateID":"base","autoResume":{"enabled":true}}`:                                 "autoResume.enabled: true needs autoPause: true",
		`{"templateID":`: "not the JSON this route takes",
		string(bigJSON):  "metadata: 65 keys, at most 64",
	} {
		w := do(d, "POST", "/v2/sandboxes", body, key)
		if want == "" {
			continue // an empty iam object asks for nothing
		}
		if w.Code != 400 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, w.Code, w.Body, want)
		}
	}
	for _, c := range f.calls {
		if c.Op == api.OpCreate {
			t.Errorf("a refused create reached the dispatcher: %+v", c)
		}
	}
	// What E2B's secure sandboxes send: URLs that need the token, which a
	// jailcell sandbox's always do.
	for _, body := range []string{`{"templateID":"base","secure":true,"network":{"allowPublicTraffic":false}}`, `{"templateID":"base","network":{"allowPublicTraffic":true}}`} {
		if w := do(d, "POST", "/v2/sandboxes", body, key); w.Code != 201 {
			t.Errorf("%s: %d %s, want 201", body, w.Code, w.Body)
		}
	}
	// What the SDKs send for lifecycle onTimeout "kill": what jailcell does.
	if w := do(d, "POST", "/v2/sandboxes", `{"templateID":"base","autoPause":false}`, key); w.Code != 201 {
		t.Errorf("autoPause: false: %d %s, want 201", w.Code, w.Body)
	}
}

// TestCreateMapsToTheSession: template to policy, envVars and timeout to
// the create op, metadata kept; the answer carries the sandbox's token.
func TestCreateMapsToTheSession(t *testing.T) {
	d, f := newTestDoor(t, Options{Templates: map[string]string{"data": "big"}, StateDir: t.TempDir()})
	w := do(d, "POST", "/v2/sandboxes", `{"templateID":"data","timeout":90,"envVars":{"A":"b"},"metadata":{"k":"v"}}`, map[string]string{"X-API-KEY": testKey})
	if w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var s sandbox
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	// The first call lists the owner's sessions (its ended sandboxes'
	// records are pruned); the second creates.
	c := f.calls[1]
	if f.calls[0].Op != api.OpSessions || c.Op != api.OpCreate || c.Policy != "big" || c.TTLS != 90 || c.Envs["A"] != "b" || c.Cwd != seam.HomeDir || f.owner[1] != 1000 {
		t.Errorf("create sent %+v as owner %d", c, f.owner[1])
	}
	if owner, ok := d.verifyToken(s.EnvdAccessToken, s.SandboxID); !ok || owner != 1000 || s.TrafficAccessToken != s.EnvdAccessToken || s.EnvdVersion != EnvdVersion {
		t.Errorf("answer %+v: token for owner %d %v", s, owner, ok)
	}
	// A restarted door reads the record back.
	again, err := newRecords(d.o.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok := again.get(s.SandboxID); !ok || rec.Template != "data" || rec.Metadata["k"] != "v" || rec.Owner != 1000 {
		t.Errorf("record after a restart: %+v %v", rec, ok)
	}
}

// TestRecordsPruneOnlyTheirOwners: a listing by one owner drops its own
// gone sandboxes' records, never another owner's it cannot see.
func TestRecordsPruneOnlyTheirOwners(t *testing.T) {
	r, err := newRecords(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.put("n1-a1", record{Owner: 1})
	r.put("n1-a2", record{Owner: 1})
	r.put("n1-b1", record{Owner: 2})
	r.put("../etc", record{Owner: 1}) // kept in memory, never a file name
	r.keepOnly(1, map[string]bool{"n1-a1": true})
	for id, want := range map[string]bool{"n1-a1": true, "n1-a2": false, "n1-b1": true} {
		if _, ok := r.get(id); ok != want {
			t.Errorf("%s kept %v, want %v", id, ok, want)
		}
	}
	again, _ := newRecords(r.dir)
	if _, ok := again.get("n1-a2"); ok {
		t.Error("a pruned record came back after a restart")
	}
	if _, ok := again.get("../etc"); ok {
		t.Error("a record with a path for an id was written")
	}
}

// TestHealthOfAPausedSandbox: envd's and the interpreter's /health answer
// 502 for a paused sandbox, as for one that does not exist (the SDKs'
// isRunning is false), and answer again once it runs; asking does not
// resume it.
func TestHealthOfAPausedSandbox(t *testing.T) {
	d, f := newTestDoor(t, Options{})
	f.live["n1-abc"] = seam.Info{ID: "n1-abc", State: "hibernated"}
	hdr := func(port int) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": "n1-abc", "E2b-Sandbox-Port": strconv.Itoa(port), "X-Access-Token": d.accessToken(1000, "n1-abc")}
	}
	for _, port := range []int{EnvdPort, InterpreterPort} {
		if w := do(d, "GET", "/health", "", hdr(port)); w.Code != 502 || !strings.Contains(w.Body.String(), "is paused") {
			t.Errorf("port %d, paused: %d %s, want 502 saying it is paused", port, w.Code, w.Body)
		}
	}
	for _, c := range f.calls {
		if c.Op != api.OpInfo {
			t.Errorf("health of a paused sandbox sent %s: it must not resume it", c.Op)
		}
	}
	f.live["n1-abc"] = seam.Info{ID: "n1-abc", State: "ready"}
	if w := do(d, "GET", "/health", "", hdr(EnvdPort)); w.Code != 204 {
		t.Errorf("envd, running again: %d %s, want 204", w.Code, w.Body)
	}
	if w := do(d, "GET", "/health", "", hdr(InterpreterPort)); w.Code != 200 {
		t.Errorf("interpreter, running again: %d %s, want 200", w.Code, w.Body)
	}
}

// TestMetricsRange: the one sample (now) is answered for a range that
// reaches now, none for a range wholly in the past or the future, and a
// bound that is not a Unix time in seconds is refused.
func TestMetricsRange(t *testing.T) {
	d, _ := newTestDoor(t, Options{})
	key := map[string]string{"X-API-KEY": testKey}
	w := do(d, "POST", "/v2/sandboxes", `{"templateID":"base"}`, key)
	var s sandbox
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	for q, want := range map[string]int{
		"":                              1,
		fmt.Sprintf("?start=%d", now-1): 1,
		fmt.Sprintf("?start=%d&end=%d", now-10, now):        1,
		fmt.Sprintf("?start=%d&end=%d", now-3600, now-1800): 0,
		fmt.Sprintf("?start=%d", now+60):                    0,
	} {
		w := do(d, "GET", "/sandboxes/"+s.SandboxID+"/metrics"+q, "", key)
		var got []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil || len(got) != want {
			t.Errorf("metrics%s: %d %s, want %d samples", q, w.Code, w.Body, want)
		}
	}
	if w := do(d, "GET", "/sandboxes/"+s.SandboxID+"/metrics?end=yesterday", "", key); w.Code != 400 || !strings.Contains(w.Body.String(), `end \"yesterday\": want a Unix time in seconds`) {
		t.Errorf("bad end: %d %s", w.Code, w.Body)
	}
}

// TestSignedFileURLs: a /files request without a token header is admitted
// by the signature the SDKs' downloadUrl and uploadUrl compute from the
// sandbox's token (computed here from E2B's definition), for its path,
// operation and user only, and not once it has expired.
func TestSignedFileURLs(t *testing.T) {
	d, _ := newTestDoor(t, Options{})
	w := do(d, "POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": testKey})
	var s sandbox
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	sign := func(path, op, user string, exp string) string {
		raw := path + ":" + op + ":" + user + ":" + s.EnvdAccessToken
		if exp != "" {
			raw += ":" + exp
		}
		sum := sha256.Sum256([]byte(raw))
		return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	}
	hdr := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49983"}
	later := strconv.FormatInt(time.Now().Unix()+600, 10)
	past := strconv.FormatInt(time.Now().Unix()-10, 10)
	q := func(v url.Values) string { return "/files?" + v.Encode() }
	for _, c := range []struct {
		name, method, target, msg string
	}{
		{"read", "GET", q(url.Values{"path": {"a.txt"}, "signature": {sign("a.txt", "read", "", "")}}), ""},
		{"read with user and expiry", "GET", q(url.Values{"path": {"a.txt"}, "username": {"user"}, "signature_expiration": {later}, "signature": {sign("a.txt", "read", "user", later)}}), ""},
		{"write", "POST", q(url.Values{"path": {"a.txt"}, "signature": {sign("a.txt", "write", "", "")}}), ""},
		{"a read's signature used to write", "POST", q(url.Values{"path": {"a.txt"}, "signature": {sign("a.txt", "read", "", "")}}), "invalid signature"},
		{"another path", "GET", q(url.Values{"path": {"b.txt"}, "signature": {sign("a.txt", "read", "", "")}}), "invalid signature"},
		{"expiry moved later", "GET", q(url.Values{"path": {"a.txt"}, "signature_expiration": {later}, "signature": {sign("a.txt", "read", "", past)}}), "invalid signature"},
		{"expired", "GET", q(url.Values{"path": {"a.txt"}, "signature_expiration": {past}, "signature": {sign("a.txt", "read", "", past)}}), "signature is already expired"},
	} {
		w := do(d, c.method, c.target, "", hdr)
		if c.msg == "" {
			if w.Code == 401 {
				t.Errorf("%s: %d %s, want admitted", c.name, w.Code, w.Body)
			}
			continue
		}
		if w.Code != 401 || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s: %d %s, want 401 %q", c.name, w.Code, w.Body, c.msg)
		}
	}
	// Another sandbox's signature (its token differs) opens nothing here.
	w = do(d, "POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": testKey})
	var other sandbox
	if err := json.Unmarshal(w.Body.Bytes(), &other); err != nil {
		t.Fatal(err)
	}
	hdr["E2b-Sandbox-Id"] = other.SandboxID
	if w := do(d, "GET", q(url.Values{"path": {"a.txt"}, "signature": {sign("a.txt", "read", "", "")}}), "", hdr); w.Code != 401 {
		t.Errorf("a signature of another sandbox: %d %s, want 401", w.Code, w.Body)
	}
}

// TestRecordsOfEndedSandboxesArePruned: a sandbox that ended by its
// timeout or through another door leaves no record once its owner creates
// another, and one ended by a timeout of 0 leaves none at once: records
// were kept for good, and an unauthenticated signed URL tries each.
func TestRecordsOfEndedSandboxesArePruned(t *testing.T) {
	d, f := newTestDoor(t, Options{})
	create := func() string { return makeSandbox(t, d).SandboxID }
	var ended []string
	for range 5 {
		ended = append(ended, create())
	}
	f.mu.Lock()
	for _, id := range ended {
		delete(f.live, id) // ended where the door does not see it
	}
	f.mu.Unlock()
	kept := create()
	for _, id := range ended {
		if _, ok := d.records.get(id); ok {
			t.Errorf("record of ended sandbox %s kept after its owner's next create", id)
		}
	}
	if _, ok := d.records.get(kept); !ok {
		t.Fatalf("record of the live sandbox %s dropped", kept)
	}
	if w := do(d, "POST", "/sandboxes/"+kept+"/timeout", `{"timeout":0}`, map[string]string{"X-API-KEY": testKey}); w.Code >= 300 {
		t.Fatalf("timeout 0: %d %s", w.Code, w.Body)
	}
	if _, ok := d.records.get(kept); ok {
		t.Error("record kept after a timeout of 0 ended the sandbox")
	}
}
