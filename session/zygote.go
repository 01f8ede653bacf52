package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
)

// Zygotes (isolate.Zygote): the first way a kernel starts. One
// zygote per configured policy imports the preload once; a new session's
// sandbox is forked from it (milliseconds, the imported pages shared
// copy-on-write) and checked against a cold start's posture before it is
// used. A create that finds no ready zygote, or whose fork fails, restores
// the policy's template, and failing that imports (Info.Start and the
// metrics say which). Zygotes start in the background when the manager
// starts, live in memory only, and are started again when one dies.
//
// The forks of one zygote share what the interpreter fixed before the
// fork and cannot change after: the str hash secret and the address-space
// layout (SECURITY.md). Random generators seeded at import are reseeded
// in each fork before it is handed out, as a template's restores are.

// StartZygote is the start path of a kernel forked from its policy's zygote.
const StartZygote = "zygote"

// zygoteFailures is how many failed forks in a row retire a zygote (its
// policy's creates take the next path from then on).
const zygoteFailures = 3

type zygotes struct {
	mu      sync.Mutex
	byName  map[string]*zygoteEntry
	enabled bool
	closed  bool
	starts  sync.WaitGroup
	// encs: each configured policy encoded, which a create's must equal
	// (an override gets no zygote).
	encs map[string]string
}

// zygoteEntry is one policy's zygote; ready is closed when its start has
// ended, well or not.
type zygoteEntry struct {
	ready chan struct{}
	z     *isolate.Zygote
	err   error

	mu       sync.Mutex
	failures int
	retired  bool
}

// initZygotes starts the zygotes of the default policy and of each pooled
// one, in the background.
func (m *warmStarts) initZygotes() {
	m.zyg = &zygotes{byName: map[string]*zygoteEntry{}, encs: map[string]string{}}
	if m.cfg.NoZygote || len(m.cfg.Preload) == 0 {
		return
	}
	m.zyg.enabled = true
	for name, p := range m.cfg.Policies {
		b, _ := json.Marshal(p)
		m.zyg.encs[name] = string(b)
	}
	names := []string{"default"}
	for name, n := range m.cfg.Pool {
		if n > 0 && name != "default" {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if p, ok := m.cfg.Policies[name]; ok {
			m.zygoteFor(p)
		}
	}
}

// zygoteFor returns p's zygote entry, starting one if there is none or
// the last one died; nil if p cannot have one.
func (m *warmStarts) zygoteFor(p policy.Policy) *zygoteEntry {
	zs := m.zyg
	if zs == nil || !zs.enabled || p.Network != policy.NetworkNone {
		return nil
	}
	enc, ok := zs.encs[p.Name]
	if !ok {
		return nil
	}
	if b, _ := json.Marshal(p); string(b) != enc {
		return nil // an override
	}
	zs.mu.Lock()
	defer zs.mu.Unlock()
	if zs.closed {
		return nil
	}
	if e, ok := zs.byName[p.Name]; ok {
		select {
		case <-e.ready:
			if e.z != nil {
				select {
				case <-e.z.Done():
					// Died: its forks live on; start another.
					m.log().Warn("zygote ended; starting another", "policy", p.Name)
					_ = e.z.Close()
				default:
					return e
				}
			} else {
				return e // its start failed: not retried until a restart
			}
		default:
			return e
		}
	}
	e := &zygoteEntry{ready: make(chan struct{})}
	zs.byName[p.Name] = e
	zs.starts.Add(1)
	go func() {
		defer zs.starts.Done()
		start := time.Now()
		z, err := m.host.StartZygote(m.zygoteSpec(p))
		e.z, e.err = z, err
		close(e.ready)
		if err != nil {
			m.log().Info("no zygote: creates of this policy take the next start path", "policy", p.Name, "reason", err)
			return
		}
		zs.mu.Lock()
		closed := zs.closed
		zs.mu.Unlock()
		if closed {
			_ = z.Close()
			return
		}
		m.log().Info("zygote ready", "policy", p.Name, "start_ms", time.Since(start).Milliseconds())
	}()
	return e
}

// zygoteSpec is the zygote of policy p: the kernel program and preload
// of a cold start, run as kernelSpec runs them.
func (m *warmStarts) zygoteSpec(p policy.Policy) isolate.ZygoteSpec {
	return isolate.ZygoteSpec{
		Policy:   p,
		Command:  runner.Command(ctlMount),
		Dir:      ctlMount,
		Prepare:  runner.WriteKernel,
		Warm:     runner.PackageName + ".start:prepare",
		WarmArgs: []any{m.cfg.Preload},
		// The kernel's own modules only: the configured preload is imported
		// by its prepare, after the import hooks that patch pyplot are in.
		Preload:      runner.Modules(),
		Env:          kernelEnv(p),
		StartTimeout: m.cfg.StartTimeout,
	}
}

// usable reports whether e has a live zygote and is not retired, without
// waiting.
func (e *zygoteEntry) usable() bool {
	select {
	case <-e.ready:
	default:
		return false
	}
	if e.z == nil {
		return false
	}
	select {
	case <-e.z.Done():
		return false
	default:
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.retired
}

// unusable says why e cannot fork now (nil: it can).
func (e *zygoteEntry) unusable() error {
	if e.usable() {
		return nil
	}
	select {
	case <-e.ready:
	default:
		return errors.New("the zygote is still starting")
	}
	if e.z == nil {
		return fmt.Errorf("the zygote did not start: %w", e.err)
	}
	select {
	case <-e.z.Done():
		return errors.New("the zygote ended")
	default:
	}
	return errors.New("the zygote was retired after failed forks")
}

// startFromZygote forks s's kernel from its policy's zygote and reseeds
// it. (nil, nil): the policy has no zygote (none configured, an egress
// policy, an override); the caller takes the next path. A zygote still
// starting (the first creates after a start) is waited for, at most the
// kernel start bound, rather than silently importing the preload: an
// error says why there was no fork, and the caller counts the fallback.
func (m *warmStarts) startFromZygote(ctx context.Context, s *Session) (*kernel, error) {
	e := m.zygoteFor(s.policy)
	if e == nil {
		return nil, nil
	}
	select {
	case <-e.ready: // the usual case: no timer on the create path
	default:
		wait := time.NewTimer(m.cfg.StartTimeout)
		select {
		case <-e.ready:
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
	if err := e.unusable(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	k, err := m.launchKernel(ctx, s.ctlDir(), s.policy, m.cfg.StartTimeout, func(spec isolate.Spec) (*isolate.Sandbox, error) {
		return s.disk.Fork(e.z, spec)
	})
	if err == nil {
		t1 := time.Now()
		err = k.conn.Reseed(ctx)
		m.log().Debug("kernel forked from zygote", "session", s.id, "fork_ms", t1.Sub(t0).Milliseconds(),
			"reseed_ms", time.Since(t1).Milliseconds())
		if err != nil {
			_ = k.close()
			k = nil
			err = fmt.Errorf("reseed: %w", err)
		}
	}
	e.mu.Lock()
	// A start its caller abandoned (a create cancelled, a client gone)
	// says nothing of the zygote: counted, three of them retired it for
	// every caller until a restart.
	if err != nil && !errors.Is(err, isolate.ErrUnsupported) && ctx.Err() == nil {
		e.failures++
		if e.failures >= zygoteFailures && !e.retired {
			e.retired = true
			m.log().Warn("zygote retired after failed forks: creates of this policy take the next start path", "policy", s.policy.Name, "err", err)
		}
	} else if err == nil {
		e.failures = 0
	}
	e.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fork from the zygote of policy %s: %w", s.policy.Name, err)
	}
	m.metrics.StartSeconds.Observe(time.Since(t0).Seconds())
	return k, nil
}

// closeZygotes ends the zygotes (their forks live on) and waits for the
// starts in flight.
func (m *warmStarts) closeZygotes() {
	zs := m.zyg
	if zs == nil {
		return
	}
	zs.mu.Lock()
	zs.closed = true
	var live []*zygoteEntry
	for _, e := range zs.byName {
		live = append(live, e)
	}
	zs.mu.Unlock()
	zs.starts.Wait()
	for _, e := range live {
		if e.z != nil {
			_ = e.z.Close()
		}
	}
}
