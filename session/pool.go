package session

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// The warm pool keeps, per policy, Config.Pool[name] sessions whose kernel
// is started and has imported Config.Preload, so that a plain create only
// has to hand one over. A pooled session serves exactly one session and is
// never reused: a closed session's sandbox is destroyed like any other, and
// the pool builds a fresh one in the background.
//
// Each member holds a place under MaxSessions (m.reserved) from the moment
// its build starts until it becomes a session (the place passes to the
// session) or is destroyed. Pool state is guarded by m.mu, so taking a
// member, moving its place and registering the session is one step.
type warmPool struct {
	// Guarded by Manager.mu.
	ready   map[string][]*Session // policy name -> members ready to hand out
	filling map[string]int        // policy name -> members being built
	closed  bool

	kick   chan struct{} // wakes the filler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler and every build it started
}

// poolRetry is how often the filler tries again after the session limit or
// a failed build stopped it.
const poolRetry = time.Second

// checkPool validates the pool sizes; it runs before anything is built.
func (c *Config) checkPool() error {
	for name, n := range c.Pool {
		if _, ok := c.Policies[name]; !ok {
			return fmt.Errorf("pool for policy %q: no such policy", name)
		}
		if n < 0 || n > c.MaxSessions {
			return fmt.Errorf("pool for policy %q: size %d, want 0..%d (max_sessions)", name, n, c.MaxSessions)
		}
	}
	return nil
}

// startPool starts filling the pools.
func (m *Manager) startPool() {
	names := make([]string, 0, len(m.cfg.Pool))
	for name := range m.cfg.Pool {
		names = append(names, name)
	}
	sort.Strings(names)
	ctx, cancel := context.WithCancel(context.Background())
	p := &warmPool{
		ready: map[string][]*Session{}, filling: map[string]int{},
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
	}
	m.pool = p
	total := 0
	for _, n := range m.cfg.Pool {
		total += n
	}
	if total == 0 {
		return
	}
	p.wg.Add(1)
	go m.fillPool(names)
}

// fillPool keeps every pool at its size until the pool is drained.
func (m *Manager) fillPool(names []string) {
	p := m.pool
	defer p.wg.Done()
	// Members come from the template once it is there: building them by
	// import meanwhile would cost what the template saves and slow its build.
	for _, name := range names {
		if t := m.templateFor(m.cfg.Policies[name]); t != nil {
			t.wait(p.ctx)
		}
	}
	t := time.NewTicker(poolRetry)
	defer t.Stop()
	for {
		for _, name := range names {
			for m.startBuild(name) {
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// startBuild starts building one member for the named pool if it is short
// of one and a place under MaxSessions is free; it reports whether it did.
func (m *Manager) startBuild(name string) bool {
	p := m.pool
	m.mu.Lock()
	if p.closed || m.shutdown || len(p.ready[name])+p.filling[name] >= m.cfg.Pool[name] ||
		len(m.sessions)+m.reserved >= m.cfg.MaxSessions {
		m.mu.Unlock()
		return false
	}
	m.reserved++
	p.filling[name]++
	m.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		s, err := m.buildMember(name)
		m.mu.Lock()
		p.filling[name]--
		if err == nil && !p.closed {
			p.ready[name] = append(p.ready[name], s)
			full := len(p.ready[name]) == m.cfg.Pool[name]
			m.mu.Unlock()
			if full {
				m.log().Debug("warm pool full", "policy", name, "size", m.cfg.Pool[name])
			}
			return
		}
		m.reserved--
		m.mu.Unlock()
		if s != nil {
			_ = m.destroy(s)
		}
		if err != nil && p.ctx.Err() == nil {
			m.log().Warn("build warm pool member", "policy", name, "err", err)
		}
		// A failed build is retried on the filler's next tick, not at
		// once: a broken rootfs must not become a busy loop.
	}()
	return true
}

// buildMember starts one session with its kernel, owned by nobody yet.
func (m *Manager) buildMember(name string) (_ *Session, retErr error) {
	p := m.pool
	release, err := m.admitStart(p.ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s, err := m.newSession(0, m.cfg.Policies[name])
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = m.destroy(s)
		}
	}()
	s.info = Info{Policy: s.policy.Name}
	if _, err := m.ensureKernel(p.ctx, s); err != nil {
		return nil, err
	}
	m.rescan(s)
	return s, nil
}

// takePooled hands a ready member of the request's policy over as a new
// session, or returns nil when the request needs a cold create: no pool
// for the policy, an override, persistence or requirements, or the pool is
// empty. The member's place under MaxSessions becomes the session's.
func (m *Manager) takePooled(opt CreateOptions, ttl time.Duration) *Info {
	if m.pool == nil || opt.Override != nil || opt.Persist != "" || len(opt.Requirements) > 0 {
		return nil
	}
	name := opt.Policy
	if name == "" {
		name = "default"
	}
	if m.cfg.Pool[name] <= 0 {
		return nil
	}
	for {
		m.mu.Lock()
		if m.shutdown || m.pool.closed || len(m.pool.ready[name]) == 0 {
			m.mu.Unlock()
			m.kickPool()
			return nil
		}
		q := m.pool.ready[name]
		s := q[0]
		q[0] = nil
		m.pool.ready[name] = q[1:]
		s.mu.Lock()
		k := s.k
		s.mu.Unlock()
		dead := k == nil
		if !dead {
			select {
			case <-k.sb.Done():
				dead = true
			default:
			}
		}
		if dead {
			// Its kernel died while it waited: never hand that out.
			m.reserved--
			m.mu.Unlock()
			_ = m.destroy(s)
			continue
		}
		now := time.Now()
		s.mu.Lock()
		s.owner, s.ttl, s.maxLife = opt.Owner, ttl, opt.MaxLifetime
		s.created, s.lastUsed = now, now
		s.info.Pooled = true
		s.mu.Unlock()
		m.sessions[s.id] = s
		m.reserved--
		m.mu.Unlock()
		m.kickPool()
		m.metrics.created()
		m.log().Info("session created", "session", s.id, "owner", opt.Owner, "policy", name, "ttl", ttl, "pooled", true)
		info := m.infoOf(s)
		return &info
	}
}

// admitStart waits for a place to start a kernel: at most two per CPU start
// at once, pool builds and cold creates alike. A start is mostly CPU (the
// sandbox's init, the preload imports): a hundred at once on two cores
// would all share the CPU and all miss StartTimeout together, where queued
// they finish one pair after another. StartTimeout counts from admission.
func (m *Manager) admitStart(ctx context.Context) (release func(), err error) {
	select {
	case m.starts <- struct{}{}:
		return func() { <-m.starts }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting to start a kernel: %v", ErrUnavailable, context.Cause(ctx))
	}
}

func (m *Manager) kickPool() {
	select {
	case m.pool.kick <- struct{}{}:
	default:
	}
}

// PoolReady returns how many ready members each configured pool holds.
func (m *Manager) PoolReady() map[string]int {
	out := map[string]int{}
	if m.pool == nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.cfg.Pool {
		out[name] = len(m.pool.ready[name])
	}
	return out
}

// drainPool stops the filler, waits for the builds in flight and destroys
// every member, freeing their places. Called by Shutdown before it waits
// for reserved places to empty.
func (m *Manager) drainPool() error {
	p := m.pool
	if p == nil {
		return nil
	}
	m.mu.Lock()
	p.closed = true
	m.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	m.mu.Lock()
	var all []*Session
	for name, q := range p.ready {
		all = append(all, q...)
		m.reserved -= len(q)
		delete(p.ready, name)
	}
	m.mu.Unlock()
	var errs []error
	for _, s := range all {
		if err := m.destroy(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
