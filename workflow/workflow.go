package workflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

// Sentinel errors.
var (
	// ErrNoFixer: a request asked for fix but no fixer is configured. The
	// message names the config keys to set.
	ErrNoFixer = errors.New("no fixer configured")
)

// StatusSkipped is the status of a request answered from failure memory
// without running.
const StatusSkipped = "skipped"

// ModeDegraded marks a result produced by the degraded stateless run.
const ModeDegraded = "degraded"

// Config shapes a Runner. Zero fields take the documented defaults.
type Config struct {
	// Fixer proposes new code for a failed cell; nil means fix requests are
	// refused with ErrNoFixer.
	Fixer Fixer
	// MaxAttemptsCeiling bounds a request's fix.max_attempts. Default 5.
	MaxAttemptsCeiling int
	// ReviewDir holds the review log and the failure memory ("" = neither
	// is kept on disk; failure memory then lives in memory only).
	ReviewDir string
	// Threshold is how many recorded failures of one fingerprint make a
	// matching request answer "skipped" at once. Default 3.
	Threshold int
	// TTL is how long a fingerprint is remembered after its last failure.
	// Default 24 h.
	TTL time.Duration
	// Policies are the manager's named policies, consulted for their
	// Degraded field ("" names "default"). Missing: degraded mode off.
	Policies map[string]policy.Policy
	// Logger receives loop outcomes (never code, never fixer credentials).
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Sessions is what the Runner needs of session.Manager, which satisfies
// it: workflow names no session type, so it links no sandbox machinery.
type Sessions interface {
	Exec(ctx context.Context, owner int, id string, req seam.ExecRequest) (*seam.Result, error)
	RunOnce(ctx context.Context, owner int, policyName string, req seam.ExecRequest) (*seam.Result, error)
	RunOnceAs(ctx context.Context, owner int, id string, req seam.ExecRequest) (*seam.Result, error)
	PolicyOf(ctx context.Context, owner int, id string) (policy.Policy, error)
}

// Runner runs cells with fix-and-retry, fallback and failure memory.
type Runner struct {
	m   Sessions
	cfg Config
	mem *memory
	rev *reviewLog
}

// The defaults of Config's zero fields, and the largest ceiling; the
// daemon's configuration keys take theirs from here.
const (
	DefaultMaxAttemptsCeiling = 5
	MaxAttemptsCeilingLimit   = 20
	DefaultThreshold          = 3
	DefaultTTL                = 24 * time.Hour
)

// New makes a Runner over m, loading failure memory from cfg.ReviewDir.
func New(m Sessions, cfg Config) (*Runner, error) {
	if cfg.MaxAttemptsCeiling == 0 {
		cfg.MaxAttemptsCeiling = DefaultMaxAttemptsCeiling
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxAttemptsCeiling < 1 || cfg.MaxAttemptsCeiling > MaxAttemptsCeilingLimit {
		return nil, fmt.Errorf("fixer.max_attempts_ceiling = %d, allowed 1..%d", cfg.MaxAttemptsCeiling, MaxAttemptsCeilingLimit)
	}
	if cfg.Threshold < 1 {
		return nil, fmt.Errorf("failures.threshold = %d, allowed >= 1", cfg.Threshold)
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("failures.ttl = %s, must be positive", cfg.TTL)
	}
	mem, err := openMemory(cfg.ReviewDir, cfg.TTL, cfg.Now, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &Runner{m: m, cfg: cfg, mem: mem, rev: &reviewLog{dir: cfg.ReviewDir}}, nil
}

// HasFixer reports whether fix requests can be served.
func (r *Runner) HasFixer() bool { return r.cfg.Fixer != nil }

// MaxAttemptsCeiling is the largest fix.max_attempts allowed.
func (r *Runner) MaxAttemptsCeiling() int { return r.cfg.MaxAttemptsCeiling }

// Request is one cell to run through the loop.
type Request struct {
	Owner int
	// Session names the session; "" runs one-shot under Policy.
	Session string
	Policy  string
	Exec    seam.ExecRequest
	// MaxAttempts > 1 turns on fix-and-retry (0 or 1: a single run), and
	// with it failure memory.
	MaxAttempts int
	// Memory opts a request without fix-and-retry into failure memory: a
	// remembered failure answers it "skipped", and its own failure is
	// remembered. Without it (and without fix) a request always runs and is
	// never remembered, so memory cannot surprise a plain exec.
	Memory bool
	// Force runs the cell even when failure memory says it will fail.
	Force bool
}

func (req Request) usesMemory() bool { return req.MaxAttempts > 1 || req.Memory }

// Attempt is one run of the loop.
type Attempt struct {
	Attempt int             `json:"attempt"`
	Code    string          `json:"code"`
	Status  string          `json:"status"`
	Error   *seam.CellError `json:"error,omitempty"`
	Stdout  string          `json:"stdout,omitempty"`
	Stderr  string          `json:"stderr,omitempty"`
}

// Fallback is what a person needs when the loop could not make the cell work.
type Fallback struct {
	// Code is the last code tried, to run by hand.
	Code string `json:"code"`
	// Error is the exact error: the traceback, or the sandbox error.
	Error string `json:"error"`
	// Reason says why the loop ended.
	Reason string `json:"reason"`
	// Tried lists what was attempted, in order.
	Tried []string `json:"tried"`
}

// Known is the remembered failure a skipped request matched: which one
// (fingerprint, under which policy), when, what error, and how to run the
// cell anyway.
type Known struct {
	Fingerprint string    `json:"fingerprint"`
	Policy      string    `json:"policy"`
	Type        string    `json:"type"`
	Message     string    `json:"message"`
	Modules     []string  `json:"modules,omitempty"`
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	// Force says how to run the cell anyway.
	Force string `json:"force"`
}

const forceHint = `send the same request with "force":true to run it anyway`

// Outcome is what the loop produced. Result is the last attempt's result
// (nil when nothing could run); the rest are the loop's own fields.
type Outcome struct {
	Result   *seam.Result
	Attempts []Attempt
	Fallback *Fallback
	// Mode is "degraded" when Result came from the degraded stateless run.
	Mode string
	// Known is set with Result.Status "skipped".
	Known *Known
}

func failed(res *seam.Result) bool { return res != nil && res.Status != seam.StatusOK }

func fixable(res *seam.Result) bool {
	return res.Status == seam.StatusError || res.Status == seam.StatusTimeout
}

// sandboxFailure: the cell never ran because no sandbox could be had.
func sandboxFailure(err error) bool {
	return errors.Is(err, seam.ErrUnavailable) || errors.Is(err, seam.ErrLimit)
}

// Exec runs req through the loop. A non-nil error is a request the loop
// could not serve at all; with it the Outcome may still carry a Fallback
// (the sandbox could not be created) that the caller should pass on.
func (r *Runner) Exec(ctx context.Context, req Request) (*Outcome, error) {
	if req.MaxAttempts > 1 && r.cfg.Fixer == nil {
		return nil, ErrNoFixer
	}
	if req.MaxAttempts < 0 || req.MaxAttempts > r.cfg.MaxAttemptsCeiling {
		return nil, fmt.Errorf("%w: fix.max_attempts = %d, allowed 1..%d (config key fixer.max_attempts_ceiling)",
			seam.ErrBadRequest, req.MaxAttempts, r.cfg.MaxAttemptsCeiling)
	}
	// Memory is consulted only after the session lookup: an unknown
	// session is not_found, never a remembered failure.
	var sc scope
	if req.usesMemory() {
		var err error
		if sc, err = r.scope(ctx, req); err != nil {
			return nil, err
		}
		if k := r.mem.lookup(req.Owner, sc, req.Exec.Code, r.cfg.Threshold); k != nil && !req.Force {
			r.cfg.Logger.Info("cell skipped by failure memory", "fingerprint", k.Fingerprint, "policy", k.Policy, "count", k.Count)
			return &Outcome{
				Result: &seam.Result{Status: StatusSkipped, Error: &seam.CellError{
					Type: k.Type, Message: fmt.Sprintf("skipped by failure memory: this code ended in remembered failure %s under policy %q %d times (first %s, last %s): %s: %s; %s",
						k.Fingerprint, k.Policy, k.Count, k.FirstSeen.Format(time.RFC3339), k.LastSeen.Format(time.RFC3339), k.Type, k.Message, k.Force),
				}},
				Known: k,
			}, nil
		}
	}
	max := max(req.MaxAttempts, 1)
	out := &Outcome{}
	code := req.Exec.Code
	var tried []string
	var reason string
	var runErr error
	for n := 1; ; n++ {
		er := req.Exec
		er.Code = code
		// A snapshot is the state before the request, not before a retry.
		er.Snapshot = er.Snapshot && n == 1
		res, err := r.run(ctx, req, er)
		if err != nil {
			if !sandboxFailure(err) {
				if n == 1 {
					return nil, err
				}
				// A later attempt could not run: keep what we have.
				reason = fmt.Sprintf("attempt %d could not run: %v", n, err)
				runErr = err
				break
			}
			runErr = err
			reason = "the sandbox could not be created: " + err.Error()
			tried = append(tried, fmt.Sprintf("attempt %d: sandbox unavailable", n))
			break
		}
		out.Result = res
		out.Attempts = append(out.Attempts, Attempt{Attempt: n, Code: code, Status: res.Status, Error: res.Error, Stdout: trim(res.Stdout, 4096), Stderr: trim(res.Stderr, 4096)})
		tried = append(tried, fmt.Sprintf("attempt %d: %s", n, statusLine(res)))
		if !failed(res) {
			break
		}
		if !fixable(res) {
			reason = fmt.Sprintf("status %s is not retried", res.Status)
			break
		}
		if n >= max {
			reason = fmt.Sprintf("retries exhausted after %d attempts", n)
			break
		}
		newCode, ferr := r.cfg.Fixer.Fix(ctx, FixInput{
			Code: code, Error: errorText(res), Stdout: trim(res.Stdout, 8192), Stderr: trim(res.Stderr, 8192),
			Attempt: n, Attempts: out.Attempts[:len(out.Attempts)-1],
		})
		switch {
		case ferr != nil:
			reason = fmt.Sprintf("fixer %s failed: %v", r.cfg.Fixer.Name(), ferr)
		case newCode == "":
			reason = fmt.Sprintf("fixer %s returned no code", r.cfg.Fixer.Name())
		case newCode == code:
			reason = fmt.Sprintf("fixer %s returned the same code", r.cfg.Fixer.Name())
		}
		if reason != "" {
			tried = append(tried, reason)
			break
		}
		tried = append(tried, fmt.Sprintf("fixer %s proposed new code", r.cfg.Fixer.Name()))
		code = newCode
	}
	if runErr == nil && (!failed(out.Result) || req.MaxAttempts <= 1) {
		// Success, or a plain exec's own failure: the result says it all,
		// and an interactive NameError is not an incident to review.
		if req.MaxAttempts <= 1 {
			out.Attempts = nil
		}
		if failed(out.Result) && req.usesMemory() {
			r.mem.record(req.Owner, sc, req.Exec.Code, code, out.Result)
		}
		return out, nil
	}

	// The loop ended in failure: say so explicitly, remember it, log it.
	fb := &Fallback{Code: code, Reason: reason, Tried: tried}
	if runErr != nil {
		fb.Error = runErr.Error()
	} else {
		fb.Error = errorText(out.Result)
	}
	out.Fallback = fb
	fp := ""
	if runErr == nil {
		fp = r.mem.record(req.Owner, sc, req.Exec.Code, code, out.Result)
	}
	r.review(req, out, fp)
	allowed, perr := r.degradedAllowed(ctx, req)
	if perr != nil {
		fb.Tried = append(fb.Tried, "degraded stateless run: not tried: "+perr.Error())
	}
	if allowed {
		if dres, derr := r.degraded(ctx, req, code); derr == nil {
			fb.Tried = append(fb.Tried, "degraded stateless run: "+statusLine(dres))
			out.Result, out.Mode = dres, ModeDegraded
			return out, nil
		} else {
			fb.Tried = append(fb.Tried, "degraded stateless run: "+derr.Error())
		}
	}
	if out.Result == nil {
		return out, runErr
	}
	return out, nil
}

func (r *Runner) run(ctx context.Context, req Request, er seam.ExecRequest) (*seam.Result, error) {
	if req.Session != "" {
		return r.m.Exec(ctx, req.Owner, req.Session, er)
	}
	return r.m.RunOnce(ctx, req.Owner, req.Policy, er)
}

func statusLine(res *seam.Result) string {
	if res.Error != nil {
		return res.Status + " (" + res.Error.Type + ": " + trim(res.Error.Message, 200) + ")"
	}
	return res.Status
}

// errorText is the exact error of a failed result: the traceback if any.
func errorText(res *seam.Result) string {
	if res == nil {
		return ""
	}
	if res.Error != nil {
		if res.Error.Traceback != "" {
			return res.Error.Traceback
		}
		return res.Error.Type + ": " + res.Error.Message
	}
	if res.Status != seam.StatusOK {
		return "cell ended with status " + res.Status
	}
	return ""
}

// trim keeps the last n bytes of s (the end of output is where the error is).
func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...[trimmed]...\n" + s[len(s)-n:]
}

// ErrorForMissingFixer names the config keys a fix request needs.
func ErrorForMissingFixer() string {
	return `"fix" needs a fixer: set config key fixer.command (env JAILCELL_FIXER_COMMAND), or fixer.kind=openai with fixer.openai.base_url and fixer.openai.model (env JAILCELL_FIXER_OPENAI_BASE_URL, JAILCELL_FIXER_OPENAI_MODEL)`
}
