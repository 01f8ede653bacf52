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
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/rootfs"
	"github.com/jailcell/jailcell/session"
)

const (
	defaultStateDir   = "/var/lib/jailcell/state"
	defaultCgroupRoot = "/jailcell"
	lockName          = "jailcell.lock"
)

// errStateBusy: another jailcell process holds the state directory.
var errStateBusy = errors.New("state directory in use")

// hostFlags are the flags every command that builds sandboxes shares.
// (Config files come later; until then these are the whole configuration.)
type hostFlags struct {
	stateDir string
	rootfs   string
	logLevel string
}

func addHostFlags(cmd *cobra.Command) *hostFlags {
	f := &hostFlags{}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.stateDir, "state-dir", defaultStateDir,
		"directory for sandbox and session state; one jailcell process at a time uses it")
	pf.StringVar(&f.rootfs, "rootfs", rootfs.DefaultBase,
		"Python rootfs: a base directory (its current version), a version directory or its root/")
	pf.StringVar(&f.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	return f
}

// logger logs to stderr: stdout belongs to cell output and the protocol.
func (f *hostFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

// stack is a built host and manager, and the state-directory lock that
// makes them this process's alone.
type stack struct {
	rootfs  *rootfs.Rootfs
	host    *isolate.Host
	manager *session.Manager
	lock    *os.File
}

// build opens the rootfs, locks the state directory and builds the host
// and manager. Undone in reverse on failure.
func (f *hostFlags) build(log *slog.Logger) (_ *stack, retErr error) {
	stateDir, err := filepath.Abs(f.stateDir)
	if err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", f.stateDir, err)
	}
	r, err := rootfs.Open(f.rootfs)
	if err != nil {
		return nil, err
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
	host, err := isolate.NewHost(isolate.Config{
		StateDir:   stateDir,
		Rootfs:     r.Root,
		CgroupRoot: cgroupRootFor(stateDir),
	})
	if err != nil {
		return nil, fmt.Errorf("build sandbox host: %w", err)
	}
	m, err := session.New(session.Config{
		StateDir: stateDir,
		Policies: map[string]policy.Policy{"default": policy.Default()},
		Logger:   log,
	}, host)
	if err != nil {
		return nil, fmt.Errorf("start session manager: %w", err)
	}
	return &stack{rootfs: r, host: host, manager: m, lock: lock}, nil
}

// shutdown tears every sandbox down, then lets go of the state directory.
func (s *stack) shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.manager.Shutdown(ctx)
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
func cgroupRootFor(stateDir string) string {
	if filepath.Clean(stateDir) == defaultStateDir {
		return defaultCgroupRoot
	}
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return defaultCgroupRoot + "-" + hex.EncodeToString(sum[:6])
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
