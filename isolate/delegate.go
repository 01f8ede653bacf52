package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
)

// Under systemd with Delegate=yes on a cgroup v2 host, the service owns its
// cgroup subtree. cgroup v2's "no internal processes" rule forbids a cgroup
// that both holds processes and hands controllers to children, so the
// daemon moves itself into a leaf ("supervisor") and sandboxes go under a
// sibling ("sandboxes"), both inside the service's own cgroup: systemd then
// accounts, limits and stops them together with the service.

// ErrNotDelegated says the process does not run in a delegated cgroup v2
// subtree (a v1 or hybrid host, or not started by systemd with
// Delegate=yes); sandboxes then use the configured absolute cgroup root.
var ErrNotDelegated = errors.New("not in a delegated cgroup v2 subtree")

// DelegatedRoot prepares the calling process's delegated cgroup subtree and
// returns the cgroup path (absolute, from the v2 root) that sandboxes go
// under. It is for a service started by systemd with Delegate=yes
// (INVOCATION_ID set) on a unified cgroup v2 host.
func DelegatedRoot() (string, error) {
	if os.Getenv("INVOCATION_ID") == "" || !cgroups.IsCgroup2UnifiedMode() {
		return "", ErrNotDelegated
	}
	own, err := ownCgroup("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	return delegate("/sys/fs/cgroup", own, os.Getpid())
}

// ownCgroup reads the v2 ("0::") path of a /proc/<pid>/cgroup file.
func ownCgroup(procFile string) (string, error) {
	f, err := os.Open(procFile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup v2 entry in %s", ErrNotDelegated, procFile)
}

// delegate moves pid (the daemon, with all its threads) from own into
// own/supervisor, enables own's controllers for its children, and returns
// own/sandboxes, created. fs is the cgroup v2 mount point. Starting again
// from inside own/supervisor (a restart within the same unit) works too.
func delegate(fs, own string, pid int) (string, error) {
	if strings.HasSuffix(own, "/supervisor") {
		own = strings.TrimSuffix(own, "/supervisor")
	}
	if own == "/" || own == "" {
		return "", fmt.Errorf("%w: the process is in the root cgroup", ErrNotDelegated)
	}
	base := filepath.Join(fs, own)
	// Delegate=yes hands the service its cgroup.subtree_control; without
	// write access to it there is no delegation to use.
	if err := unixAccessW(filepath.Join(base, "cgroup.subtree_control")); err != nil {
		return "", fmt.Errorf("%w: %s/cgroup.subtree_control is not writable: %v", ErrNotDelegated, base, err)
	}
	sup := filepath.Join(base, "supervisor")
	if err := os.Mkdir(sup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create %s: %w", sup, err)
	}
	if err := os.WriteFile(filepath.Join(sup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return "", fmt.Errorf("move the daemon into %s: %w", sup, err)
	}
	b, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Errorf("read controllers of %s: %w", base, err)
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) > 0 {
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
			return "", fmt.Errorf("enable controllers %v in %s: %w", enable, base, err)
		}
	}
	box := filepath.Join(base, "sandboxes")
	if err := os.Mkdir(box, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create %s: %w", box, err)
	}
	if len(enable) > 0 {
		if err := os.WriteFile(filepath.Join(box, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
			return "", fmt.Errorf("enable controllers %v in %s: %w", enable, box, err)
		}
	}
	return filepath.Join(own, "sandboxes"), nil
}

func unixAccessW(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}
