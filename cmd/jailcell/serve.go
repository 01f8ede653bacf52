package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
	"github.com/jailcell/jailcell/isolate"
)

// addServeFlags are the flags of `jailcell serve`, which `jailcell config`
// shares so that it prints what serve would use.
func addServeFlags(cmd *cobra.Command) *hostFlags {
	hf := addHostFlagsLevel(cmd, "info")
	hf.survivable = true
	cmd.Flags().String("socket", defaultSocket, "Unix socket to listen on (ignored when systemd passes a socket)")
	cmd.Flags().String("socket-group", "jailcell", `group owning the socket and its directory ("root": root only)`)
	cmd.Flags().String("listen", "", "also serve on TCP, tcp://HOST:PORT; needs auth.tokens_file or mutual TLS (tls.*)")
	cmd.Flags().String("e2b-listen", "", "also serve E2B's protocol on TCP, tcp://HOST:PORT (docs/e2b.md); needs auth.tokens_file")
	return hf
}

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API on a Unix socket (the system service)",
		Long: `Serve the HTTP/1.1 API on a Unix socket: the same requests as
"jailcell json", as routes (see docs/service.md). Each connection's caller is
read from the kernel (SO_PEERCRED); root and the configured allowed_uids and
allowed_gids may call, and a session belongs to the uid that created it.

The socket is created 0660 in a 0750 directory owned by root and
socket_group, unless systemd passes one (socket activation, LISTEN_FDS).
Readiness and shutdown are reported to systemd (NOTIFY_SOCKET), and the
watchdog is fed when WATCHDOG_USEC is set.

SIGTERM or SIGINT drains: no new connections, running cells get up to
drain_grace to finish, then every sandbox is torn down and serve exits 0; a
second signal ends the cells at once. SIGHUP reloads log.level,
allowed_uids and allowed_gids from the configuration; other keys need a
restart.`,
		Example: `  sudo jailcell serve
  sudo jailcell serve --socket /tmp/jc.sock --socket-group root --log-format json`,
		Args: cobra.NoArgs,
	}
	hf := addServeFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return serve(hf) }
	return cmd
}

// service is a running `jailcell serve`.
type service struct {
	hf  *hostFlags
	log *slog.Logger
	st  *stack
	srv *httpapi.HTTPServer
	// e2b is the E2B door's server, drained beside srv (nil: none).
	e2b *http.Server
}

func serve(hf *hostFlags) (retErr error) {
	// TERM and INT drain; HUP reloads. Registered before anything else:
	// the socket can be reached (and a service manager or a client may
	// stop us) before the serve loop below runs, and a SIGTERM unhandled
	// by then ended serve by the default action, its sandboxes and
	// session state left as they were. A signal that comes during the
	// start waits in the channel and drains once serving.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A log write to a stderr whose reader is gone (a hand-run daemon
	// whose terminal or parent died) must fail with EPIPE, not kill the
	// daemon by SIGPIPE halfway through a drain with its sandboxes left.
	signal.Ignore(syscall.SIGPIPE)
	cfg := hf.cfg
	log, err := hf.logger()
	if err != nil {
		return err
	}
	access, err := resolveAccess(cfg)
	if err != nil {
		return err
	}
	gid, err := socketGID(cfg, log)
	if err != nil {
		return err
	}
	// Taken before anything starts a process: the fds are made
	// close-on-exec and LISTEN_* leave the environment.
	listeners, err := activatedListeners()
	if err != nil {
		return err
	}
	activated := len(listeners) > 0
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	st, err := hf.build(log)
	if err != nil {
		closeAll()
		return err
	}
	// The same dispatcher as `jailcell json`: one core, two transports.
	wf, err := newWorkflow(st.manager, cfg, log)
	if err != nil {
		closeAll()
		_ = st.shutdown(10 * time.Second)
		return err
	}
	if activated {
		for _, l := range listeners {
			checkActivated(l, gid, log)
		}
	} else {
		l, err := listenSocket(cfg.Socket, gid, log)
		if err != nil {
			_ = st.shutdown(10 * time.Second)
			return err
		}
		listeners = []net.Listener{l}
	}
	var remote *httpapi.RemoteAuth
	if cfg.Listen != "" {
		l, auth, err := remoteListener(cfg)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			_ = st.shutdown(10 * time.Second)
			return err
		}
		listeners, remote = append(listeners, l), auth
	}
	s := &service{hf: hf, log: log, st: st}
	disp := &api.Dispatcher{Manager: st.manager, Version: version, Logger: log, Workflow: wf}
	e2bL, e2bSrv, err := e2bServer(cfg, disp, log)
	if err != nil {
		for _, l := range listeners {
			l.Close()
		}
		_ = st.shutdown(10 * time.Second)
		return err
	}
	s.e2b = e2bSrv
	s.srv = httpapi.NewHTTPServer(disp,
		httpapi.HTTPOptions{Access: access, Logger: log, Remote: remote, Ready: st.host.Ready, Node: cfg.Session.NodeID,
			StreamGrace: cfg.HTTP.StreamGrace, MCPMaxSessionsPerOwner: cfg.HTTP.MCPMaxSessionsPerOwner,
			MCPMaxSessions: cfg.HTTP.MCPMaxSessions, MCPIdleTimeout: cfg.HTTP.MCPIdleTimeout,
			MaxInFlight: cfg.HTTP.MaxInFlight, MaxInFlightPerOwner: cfg.HTTP.MaxInFlightPerOwner,
			MaxInFlightBytes: cfg.HTTP.MaxInFlightBytes, MaxInFlightBytesPerOwner: cfg.HTTP.MaxInFlightBytesPerOwner,
			BodyTimeout: cfg.HTTP.BodyTimeout})
	serveErr := make(chan error, len(listeners)+1)
	addrs := make([]string, len(listeners))
	for i, l := range listeners {
		addrs[i] = l.Addr().String()
		go func() { serveErr <- s.srv.Serve(l) }()
	}
	if e2bL != nil {
		addrs = append(addrs, "e2b "+e2bL.Addr().String())
		go func() {
			if err := e2bSrv.Serve(e2bL); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	notify(log, fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving on %s", os.Getpid(), strings.Join(addrs, ", ")))
	log.Info("serving", "socket", strings.Join(addrs, ","), "socket_activated", activated, "node", cfg.Session.NodeID,
		"version", version, "pid", os.Getpid(), "allowed_uids", access.UIDs, "allowed_gids", access.GIDs)
	stopWatchdog := s.watchdog()
	defer stopWatchdog()

	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				continue
			}
			log.Info("signal received; draining", "signal", sig.String(), "grace", cfg.DrainGrace)
			return s.drain(sigs, cfg.DrainGrace)
		case err := <-serveErr:
			log.Error("listener failed; draining", "err", err)
			if derr := s.drain(sigs, cfg.DrainGrace); derr != nil {
				return errors.Join(err, derr)
			}
			return fmt.Errorf("serve: %w", err)
		}
	}
}

// drain stops accepting, lets running requests (and their cells) finish
// until grace is up or a second signal comes, then tears every sandbox
// down. Cells still running then are killed with their sessions.
func (s *service) drain(sigs <-chan os.Signal, grace time.Duration) error {
	notify(s.log, "STOPPING=1\nSTATUS=draining")
	// Until the listeners close: readyz false, creates refused; a proxy
	// gets drain_notice to see it while the sessions here still answer.
	s.srv.SetDraining()
	if n := s.hf.cfg.DrainNotice; n > 0 {
		s.log.Info("draining: not ready, still listening", "drain_notice", n)
		t := time.NewTimer(n)
	notice:
		for {
			select {
			case <-t.C:
				break notice
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					continue
				}
				t.Stop()
				s.log.Warn("second signal: skipping the rest of drain_notice", "signal", sig.String())
				break notice
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					continue
				}
				s.log.Warn("second signal: ending running cells now", "signal", sig.String())
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	e2bDone := make(chan struct{})
	go func() {
		defer close(e2bDone)
		if s.e2b != nil {
			_ = s.e2b.Shutdown(ctx)
		}
	}()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.log.Warn("drain: requests still running at the end of the grace period; ending them", "err", err)
	}
	<-e2bDone
	err := s.st.shutdownContext(ctx)
	_ = s.srv.Close()
	if s.e2b != nil {
		_ = s.e2b.Close()
	}
	if err != nil {
		s.log.Error("tear down sessions", "err", err)
		return err
	}
	s.log.Info("stopped")
	return nil
}

// reload re-reads the configuration. An invalid one is logged and the
// running configuration kept.
func (s *service) reload() {
	notify(s.log, "RELOADING=1\n"+daemon.SdNotifyMonotonicUsec())
	defer notify(s.log, "READY=1")
	cfg, err := loadConfig(s.hf.cmd.Flags())
	if err == nil {
		var access httpapi.Access
		if access, err = resolveAccess(cfg); err == nil {
			s.srv.SetAccess(access)
		}
	}
	if err != nil {
		s.log.Error("reload: keeping the running configuration", "err", err)
		return
	}
	old := s.hf.cfg
	oldVals, newVals := map[string]string{}, map[string]string{}
	for _, st := range old.Settings {
		oldVals[st.Key] = st.Value
	}
	for _, st := range cfg.Settings {
		newVals[st.Key] = st.Value
	}
	var restart []string
	for _, k := range sortedUnion(oldVals, newVals) {
		if v, ok := newVals[k]; (!ok || oldVals[k] != v) && !reloadable(k) {
			restart = append(restart, k)
		}
	}
	// What needs a restart stays as it runs, so the warning comes again on
	// the next reload until the restart happens.
	kept := *old
	applyReloadable(&kept, cfg) // the keys marked reload in configKeys
	kept.Settings = make([]setting, len(old.Settings))
	for i, st := range old.Settings {
		if reloadable(st.Key) {
			st.Value = newVals[st.Key]
			for _, n := range cfg.Settings {
				if n.Key == st.Key {
					st.Source = n.Source
				}
			}
		}
		kept.Settings[i] = st
	}
	s.hf.apply(&kept)
	s.log.Info("configuration reloaded", "log_level", strings.ToLower(cfg.LogLevel.String()),
		"allowed_uids", cfg.AllowedUIDs, "allowed_gids", cfg.AllowedGIDs)
	if len(restart) > 0 {
		s.log.Warn("reload: these keys changed but take effect only after a restart", "keys", restart)
	}
}

func sortedUnion(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// watchdog feeds systemd's watchdog (WATCHDOG_USEC) while the manager
// answers; a manager stuck on its lock stops the pings and systemd
// restarts the service.
func (s *service) watchdog() (stop func()) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		s.log.Warn("watchdog settings unusable; not feeding it", "err", err)
	}
	if interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval / 3)
		defer t.Stop()
		for {
			s.st.manager.List(context.Background(), 0) // blocks if the manager is wedged
			notify(s.log, daemon.SdNotifyWatchdog)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}

// notify sends a state to systemd, if it is listening (NOTIFY_SOCKET).
func notify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", state, "err", err)
	}
}

// activatedListeners returns the sockets systemd passed (LISTEN_FDS for
// this LISTEN_PID), or none. Only Unix stream sockets are accepted: the
// caller's identity comes from their peer credentials.
func activatedListeners() ([]net.Listener, error) {
	ls, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	var out []net.Listener
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("socket activation: fd %d is not a listening stream socket", 3+i)
		}
		if _, ok := l.(*net.UnixListener); !ok {
			l.Close()
			return nil, fmt.Errorf("socket activation: fd %d is a %s socket; only Unix sockets carry the caller's credentials", 3+i, l.Addr().Network())
		}
		out = append(out, l)
	}
	return out, nil
}

// checkActivated reports an activated socket whose group is not
// socket_group. Its owner and mode are systemd's (jailcell.socket), so
// they are left as they are.
func checkActivated(l net.Listener, gid int, log *slog.Logger) {
	path := l.Addr().String()
	fi, err := os.Stat(path)
	if err != nil {
		return // abstract or unnamed
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) != gid {
		log.Warn("the activated socket's group is not socket_group; the socket unit's SocketGroup decides who can connect",
			"socket", path, "socket_gid", st.Gid, "socket_group_gid", gid)
	}
}

// listenSocket creates the service socket: mode 0660, owned by root and
// gid, in a directory of mode 0750 owned by root and gid. A stale socket
// from a crashed run is replaced; a live one is an error.
func listenSocket(path string, gid int, log *slog.Logger) (net.Listener, error) {
	dir, name := filepath.Dir(path), filepath.Base(path)
	if err := claimDir(dir, ownEntries(dir, name), gid, log); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("socket %s: exists and is not a socket; remove it or choose another --socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another process is serving on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// The directory is already 0750 root:gid, so until the chmod below
	// nobody outside the group can reach the socket, and the group cannot
	// write (connect to) it.
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chown(path, 0, gid); err != nil {
		l.Close()
		return nil, fmt.Errorf("chown socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return l, nil
}

// ownEntries are the names jailcell itself puts in the socket directory.
func ownEntries(dir, socketName string) map[string]bool {
	ours := map[string]bool{socketName: true}
	if filepath.Dir(isolate.DefaultClaimDir) == filepath.Clean(dir) {
		ours[filepath.Base(isolate.DefaultClaimDir)] = true
	}
	return ours
}

// claimDir makes dir 0750 root:gid when jailcell may own it: it did not
// exist, or holds nothing but jailcell's own entries (the socket, and in
// the default directory the uid-claims directory, which build makes
// first, 0700, so that the socket directory is then found existing). A
// directory shared with anything else (/run, /tmp) is never changed;
// access then rests on the socket's own mode and the peer check.
func claimDir(dir string, ours map[string]bool, gid int, log *slog.Logger) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create socket directory %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("socket directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s: not a directory", dir)
	default:
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
		for _, e := range ents {
			if !ours[e.Name()] {
				// The socket is chowned and chmodded by its path here: in a
				// directory another user may write without the sticky bit,
				// they could swap it for a symlink between the listen and
				// the chmod, and root would make their target (/etc/shadow)
				// the socket group's.
				st, ok := fi.Sys().(*syscall.Stat_t)
				switch {
				case !ok || st.Uid != 0 && int(st.Uid) != os.Geteuid():
					return fmt.Errorf("socket directory %s: shared and owned by another user; choose another --socket", dir)
				case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0:
					return fmt.Errorf("socket directory %s: shared and writable by others without the sticky bit (mode %04o); choose another --socket", dir, fi.Mode().Perm())
				}
				log.Warn("socket directory is shared, leaving its owner and mode alone", "dir", dir)
				return nil
			}
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			return fmt.Errorf("socket directory %s: owned by uid %d, not root; remove it or choose another --socket", dir, st.Uid)
		}
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		return fmt.Errorf("chown socket directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("chmod socket directory %s: %w", dir, err)
	}
	return nil
}

// socketGID resolves socket_group. The default group missing is no error:
// the socket is then root's alone (nothing looser than configured).
func socketGID(cfg *config, log *slog.Logger) (int, error) {
	g, err := lookupGroup(cfg.SocketGroup)
	if err == nil {
		return int(g), nil
	}
	if cfg.sources["socket_group"] == "default" {
		log.Warn("socket_group does not exist; the socket is root's alone (groupadd --system jailcell, or set socket_group)",
			"socket_group", cfg.SocketGroup)
		return 0, nil
	}
	return 0, fmt.Errorf("socket_group = %q: %v; want an existing group name or number", cfg.SocketGroup, err)
}

// resolveAccess turns allowed_uids and allowed_gids (names or numbers)
// into ids.
func resolveAccess(cfg *config) (httpapi.Access, error) {
	var a httpapi.Access
	var errs []error
	for _, u := range cfg.AllowedUIDs {
		id, err := lookupUser(u)
		if err != nil {
			errs = append(errs, fmt.Errorf("allowed_uids: %q: %v; want a user name or uid", u, err))
			continue
		}
		a.UIDs = append(a.UIDs, id)
	}
	for _, g := range cfg.AllowedGIDs {
		id, err := lookupGroup(g)
		if err != nil {
			errs = append(errs, fmt.Errorf("allowed_gids: %q: %v; want a group name or gid", g, err))
			continue
		}
		a.GIDs = append(a.GIDs, id)
	}
	return a, errors.Join(errs...)
}

// lookupUser takes a number as it is (a uid need not have a name).
func lookupUser(s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n < math.MaxUint32 {
		return uint32(n), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err
}

func lookupGroup(s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n < math.MaxUint32 {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	return uint32(n), err
}
