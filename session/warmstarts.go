package session

import (
	"context"
	"log/slog"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

// The warm-start part owns the checkpoint templates (template.go) and the
// zygotes (zygote.go): building them, finding one for a policy, starting a
// session's kernel from one, and closing them. It must never touch the
// session table, admission or a session's lifetime: it builds and destroys
// its own scratch sessions only through warmHost, and a session it starts
// a kernel for stays the Manager's.
type warmStarts struct {
	cfg        *Config
	host       *isolate.Host
	metrics    *Metrics
	stateQuota *quota
	mgr        warmHost

	tmpl *templates
	zyg  *zygotes
}

// warmHost is what the warm-start part needs back from the Manager.
type warmHost interface {
	admitStart(ctx context.Context) (release func(), err error)
	newSession(owner int, p policy.Policy) (*Session, error)
	destroy(s *Session) error
	startKernel(ctx context.Context, disk *isolate.Disk, ctl string, p policy.Policy) (*kernel, error)
	restoreKernelIfIdle(ctx context.Context, s *Session, images string) (*kernel, error)
	launchKernel(ctx context.Context, ctl string, p policy.Policy, timeout time.Duration, build func(isolate.Spec) (*isolate.Sandbox, error)) (*kernel, error)
}

func (m *warmStarts) log() *slog.Logger { return m.cfg.Logger }
