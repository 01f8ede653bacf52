package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// FixInput is what a fixer sees: the failed code, its error and output,
// and the attempts before it. It is also the JSON the command fixer gets
// on stdin.
type FixInput struct {
	Code     string    `json:"code"`
	Error    string    `json:"error"`
	Stdout   string    `json:"stdout"`
	Stderr   string    `json:"stderr"`
	Attempt  int       `json:"attempt"`
	Attempts []Attempt `json:"attempts"`
}

// A Fixer proposes new code for a failed cell. It returns "" when it has
// nothing to propose.
type Fixer interface {
	Name() string
	Fix(ctx context.Context, in FixInput) (string, error)
}

// Defaults for fixers.
const (
	DefaultFixTimeout   = 60 * time.Second
	DefaultMaxCodeBytes = 1 << 20
)

// CommandFixer runs an external program: FixInput as one JSON object on
// stdin, the new code on stdout. It runs on the host with the caller's
// privileges, so it is the operator's own program, never request input.
type CommandFixer struct {
	// Path is the program; Args its arguments.
	Path string
	Args []string
	// Timeout bounds one run (default 60 s); MaxOutput bounds stdout
	// (default 1 MiB): more is a failure, not a truncated fix.
	Timeout   time.Duration
	MaxOutput int
}

// Name implements Fixer.
func (c *CommandFixer) Name() string { return "command" }

// Fix implements Fixer.
func (c *CommandFixer) Fix(ctx context.Context, in FixInput) (string, error) {
	timeout, limit := c.Timeout, c.MaxOutput
	if timeout <= 0 {
		timeout = DefaultFixTimeout
	}
	if limit <= 0 {
		limit = DefaultMaxCodeBytes
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Stdin = bytes.NewReader(body)
	out := &capped{max: limit, strict: true}
	stderr := capped{max: 4096} // for the error message only
	cmd.Stdout, cmd.Stderr = out, &stderr
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return "", fmt.Errorf("run %s: timed out after %s (config key fixer.timeout)", c.Path, timeout)
	}
	if out.over {
		return "", fmt.Errorf("run %s: output over %d bytes", c.Path, limit)
	}
	if err != nil {
		return "", fmt.Errorf("run %s: %w: %s", c.Path, err, strings.TrimSpace(stderr.buf.String()))
	}
	return strings.TrimSpace(out.buf.String()), nil
}

var errOverflow = errors.New("output over the limit")

// capped is a bounded writer that remembers it overflowed.
type capped struct {
	buf    bytes.Buffer
	max    int
	over   bool
	strict bool // fail the write (and so the program) when over
}

func (w *capped) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); len(p) > room {
		w.over = true
		w.buf.Write(p[:max(room, 0)])
		if !w.strict {
			return len(p), nil
		}
		// An error closes the pipe: the program gets SIGPIPE instead of
		// running on until the timeout.
		return 0, errOverflow
	}
	return w.buf.Write(p)
}

// OpenAIFixer asks an OpenAI-compatible chat-completions endpoint (a local
// model server on an air-gapped host works the same).
type OpenAIFixer struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:8000/v1; the request
	// goes to BaseURL + "/chat/completions".
	BaseURL string
	Model   string
	// APIKeyEnv names the environment variable holding the key ("" = no
	// key). The key is read per request and never logged or echoed.
	APIKeyEnv string
	// Timeout bounds one request (default 60 s); MaxResponse bounds the
	// response body (default 1 MiB).
	Timeout     time.Duration
	MaxResponse int64
	// Client is the HTTP client (default fixerClient).
	Client *http.Client
}

// fixerClient is OpenAIFixer's default client. It ignores the proxy
// environment, which would send the code and the key through a host the
// operator never configured, and follows no redirect: a 307 or 308 would
// resend both to wherever the endpoint points. A redirect is an HTTP error.
var fixerClient = &http.Client{
	Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Name implements Fixer.
func (o *OpenAIFixer) Name() string { return "openai" }

const systemPrompt = "You fix Python code that failed in a sandboxed interpreter (no network). " +
	"Reply with the complete corrected code in one ```python fenced block and nothing else."

// Fix implements Fixer.
func (o *OpenAIFixer) Fix(ctx context.Context, in FixInput) (string, error) {
	timeout, limit := o.Timeout, o.MaxResponse
	if timeout <= 0 {
		timeout = DefaultFixTimeout
	}
	if limit <= 0 {
		limit = DefaultMaxCodeBytes
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var user strings.Builder
	fmt.Fprintf(&user, "Attempt %d failed.\n\nCode:\n```python\n%s\n```\n\nError:\n```\n%s\n```\n", in.Attempt, in.Code, in.Error)
	if s := trim(in.Stdout, 2000); s != "" {
		fmt.Fprintf(&user, "\nStdout (end):\n```\n%s\n```\n", s)
	}
	if s := trim(in.Stderr, 2000); s != "" {
		fmt.Fprintf(&user, "\nStderr (end):\n```\n%s\n```\n", s)
	}
	body, err := json.Marshal(map[string]any{
		"model": o.Model,
		"messages": []map[string]string{
			{"role": "system", "content": systemPrompt},
			{"role": "user", "content": user.String()},
		},
		"temperature": 0,
	})
	if err != nil {
		return "", err
	}
	url := strings.TrimRight(o.BaseURL, "/") + "/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("build request to %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.APIKeyEnv != "" {
		if key := os.Getenv(o.APIKeyEnv); key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	client := o.Client
	if client == nil {
		client = fixerClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("ask %s: timed out after %s (config key fixer.timeout)", url, timeout)
		}
		// The error names the URL only; headers (the key) never appear.
		return "", fmt.Errorf("ask %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return "", fmt.Errorf("read reply from %s: %w", url, err)
	}
	if int64(len(raw)) > limit {
		return "", fmt.Errorf("reply from %s is over %d bytes", url, limit)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return "", fmt.Errorf("ask %s: HTTP %d: redirects are not followed (set fixer.openai.base_url to the final address)", url, resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ask %s: HTTP %d: %s", url, resp.StatusCode, trim(string(raw), 300))
	}
	var cc struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &cc); err != nil {
		return "", fmt.Errorf("decode reply from %s: %w", url, err)
	}
	if len(cc.Choices) == 0 {
		return "", fmt.Errorf("reply from %s has no choices", url)
	}
	return CodeBlock(cc.Choices[0].Message.Content), nil
}

var fenceRE = regexp.MustCompile("(?s)```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)\r?\n?```")

// CodeBlock takes the code out of a model's reply: the first python (or
// untagged) fenced block, else the first fenced block, else the whole reply
// trimmed.
func CodeBlock(reply string) string {
	ms := fenceRE.FindAllStringSubmatch(reply, -1)
	for _, m := range ms {
		if lang := strings.ToLower(m[1]); lang == "" || lang == "python" || lang == "py" || lang == "python3" {
			return strings.TrimSpace(m[2])
		}
	}
	if len(ms) > 0 {
		return strings.TrimSpace(ms[0][2])
	}
	return strings.TrimSpace(reply)
}
