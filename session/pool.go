package session

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
	// building: when the build in flight of each policy started (at most
	// one at a time: refills never take more than one start's CPU from
	// running cells). took: how long the last builds took (moving
	// average). readied is closed, and replaced, when a build ends: a
	// member is ready or its place is free.
	building map[string]time.Time
	took     map[string]time.Duration
	readied  chan struct{}
	// demand: each policy's recent plain creates, by which its pool grows
	// past its size (Config.PoolGrow).
	demand map[string]*poolDemand

	// creating counts cold creates between their admission request and
	// their kernel being up; lastCreate is when the last create was handed
	// its session (pooled or cold), in UnixNano. A refill yields to both:
	// see refillWait.
	creating   atomic.Int32
	lastCreate atomic.Int64

	kick   chan struct{} // wakes the filler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler and every build it started
}

// poolRetry is how often the filler tries again after the session limit or
// a failed build stopped it.
const poolRetry = time.Second

// A refill yields to creates: a member's build (a zygote fork, its mounts
// and cgroup, the kernel's start) is CPU the create just served needs for
// its first command, and the cold creates of a burst need for their
// starts. So a build starts only once no cold create is starting and
// poolSettle has passed since the last create was handed its session, or
// once it has been held back poolMaxDefer (a steady stream of creates
// must not keep the pool below its size for good). A member beyond the
// pool's size (grown with demand) waits for growSettle of quiet and is
// never forced: those builds ran into the next creates' first commands
// (sequential time to interactive 25 -> 60 ms p50, measured). Vars, for
// tests.
var (
	poolSettle   = 150 * time.Millisecond
	poolMaxDefer = time.Second
	growSettle   = time.Second
)

// A pool grows with demand: to the most plain creates of its policy seen
// in any demandWindow, for demandHold after that peak, between its size
// and its PoolGrow. A burst of creates the pool served only in part (the
// rest started cold, each a full start) is then served whole the next
// time, while an idle daemon keeps only its size: members are memory
// and places under sessions.max. Vars, for tests.
var (
	demandWindow = time.Minute
	demandHold   = 10 * time.Minute
)

// poolDemand is one policy's recent plain creates.
type poolDemand struct {
	recent []time.Time // the last creates' times, oldest first, at most the pool's PoolGrow
	peak   int         // the most of them in one demandWindow ...
	peakAt time.Time   // ... seen last at peakAt
}

// note counts a plain create at now; keep is how many times are kept
// (the most the pool may grow to).
func (d *poolDemand) note(now time.Time, keep int) {
	d.recent = append(d.recent, now)
	if n := len(d.recent) - keep; n > 0 {
		d.recent = append(d.recent[:0], d.recent[n:]...)
	}
	in := 0
	for _, t := range d.recent {
		if now.Sub(t) < demandWindow {
			in++
		}
	}
	if in >= d.peak || now.Sub(d.peakAt) >= demandHold {
		d.peak, d.peakAt = in, now
	}
}

// poolTarget is how many ready members a pool of base size that may grow
// to grow should hold at now, given its demand (nil: none seen).
func poolTarget(base, grow int, d *poolDemand, now time.Time) int {
	if grow <= base || d == nil || now.Sub(d.peakAt) >= demandHold {
		return base
	}
	return min(max(base, d.peak), grow)
}

// refillWait is how long a refill that wants to build at now should still
// wait (0: build now), given the last create's time, whether a cold
// create is starting, since when the refill has waited (zero: it has
// not yet), and whether the member would be beyond the pool's size.
func refillWait(now, lastCreate time.Time, creating bool, deferredSince time.Time, growing bool) time.Duration {
	settle := poolSettle
	if growing {
		settle, deferredSince = growSettle, time.Time{}
	}
	if !deferredSince.IsZero() && now.Sub(deferredSince) >= poolMaxDefer {
		return 0
	}
	wait := lastCreate.Add(settle).Sub(now)
	if creating && wait < settle {
		wait = settle // looked at again once the start may be done
	}
	if !deferredSince.IsZero() {
		wait = min(wait, deferredSince.Add(poolMaxDefer).Sub(now))
	}
	return max(wait, 0)
}

// createStarting marks a cold create's kernel start; the returned func
// marks its end (its session handed over).
func (m *warmStarts) createStarting() func() {
	if m.pool == nil {
		return func() {}
	}
	m.pool.creating.Add(1)
	return func() {
		m.pool.lastCreate.Store(time.Now().UnixNano())
		m.pool.creating.Add(-1)
		m.kickPool()
	}
}

// checkPool validates the pool sizes; it runs before anything is built.
func (c *Config) checkPool() error {
	for name, n := range c.Pool {
		if _, ok := c.Policies[name]; !ok {
			return fmt.Errorf("pool for policy %q: no such policy", name)
		}
		if n < 0 || n > c.MaxSessions {
			return fmt.Errorf("pool for policy %q: size %d, want 0..%d (sessions.max)", name, n, c.MaxSessions)
		}
	}
	for name, n := range c.PoolGrow {
		if _, ok := c.Pool[name]; !ok {
			return fmt.Errorf("pool growth for policy %q: it has no pool", name)
		}
		if n < 0 || n > c.MaxSessions {
			return fmt.Errorf("pool growth for policy %q: %d, want 0..%d (sessions.max)", name, n, c.MaxSessions)
		}
	}
	return nil
}

// startPool starts filling the pools.
func (m *warmStarts) startPool() {
	names := make([]string, 0, len(m.cfg.Pool))
	for name := range m.cfg.Pool {
		names = append(names, name)
	}
	sort.Strings(names)
	ctx, cancel := context.WithCancel(context.Background())
	p := &warmPool{
		ready: map[string][]*Session{}, filling: map[string]int{},
		building: map[string]time.Time{}, took: map[string]time.Duration{}, readied: make(chan struct{}),
		demand: map[string]*poolDemand{},
		kick:   make(chan struct{}, 1), ctx: ctx, cancel: cancel,
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
func (m *warmStarts) fillPool(names []string) {
	p := m.pool
	defer p.wg.Done()
	// Members come from the template once it is there: building them by
	// import meanwhile would cost what the template saves and slow its build.
	for _, name := range names {
		if t := m.templateFor(m.cfg.Policies[name]); t != nil {
			t.wait(p.ctx)
		}
	}
	t := time.NewTimer(poolRetry)
	defer t.Stop()
	var deferredSince time.Time
	for {
		now := time.Now()
		held := false // a member within a pool's size was held back
		wait := func(growing bool) time.Duration {
			w := refillWait(now, time.Unix(0, p.lastCreate.Load()), p.creating.Load() > 0, deferredSince, growing)
			held = held || w > 0 && !growing
			return w
		}
		next := poolRetry
		for _, name := range names {
			for {
				started, w := m.mgr.startBuild(name, wait)
				if w > 0 {
					next = min(next, w)
				}
				if !started {
					break
				}
			}
		}
		switch {
		case !held:
			deferredSince = time.Time{}
		case deferredSince.IsZero():
			deferredSince = now
		}
		t.Reset(next)
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// startBuild starts building one member for the named pool if it is short
// of one, a place under MaxSessions is free and wait, asked once the pool
// is found short (with whether the member would be beyond the pool's
// size), says 0; it reports whether it started one and what wait said.
// A pool holding more than its target retires one member instead.
func (m *Manager) startBuild(name string, wait func(growing bool) time.Duration) (bool, time.Duration) {
	p := m.warm.pool
	m.mu.Lock()
	target := poolTarget(m.cfg.Pool[name], m.cfg.PoolGrow[name], p.demand[name], time.Now())
	if q := p.ready[name]; !p.closed && len(q) > target {
		// Grown for a demand that has passed: the newest member goes, its
		// place with it.
		s := q[len(q)-1]
		q[len(q)-1] = nil
		p.ready[name] = q[:len(q)-1]
		m.reserved--
		m.mu.Unlock()
		_ = m.destroy(s)
		return false, 0
	}
	if p.closed || m.shutdown || p.filling[name] > 0 || len(p.ready[name]) >= target ||
		len(m.sessions)+m.reserved >= m.cfg.MaxSessions {
		m.mu.Unlock()
		return false, 0
	}
	if w := wait(len(p.ready[name]) >= m.cfg.Pool[name]); w > 0 {
		m.mu.Unlock()
		return false, w
	}
	m.reserved++
	p.filling[name]++
	started := time.Now()
	p.building[name] = started
	m.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		s, err := m.warm.buildMember(name)
		m.mu.Lock()
		p.filling[name]--
		delete(p.building, name)
		if err == nil && !p.closed {
			took := time.Since(started)
			if prev := p.took[name]; prev > 0 {
				took = (3*prev + took) / 4
			}
			p.took[name] = took
			close(p.readied)
			p.readied = make(chan struct{})
			p.ready[name] = append(p.ready[name], s)
			size := poolTarget(m.cfg.Pool[name], m.cfg.PoolGrow[name], p.demand[name], time.Now())
			full := len(p.ready[name]) >= size
			m.mu.Unlock()
			if full {
				m.log().Debug("warm pool full", "policy", name, "size", size)
			} else {
				m.warm.kickPool() // the next member, without waiting for the filler's tick
			}
			return
		}
		m.reserved--
		close(p.readied) // a waiter may take the place
		p.readied = make(chan struct{})
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
	return true, 0
}

// buildMember starts one session with its kernel, owned by nobody yet.
func (m *warmStarts) buildMember(name string) (_ *Session, retErr error) {
	p := m.pool
	release, err := m.admitStart(p.ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s, err := m.mgr.newSession(0, m.cfg.Policies[name])
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = m.mgr.destroy(s)
		}
	}()
	s.info = Info{Policy: s.policy.Name}
	if _, err := m.mgr.ensureKernel(p.ctx, s); err != nil {
		return nil, err
	}
	m.files.rescan(s)
	return s, nil
}

// takePooled hands a ready member of the request's policy over as a new
// session, or returns nil when the request needs a cold create: no pool
// for the policy, an override, persistence or requirements, or the pool is
// empty. The member's place under MaxSessions becomes the session's.
func (m *Manager) takePooled(opt CreateOptions, ttl time.Duration) *Info {
	if m.warm.pool == nil || opt.Override != nil || opt.Persist != "" || len(opt.Requirements) > 0 {
		return nil
	}
	name := opt.Policy
	if name == "" {
		name = "default"
	}
	if m.cfg.Pool[name] <= 0 {
		return nil
	}
	m.mu.Lock()
	if grow := m.cfg.PoolGrow[name]; grow > m.cfg.Pool[name] {
		d := m.warm.pool.demand[name]
		if d == nil {
			d = &poolDemand{}
			m.warm.pool.demand[name] = d
		}
		d.note(time.Now(), grow)
	}
	m.mu.Unlock()
	waited := false
	for {
		m.mu.Lock()
		if m.shutdown || m.warm.pool.closed {
			m.mu.Unlock()
			return nil
		}
		if len(m.warm.pool.ready[name]) == 0 {
			wait := m.warm.memberAlmostReady(name)
			readied := m.warm.pool.readied
			m.mu.Unlock()
			m.warm.kickPool()
			if waited || wait <= 0 {
				return nil
			}
			// The member in flight will be ready before a start of this
			// create's own would be: wait for it, a little longer at most.
			waited = true
			t := time.NewTimer(wait + wait/2)
			select {
			case <-readied:
			case <-t.C:
			case <-m.warm.pool.ctx.Done():
			}
			t.Stop()
			continue
		}
		q := m.warm.pool.ready[name]
		s := q[0]
		q[0] = nil
		m.warm.pool.ready[name] = q[1:]
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
		m.warm.pool.lastCreate.Store(now.UnixNano())
		m.warm.kickPool()
		m.metrics.created()
		m.log().Info("session created", "session", s.id, "owner", opt.Owner, "policy", name, "ttl", ttl, "pooled", true)
		info := m.infoOf(s)
		return &info
	}
}

// evictMemberLocked takes the newest ready pool member out of its pool, for
// the caller to destroy: its place under MaxSessions (still counted in
// m.reserved) goes to a session that could not be served from the pool.
// nil if no pool holds one. m.mu is held.
func (m *warmStarts) evictMemberLocked() *Session {
	if m.pool == nil || m.pool.closed {
		return nil
	}
	for name, q := range m.pool.ready {
		if n := len(q); n > 0 {
			s := q[n-1]
			q[n-1] = nil
			m.pool.ready[name] = q[:n-1]
			return s
		}
	}
	return nil
}

// waitMemberBuild waits, at most StartTimeout, for a pool member's build in
// flight to end, and reports whether there was one: at sessions.max the
// member holds the place a create needs, and the create gets it (as the
// member, or as the place the member gives up) when the build ends.
func (m *Manager) waitMemberBuild(ctx context.Context) bool {
	m.mu.Lock()
	p := m.warm.pool
	if p == nil || p.closed {
		m.mu.Unlock()
		return false
	}
	building := 0
	for _, n := range p.filling {
		building += n
	}
	readied := p.readied
	m.mu.Unlock()
	if building == 0 {
		return false
	}
	t := time.NewTimer(m.cfg.StartTimeout)
	defer t.Stop()
	select {
	case <-readied:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-p.ctx.Done():
	}
	return false
}

// memberAlmostReady returns how long the member in flight of pool name
// should still take if a create should wait for it (almostReady); else 0.
// m.mu is held.
func (m *warmStarts) memberAlmostReady(name string) time.Duration {
	started, ok := m.pool.building[name]
	if !ok {
		return 0
	}
	return almostReady(started, m.pool.took[name], time.Now())
}

// almostReady: a build that started at started and should take took is
// worth waiting for at now if it is past half its expected time (a start of
// the caller's own would take the whole of it) and not overdue; it returns
// how long it should still take, or 0 for "start your own".
func almostReady(started time.Time, took time.Duration, now time.Time) time.Duration {
	if took <= 0 {
		return 0 // nothing measured yet
	}
	left := took - now.Sub(started)
	if left <= 0 || left > took/2 {
		return 0
	}
	return left
}

// admitStart waits for a place to start a kernel: at most two per CPU start
// at once, pool builds and cold creates alike. A start is mostly CPU (the
// sandbox's init, the preload imports): a hundred at once on two cores
// would all share the CPU and all miss StartTimeout together, where queued
// they finish one pair after another. StartTimeout counts from admission.
func (m *warmStarts) admitStart(ctx context.Context) (release func(), err error) {
	select {
	case m.starts <- struct{}{}:
		return func() { <-m.starts }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting to start a kernel: %v", ErrUnavailable, context.Cause(ctx))
	}
}

func (m *warmStarts) kickPool() {
	select {
	case m.pool.kick <- struct{}{}:
	default:
	}
}

// PoolReady returns how many ready members each configured pool holds.
func (m *Manager) PoolReady() map[string]int {
	out := map[string]int{}
	if m.warm.pool == nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.cfg.Pool {
		out[name] = len(m.warm.pool.ready[name])
	}
	return out
}

// drainPool stops the filler, waits for the builds in flight and destroys
// every member, freeing their places. Called by Shutdown before it waits
// for reserved places to empty.
func (m *Manager) drainPool() error {
	p := m.warm.pool
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

// AutoPoolSize is the default policy's pool size when none is configured:
// 2 per CPU (a member is ready in a fraction of a second from a template,
// so a burst beyond it waits little), at most 8, at most a quarter of
// maxSessions, and no more than 5% of the machine's memory holds at
// poolMemberEstimate each; at least 1.
func AutoPoolSize(maxSessions int) int {
	n := min(2*runtime.NumCPU(), 8, max(1, maxSessions/4))
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil && si.Totalram > 0 {
		total := uint64(si.Totalram) * uint64(si.Unit)
		n = min(n, int(total/20/poolMemberEstimate))
	}
	return max(1, n)
}

// poolMemberEstimate is what an idle preloaded member costs, rounded up
// (docs/performance.md measures it); poolForkEstimate the same for a
// member forked from a zygote (9 MB measured).
const (
	poolMemberEstimate = 100_000_000
	poolForkEstimate   = 15_000_000
)

// AutoPoolGrow is how far the default policy's pool may grow with demand
// when its size is auto: to 24 (a burst of 20 creates, the bench's, and
// some), at most a quarter of maxSessions, and no more than 5% of the
// machine's memory holds at what a member costs (forked from a zygote or
// not); never below AutoPoolSize.
func AutoPoolGrow(maxSessions int, zygote bool) int {
	n := min(24, max(1, maxSessions/4))
	each := uint64(poolMemberEstimate)
	if zygote {
		each = poolForkEstimate
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil && si.Totalram > 0 {
		n = min(n, int(uint64(si.Totalram)*uint64(si.Unit)/20/each))
	}
	return max(AutoPoolSize(maxSessions), n)
}
