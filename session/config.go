package session

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/store"
)

// Config shapes a Manager. Zero fields take the documented defaults.
type Config struct {
	// StateDir holds per-session control directories. Required.
	StateDir string
	// NodeID is this daemon's name in a fleet (NodeIDPattern). Every new
	// session id is "<NodeID>-<32 hex digits>", so that a proxy in front of
	// several daemons routes a session's requests to the node that holds
	// it. Default "": bare hex ids. Ids of either form are accepted on
	// re-adoption whatever NodeID is now. NodeFromHostname derives one.
	// It also names this daemon in a shared store's ownership records
	// (there "" means NodeFromHostname of the host name: Manager.node).
	NodeID string
	// Policies are the named policies; "default" is used when a request
	// names none (policy.Default() if absent).
	Policies map[string]policy.Policy
	// IdleTTL is the default idle timeout (reset by each cell). Default 30 min.
	IdleTTL time.Duration
	// MaxIdleTTL is the ceiling of a per-session TTL. Default 24 h.
	MaxIdleTTL time.Duration
	// MaxLifetime ends a session this long after creation whatever its
	// use. Default 24 h.
	MaxLifetime time.Duration
	// MaxSessions caps live sessions (one-shot cells count while they
	// run). Default (0): sized from the host, AutoMaxSessions.
	MaxSessions int
	// MaxPerOwner caps one owner's live sessions (one-shot cells and
	// creates under way included), so one caller cannot take every place
	// under MaxSessions. Default (0): MaxSessions.
	MaxPerOwner int
	// Preload lists modules every kernel imports before it is ready.
	Preload []string
	// Pool maps a policy name to how many ready sessions of that policy
	// (kernel started, Preload imported) are kept for plain creates: no
	// override, persist or requirements. Members count toward MaxSessions
	// and each serves one session only. Default: none (every create is
	// cold).
	Pool map[string]int
	// PoolGrow maps a policy name to how far its pool may grow past its
	// Pool size while creates ask for more (the most plain creates of the
	// policy in any minute of the last ten); 0 or at most its Pool size: a
	// fixed pool.
	PoolGrow map[string]int
	// NoTemplate turns session templates off (template.go): every kernel
	// imports the preload itself. Default false: templates are used where
	// criu works and Preload is not empty.
	NoTemplate bool
	// NoZygote turns zygotes off (zygote.go): no kernel is forked from a
	// preloaded one. Default false: zygotes are used where the host can
	// fork one (unprivileged user namespaces, detached mounts) and Preload
	// is not empty.
	NoZygote bool
	// Wheelhouse is a host directory of wheels, mounted read-only at
	// /opt/jailcell/wheelhouse for offline pip installs ("" = none).
	Wheelhouse string
	// StoreDir is where persisted workspaces are kept: the directory of a
	// file Store (set from it when empty). "" with no Store: persistence
	// off. Its filesystem must keep user xattrs: each persisted file's
	// sha256 lives in one (store.SetFileSum; store.Open checks this).
	StoreDir string
	// Store keeps persisted workspaces (an S3 store, or a signed one; an
	// unsigned file store's are copied into StoreDir directly, sparse)
	// and, when Store.Shared(), hibernated sessions, which any node using
	// the same store can then restore (store.go). A shared Store must be
	// signed (store.Sign, store.key_file): New refuses one that is not.
	// nil: StoreDir alone.
	Store store.Store
	// JanitorInterval is how often expired sessions are swept. Default 1 s.
	JanitorInterval time.Duration
	// StartTimeout bounds a kernel's start. Default 60 s.
	StartTimeout time.Duration
	// RequirementsTimeout bounds installing a session's requirements.
	// Default 5 min.
	RequirementsTimeout time.Duration
	// Logger receives one line per cell (never the code unless debug).
	Logger *slog.Logger
	// KeepOnShutdown leaves live sessions running at Shutdown for the next
	// daemon to re-adopt, instead of destroying them. Default false.
	KeepOnShutdown bool
	// HibernateAfter checkpoints a session idle this long to disk and
	// releases its memory (hibernate.go); it comes back on its next cell.
	// Needs a working criu (make criu). Default 0: off.
	HibernateAfter time.Duration
	// HibernatedTTL ends a hibernated session idle this long (instead of
	// its idle TTL). Default 7 days. In a shared store it counts from the
	// hibernation, and any node's janitor expires it (sweepStored).
	HibernatedTTL time.Duration
	// StoreSweepInterval is how often the janitor looks for sessions in a
	// shared store past HibernatedTTL. Default 10 min.
	StoreSweepInterval time.Duration
	// MaxHibernated caps hibernated sessions, which do not count toward
	// MaxSessions (they hold no sandbox, only disk: their images and
	// files). Default 1024.
	MaxHibernated int
	// HibernatedDiskBytes bounds the memory that hibernated sessions'
	// workspace disks hold together: a disk is a tmpfs that stays mounted
	// while its session sleeps (a wake takes its files back at once), and
	// its pages are then charged to no sandbox's memory limit. A
	// hibernation that would pass it is refused (limit). Default: a
	// quarter of the machine's memory.
	HibernatedDiskBytes int64
	// HibernateOnShutdown hibernates every live session at Shutdown, so
	// that the next daemon restores it, after a restart or a reboot. A
	// session that cannot be hibernated (no criu, a dump that fails) is
	// kept running if KeepOnShutdown, else ended. Default false.
	HibernateOnShutdown bool
	// HibernateIfAble: HibernateOnShutdown was not asked for but is the
	// service's default. Where it cannot work (criu does not, or
	// StateQuota is below one hibernation's reservation) sessions are kept
	// running (KeepOnShutdown) instead, with one log line, where an asked
	// for HibernateOnShutdown refuses to start (the quota) or warns for
	// each session (criu).
	HibernateIfAble bool
	// ShutdownHibernateBudget bounds how long Shutdown spends hibernating
	// sessions (one criu at a time): past it, the rest are kept running
	// (KeepOnShutdown) or ended, and the log says how many and why, so a
	// stop stays inside its supervisor's stop timeout (systemd's 90 s for
	// the shipped unit, drain_grace included). Default 45 s.
	ShutdownHibernateBudget time.Duration
	// StateQuota caps what StateDir holds for checkpoint images and copies
	// of workspaces (hibernation, snapshots, forks), in allocated bytes; a
	// hibernate, snapshot or fork that would pass it fails with
	// ErrStateQuota (wire code limit). Each session's share is bounded on
	// its own (quota.go). Default: a quarter of the size of the filesystem
	// holding StateDir.
	StateQuota int64
	// StoreQuota caps what StoreDir holds for persisted workspaces, in
	// allocated bytes; a file that would pass it is not persisted
	// (ErrStoreQuota). Default: a quarter of the size of the filesystem
	// holding StoreDir.
	StoreQuota int64
}

// The defaults of the Config fields that are also configuration keys
// (cmd/jailcell's key table quotes these, so the service and a library
// caller get the same values).
const (
	// DefaultIdleTTL is IdleTTL's default (sessions.idle_ttl).
	DefaultIdleTTL = 30 * time.Minute
	// DefaultMaxIdleTTL is MaxIdleTTL's default (sessions.max_idle_ttl).
	DefaultMaxIdleTTL = 24 * time.Hour
	// DefaultMaxLifetime is MaxLifetime's default (sessions.max_lifetime).
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultHibernatedTTL is HibernatedTTL's default
	// (sessions.hibernated_ttl).
	DefaultHibernatedTTL = 7 * 24 * time.Hour
	// DefaultMaxHibernated is MaxHibernated's default
	// (sessions.max_hibernated).
	DefaultMaxHibernated = 1024
)

func (c *Config) defaults() {
	if c.Policies == nil {
		c.Policies = map[string]policy.Policy{}
	}
	if _, ok := c.Policies["default"]; !ok {
		c.Policies["default"] = policy.Default()
	}
	if c.IdleTTL == 0 {
		c.IdleTTL = DefaultIdleTTL
	}
	if c.MaxIdleTTL == 0 {
		c.MaxIdleTTL = DefaultMaxIdleTTL
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = DefaultMaxLifetime
	}
	if c.MaxSessions == 0 {
		c.MaxSessions, _ = AutoMaxSessions(ReadHostCapacity(0), !c.NoZygote, MaxPolicyPids(c.Policies))
	}
	if c.MaxPerOwner >= c.MaxSessions {
		c.MaxPerOwner = 0 // MaxSessions says it, naming its own key
	}
	if c.JanitorInterval == 0 {
		c.JanitorInterval = time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.ShutdownHibernateBudget == 0 {
		c.ShutdownHibernateBudget = 45 * time.Second
	}
	if c.RequirementsTimeout == 0 {
		c.RequirementsTimeout = 5 * time.Minute
	}
	if c.HibernatedTTL == 0 {
		c.HibernatedTTL = DefaultHibernatedTTL
	}
	if c.StoreSweepInterval == 0 {
		c.StoreSweepInterval = 10 * time.Minute
	}
	if c.MaxHibernated == 0 {
		c.MaxHibernated = DefaultMaxHibernated
	}
	if c.HibernatedDiskBytes == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			c.HibernatedDiskBytes = int64(si.Totalram) * int64(si.Unit) / 4
		}
	}
	if c.StateQuota == 0 {
		c.StateQuota = defaultQuota(c.StateDir)
	}
	if d, ok := store.LocalDir(c.Store); ok && c.StoreDir == "" {
		c.StoreDir = d
	}
	if c.StoreQuota == 0 && c.StoreDir != "" {
		c.StoreQuota = defaultQuota(c.StoreDir)
	}
	if c.StoreQuota == 0 {
		c.StoreQuota = defaultObjectQuota
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// What the configuration alone decides, with no session table behind it:
// a request's policy, a new session's id, how long a session may live and
// how long a cell may run. The Manager asks; these never touch its state.

// policyFor resolves a policy name and override.
func (c *Config) policyFor(name string, o *policy.Override) (policy.Policy, error) {
	if name == "" {
		name = "default"
	}
	p, ok := c.Policies[name]
	if !ok {
		names := make([]string, 0, len(c.Policies))
		for n := range c.Policies {
			names = append(names, n)
		}
		sort.Strings(names)
		return p, fmt.Errorf("%w: unknown policy %q, configured: %v", ErrBadRequest, name, names)
	}
	p, err := o.Apply(p)
	if err != nil {
		return p, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	// A limit set at create bounds the whole session: its timeout_s is the
	// ceiling of every later request's, not only their default (exec's
	// cellTimeout). max_timeout cannot go below its own 1 s floor; the
	// ceiling is then the timeout itself.
	if o != nil && o.TimeoutS != nil {
		p.MaxTimeout = max(p.Timeout, time.Second)
	}
	return p, nil
}

// sessionID is a new session's id: the node's name, if any, then 128
// random bits.
func (c *Config) sessionID() string {
	if c.NodeID == "" {
		return newID()
	}
	return c.NodeID + "-" + newID()
}

// maxLifeOf is how long s may live from its creation.
func (c *Config) maxLifeOf(s *Session) time.Duration {
	if s.maxLife > 0 {
		return s.maxLife
	}
	return c.MaxLifetime
}

// cellTimeout resolves a request's timeout (0: the default) for a cell of
// s. Above the configured policy's ceiling it is clamped, as documented;
// above a ceiling the session's own create lowered (limits.timeout_s) it
// is refused: that limit was asked for, so a later request may not widen
// it, and silently cutting its time would hide that.
func (c *Config) cellTimeout(s *Session, d time.Duration) (time.Duration, error) {
	if base, ok := c.Policies[s.policy.Name]; ok && s.policy.MaxTimeout < base.MaxTimeout {
		// policyFor sets max_timeout to timeout_s (at least 1 s).
		if max := s.policy.Timeout; d > max {
			return 0, fmt.Errorf("%w: timeout_s = %g, allowed up to %g (the limits.timeout_s this session was created with)", ErrBadRequest, d.Seconds(), max.Seconds())
		}
	}
	t, err := s.policy.CellTimeout(d.Seconds())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return t, nil
}
