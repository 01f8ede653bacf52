package api_test

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/doortest"
	"github.com/jailcell/jailcell/api/jsonl"
	"github.com/jailcell/jailcell/internal/sessiontest"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
	"github.com/jailcell/jailcell/workflow"
)

func TestDecodeWorkflowFields(t *testing.T) {
	for _, tc := range []struct {
		name, line, wantErr string
		check               func(*api.Request) bool
	}{
		{"fix", `{"id":1,"op":"exec","code":"x","fix":{"max_attempts":3},"force":true}`, "",
			func(r *api.Request) bool { return r.Fix != nil && r.Fix.MaxAttempts == 3 && r.Force }},
		{"fix null is absent", `{"id":1,"op":"exec","code":"x","fix":null}`, "", func(r *api.Request) bool { return r.Fix == nil }},
		{"fix not object", `{"id":1,"op":"exec","code":"x","fix":3}`, `field "fix" must be an object`, nil},
		{"fix unknown key", `{"id":1,"op":"exec","code":"x","fix":{"max_attempt":3}}`, `"fix.max_attempt" is not a fix option`, nil},
		{"fix missing key", `{"id":1,"op":"exec","code":"x","fix":{}}`, `"fix.max_attempts" is required`, nil},
		{"fix fraction", `{"id":1,"op":"exec","code":"x","fix":{"max_attempts":2.5}}`, `must be an integer, got 2.5`, nil},
		{"fix zero", `{"id":1,"op":"exec","code":"x","fix":{"max_attempts":0}}`, `must be at least 1`, nil},
		{"memory", `{"id":1,"op":"exec","code":"x","memory":true}`, "", func(r *api.Request) bool { return r.Memory && r.Fix == nil }},
		{"memory string", `{"id":1,"op":"exec","code":"x","memory":1}`, `field "memory" must be a boolean`, nil},
		{"force string", `{"id":1,"op":"exec","code":"x","force":"yes"}`, `field "force" must be a boolean`, nil},
		{"failures", `{"id":1,"op":"failures","action":"clear"}`, "", func(r *api.Request) bool { return r.Action == "clear" }},
		{"failures bad action", `{"id":1,"op":"failures","action":"drop"}`, `allowed "list" (default) or "clear"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := api.DecodeRequest([]byte(tc.line))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Message, tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(req) {
				t.Fatalf("req %+v err %v", req, err)
			}
		})
	}
}

// A cgroup root of its own: starting a manager sweeps its root, and other
// packages' tests may run at the same time.
const workflowCgroupRoot = "/jailcell-test-api-wf"

func TestWorkflowJSONL(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	m := sessiontest.Manager(t, workflowCgroupRoot, p)
	fixer, _ := filepath.Abs("../testdata/fixer/fix_name_error.py")
	wf, err := workflow.New(m, workflow.Config{
		Fixer:     &workflow.CommandFixer{Path: "/usr/bin/python3", Args: []string{fixer}, Timeout: 10 * time.Second},
		ReviewDir: t.TempDir(), Threshold: 1,
		Policies: map[string]policy.Policy{"default": p},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &api.Dispatcher{Manager: m, Workflow: wf}
	c := doortest.StartJSONL(t, func(ctx context.Context, r io.Reader, w io.Writer) error {
		return jsonl.Serve(ctx, r, w, d, jsonl.Options{})
	})
	defer c.Close()

	type wfLine struct {
		OK       bool               `json:"ok"`
		Error    *api.Error         `json:"error"`
		Result   *seam.Result       `json:"result"`
		Attempts []workflow.Attempt `json:"attempts"`
		Fallback *workflow.Fallback `json:"fallback"`
		Known    *workflow.Known    `json:"known"`
		Failures []workflow.Failure `json:"failures"`
		Cleared  *int               `json:"cleared"`
	}
	call := func(line string) wfLine {
		t.Helper()
		_, raw := c.Call(line)
		var v wfLine
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		return v
	}

	// Fixed on attempt 2, one-shot: each attempt a fresh one-shot.
	v := call(`{"id":1,"op":"exec","code":"pritn(6*7)","fix":{"max_attempts":3}}`)
	if !v.OK || v.Result.Status != "ok" || v.Result.Stdout != "42\n" || len(v.Attempts) != 2 || v.Attempts[0].Error.Type != "NameError" || v.Fallback != nil {
		t.Fatalf("fixed exec: %+v", v)
	}
	// Over the ceiling.
	if v := call(`{"id":2,"op":"exec","code":"1","fix":{"max_attempts":9}}`); v.OK || v.Error.Code != api.CodeBadRequest || !strings.Contains(v.Error.Message, "1..5") {
		t.Fatalf("over the ceiling: %+v", v)
	}
	// Unfixable: fallback, then (threshold 1) skipped, then forced.
	v = call(`{"id":3,"op":"exec","code":"1/0","fix":{"max_attempts":2}}`)
	if !v.OK || v.Result.Status != "error" || v.Fallback == nil || !strings.Contains(v.Fallback.Reason, "returned no code") || !strings.Contains(v.Fallback.Error, "ZeroDivisionError") {
		t.Fatalf("unfixable: %+v", v)
	}
	// A plain exec never meets failure memory; one that opts in does.
	if v := call(`{"id":4,"op":"exec","code":"1/0"}`); !v.OK || v.Result.Status != "error" || v.Known != nil {
		t.Fatalf("plain repeat: %+v, want it run", v)
	}
	v = call(`{"id":4,"op":"exec","code":"1/0","memory":true}`)
	if !v.OK || v.Result.Status != "skipped" || v.Known == nil || v.Known.Count != 1 || v.Known.Policy != "default" ||
		v.Known.FirstSeen.IsZero() || !strings.Contains(v.Known.Force, `"force":true`) ||
		!strings.Contains(v.Result.Error.Message, v.Known.Fingerprint) {
		t.Fatalf("repeat: %+v known %+v, want skipped naming the fingerprint and force", v, v.Known)
	}
	if v := call(`{"id":5,"op":"exec","code":"1/0","memory":true,"force":true}`); v.Result.Status != "error" {
		t.Fatalf("forced: %+v", v)
	}
	if v := call(`{"id":6,"op":"failures"}`); !v.OK || len(v.Failures) != 1 || v.Failures[0].Type != "ZeroDivisionError" {
		t.Fatalf("failures: %+v", v)
	}
	if v := call(`{"id":7,"op":"failures","action":"clear"}`); !v.OK || v.Cleared == nil || *v.Cleared != 1 {
		t.Fatalf("clear: %+v", v)
	}

	// No fixer configured: bad_request naming the config key.
	nofix, err := workflow.New(m, workflow.Config{ReviewDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*api.Dispatcher{{Manager: m, Workflow: nofix}, {Manager: m}} {
		resp := d.Handle(context.Background(), 0, &api.Request{ID: json.RawMessage(`8`), Op: api.OpExec, Code: "1", Fix: &api.Fix{MaxAttempts: 2}}, nil)
		if resp.Error == nil || resp.Error.Code != api.CodeBadRequest || !strings.Contains(resp.Error.Message, "fixer.command") || !strings.Contains(resp.Error.Message, "JAILCELL_FIXER_COMMAND") {
			t.Errorf("fix without fixer: %+v", resp.Error)
		}
	}
}

// TestHostileFailuresOfOtherOwners: failure memory is per owner. Another
// user must not list your failures (their messages are your data) nor
// have requests skipped because of them.
func TestHostileFailuresOfOtherOwners(t *testing.T) {
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	m := sessiontest.Manager(t, workflowCgroupRoot, p)
	wf, err := workflow.New(m, workflow.Config{
		Fixer:     &workflow.CommandFixer{Path: "/bin/true", Timeout: 10 * time.Second},
		ReviewDir: t.TempDir(), Threshold: 1,
		Policies: map[string]policy.Policy{"default": p},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &api.Dispatcher{Manager: m, Workflow: wf}
	ctx := context.Background()
	const alice, bob = 1000, 2000
	code := "raise ValueError('alice-private-token')"
	exec := func(owner int, fix *api.Fix) *api.Response {
		return d.Handle(ctx, owner, &api.Request{ID: json.RawMessage(`1`), Op: api.OpExec, Code: code, Fix: fix, Memory: true}, nil)
	}
	failures := func(owner int) []*workflow.Failure {
		r := d.Handle(ctx, owner, &api.Request{ID: json.RawMessage(`2`), Op: api.OpFailures}, nil)
		if !r.OK {
			t.Fatalf("failures as uid %d: %+v", owner, r.Error)
		}
		return r.Failures
	}
	if r := exec(alice, &api.Fix{MaxAttempts: 2}); !r.OK || r.Fallback == nil {
		t.Fatalf("alice's failing exec: %+v", r)
	}
	if l := failures(bob); len(l) != 0 {
		t.Fatalf("uid %d lists uid %d's failures: %+v", bob, alice, l[0])
	}
	if r := exec(bob, nil); !r.OK || r.Result.Status != "error" || r.Known != nil {
		t.Fatalf("uid %d's request answered from uid %d's failures: %+v", bob, alice, r.Result)
	}
	if l := failures(alice); len(l) != 1 || l[0].UID != alice || !strings.Contains(l[0].Message, "alice-private-token") {
		t.Fatalf("alice's own failures: %+v", l)
	}
	if r := exec(alice, nil); !r.OK || r.Result.Status != workflow.StatusSkipped {
		t.Fatalf("alice's repeat: %+v, want skipped", r.Result)
	}
	// bob opted in, so his own failure is remembered beside alice's.
	if l := failures(0); len(l) != 2 {
		t.Fatalf("root lists %d failures, want alice's and bob's", len(l))
	}
}
