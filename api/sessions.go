package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jailcell/jailcell/session/seam"
)

// Sessions is what the Dispatcher and the front doors need of
// session.Manager, which satisfies it: api names no session type and
// speaks session/seam's, so linking api (every front door, the client
// side of a remote) links no isolate, libcontainer or libseccomp.
type Sessions interface {
	// Cells.
	Exec(ctx context.Context, owner int, id string, req seam.ExecRequest) (*seam.Result, error)
	RunOnce(ctx context.Context, owner int, policyName string, req seam.ExecRequest) (*seam.Result, error)
	Interrupt(ctx context.Context, owner int, id string) (bool, error)
	Assist(ctx context.Context, owner int, id string, req seam.AssistRequest) (*seam.Assistance, error)
	Command(ctx context.Context, owner int, id string, req seam.CommandRequest) (*seam.CommandResult, error)

	// Sessions.
	Create(ctx context.Context, opt seam.CreateOptions) (*seam.Info, error)
	Close(ctx context.Context, owner int, id string) error
	Info(ctx context.Context, owner int, id string) (*seam.Info, error)
	List(ctx context.Context, owner int) []seam.Info
	SetTimeout(ctx context.Context, owner int, id string, d time.Duration) (*seam.Info, error)
	SessionMetrics(ctx context.Context, owner int, id string) (*seam.SessionMetrics, error)

	// Hibernation, forks and snapshots, through session's durability part.
	Durability() seam.Durability

	// Workspace files, through session's workspace part.
	Workspace() seam.Workspace

	// The host and /metrics.
	Features() seam.Features
	PoolReady() map[string]int
	Usage(ctx context.Context, owner int) []seam.SessionUsage
	Collectors() []prometheus.Collector
}
