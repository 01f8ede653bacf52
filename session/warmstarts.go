package session

import (
	"context"
	"log/slog"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

// The warm-start part owns how a session's kernel starts: the checkpoint
// templates (template.go), the zygotes (zygote.go), a cold or restored
// start and its throttle (kernel.go, hibernate.go's restoreKernel) and the
// filler of the warm pool (pool.go): building them, finding one for a
// policy, starting a session's kernel from one, and closing them. It must
// never touch the session table, admission or a session's lifetime: it
// builds and destroys its own scratch sessions and asks for a pool
// member's place only through warmHost, and a session it starts a kernel
// for stays the Manager's.
type warmStarts struct {
	cfg        *Config
	host       *isolate.Host
	metrics    *Metrics
	stateQuota *quota
	mgr        warmHost
	// files records a session's workspace as it is now: the workspace
	// part's, never the Manager's.
	files interface{ rescan(s *Session) }

	tmpl *templates
	zyg  *zygotes
	// pool is the warm pool (pool.go). Its maps are guarded by Manager.mu,
	// which the Manager holds when a member becomes a session: taking a
	// member, moving its place and registering the session is one step.
	pool   *warmPool
	starts chan struct{} // kernel starts in progress (admitStart)
}

// warmHost is what the warm-start part needs back from the Manager.
type warmHost interface {
	newSession(owner int, p policy.Policy) (*Session, error)
	destroy(s *Session) error
	ensureKernel(ctx context.Context, s *Session) (*kernel, error)
	startBuild(name string, wait func(growing bool) time.Duration) (bool, time.Duration)
}

func (m *warmStarts) log() *slog.Logger { return m.cfg.Logger }
