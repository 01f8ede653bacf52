package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/workflow"
)

// The workflow keys (fixer.*, review.dir, failures.*) are rows of
// configKeys like every other; review.dir, fixer.max_attempts_ceiling and
// failures.* decode straight into config.Workflow, the fixer.* keys into
// fixerKeys, which buildFixer turns into the one fixer.

const defaultReviewDir = "/var/lib/jailcell/review"

// fixerKeys are the fixer.* keys as read.
type fixerKeys struct {
	kind, command, baseURL, model, apiKeyEnv string
	timeout                                  time.Duration
}

// buildFixer sets c.Workflow.Fixer from the fixer.* keys: kind "" picks
// command when fixer.command is set, else openai when
// fixer.openai.base_url is set, else no fixer ("fix" is refused).
func buildFixer(c *config) error {
	f := c.fixer
	kind := f.kind
	if kind == "" {
		switch {
		case f.command != "":
			kind = "command"
		case f.baseURL != "":
			kind = "openai"
		}
	}
	switch kind {
	case "":
	case "command":
		args := strings.Fields(f.command)
		if len(args) == 0 {
			return fmt.Errorf("fixer.kind is command but fixer.command (%s) is empty", envName("fixer.command"))
		}
		c.Workflow.Fixer = &workflow.CommandFixer{Path: args[0], Args: args[1:], Timeout: f.timeout}
	case "openai":
		if f.baseURL == "" || f.model == "" {
			return fmt.Errorf("fixer.kind is openai: set fixer.openai.base_url (%s) and fixer.openai.model (%s)",
				envName("fixer.openai.base_url"), envName("fixer.openai.model"))
		}
		c.Workflow.Fixer = &workflow.OpenAIFixer{BaseURL: f.baseURL, Model: f.model, APIKeyEnv: f.apiKeyEnv, Timeout: f.timeout}
	default:
		return fmt.Errorf("fixer.kind (%s) = %q: want command or openai", envName("fixer.kind"), kind)
	}
	return nil
}

// newWorkflow builds the workflow runner over m; policies must be the
// manager's own (their degraded field decides the degraded run).
func newWorkflow(m *session.Manager, c *config, log *slog.Logger) (*workflow.Runner, error) {
	cfg := c.Workflow
	cfg.Policies, cfg.Logger = c.Policies, log
	r, err := workflow.New(m, cfg)
	if err != nil {
		return nil, fmt.Errorf("start workflow: %w", err)
	}
	return r, nil
}
