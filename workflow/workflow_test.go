package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	os.Exit(m.Run())
}

// Its own cgroup root: a manager sweeps its root at start, and other
// packages' tests may run at the same time.
const testCgroupRoot = "/jailcell-test-workflow"

func testPolicy() policy.Policy {
	p := policy.Default()
	p.MemoryBytes = 512 << 20
	p.Pids = 64
	p.DiskBytes = 64 << 20
	p.OutputBytes = 64 << 10
	p.InterruptGrace = time.Second
	p.Timeout = 20 * time.Second
	return p
}

// newManager builds a real host and manager (privileged tier).
func newManager(t *testing.T, maxSessions int, policies map[string]policy.Policy) *session.Manager {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: testCgroupRoot})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	if policies == nil {
		policies = map[string]policy.Policy{"default": testPolicy()}
	}
	m, err := session.New(session.Config{StateDir: filepath.Join(state, "sessions"), Policies: policies, MaxSessions: maxSessions}, h)
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return m
}

func fixerScript(t *testing.T, name string) *CommandFixer {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "testdata", "fixer", name))
	if err != nil {
		t.Fatal(err)
	}
	return &CommandFixer{Path: "/usr/bin/python3", Args: []string{path}, Timeout: 10 * time.Second}
}

func newRunner(t *testing.T, m *session.Manager, cfg Config) *Runner {
	t.Helper()
	if cfg.ReviewDir == "" {
		cfg.ReviewDir = t.TempDir()
	}
	if cfg.Policies == nil {
		cfg.Policies = map[string]policy.Policy{"default": testPolicy()}
	}
	r, err := New(m, cfg)
	if err != nil {
		t.Fatalf("workflow.New: %v", err)
	}
	return r
}

func create(t *testing.T, m *session.Manager) string {
	t.Helper()
	info, err := m.Create(context.Background(), session.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return info.ID
}

func TestFixCommandRepairsOnAttempt2(t *testing.T) {
	m := newManager(t, 0, nil)
	r := newRunner(t, m, Config{Fixer: fixerScript(t, "fix_name_error.py")})
	id := create(t, m)
	ctx := context.Background()
	if _, err := m.Exec(ctx, 0, id, session.ExecRequest{Code: "x = 41"}); err != nil {
		t.Fatal(err)
	}
	out, err := r.Exec(ctx, Request{Session: id, MaxAttempts: 3, Exec: session.ExecRequest{Code: "pritn(x + 1)"}})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if out.Result.Status != "ok" || strings.TrimSpace(out.Result.Stdout) != "42" {
		t.Fatalf("final result %+v, want ok with 42 (the same session's x)", out.Result)
	}
	if len(out.Attempts) != 2 || out.Attempts[0].Status != "error" || out.Attempts[0].Error.Type != "NameError" ||
		out.Attempts[1].Code != "print(x + 1)" || out.Attempts[1].Status != "ok" {
		t.Fatalf("attempts %+v, want a NameError then the fixed code ok", out.Attempts)
	}
	if out.Fallback != nil {
		t.Errorf("fallback %+v on success", out.Fallback)
	}
}

func TestFixerNeverFixesThenSkippedThenForce(t *testing.T) {
	m := newManager(t, 0, nil)
	dir := t.TempDir()
	cfg := Config{Fixer: fixerScript(t, "never_fix.py"), ReviewDir: dir, Threshold: 2}
	r := newRunner(t, m, cfg)
	id := create(t, m)
	ctx := context.Background()
	code := "import json\nopen('/work/no-such-file-17.csv')"
	req := Request{Session: id, MaxAttempts: 2, Exec: session.ExecRequest{Code: code}}
	for i := 1; i <= 2; i++ {
		out, err := r.Exec(ctx, req)
		if err != nil {
			t.Fatalf("loop %d: %v", i, err)
		}
		if len(out.Attempts) != 2 || out.Result.Status != "error" {
			t.Fatalf("loop %d: attempts %+v status %s, want 2 failed attempts", i, out.Attempts, out.Result.Status)
		}
		fb := out.Fallback
		if fb == nil || !strings.Contains(fb.Reason, "retries exhausted after 2") || !strings.Contains(fb.Error, "FileNotFoundError") ||
			!strings.Contains(fb.Code, "# fixer attempt 1") || len(fb.Tried) < 3 {
			t.Fatalf("loop %d: fallback %+v", i, fb)
		}
	}
	entries, err := ReadReview(dir)
	if err != nil || len(entries) != 2 {
		t.Fatalf("review log: %d entries, %v; want 2", len(entries), err)
	}
	if e := entries[0]; e.Session != id || e.Code != code || len(e.Attempts) != 2 || len(e.Errors) != 2 || e.Fingerprint == "" {
		t.Errorf("review entry %+v", e)
	}

	// A third identical request is answered from memory, without running.
	out, err := r.Exec(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != StatusSkipped || out.Known == nil || out.Known.Count != 2 || out.Known.Type != "FileNotFoundError" || len(out.Attempts) != 0 {
		t.Fatalf("third request: %+v known %+v, want skipped with count 2", out.Result, out.Known)
	}
	// The answer names the remembered failure (which, under which policy,
	// when, what error) and how to run the cell anyway.
	k := out.Known
	if k.Fingerprint != entries[0].Fingerprint || k.Policy != "default" || k.FirstSeen.IsZero() || k.LastSeen.Before(k.FirstSeen) ||
		!strings.Contains(k.Message, "<path>") || !strings.Contains(k.Force, `"force":true`) {
		t.Errorf("known %+v: want the review entry's fingerprint %s, policy, times, error and the force hint", k, entries[0].Fingerprint)
	}
	for _, want := range []string{k.Fingerprint, `policy "default"`, "FileNotFoundError", k.FirstSeen.Format(time.RFC3339), `"force":true`} {
		if !strings.Contains(out.Result.Error.Message, want) {
			t.Errorf("skipped message %q lacks %q", out.Result.Error.Message, want)
		}
	}
	// Memory survives a restart.
	r2 := newRunner(t, m, cfg)
	if out, _ := r2.Exec(ctx, req); out.Result.Status != StatusSkipped {
		t.Errorf("after restart: status %s, want skipped", out.Result.Status)
	}
	if l := r2.Failures(0); len(l) != 1 || l[0].Count != 2 || !strings.Contains(l[0].Message, "<path>") {
		t.Errorf("failures %+v, want one normalised entry", l)
	}
	// force runs it anyway.
	req.Force = true
	out, err = r2.Exec(ctx, req)
	if err != nil || out.Result.Status != "error" || out.Known != nil || len(out.Attempts) != 2 {
		t.Fatalf("forced: %+v %v, want it run", out, err)
	}
	if n, err := r2.ClearFailures(); n != 1 || err != nil {
		t.Errorf("ClearFailures = %d, %v", n, err)
	}
	req.Force = false
	req.MaxAttempts, req.Memory = 1, true
	if out, _ := r2.Exec(ctx, req); out.Result.Status == StatusSkipped {
		t.Errorf("skipped after clear")
	}
}

// TestMemoryOnlyWhenAskedPerOwnerAndPolicyAfterLookup: failure memory
// cannot surprise. A plain exec neither meets it nor feeds it; fix (or
// "memory") does. It is keyed per owner and policy, and consulted after the
// session lookup, so an unknown session is not_found, not "skipped".
func TestMemoryOnlyWhenAskedPerOwnerAndPolicyAfterLookup(t *testing.T) {
	other := testPolicy()
	other.Pids = 48
	policies := map[string]policy.Policy{"default": testPolicy(), "other": other}
	m := newManager(t, 0, policies)
	r := newRunner(t, m, Config{Fixer: fixerScript(t, "never_fix.py"), Threshold: 1, Policies: policies})
	id := create(t, m)
	ctx := context.Background()
	code := "1/0"
	run := func(what string, req Request) *Outcome {
		t.Helper()
		req.Exec = session.ExecRequest{Code: code}
		out, err := r.Exec(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}

	// A plain exec that fails is not remembered.
	if out := run("plain", Request{Session: id}); out.Result.Status != "error" {
		t.Fatalf("plain exec: %+v, want error", out.Result)
	}
	if l := r.Failures(0); len(l) != 0 {
		t.Fatalf("a plain exec was remembered: %+v", l[0])
	}
	// A fix loop is (threshold 1: one is enough).
	if out := run("fix", Request{Session: id, MaxAttempts: 2}); out.Fallback == nil {
		t.Fatalf("fix loop: %+v, want a fallback", out)
	}
	// A plain exec still runs; one that opts in is skipped.
	if out := run("plain after", Request{Session: id}); out.Result.Status != "error" || out.Known != nil {
		t.Fatalf("plain exec after a remembered failure: %+v, want it run", out.Result)
	}
	if out := run("opted in", Request{Session: id, Memory: true}); out.Result.Status != StatusSkipped || out.Known == nil {
		t.Fatalf("opted-in exec: %+v, want skipped", out.Result)
	}
	// A one-shot under the same (effective) policy is the same key.
	if out := run("one-shot", Request{Memory: true}); out.Result.Status != StatusSkipped {
		t.Fatalf("one-shot under the same policy: %+v, want skipped", out.Result)
	}
	// Another policy, another owner: their own keys, so the cell runs.
	if out := run("other policy", Request{Policy: "other", Memory: true}); out.Result.Status != "error" || out.Known != nil {
		t.Fatalf("another policy: %+v, want it run", out.Result)
	}
	if out := run("other owner", Request{Owner: 1000, Memory: true}); out.Result.Status != "error" || out.Known != nil {
		t.Fatalf("another owner: %+v, want it run", out.Result)
	}
	// The session lookup comes first: an unknown session, or the session
	// of someone else, is not_found whatever memory holds.
	for _, req := range []Request{{Session: "no-such-session", MaxAttempts: 2}, {Session: id, Owner: 1000, Memory: true}} {
		req.Exec = session.ExecRequest{Code: code}
		if out, err := r.Exec(ctx, req); !errors.Is(err, session.ErrNotFound) || out != nil {
			t.Errorf("session %q as uid %d: %+v, %v; want not_found", req.Session, req.Owner, out, err)
		}
	}
	// An unknown one-shot policy is named, not looked up in memory.
	if _, err := r.Exec(ctx, Request{Policy: "nope", Memory: true, Exec: session.ExecRequest{Code: code}}); !errors.Is(err, session.ErrBadRequest) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown policy: %v, want bad_request naming it", err)
	}
}

func TestFixerEndsLoop(t *testing.T) {
	m := newManager(t, 0, nil)
	id := create(t, m)
	for _, tc := range []struct {
		name   string
		fixer  Fixer
		reason string
	}{
		{"nothing", &CommandFixer{Path: "/bin/true"}, "returned no code"},
		{"same", &CommandFixer{Path: "/usr/bin/python3", Args: []string{"-c", "import json,sys; sys.stdout.write(json.load(sys.stdin)['code'])"}}, "returned the same code"},
		{"fails", &CommandFixer{Path: "/bin/sh", Args: []string{"-c", "echo broken >&2; exit 3"}}, "exit status 3: broken"},
		{"timeout", &CommandFixer{Path: "/bin/sleep", Args: []string{"10"}, Timeout: 200 * time.Millisecond}, "timed out"},
		{"output", &CommandFixer{Path: "/usr/bin/yes", MaxOutput: 1000}, "output over 1000 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(t, m, Config{Fixer: tc.fixer})
			out, err := r.Exec(context.Background(), Request{Session: id, MaxAttempts: 3, Exec: session.ExecRequest{Code: "1/0"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Attempts) != 1 || out.Fallback == nil || !strings.Contains(out.Fallback.Reason, tc.reason) {
				t.Fatalf("attempts %d fallback %+v, want one attempt ending with %q", len(out.Attempts), out.Fallback, tc.reason)
			}
		})
	}
}

func TestNoFixerRefused(t *testing.T) {
	r := &Runner{cfg: Config{MaxAttemptsCeiling: 5}}
	if _, err := r.Exec(context.Background(), Request{MaxAttempts: 2}); !errors.Is(err, ErrNoFixer) {
		t.Fatalf("err %v, want ErrNoFixer", err)
	}
	if !strings.Contains(ErrorForMissingFixer(), "fixer.command") || !strings.Contains(ErrorForMissingFixer(), "JAILCELL_FIXER_COMMAND") {
		t.Errorf("message %q does not name the config key", ErrorForMissingFixer())
	}
	r.cfg.Fixer = &CommandFixer{Path: "/bin/true"}
	if _, err := r.Exec(context.Background(), Request{MaxAttempts: 6}); !errors.Is(err, session.ErrBadRequest) || !strings.Contains(err.Error(), "1..5") {
		t.Fatalf("err %v, want bad request naming the ceiling", err)
	}
}

func TestOpenAIFixer(t *testing.T) {
	const key = "sk-test-SECRET-0123456789"
	t.Setenv("JAILCELL_TEST_OPENAI_KEY", key)
	var got struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	var auth, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, path = r.Header.Get("Authorization"), r.URL.Path
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Here is the fix:\n\n`+"```python\\nprint(6 * 7)\\n```"+`\nDone."},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := &OpenAIFixer{BaseURL: srv.URL + "/v1/", Model: "local-coder", APIKeyEnv: "JAILCELL_TEST_OPENAI_KEY", Timeout: 5 * time.Second}

	m := newManager(t, 0, nil)
	r := newRunner(t, m, Config{Fixer: f, Logger: log})
	out, err := r.Exec(context.Background(), Request{MaxAttempts: 2, Exec: session.ExecRequest{Code: "print(6 * 7 +)"}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != "ok" || strings.TrimSpace(out.Result.Stdout) != "42" || len(out.Attempts) != 2 {
		t.Fatalf("result %+v attempts %d, want fixed on attempt 2", out.Result, len(out.Attempts))
	}
	if path != "/v1/chat/completions" || auth != "Bearer "+key || got.Model != "local-coder" || len(got.Messages) != 2 ||
		got.Messages[0].Role != "system" || got.Messages[1].Role != "user" ||
		!strings.Contains(got.Messages[1].Content, "SyntaxError") || !strings.Contains(got.Messages[1].Content, "print(6 * 7 +)") {
		t.Fatalf("request path %q auth %q body %+v", path, auth, got)
	}

	// A failing endpoint ends the loop with a reason that never carries the key.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "model overloaded", 503) }))
	defer bad.Close()
	r = newRunner(t, m, Config{Fixer: &OpenAIFixer{BaseURL: bad.URL, Model: "m", APIKeyEnv: "JAILCELL_TEST_OPENAI_KEY"}, Logger: log})
	out, err = r.Exec(context.Background(), Request{MaxAttempts: 2, Exec: session.ExecRequest{Code: "1/0"}})
	if err != nil || out.Fallback == nil || !strings.Contains(out.Fallback.Reason, "HTTP 503") {
		t.Fatalf("fallback %+v, %v; want the HTTP 503 named", out.Fallback, err)
	}
	if strings.Contains(logs.String(), key) || strings.Contains(out.Fallback.Reason, key) {
		t.Fatalf("API key leaked:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "loop ended in failure") {
		t.Errorf("no loop outcome in the log:\n%s", logs.String())
	}
}

func TestDegradedStateless(t *testing.T) {
	p := testPolicy()
	p.Degraded = DegradedStateless
	pols := map[string]policy.Policy{"default": p}
	m := newManager(t, 0, pols)
	r := newRunner(t, m, Config{Policies: pols, Fixer: &CommandFixer{Path: "/bin/true"}})
	secret := filepath.Join(t.TempDir(), "host-secret.txt")
	os.WriteFile(secret, []byte("s"), 0o644)
	code := `import os
try:
    import numpy
    np_ok = True
except ImportError:
    np_ok = False
print("numpy", np_ok)
print("net", sorted(os.listdir("/sys/class/net")))
print("host", os.path.exists(` + "'" + secret + "'" + `))
if np_ok:
    raise RuntimeError("the full interpreter ran")`
	out, err := r.Exec(context.Background(), Request{MaxAttempts: 2, Exec: session.ExecRequest{Code: code}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Attempts) != 1 || out.Attempts[0].Status != "error" {
		t.Fatalf("attempts %+v, want the normal run failing first", out.Attempts)
	}
	if out.Mode != ModeDegraded || out.Result.Status != "ok" {
		t.Fatalf("mode %q result %+v, want a degraded ok", out.Mode, out.Result)
	}
	want := "numpy False\nnet ['lo']\nhost False\n"
	if out.Result.Stdout != want {
		t.Fatalf("degraded stdout %q, want %q", out.Result.Stdout, want)
	}
	if out.Fallback == nil || !strings.Contains(strings.Join(out.Fallback.Tried, "\n"), "degraded stateless run: ok") {
		t.Errorf("fallback %+v, want the degraded run listed", out.Fallback)
	}
	// Without the policy field there is no degraded run.
	r = newRunner(t, m, Config{Policies: map[string]policy.Policy{"default": testPolicy()}, Fixer: &CommandFixer{Path: "/bin/true"}})
	if out, _ := r.Exec(context.Background(), Request{MaxAttempts: 2, Exec: session.ExecRequest{Code: "1/0"}}); out.Mode != "" || out.Fallback == nil {
		t.Errorf("mode %q fallback %+v without degraded in the policy", out.Mode, out.Fallback)
	}
	// A plain exec's own failure is just its result: no fallback, no
	// degraded run, no attempts list.
	r = newRunner(t, m, Config{Policies: pols})
	if out, _ := r.Exec(context.Background(), Request{Exec: session.ExecRequest{Code: "1/0"}}); out.Mode != "" || out.Fallback != nil || out.Attempts != nil || out.Result.Status != "error" {
		t.Errorf("plain exec: %+v", out)
	}
}

func TestSandboxUnavailableFallback(t *testing.T) {
	m := newManager(t, 1, nil)
	create(t, m) // takes the only slot
	r := newRunner(t, m, Config{})
	out, err := r.Exec(context.Background(), Request{Exec: session.ExecRequest{Code: "print(1)"}})
	if !errors.Is(err, session.ErrLimit) {
		t.Fatalf("err %v, want ErrLimit", err)
	}
	if out == nil || out.Fallback == nil || out.Fallback.Code != "print(1)" || !strings.Contains(out.Fallback.Error, "sessions.max") ||
		!strings.Contains(out.Fallback.Reason, "sandbox could not be created") {
		t.Fatalf("outcome %+v, want a fallback block", out)
	}
}

// TestHostileDegradedRerunWidensPolicy: the degraded rerun of a session's
// cell runs under the session's policy as tightened at create, never the
// wider policy of the same name; without a session the caller may use, it
// is refused rather than run under some default.
func TestHostileDegradedRerunWidensPolicy(t *testing.T) {
	p := testPolicy()
	p.Degraded = DegradedStateless
	pols := map[string]policy.Policy{"default": p}
	m := newManager(t, 0, pols)
	r := newRunner(t, m, Config{Policies: pols, Fixer: &CommandFixer{Path: "/bin/true"}})
	ctx := context.Background()
	mem := int64(96 << 20)
	info, err := m.Create(ctx, session.CreateOptions{Override: &policy.Override{MemoryBytes: &mem}})
	if err != nil {
		t.Fatal(err)
	}
	// 256 MiB fits the named policy's 512 MiB, not the session's 96 MiB.
	code := "b = bytearray(256 << 20)\nb[::4096] = b'x' * (len(b) // 4096)\nprint('allocated')"
	out, err := r.Exec(ctx, Request{Session: info.ID, MaxAttempts: 2, Exec: session.ExecRequest{Code: code}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Attempts) != 1 || out.Attempts[0].Status == session.StatusOK {
		t.Fatalf("attempts %+v, want the session's run failing on its memory limit", out.Attempts)
	}
	if out.Mode != ModeDegraded {
		t.Fatalf("mode %q, fallback %+v: want the degraded run", out.Mode, out.Fallback)
	}
	if out.Result.Status == session.StatusOK || strings.Contains(out.Result.Stdout, "allocated") {
		t.Fatalf("the degraded rerun allocated 256 MiB in a session limited to 96 MiB: %+v", out.Result)
	}
	// Unknown, or another owner's: its policy cannot be known.
	for _, req := range []Request{{Session: "no-such-session"}, {Owner: 4242, Session: info.ID}} {
		if res, err := r.degraded(ctx, req, "print(1)"); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("degraded run for %+v: result %+v, err %v; want refused (not found)", req, res, err)
		}
	}
}
