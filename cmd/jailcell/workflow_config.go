package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/workflow"
)

// Workflow configuration keys. Like every key they come from the config
// file, JAILCELL_ + the key in upper case with "." as "_"
// (fixer.command: JAILCELL_FIXER_COMMAND), or their defaults.
//
//	fixer.kind                  command | openai; default: command when fixer.command
//	                            is set, else openai when fixer.openai.base_url is set,
//	                            else no fixer ("fix" requests are refused)
//	fixer.command               the fixer program and its arguments, split on spaces
//	                            (no shell); it runs on the host as jailcell's user
//	fixer.timeout               bound of one fixer call; default 60s
//	fixer.max_attempts_ceiling  largest fix.max_attempts a request may ask; default 5
//	fixer.openai.base_url       OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1
//	fixer.openai.model          model name sent in each request
//	fixer.openai.api_key_env    name of the environment variable holding the API key
//	                            (the key itself is never configured, logged or echoed)
//	review.dir                  review log and failure memory; default /var/lib/jailcell/review
//	failures.threshold          failures of one fingerprint before "skipped"; default 3
//	failures.ttl                how long a fingerprint is remembered; default 24h
var workflowKeys = []string{
	"fixer.kind", "fixer.command", "fixer.timeout", "fixer.max_attempts_ceiling",
	"fixer.openai.base_url", "fixer.openai.model", "fixer.openai.api_key_env",
	"review.dir", "failures.threshold", "failures.ttl",
}

const defaultReviewDir = "/var/lib/jailcell/review"

func workflowEnv(key string) string {
	return os.Getenv("JAILCELL_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")))
}

// workflowConfig builds the workflow configuration from the keys' values
// (get returns "" for an unset key). Policies and Logger are left for the
// caller.
func workflowConfig(get func(key string) string) (workflow.Config, error) {
	workflowEnv := get
	cfg := workflow.Config{ReviewDir: defaultReviewDir, MaxAttemptsCeiling: 5, Threshold: 3, TTL: 24 * time.Hour}
	envName := func(key string) string {
		return "JAILCELL_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
	}
	integer := func(key string, dst *int, lo, hi int) error {
		v := workflowEnv(key)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%s (%s) = %q: want an integer %d..%d", key, envName(key), v, lo, hi)
		}
		*dst = n
		return nil
	}
	dur := func(key string, dst *time.Duration) error {
		v := workflowEnv(key)
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s (%s) = %q: want a positive duration such as 30s or 24h", key, envName(key), v)
		}
		*dst = d
		return nil
	}
	var timeout time.Duration
	for _, err := range []error{
		integer("fixer.max_attempts_ceiling", &cfg.MaxAttemptsCeiling, 1, 20),
		integer("failures.threshold", &cfg.Threshold, 1, 1<<20),
		dur("failures.ttl", &cfg.TTL),
		dur("fixer.timeout", &timeout),
	} {
		if err != nil {
			return cfg, err
		}
	}
	if v := workflowEnv("review.dir"); v != "" {
		if !strings.HasPrefix(v, "/") {
			return cfg, fmt.Errorf("review.dir (%s) = %q: want an absolute path", envName("review.dir"), v)
		}
		cfg.ReviewDir = v
	}
	command := workflowEnv("fixer.command")
	baseURL := workflowEnv("fixer.openai.base_url")
	kind := workflowEnv("fixer.kind")
	if kind == "" {
		switch {
		case command != "":
			kind = "command"
		case baseURL != "":
			kind = "openai"
		}
	}
	switch kind {
	case "":
	case "command":
		args := strings.Fields(command)
		if len(args) == 0 {
			return cfg, fmt.Errorf("fixer.kind is command but fixer.command (%s) is empty", envName("fixer.command"))
		}
		cfg.Fixer = &workflow.CommandFixer{Path: args[0], Args: args[1:], Timeout: timeout}
	case "openai":
		model := workflowEnv("fixer.openai.model")
		if baseURL == "" || model == "" {
			return cfg, fmt.Errorf("fixer.kind is openai: set fixer.openai.base_url (%s) and fixer.openai.model (%s)",
				envName("fixer.openai.base_url"), envName("fixer.openai.model"))
		}
		cfg.Fixer = &workflow.OpenAIFixer{BaseURL: baseURL, Model: model, APIKeyEnv: workflowEnv("fixer.openai.api_key_env"), Timeout: timeout}
	default:
		return cfg, fmt.Errorf("fixer.kind (%s) = %q: want command or openai", envName("fixer.kind"), kind)
	}
	return cfg, nil
}

// newWorkflow builds the workflow runner over m; policies must be the
// manager's own (their degraded field decides the degraded run).
func newWorkflow(m *session.Manager, c *config, log *slog.Logger) (*workflow.Runner, error) {
	policies := c.Policies
	cfg, err := workflowConfig(func(k string) string { return c.Workflow[k] })
	if err != nil {
		return nil, err
	}
	cfg.Policies, cfg.Logger = policies, log
	r, err := workflow.New(m, cfg)
	if err != nil {
		return nil, fmt.Errorf("start workflow: %w", err)
	}
	return r, nil
}
