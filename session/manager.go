package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/cleanup"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
	"github.com/jailcell/jailcell/store"
)

// Manager owns every session. It is safe for concurrent use; no lock is
// held across a cell. Every method that acts on sessions takes the
// caller's ctx, whether or not it can block today; only the accessors of
// in-memory state (Metrics, Features, PoolReady) do not.
type Manager struct {
	cfg     Config
	host    *isolate.Host
	metrics *Metrics
	// warm is the warm-start part: templates and zygotes (warmstarts.go).
	warm warmStarts
	// ws is the workspace part: the host's file ops and watches (workspace.go).
	ws Workspace
	// dur is the durability part: metadata, hibernation, persisted
	// workspaces, the shared store, lost records, disk quotas (durable.go).
	dur durable
	// env is the environment part: a session's envs in its kernels
	// (environ.go).
	env environ

	mu       sync.Mutex
	sessions map[string]*Session
	reserved int // slots taken by sessions being created and one-shot cells
	// starting counts each owner's creates, forks, wakes and one-shot
	// cells under way (MaxPerOwner).
	starting map[int]int
	// ended is what an id no longer in sessions answers (ended.go): its
	// lock is taken after mu, so an id leaves the table and is recorded
	// in one step.
	ended *endedIDs
	// closed is every session this node ended while it shared a store,
	// kept on disk (tombstone.go): a take from the store refuses them.
	closed   *closedSet
	oneshots map[string]*Session // one-shot cells running now
	shutdown bool

	// nonce prefixes cell ids, so ids never repeat across daemon restarts.
	nonce string

	stop        chan struct{}
	janitorDone chan struct{} // closed when the janitor has stopped

	// hibernating counts the hibernations being written (guarded by mu).
	hibernating int
	// hibernatingBytes is what the disks of the hibernations under way
	// hold (reserveHibernation).
	hibernatingBytes int64
	// takes are the takes from the shared store running here.
	takes takeLocks
}

// New makes a manager and reconciles what a previous run left behind.
func New(cfg Config, host *isolate.Host) (*Manager, error) {
	autoQuota := cfg.StateQuota == 0
	cfg.defaults()
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("state dir %q must be absolute", cfg.StateDir)
	}
	for name, p := range cfg.Policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("policy %q: %w", name, err)
		}
	}
	if err := cfg.checkPool(); err != nil {
		return nil, err
	}
	if cfg.NodeID != "" && !NodeIDPattern.MatchString(cfg.NodeID) {
		return nil, fmt.Errorf("node %q: want 1-16 of [a-z0-9]", cfg.NodeID)
	}
	// Host root's alone: session metadata, checkpoint images (a kernel's
	// whole memory) and saved workspaces live below; no sandbox needs it.
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("create session dir: %w", err)
	}
	if err := os.Chmod(filepath.Join(cfg.StateDir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("create session dir: %w", err)
	}
	if cfg.StoreDir != "" {
		if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
			return nil, fmt.Errorf("create store dir: %w", err)
		}
	}
	m := &Manager{
		cfg: cfg, host: host, metrics: newMetrics(),
		sessions: map[string]*Session{}, ended: newEndedIDs(), oneshots: map[string]*Session{}, starting: map[int]int{},
		stop: make(chan struct{}), janitorDone: make(chan struct{}), nonce: newID()[:8],
	}
	m.warm = warmStarts{cfg: &m.cfg, host: host, metrics: m.metrics, mgr: m,
		files: &m.ws, starts: make(chan struct{}, 2*max(1, runtime.NumCPU()))}
	m.ws.host = m
	m.ws.upper = &m.dur
	m.dur = durable{cfg: &m.cfg, host: host, metrics: m.metrics, mgr: m, kernels: &m.warm, files: &m.ws, ended: m.ended}
	m.env = environ{nonce: m.nonce, host: m}
	if cfg.Store != nil && cfg.Store.Shared() {
		// Store attack: others write a shared store; unsigned, its records
		// would name owners, host paths and confinement for this node.
		if _, ok := store.Signer(cfg.Store); !ok {
			return nil, fmt.Errorf("store %s is shared but not signed: open it with a fleet key (store.key_file)", cfg.Store.Name())
		}
	}
	closed, err := loadClosed(filepath.Join(cfg.StateDir, closedName), maxClosed, cfg.HibernatedTTL)
	if err != nil {
		return nil, err
	}
	m.closed = closed
	m.dur.initQuotas()
	if err := m.dur.checkHibernateOnShutdown(autoQuota); err != nil {
		return nil, err
	}
	if cfg.Store != nil {
		m.dur.objects = store.Quota(cfg.Store, cfg.StoreQuota, "store_quota_bytes")
	}
	m.dur.loadLost()
	if err := m.dur.reconcile(m.adoptAll()); err != nil {
		cfg.Logger.Warn("reconcile leftovers", "err", err)
	}
	if err := m.dur.saveLost(); err != nil {
		cfg.Logger.Warn("lost sessions not recorded: after the next restart their ids answer not_found", "err", err)
	}
	m.dur.chargeAdopted()
	m.warm.stateQuota = m.dur.stateQuota
	m.warm.initZygotes()
	m.warm.initTemplates()
	m.warm.startPool()
	go m.janitor()
	return m, nil
}

func (m *Manager) log() *slog.Logger { return m.cfg.Logger }

// Metrics returns the manager's counters.
func (m *Manager) Metrics() *Metrics { return m.metrics }

// newID returns 128 random bits in hex: unguessable, so an id is a
// capability only its creator holds.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// reserve takes a place under MaxSessions.
func (m *Manager) reserve() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	if m.liveLocked()+m.reserved >= m.cfg.MaxSessions {
		// A waiting pool member gives its place up to a session.
		s := m.warm.evictMemberLocked()
		if s == nil {
			return fmt.Errorf("%w: %d live sessions, the configured maximum (sessions.max; hibernated sessions do not count)", ErrLimit, m.cfg.MaxSessions)
		}
		m.reserved--
		m.warm.pool.wg.Add(1)
		go func() {
			defer m.warm.pool.wg.Done()
			_ = m.destroy(s)
		}()
	}
	m.reserved++
	return nil
}

// reserveOwner takes one of owner's places under MaxPerOwner for a
// session about to hold a sandbox; release gives it back (the session,
// once in the table, counts itself). One owner filling sessions.max
// would refuse every other caller's creates.
func (m *Manager) reserveOwner(owner int) (release func(), _ error) {
	if m.cfg.MaxPerOwner <= 0 {
		return func() {}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.starting[owner]
	for _, t := range []map[string]*Session{m.sessions, m.oneshots} {
		for _, s := range t {
			s.mu.Lock()
			if s.owner == owner && !s.hibernated {
				n++
			}
			s.mu.Unlock()
		}
	}
	if n >= m.cfg.MaxPerOwner {
		return nil, fmt.Errorf("%w: owner %d has %d live sessions, the configured maximum per owner is %d (sessions.max_per_owner; hibernated sessions do not count)", ErrLimit, owner, n, m.cfg.MaxPerOwner)
	}
	m.starting[owner]++
	return func() {
		m.mu.Lock()
		if m.starting[owner]--; m.starting[owner] <= 0 {
			delete(m.starting, owner)
		}
		m.mu.Unlock()
	}, nil
}

// liveLocked counts the sessions that hold a sandbox: all but the
// hibernated ones. The caller holds m.mu.
func (m *Manager) liveLocked() int {
	n := 0
	for _, s := range m.sessions {
		s.mu.Lock()
		if !s.hibernated {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// hibernatedCount counts the hibernated sessions.
func (m *Manager) hibernatedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions) - m.liveLocked() + m.hibernating
}

// reserveHibernation takes a place among sessions.max_hibernated for a
// hibernation about to be written, or answers ErrLimit: a count checked
// and then acted on let hibernations run side by side all pass it.
func (m *Manager) reserveHibernation(s *Session) (release func(), err error) {
	// A hibernated session's disk stays in memory, charged to no
	// sandbox: one owner who filled a workspace and hibernated it, again
	// and again, pinned max_hibernated disks of RAM (512 GiB at the
	// defaults) that no limit saw and the OOM killer cannot free. The
	// disks are measured outside the lock (a statfs each).
	var held, mine int64
	if m.cfg.HibernatedDiskBytes > 0 {
		for _, o := range m.sessionsWhere(func(o *Session) bool { o.mu.Lock(); defer o.mu.Unlock(); return o.hibernated }) {
			held += diskBytesHeld(o)
		}
		mine = diskBytesHeld(s)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.sessions) - m.liveLocked() + m.hibernating; n >= m.cfg.MaxHibernated {
		return nil, fmt.Errorf("%w: %d hibernated sessions, the configured maximum (sessions.max_hibernated)", ErrLimit, n)
	}
	if b := m.cfg.HibernatedDiskBytes; b > 0 && held+m.hibernatingBytes+mine > b {
		return nil, fmt.Errorf("%w: hibernated sessions' disks hold %d MiB of memory and this one %d MiB, past the %d MiB they may hold together (a quarter of the machine's memory): "+
			"remove files, or close hibernated sessions", ErrLimit, (held+m.hibernatingBytes)>>20, mine>>20, b>>20)
	}
	m.hibernating++
	m.hibernatingBytes += mine
	return func() {
		m.mu.Lock()
		m.hibernating--
		m.hibernatingBytes -= mine
		m.mu.Unlock()
	}, nil
}

// diskBytesHeld is what s's workspace disk (a tmpfs) holds in memory.
func diskBytesHeld(s *Session) int64 {
	if s.disk == nil {
		return 0
	}
	var st unix.Statfs_t
	if unix.Statfs(filepath.Dir(s.disk.UpperDir()), &st) != nil {
		return 0
	}
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

// sessionsWhere lists the sessions in the table for which keep says so;
// keep runs under m.mu.
func (m *Manager) sessionsWhere(keep func(s *Session) bool) []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Session
	for _, s := range m.sessions {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// stopping is closed when Shutdown begins.
func (m *Manager) stopping() <-chan struct{} { return m.stop }

func (m *Manager) unreserve() {
	m.mu.Lock()
	m.reserved--
	m.mu.Unlock()
}

// node is this daemon's name in the store's ownership records: NodeID,
// or without one the name derived from the host name.
func (m *durable) node() string {
	if m.cfg.NodeID != "" {
		return m.cfg.NodeID
	}
	h, _ := os.Hostname()
	return NodeFromHostname(h)
}

// diskID is the sandbox disk id of session id: isolate's ids are
// [A-Za-z0-9_] (its container ids append "-<generation>"), so the "-" after
// a node name becomes "_". A bare hex id is its own disk id, as before.
func diskID(id string) string { return strings.ReplaceAll(id, "-", "_") }

// NodeIDPattern is what a node name may be: short, lower-case letters and
// digits, so it is safe in a URL path, a file name, an HAProxy server
// name and a session id that is split at its first "-".
var NodeIDPattern = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// NodeFromHostname derives a node name from a host name: its letters
// and digits, lower case, at most 16; "node" if none are left.
func NodeFromHostname(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		if b.Len() == 16 {
			break
		}
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "node"
	}
	return b.String()
}

// NodeOf returns the node named in a session id ("" for a bare id, from
// before nodes or from a daemon without one).
func NodeOf(id string) string {
	node, _, ok := strings.Cut(id, "-")
	if !ok || !NodeIDPattern.MatchString(node) {
		return ""
	}
	return node
}

// newSession builds a session's disk and directories (no kernel yet).
func (m *Manager) newSession(owner int, p policy.Policy) (_ *Session, retErr error) {
	id := m.cfg.sessionID()
	dir := filepath.Join(m.cfg.StateDir, "sessions", id)
	var cl cleanup.Stack
	defer func() {
		if retErr != nil {
			_ = cl.Run()
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create session dir: %w", err)
	}
	cl.Add(func() error { return os.RemoveAll(dir) })
	disk, err := m.host.NewDisk(diskID(id), p)
	if err != nil {
		return nil, hostErr(ErrUnavailable, err)
	}
	cl.Add(disk.Destroy)
	// The control directory (host root's, on the disk's tmpfs so that its
	// bind mount shows no host path inside) holds the kernel and the
	// socket: the sandbox may read the one and connect to the other, but
	// replace neither.
	if err := writeKernel(disk); err != nil {
		return nil, err
	}
	cl.Release()
	now := time.Now()
	return &Session{id: id, owner: owner, policy: p, dir: dir, disk: disk, created: now, lastUsed: now, stamps: fileStamps{}}, nil
}

// writeKernel puts the kernel package into disk's control directory.
func writeKernel(disk *isolate.Disk) error {
	return runner.WriteKernel(disk.CtlDir())
}

// destroy tears a session down: kernel, sandbox, disk, directories.
func (m *Manager) destroy(s *Session) error {
	s.mu.Lock()
	s.closed = true
	k := s.k
	s.k = nil
	s.mu.Unlock()
	var errs []error
	if k != nil {
		errs = append(errs, k.close())
	}
	errs = append(errs, s.disk.Destroy())
	errs = append(errs, os.RemoveAll(s.dir))
	m.dur.stateQuota.release(s.dir)
	if s.lease != "" {
		m.dur.dropStored(s.id) // it was taken from the shared store: it ends there too
	}
	return errors.Join(errs...)
}

// finishPooled gives the pooled session a create took what the create
// asked beyond the pool's shape, and saves it.
func (m *Manager) finishPooled(info *Info, opt CreateOptions) *Info {
	m.env.setEnvs(info.ID, opt.Envs, opt.Cwd)
	info.Cwd = opt.Cwd
	if opt.HibernateOnIdle {
		if s, err := m.get(0, info.ID); err == nil {
			s.mu.Lock()
			s.info.HibernateOnIdle = true
			s.mu.Unlock()
		}
		info.HibernateOnIdle = true
	}
	m.dur.savePooledMeta(info)
	return info
}

// Create starts a new session and returns once its kernel is ready.
func (m *Manager) Create(ctx context.Context, opt CreateOptions) (_ *Info, retErr error) {
	p, err := m.cfg.policyFor(opt.Policy, opt.Override)
	if err != nil {
		return nil, err
	}
	ttl := opt.TTL
	switch {
	case ttl < 0:
		return nil, fmt.Errorf("%w: ttl_s must be positive", ErrBadRequest)
	case ttl == 0:
		ttl = m.cfg.IdleTTL
	case ttl > m.cfg.MaxIdleTTL:
		ttl = m.cfg.MaxIdleTTL
	}
	switch {
	case opt.MaxLifetime < 0:
		return nil, fmt.Errorf("%w: max_lifetime_s must be positive", ErrBadRequest)
	case opt.MaxLifetime > m.cfg.MaxLifetime:
		opt.MaxLifetime = m.cfg.MaxLifetime
	}
	if opt.Persist != "" {
		if m.cfg.StoreDir == "" && m.cfg.Store == nil {
			return nil, fmt.Errorf("%w: persist needs a store (config key store.url)", ErrBadRequest)
		}
		if !persistNameRE.MatchString(opt.Persist) {
			return nil, fmt.Errorf("%w: persist name %q: want 1-64 of [A-Za-z0-9._-], not starting with '.'", ErrBadRequest, opt.Persist)
		}
	}
	if err := CheckEnvs("envs", opt.Envs); err != nil {
		return nil, err
	}
	if err := CheckStartDir(opt.Cwd); err != nil {
		return nil, err
	}
	if opt.Cwd == Workdir {
		opt.Cwd = "" // the default, shown as none
	}
	if opt.HibernateOnIdle {
		// Refused rather than ended at the TTL: the caller asked not to
		// lose the session's state then.
		if err := m.host.CriuCheck(); err != nil {
			return nil, fmt.Errorf("%w: hibernate_on_idle needs checkpoint/restore, which this host lacks: %v", ErrUnavailable, err)
		}
	}
	releaseOwner, err := m.reserveOwner(opt.Owner)
	if err != nil {
		return nil, err
	}
	defer releaseOwner()
	if info := m.takePooled(opt, ttl); info != nil {
		return m.finishPooled(info, opt), nil
	}
	if err := m.reserve(); err != nil {
		// At the limit with a pool member being built on the last place:
		// that member is this create's, once built (or its place is).
		if !errors.Is(err, ErrLimit) || !m.waitMemberBuild(ctx) {
			return nil, err
		}
		if info := m.takePooled(opt, ttl); info != nil {
			return m.finishPooled(info, opt), nil
		}
		if err := m.reserve(); err != nil {
			return nil, err
		}
	}
	defer m.unreserve()
	s, err := m.newSession(opt.Owner, p)
	if err != nil {
		return nil, err
	}
	var cl cleanup.Stack
	defer func() {
		if retErr != nil {
			_ = cl.Run()
		}
	}()
	cl.Add(func() error { return m.destroy(s) })
	s.ttl, s.persist, s.maxLife = ttl, opt.Persist, opt.MaxLifetime
	s.envs = maps.Clone(opt.Envs)
	s.info = Info{Policy: p.Name, Persist: opt.Persist, Cwd: opt.Cwd, HibernateOnIdle: opt.HibernateOnIdle}
	if opt.Persist != "" {
		restored, err := m.dur.restorePersist(s)
		if err != nil {
			return nil, fmt.Errorf("restore persisted workspace %q: %w", opt.Persist, err)
		}
		s.info.Restored = restored
		s.info.Survives = "files in " + Workdir + " are saved after every cell and restored by a later create with the same persist name; variables, imports and running processes are not"
	}
	started := m.warm.createStarting()
	release, err := m.warm.admitStart(ctx)
	if err != nil {
		started()
		return nil, err
	}
	_, err = m.ensureKernel(ctx, s)
	release()
	started()
	if err != nil {
		return nil, err
	}
	if len(opt.Requirements) > 0 {
		installed, err := m.dur.install(ctx, s, opt.Requirements)
		if err != nil {
			return nil, err
		}
		s.info.Installed = installed
	}
	if err := m.register(s); err != nil {
		return nil, err
	}
	cl.Release()
	m.dur.recordLive(s)
	m.log().Info("session created", "session", s.id, "owner", opt.Owner, "policy", p.Name, "ttl", ttl)
	info := m.infoOf(s)
	return &info, nil
}

// register makes a new session with a running kernel live: listed, saved
// for re-adoption, counted.
func (m *Manager) register(s *Session) error {
	m.ws.rescan(s)
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		return ErrShutdown
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	if err := m.dur.saveMeta(s); err != nil {
		m.log().Warn("session metadata not saved: it cannot be re-adopted after a restart", "session", s.id, "err", err)
	}
	m.metrics.created()
	return nil
}

// claim finds session id for owner and takes its run lock (ErrBusy while
// a cell runs); the caller unlocks s.run.
func (m *Manager) claim(ctx context.Context, owner int, id string) (*Session, error) {
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	// A kernel replacing a lost one is being started: wait for it (the
	// start is bounded by the kernel start timeout), as the next cell of a
	// notebook waits for its restarted kernel, rather than answer busy.
	s.mu.Lock()
	restarting := s.restarting
	s.mu.Unlock()
	if restarting != nil {
		select {
		case <-restarting:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: session %s is starting a new kernel after a lost one: %v", ErrBusy, id, context.Cause(ctx))
		}
	}
	// The janitor may be hibernating the idle session: wait for that, then
	// take it (the op wakes it). It marks the session before it takes the
	// lock, so a claim that misses the lock sees the mark.
	for try := 0; ; try++ {
		s.mu.Lock()
		pausing := s.pausing
		s.mu.Unlock()
		if pausing != nil {
			select {
			case <-pausing:
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: session %s is being hibernated for its idle time: %v", ErrBusy, id, context.Cause(ctx))
			}
		}
		if s.run.TryLock() {
			return s, nil
		}
		s.mu.Lock()
		pausing = s.pausing
		s.mu.Unlock()
		if pausing == nil || try >= 3 {
			return nil, fmt.Errorf("%w: session %s is running a cell", ErrBusy, id)
		}
	}
}

func (m *Manager) infoOf(s *Session) Info {
	exp := s.expiry(m.cfg.maxLifeOf(s))
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.info
	info.ID = s.id
	info.CreatedAt = s.created.UTC()
	info.ExpiresAt = exp.UTC()
	info.Cells = s.cells
	info.State = "ready"
	switch {
	case s.busy:
		info.State = "busy"
	case s.hibernated && s.k == nil:
		info.State = "hibernated"
	case s.k == nil:
		info.State = "starting"
	}
	return info
}

// get finds a session owner may use. Another owner's session is reported
// exactly like a missing one: no existence oracle.
func (m *Manager) get(owner int, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || (owner != 0 && s.owner != owner) {
		if err := m.ended.answer(id, owner); err != nil && (s == nil || owner == 0 || s.owner == owner) {
			return nil, err
		}
		return nil, fmt.Errorf("session %q %w", id, ErrNotFound)
	}
	return s, nil
}

// Exec runs one cell in session id on behalf of owner. A cell already
// running in the session makes it ErrBusy at once (cells of one session
// never queue: the caller decides whether to wait).
func (m *Manager) Exec(ctx context.Context, owner int, id string, req ExecRequest) (*Result, error) {
	s, err := m.claim(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			s.run.Unlock()
		}
	}()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: session %s was closed", ErrNotFound, id)
	}
	s.busy = true
	s.lastUsed = time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.lastUsed = time.Now()
		s.mu.Unlock()
	}()
	res, err := m.exec(ctx, s, req)
	if err == nil && res.State == StateLost && m.pastLife(s, time.Now()) == nil {
		handedOff = m.restartInBackground(s)
	}
	return res, err
}

// RunOnce runs one cell in a fresh sandbox that is destroyed afterwards;
// the files it created come back with their content, up to the policy's
// ReturnFileBytes in total.
func (m *Manager) RunOnce(ctx context.Context, owner int, policyName string, req ExecRequest) (*Result, error) {
	p, err := m.cfg.policyFor(policyName, nil)
	if err != nil {
		return nil, err
	}
	return m.runOnce(ctx, owner, p, req)
}

// RunOnceAs is RunOnce under the effective policy of session id: its named
// policy as tightened at create (limits, allow), never the wider policy of
// the same name. Without a session owner may use, that policy cannot be
// known and nothing runs (ErrNotFound).
func (m *Manager) RunOnceAs(ctx context.Context, owner int, id string, req ExecRequest) (*Result, error) {
	p, err := m.PolicyOf(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return m.runOnce(ctx, owner, p, req)
}

// PolicyOf returns the effective policy of session id (as tightened at
// create) for owner.
func (m *Manager) PolicyOf(ctx context.Context, owner int, id string) (policy.Policy, error) {
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return policy.Policy{}, err
	}
	return s.policy, nil
}

// runOnce runs one cell in a fresh sandbox built from p.
func (m *Manager) runOnce(ctx context.Context, owner int, p policy.Policy, req ExecRequest) (*Result, error) {
	if _, err := m.cfg.cellTimeout(&Session{policy: p}, req.Timeout); err != nil {
		return nil, err
	}
	releaseOwner, err := m.reserveOwner(owner)
	if err != nil {
		return nil, err
	}
	defer releaseOwner()
	if err := m.reserve(); err != nil {
		return nil, err
	}
	defer m.unreserve()
	s, err := m.newSession(owner, p)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.oneshots[s.id] = s
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.oneshots, s.id)
		m.mu.Unlock()
		if err := m.destroy(s); err != nil {
			m.log().Warn("destroy one-shot sandbox", "err", err)
		}
	}()
	s.ttl = p.MaxTimeout
	if len(req.Files) > 0 {
		// Before the kernel starts, straight into the upper layer.
		if err := m.ws.placeFiles(s, req.Files, nil); err != nil {
			return nil, err
		}
		req.Files = nil
		m.ws.rescan(s)
	}
	res, err := m.exec(ctx, s, req)
	if err != nil {
		return nil, err
	}
	// The sandbox is about to go: hand the files back with their content.
	if ws, err := s.workspace(); err == nil && ws != nil {
		budget := p.ReturnFileBytes
		for i := range res.Files {
			f := &res.Files[i]
			if f.Change == "deleted" {
				continue
			}
			if f.Size > budget {
				f.Omitted = true
				continue
			}
			b, err := readFile(ws, f.Path, budget)
			if err != nil {
				f.Omitted = true
				continue
			}
			f.Data = b
			budget -= int64(len(b))
		}
		ws.Close()
	}
	return res, nil
}

// Close ends a session now.
func (m *Manager) Close(ctx context.Context, owner int, id string) error {
	// find, not lookup: closing a session past its lifetime that the
	// janitor has not ended yet is what its owner wants done.
	s, err := m.find(ctx, owner, id)
	if err != nil {
		return err
	}
	return m.endAs(s, "was closed at "+time.Now().UTC().Format(time.RFC3339), nil, false)
}

// endAs removes s from the live set, remembers why (its id answers kind
// afterwards: ErrExpired, or nil for not found), and destroys it. A cell
// running in it is killed with its sandbox. held: the caller holds s.run.
func (m *Manager) endAs(s *Session, why string, kind error, held bool) error {
	m.mu.Lock()
	if _, ok := m.sessions[s.id]; !ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: session %s already ended", ErrNotFound, s.id)
	}
	delete(m.sessions, s.id)
	m.ended.add(s.id, s.owner, why, kind)
	m.mu.Unlock()
	if m.dur.shared() {
		// Before its objects leave the store (destroy): a writer of the
		// store who puts them back finds the id refused here.
		if err := m.closed.add(s.id, time.Now()); err != nil {
			m.log().Error("closed session not recorded on disk: after a restart this node could restore it if its objects were put back in the store",
				"session", s.id, "err", err)
		}
	}
	// Kill a running cell, and cancel a kernel start after a lost one, so
	// that the run lock is released promptly.
	s.mu.Lock()
	s.closed = true
	if s.k != nil {
		_ = s.k.sb.Kill()
	}
	if s.stopRestart != nil {
		s.stopRestart()
	}
	s.mu.Unlock()
	if held {
		err := m.destroy(s)
		m.log().Info("session ended", "session", s.id, "why", why)
		return err
	}
	if !lockWithin(&s.run, endLockWait) {
		// Something on the host side is stuck inside the session (a bug:
		// no file operation into a session can block). The janitor and
		// Shutdown must not wait on it: the session is gone from the live
		// set already; its disk is freed when that operation returns.
		m.log().Error("session stuck: its run lock was not released after its sandbox was killed; it is ended, and destroyed once the operation holding it returns",
			"session", s.id, "waited", endLockWait, "why", why)
		go func() {
			s.run.Lock()
			defer s.run.Unlock()
			if err := m.destroy(s); err != nil {
				m.log().Warn("destroy stuck session", "session", s.id, "err", err)
			}
			m.log().Info("stuck session destroyed", "session", s.id)
		}()
		return fmt.Errorf("session %s stuck: an operation held it %s after its sandbox was killed; it is destroyed when that operation returns", s.id, endLockWait)
	}
	defer s.run.Unlock()
	err := m.destroy(s)
	m.log().Info("session ended", "session", s.id, "why", why)
	return err
}

// endIdle ends s at its idle TTL, and only if it is still idle with its
// run lock held. Hibernate, restore, fork, snapshots and file operations
// hold that lock without marking the session busy as a cell does: ending
// the session under one of them (endAs kills the sandbox, then waits for
// the lock) killed a kernel mid-dump, and ended a session its caller had
// just hibernated, its state lost, because the dump outlasted the idle TTL.
// ended is false when s is in use: the next sweep looks again. An
// operation holding it idleHoldWait past its idle expiry is taken as stuck
// (each has its own bound, far shorter): s is ended as endAs ends it.
func (m *Manager) endIdle(s *Session, why string, life time.Duration) (ended bool, _ error) {
	if !s.run.TryLock() {
		if !s.stillIdle(life) || time.Since(s.expiry(life)) < idleHoldWait {
			return false, nil
		}
		return true, m.endAs(s, why+", held by an operation "+idleHoldWait.String()+" past it", nil, false)
	}
	defer s.run.Unlock()
	if !s.stillIdle(life) {
		return false, nil
	}
	return true, m.endAs(s, why, nil, true)
}

// idleHoldWait is how long past its idle expiry an operation (not a
// cell) may hold a session before the janitor takes it as stuck. A
// variable so that tests can shorten it.
var idleHoldWait = time.Minute

// endLockWait bounds how long end waits for a session's run lock once its
// sandbox is killed: a cell returns promptly then (its result, a scan of
// its workspace, the persist copy), so only a stuck host-side operation
// holds it longer. A variable so that tests can shorten it.
var endLockWait = 10 * time.Second

// lockWithin takes mu if it can within d.
func lockWithin(mu *sync.Mutex, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for pause := time.Millisecond; !mu.TryLock(); pause = min(2*pause, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// visible returns the live sessions owner may see (root sees all).
func (m *Manager) visible(owner int) []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ss []*Session
	for _, s := range m.sessions {
		if owner == 0 || s.owner == owner {
			ss = append(ss, s)
		}
	}
	return ss
}

// List returns the live sessions owner may see (root sees all), leaving
// out those past their lifetime.
func (m *Manager) List(ctx context.Context, owner int) []Info {
	ss := m.visible(owner)
	out := make([]Info, 0, len(ss))
	now := time.Now()
	for _, s := range ss {
		// A session past its lifetime answers expired to every request
		// (lookup) however soon the janitor ends it, so a list does not
		// offer it as live either.
		if m.pastLife(s, now) != nil {
			continue
		}
		info := m.infoOf(s)
		s.mu.Lock()
		k := s.k
		s.mu.Unlock()
		if k != nil {
			info.MemoryBytes = k.sb.Usage().MemoryCurrent
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Features reports what isolation this host gives.
func (m *Manager) Features() isolate.Features { return m.host.Features() }

// janitor ends sessions past their idle TTL or lifetime.
func (m *Manager) janitor() {
	defer close(m.janitorDone)
	// Expiries in flight are each bounded (end), so waiting for them at
	// stop is too.
	var ending sync.WaitGroup
	defer ending.Wait()
	t := time.NewTicker(m.cfg.JanitorInterval)
	defer t.Stop()
	lastSweep, sweeping := time.Now(), make(chan struct{}, 1)
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		m.dur.hibernateIdle(now)
		if m.dur.shared() && now.Sub(lastSweep) >= m.cfg.StoreSweepInterval {
			select {
			case sweeping <- struct{}{}: // one sweep at a time
				lastSweep = now
				ending.Add(1)
				go func() {
					defer ending.Done()
					defer func() { <-sweeping }()
					m.dur.sweepStoreOnce(now)
				}()
			default:
			}
		}
		type expiry struct {
			s    *Session
			why  string
			kind error
			// life is set for an idle expiry: checked again just before
			// it is ended (stillIdle).
			life time.Duration
		}
		m.mu.Lock()
		var expired []expiry
		var idleOut []*Session // past the idle TTL, to hibernate
		for _, s := range m.sessions {
			s.mu.Lock()
			busy := s.busy
			s.mu.Unlock()
			life, end := m.lifeEnd(s)
			switch {
			case !now.Before(end):
				// Past its lifetime however busy. A busy one's cell had
				// its timeout cut to the lifetime (capToLife): the host
				// interrupts it, then kills it after the grace, and its
				// result says why; only a cell still going after that is
				// killed here, with the session.
				if busy && now.Before(end.Add(s.policy.InterruptGrace+lifeSlack)) {
					continue
				}
				expired = append(expired, expiry{s, lifeWhy(life, end), ErrExpired, 0})
			case !busy && now.After(s.expiry(life)):
				s.mu.Lock()
				keep := s.info.HibernateOnIdle && !s.hibernated
				s.mu.Unlock()
				if keep {
					idleOut = append(idleOut, s)
					continue
				}
				expired = append(expired, expiry{s, "expired at " + s.expiry(life).UTC().Format(time.RFC3339), nil, life})
			}
		}
		m.mu.Unlock()
		for _, s := range idleOut {
			ending.Add(1)
			go func() {
				defer ending.Done()
				m.hibernateAtIdle(s)
			}()
		}
		// Each expiry on its own: a session stuck for endLockWait delays
		// neither the others nor the next sweep.
		for _, e := range expired {
			s := e.s
			ending.Add(1)
			go func() {
				defer ending.Done()
				var err error
				if e.life > 0 {
					var ended bool
					if ended, err = m.endIdle(s, e.why, e.life); !ended && err == nil {
						return // in use since the sweep looked: the next one looks again
					}
				} else {
					err = m.endAs(s, e.why, e.kind, false)
				}
				if errors.Is(err, ErrNotFound) {
					return // ended meanwhile (closed, or by an earlier sweep)
				}
				if err != nil {
					m.log().Warn("expire session", "session", s.id, "err", err)
				}
				m.metrics.expired()
			}()
		}
	}
}

// hibernateAtIdle hibernates s, a HibernateOnIdle session past its idle
// TTL, instead of ending it. One in use is left for the next sweep; one
// that cannot be hibernated ends, and its id answers why: it is never
// kept running past its TTL, which would hold its memory without end.
func (m *Manager) hibernateAtIdle(s *Session) {
	done, ok := s.tryPause()
	if !ok {
		return
	}
	err := m.dur.hibernate(s)
	done()
	if err == nil || errors.Is(err, ErrNotFound) {
		return
	}
	m.log().Warn("hibernate at idle timeout", "session", s.id, "err", err)
	if err := m.endAs(s, "its idle timeout came and hibernating it failed: "+err.Error(), nil, false); err != nil && !errors.Is(err, ErrNotFound) {
		m.log().Warn("expire session", "session", s.id, "err", err)
	}
	m.metrics.expired()
}

// Shutdown stops taking work, waits for running cells until ctx is done,
// then destroys every session.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		return nil
	}
	m.shutdown = true
	m.mu.Unlock()
	close(m.stop)
	<-m.janitorDone
	// Pool members hold reserved places: free them before waiting on those.
	poolErr := m.drainPool()
	m.warm.closeTemplates()
	m.warm.closeZygotes()
	// Let running cells finish until ctx is done.
	for m.running() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Past the grace period, one-shot cells are killed like sessions' cells
	// (end kills those); RunOnce then tears its own sandbox down.
	m.mu.Lock()
	for _, s := range m.oneshots {
		s.mu.Lock()
		s.closed = true
		if s.k != nil {
			_ = s.k.sb.Kill()
		}
		s.mu.Unlock()
	}
	m.mu.Unlock()
	m.mu.Lock()
	var all []*Session
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	errs := []error{poolErr}
	var toEnd []*Session
	hibernateAll := m.cfg.HibernateOnShutdown
	if hibernateAll && m.cfg.HibernateIfAble && len(all) > 0 {
		if err := m.host.CriuCheck(); err != nil {
			hibernateAll = false
			m.log().Info("sessions not hibernated at shutdown: checkpoints do not work here", "err", err, "kept_running", m.cfg.KeepOnShutdown)
		}
	}
	notKept := map[string]string{}
	hibStart := time.Now()
	budgetEnd := hibStart.Add(m.cfg.ShutdownHibernateBudget)
	hibernated, overBudget := 0, 0
	for _, s := range all {
		// A hibernated session is only files on disk: it waits for the next
		// daemon whatever KeepOnShutdown says.
		s.mu.Lock()
		hib := s.hibernated
		s.mu.Unlock()
		if !hib && hibernateAll && !time.Now().Before(budgetEnd) {
			overBudget++
			notKept[s.id] = fmt.Sprintf("the shutdown's hibernation budget (%s) ran out before it and sessions.survive_restart is off", m.cfg.ShutdownHibernateBudget)
		} else if !hib && hibernateAll && s.run.TryLock() {
			err := m.dur.hibernate(s)
			s.run.Unlock()
			if err != nil {
				m.log().Warn("session not hibernated at shutdown", "session", s.id, "err", err)
				notKept[s.id] = fmt.Sprintf("could not be hibernated (%v) and sessions.survive_restart is off", err)
			}
			hib = err == nil
			if hib {
				hibernated++
			}
		}
		m.mu.Lock()
		_, here := m.sessions[s.id]
		m.mu.Unlock()
		if !here {
			continue // hibernated into the shared store: nothing left here
		}
		if m.cfg.KeepOnShutdown || hib {
			if err := m.release(s); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		toEnd = append(toEnd, s)
	}
	if hibernateAll && len(all) > 0 {
		m.log().Info("sessions hibernated at shutdown", "hibernated", hibernated, "sessions", len(all),
			"seconds", time.Since(hibStart).Seconds())
	}
	if overBudget > 0 {
		m.log().Warn("sessions not hibernated at shutdown: the hibernation budget ran out", "sessions", overBudget,
			"budget", m.cfg.ShutdownHibernateBudget, "kept_running", m.cfg.KeepOnShutdown)
	}
	// Side by side, a few at a time: a stuck session costs one endLockWait
	// in all, not one each.
	var wg sync.WaitGroup
	var emu sync.Mutex
	sem := make(chan struct{}, 8)
	now := time.Now()
	for _, s := range toEnd {
		why := notKept[s.id]
		if why == "" {
			why = "sessions.survive_restart is off"
		}
		why = fmt.Sprintf("was lost: it ended when jailcell shut down at %s: %s", now.UTC().Format(time.RFC3339), why)
		s.mu.Lock()
		until := m.dur.idEnd(s.created, s.lastUsed, s.ttl, s.maxLife)
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := m.endAs(s, why, nil, false); err != nil && !errors.Is(err, ErrNotFound) {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
				return
			}
			m.dur.markLost(s.id, s.owner, why, LostShutdown, until)
		}()
	}
	wg.Wait()
	if err := m.dur.saveLost(); err != nil {
		errs = append(errs, err)
	}
	// Wait for killed one-shots (and creates in flight) to clean up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.mu.Lock()
		n := m.reserved
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("%d one-shot cells or creates still running after shutdown", n))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// running counts cells in progress: session cells, one-shot cells and
// creates.
func (m *Manager) running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.reserved
	for _, s := range m.sessions {
		s.mu.Lock()
		if s.busy {
			n++
		}
		s.mu.Unlock()
	}
	return n
}
