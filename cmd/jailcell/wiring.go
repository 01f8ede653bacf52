package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/rootfs"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/store"
)

const (
	defaultStateDir   = "/var/lib/jailcell/state"
	defaultCgroupRoot = isolate.DefaultCgroupRoot
	lockName          = "jailcell.lock"
)

// errStateBusy: another jailcell process holds the state directory.
var errStateBusy = errors.New("state directory in use")

// hostFlags are the flags every command that builds sandboxes shares, and
// the configuration they feed (config_keys.go): flags win over JAILCELL_*
// variables, which win over the config file, which wins over defaults.
type hostFlags struct {
	// Flag targets; once the configuration is loaded they hold the
	// effective values (doctor reads stateDir and rootfs).
	stateDir  string
	rootfs    string
	logLevel  string
	logFormat string

	cmd   *cobra.Command
	cfg   *config
	level slog.LevelVar
	// survivable: this command's sessions may outlive it (serve, with
	// sessions.survive_restart); jailcell json tears down at EOF by contract.
	survivable bool
	// client: a front door that may only connect to a running service; an
	// unreadable default config file does not stop it (loadConfigFor).
	client bool
}

func addHostFlags(cmd *cobra.Command) *hostFlags {
	return addHostFlagsLevel(cmd, "warn")
}

// addHostFlagsLevel is addHostFlags with the command's default log level:
// quiet for one-off commands, "info" for the service.
func addHostFlagsLevel(cmd *cobra.Command, level string) *hostFlags {
	f := &hostFlags{cmd: cmd}
	pf := cmd.PersistentFlags()
	configFlag(pf)
	pf.StringVar(&f.stateDir, "state-dir", defaultStateDir,
		"directory for sandbox and session state; one jailcell process at a time uses it")
	pf.StringVar(&f.rootfs, "rootfs", rootfs.DefaultBase,
		"Python rootfs: a base directory (its current version), a version directory or its root/")
	pf.StringVar(&f.logLevel, "log-level", level, "log level on stderr: debug, info, warn or error")
	pf.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	// Invalid configuration stops the command before it does anything.
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return f.load() }
	return f
}

// load reads the configuration with this command's flags.
func (f *hostFlags) load() error {
	cfg, err := loadConfigFor(f.cmd.Flags(), f.client)
	if err != nil {
		return err
	}
	f.apply(cfg)
	return nil
}

// apply makes cfg the effective configuration; a reload calls it again.
func (f *hostFlags) apply(cfg *config) {
	f.cfg = cfg
	f.stateDir, f.rootfs = cfg.StateDir, cfg.Rootfs
	f.logLevel, f.logFormat = strings.ToLower(cfg.LogLevel.String()), cfg.LogFormat
	f.level.Set(cfg.LogLevel)
}

// config returns the loaded configuration, loading it if no command hook
// did yet.
func (f *hostFlags) config() (*config, error) {
	if f.cfg == nil {
		if err := f.load(); err != nil {
			return nil, err
		}
	}
	return f.cfg, nil
}

// logger logs to stderr: stdout belongs to cell output and the protocol.
// Its level follows the configuration, also after a reload.
func (f *hostFlags) logger() (*slog.Logger, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	return newSlog(os.Stderr, cfg.LogFormat, &f.level), nil
}

// stack is a built host and manager, and the state-directory lock that
// makes them this process's alone.
type stack struct {
	rootfs  *rootfs.Rootfs
	host    *isolate.Host
	manager *session.Manager
	lock    *os.File
	claim   *isolate.UIDClaim
}

// build opens the rootfs, locks the state directory and builds the host
// and manager. Undone in reverse on failure.
func (f *hostFlags) build(log *slog.Logger) (_ *stack, retErr error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", cfg.StateDir, err)
	}
	r, err := rootfs.Open(cfg.Rootfs)
	if err != nil {
		return nil, err
	}
	// libcontainer runs criu from PATH and has no option naming it (runc
	// #3316, #4722): this process's PATH is set here, before any sandbox
	// exists, and the host refuses checkpoints if PATH finds another criu.
	if err := os.Setenv("PATH", isolate.CriuPATH(cfg.Criu, os.Getenv("PATH"))); err != nil {
		return nil, fmt.Errorf("put criu %s on PATH: %w", cfg.Criu, err)
	}
	lock, err := lockStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			lock.Close()
		}
	}()
	// Several daemons on one host must not map sandboxes onto the same
	// host uids. A state directory keeps the range of its first use (its
	// kept sessions' files are owned by those uids): a live daemon holding
	// it is an error naming its pid. At first use, one on the default
	// range beside another (a front door run embedded next to the service,
	// a test next to an installed one) moves to a free range; an explicit
	// range that overlaps a live one is refused.
	claim, err := isolate.ClaimStateRange(cfg.ClaimDir, stateDir, cfg.UIDBase, isolate.RangeSize(0), cfg.sources["sandbox.uid_base"] != "default")
	if err != nil {
		return nil, fmt.Errorf("sandbox.uid_base: %w", err)
	}
	defer func() {
		if retErr != nil {
			claim.Close()
		}
	}()
	if len(claim.Overlaps) > 0 {
		log.Warn("another jailcell on this host maps sandboxes to the same uids, and no other range is free; give each its own sandbox.uid_base",
			"uid_base", cfg.UIDBase, "overlaps", claim.Overlaps)
	}
	switch {
	case claim.Recorded != 0 && claim.Base != claim.Recorded:
		log.Warn("sandbox.uid_base moves this state dir's sandboxes to another uid range: sessions kept on the old one cannot be adopted",
			"uid_base", claim.Base, "was", claim.Recorded)
	case claim.Recorded == 0 && claim.Base != cfg.UIDBase:
		log.Info("the default uid range is another jailcell's on this host: this state dir's sandboxes take the next free range, from now on",
			"uid_base", claim.Base, "default", cfg.UIDBase)
	}
	cfg.UIDBase = claim.Base
	cgRoot := cgroupRootFor(stateDir)
	if cfg.CgroupRoot != "" {
		cgRoot = cfg.CgroupRoot
	}
	// A systemd service with Delegate=yes on cgroup v2 keeps its sandboxes
	// inside its own subtree.
	if d, err := isolate.DelegatedRoot(); err == nil {
		cgRoot = d
		log.Info("sandboxes in the service's delegated cgroup subtree", "cgroup", d)
	} else if !errors.Is(err, isolate.ErrNotDelegated) {
		return nil, fmt.Errorf("set up the delegated cgroup subtree: %w", err)
	}
	host, err := isolate.NewHost(isolate.Config{
		StateDir:   stateDir,
		Criu:       cfg.Criu,
		Rootfs:     r.Root,
		CgroupRoot: cgRoot,
		UIDBase:    cfg.UIDBase,
	})
	if err != nil {
		return nil, fmt.Errorf("build sandbox host: %w", err)
	}
	if cfg.EgressUpstream != "" {
		host.SetEgress(isolate.Egress{Upstream: cfg.EgressUpstream, Log: log})
	}
	if f.survivable {
		// A long-running service checks the rootfs against its manifest
		// while it already listens; no sandbox is built before it
		// matches, none at all if it does not. The content is hashed
		// (2-4 s, minutes when emulated) unless an earlier full hash of
		// this unchanged tree is younger than rootfs_rehash_after.
		stamp := filepath.Join(stateDir, "rootfs-verified-"+shortHash(r.Root)+".json")
		host.Gate(func() error {
			start := time.Now()
			res, err := r.VerifyStamped(stamp, cfg.RootfsRehashAfter, start)
			if err != nil {
				log.Error("rootfs content check failed: no sandbox will be built (rebuild it: make rootfs)", "rootfs", r.Dir, "why", res.Why, "err", err)
				return fmt.Errorf("%w (rebuild it: make rootfs)", err)
			}
			args := []any{"rootfs", r.Dir, "hashed", res.Hashed, "why", res.Why, "verify_ms", time.Since(start).Milliseconds()}
			if res.Unstamped != "" {
				// The next start hashes again: say why.
				args = append(args, "unstamped", res.Unstamped)
			}
			log.Info("rootfs content matches its manifest", args...)
			return nil
		})
	}
	sc := cfg.Session // the keys' values; the rest is this process's
	sc.StateDir, sc.Policies, sc.Logger = stateDir, cfg.Policies, log
	if cfg.storeDir != "" {
		log.Warn("config key store_dir is deprecated: it is read as store.url", "store.url", cfg.Store.URL)
	}
	// Opening reads no network: a store that is down fails the operations
	// that need it (unavailable, naming it), not the daemon.
	if sc.Store, err = store.Open(cfg.Store); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	sc.NoTemplate = !cfg.Template
	// run answers one cell and leaves: a zygote importing the preload
	// beside its one kernel would only take CPU from it.
	sc.NoZygote = !cfg.Zygote || f.cmd.Name() == "run"
	sc.Pool, sc.PoolGrow = poolSizes(cfg.PoolSize, f.cmd.Name(), sc.MaxSessions, !sc.NoZygote)
	// Sessions left running, or hibernated, for the next daemon to
	// re-adopt: a service's choice only.
	sc.KeepOnShutdown = f.survivable && sc.KeepOnShutdown
	sc.HibernateOnShutdown = f.survivable && sc.HibernateOnShutdown
	sc.HibernateIfAble = cfg.sources["sessions.hibernate_on_shutdown"] == "default"
	m, err := session.New(sc, host)
	if err != nil {
		return nil, fmt.Errorf("start session manager: %w", err)
	}
	return &stack{rootfs: r, host: host, manager: m, lock: lock, claim: claim}, nil
}

// shutdown tears every sandbox down, then lets go of the state directory.
func (s *stack) shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.shutdownContext(ctx)
}

// shutdownContext lets running cells finish until ctx is done, then tears
// every sandbox down and lets go of the state directory.
func (s *stack) shutdownContext(ctx context.Context) error {
	err := s.manager.Shutdown(ctx)
	if err == nil {
		err = s.host.Close()
	}
	// The claim goes first: whoever takes the state dir next finds its
	// range free.
	s.claim.Close()
	s.lock.Close()
	if err != nil {
		return fmt.Errorf("shut down sessions: %w", err)
	}
	return nil
}

// cgroupRootFor gives each state directory its own cgroup root. Starting a
// manager sweeps every cgroup under its root as a leftover of a previous
// run, so two processes sharing a root would kill each other's sandboxes;
// the state-dir lock plus this mapping keeps them apart.
// poolSizes is the default policy's pool size and growth for pool.size
// (poolAuto or a number) under command cmd: auto is sized from the
// machine and grows with demand; a number the operator set is kept as it
// is; run answers one cell and leaves, so a pool would only cost it.
func poolSizes(size int, cmd string, maxSessions int, zygote bool) (pool, grow map[string]int) {
	if size != poolAuto {
		return map[string]int{"default": size}, nil
	}
	if cmd == "run" {
		return map[string]int{"default": 0}, nil
	}
	return map[string]int{"default": session.AutoPoolSize(maxSessions)},
		map[string]int{"default": session.AutoPoolGrow(maxSessions, zygote)}
}

func cgroupRootFor(stateDir string) string {
	if filepath.Clean(stateDir) == defaultStateDir {
		return defaultCgroupRoot
	}
	return defaultCgroupRoot + "-" + shortHash(filepath.Clean(stateDir))
}

// shortHash names a path in a file or cgroup name: 12 hex digits of its
// sha256.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// lockStateDir takes an exclusive, non-blocking flock on the state
// directory for the life of the process (the kernel drops it if we die).
// A second jailcell on the same directory would sweep this one's sandboxes
// as leftovers at start, so it is refused instead.
func lockStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := io.ReadAll(io.LimitReader(f, 32)); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another jailcell%s is using %s; stop it or pass a different --state-dir",
				errStateBusy, holder, dir)
		}
		return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// connectFlags choose where a front door's sandboxes run: in the running
// service (as any user it admits, no root, no state-dir lock) or in this
// process (root, and the state directory's lock).
type connectFlags struct {
	connect  string // "": use a service if one answers; connectConfigured or a socket path: must
	embedded bool
}

// connectConfigured is --connect without a value: the configured socket.
const connectConfigured = "configured"

// connectProbe bounds the wait for a service's first answer.
const connectProbe = 5 * time.Second

// joinConnectValue rewrites "--connect PATH" as "--connect=PATH" where
// PATH is a socket: --connect's value is optional, so the flag parser
// would take PATH for a command (an MCP client's args array naturally
// writes ["mcp", "--connect", "/run/jailcell/jailcell.sock"]). PATH counts
// as a socket when it is one, or when its name ends in ".sock"; anything
// else stays an argument, so "run --connect cell.py" still runs cell.py
// on the configured socket.
func joinConnectValue(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--connect" && i+1 < len(args) && isSocketArg(args[i+1]) {
			out = append(out, "--connect="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

func isSocketArg(a string) bool {
	if a == "" || strings.HasPrefix(a, "-") {
		return false
	}
	if strings.HasSuffix(a, ".sock") {
		return true
	}
	fi, err := os.Stat(a)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func addConnectFlags(cmd *cobra.Command, hf *hostFlags) *connectFlags {
	hf.client = true
	c := &connectFlags{}
	fs := cmd.Flags()
	fs.StringVar(&c.connect, "connect", "",
		"use the running service on this socket; --connect alone: the configured socket (key socket, default "+defaultSocket+
			"). Without --connect or --embedded a service answering on the configured socket is used if there is one")
	fs.Lookup("connect").NoOptDefVal = connectConfigured
	// A command that takes no arguments got one after a bare --connect:
	// say how the value is written rather than "unknown command".
	if args := cmd.Args; args != nil {
		cmd.Args = func(cmd *cobra.Command, a []string) error {
			err := args(cmd, a)
			if err != nil && c.connect == connectConfigured && len(a) > 0 {
				return fmt.Errorf("%w; if %q is the service's socket, write --connect=%s (or a path ending in .sock)", err, a[0], a[0])
			}
			return err
		}
	}
	fs.BoolVar(&c.embedded, "embedded", false, "run the sandboxes in this process (needs root and the state directory) even when a service is running")
	cmd.MarkFlagsMutuallyExclusive("connect", "embedded")
	return c
}

// service returns the running service to hand requests to, or nil when
// the sandboxes are to run here. A service that refuses this user, or one
// asked for by --connect that does not answer, is an error; so is running
// here without root.
func (f *hostFlags) service(c *connectFlags, log *slog.Logger) (*httpapi.Remote, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	// Flags never ignored: settings for sandboxes (--rootfs, --state-dir,
	// a --config file of engine keys...) would be silently dropped by a
	// service, which uses its own. They mean "build them here".
	engine := cfg.engineSettings()
	if len(engine) > 0 && c.connect != "" {
		return nil, fmt.Errorf("--connect: the running service builds the sandboxes with its own configuration and would ignore %s; "+
			"drop them, or run the sandboxes in this process with --embedded (needs root)", strings.Join(engine, ", "))
	}
	var probeErr error
	if len(engine) > 0 && !c.embedded {
		log.Info("sandbox settings given: running the sandboxes in this process, not in a service", "settings", engine)
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("%s: these configure sandboxes built by this process, which needs root; a running service "+
				"would ignore them: drop them to use the service (JAILCELL_SOCKET or --connect=PATH names its socket), or run as root",
				strings.Join(engine, ", "))
		}
	}
	if !c.embedded && len(engine) == 0 {
		sock := cfg.Socket
		if c.connect != "" && c.connect != connectConfigured {
			sock = c.connect
		}
		r := httpapi.NewRemote(sock)
		probeErr = r.Reachable(context.Background(), connectProbe)
		var refused *api.Error
		switch {
		case probeErr == nil:
			log.Info("using the running jailcell service", "socket", sock)
			return r, nil
		case errors.As(probeErr, &refused):
			r.Close()
			return nil, probeErr
		case c.connect != "":
			r.Close()
			return nil, fmt.Errorf("--connect: %w (is `jailcell serve` running there? systemctl status jailcell)", probeErr)
		}
		r.Close()
	}
	if os.Geteuid() != 0 {
		why := "--embedded"
		if probeErr != nil {
			why = probeErr.Error()
		}
		return nil, fmt.Errorf("%s; running the sandboxes in this process instead needs root: start the service "+
			"(systemctl start jailcell, or jailcell serve as root: docs/service.md) with this user in its socket group, or run as root", why)
	}
	// Building sandboxes needs the configuration this process could not
	// read: running on defaults instead would ignore the operator's limits.
	if cfg.Unreadable != nil {
		why := "--embedded"
		if probeErr != nil {
			why = "no service answered: " + probeErr.Error()
		}
		return nil, fmt.Errorf("%w; %s, and running the sandboxes in this process needs that file", cfg.Unreadable, why)
	}
	return nil, nil
}

// runFrontDoor hands serve the running service when there is one (see
// service); otherwise it builds the stack and a dispatcher with the
// workflow here. serve runs until it returns or SIGINT/SIGTERM cancels its
// context; then sandboxes built here are torn down. ignore lists errors
// that mean a normal end.
func (f *hostFlags) runFrontDoor(c *connectFlags, serve func(ctx context.Context, h api.Handler, log *slog.Logger) error, ignore ...error) error {
	log, err := f.logger()
	if err != nil {
		return err
	}
	remote, err := f.service(c, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A parent that dies closes our stdout and stderr: a write to them must
	// fail with EPIPE (which cancels the running cells, then the sandboxes
	// are torn down), not kill us by SIGPIPE with the sandboxes left running.
	signal.Ignore(syscall.SIGPIPE)
	normal := func(serr error) error {
		for _, e := range append(ignore, context.Canceled) {
			if errors.Is(serr, e) {
				log.Info("front door closed")
				return nil
			}
		}
		return serr
	}
	if remote != nil {
		// The service owns the sandboxes; it closes a session when its
		// MCP or JSON-lines client closes it, or by TTL.
		defer remote.Close()
		return normal(serve(ctx, remote, log))
	}
	st, err := f.build(log)
	if err != nil {
		return err
	}
	wf, err := newWorkflow(st.manager, f.cfg, log)
	if err != nil {
		_ = st.shutdown(30 * time.Second)
		return err
	}
	d := &api.Dispatcher{Manager: st.manager, Version: version, Logger: log, Workflow: wf}
	serr := normal(serve(ctx, d, log))
	if err := st.shutdown(30 * time.Second); err != nil {
		return err
	}
	return serr
}
