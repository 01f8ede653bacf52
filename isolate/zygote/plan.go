package zygote

import (
	"fmt"
	"os"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// Plan is what a fork is told to mount, in order (zygote.py _build).
type Plan struct {
	Root     int      `json:"root"`
	Mounts   []Mount  `json:"mounts"`
	Hostname string   `json:"hostname"`
	Cwd      string   `json:"cwd"`
	Env      []string `json:"env"`
	Args     []string `json:"args"`
	// Rlimits are set by the fork on itself: [resource, soft, hard].
	Rlimits [][3]uint64 `json:"rlimits"`
}

// Mount is one step of a Plan: a tree handed over, a file system the
// fork mounts itself, a symlink, a masked or read-only path.
type Mount struct {
	Kind   string `json:"kind"`
	Dest   string `json:"dest"`
	Tree   int    `json:"tree,omitempty"`
	Is     string `json:"is,omitempty"`
	Source string `json:"source,omitempty"`
	FSType string `json:"fstype,omitempty"`
	Flags  int    `json:"flags,omitempty"`
	Data   string `json:"data,omitempty"`
	Target string `json:"target,omitempty"`
}

// cloneTree opens a detached copy of the mount at path with the flags
// given (MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC).
func cloneTree(path string, flags int, recursive bool) (int, error) {
	how := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if recursive {
		how |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, uint(how))
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	var set uint64
	for _, f := range []struct {
		ms   int
		attr uint64
	}{{unix.MS_RDONLY, unix.MOUNT_ATTR_RDONLY}, {unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID},
		{unix.MS_NODEV, unix.MOUNT_ATTR_NODEV}, {unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC}} {
		if flags&f.ms != 0 {
			set |= f.attr
		}
	}
	if set != 0 {
		at := unix.AT_EMPTY_PATH
		if recursive {
			at |= unix.AT_RECURSIVE
		}
		if err := unix.MountSetattr(fd, "", uint(at), &unix.MountAttr{Attr_set: set}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("set attributes of %s: %w", path, err)
		}
	}
	return fd, nil
}

// PlanOf is the fork plan that gives a fork cfg's mounts, its working
// directory, environment and arguments, and the trees (descriptors) it
// refers to, the root first.
func PlanOf(cfg *configs.Config, cwd string, env, args []string) (Plan, []int, error) {
	var trees []int
	fail := func(err error) (Plan, []int, error) {
		for _, fd := range trees {
			unix.Close(fd)
		}
		return Plan{}, nil, err
	}
	root, err := cloneTree(cfg.Rootfs, 0, false)
	if err != nil {
		return fail(err)
	}
	trees = append(trees, root)
	plan := Plan{Root: 0, Hostname: cfg.Hostname, Cwd: cwd, Env: env, Args: args}
	for _, r := range cfg.Rlimits {
		plan.Rlimits = append(plan.Rlimits, [3]uint64{uint64(r.Type), r.Soft, r.Hard})
	}
	for _, m := range cfg.Mounts {
		if m.IsBind() {
			fd, err := cloneTree(m.Source, m.Flags, m.Flags&unix.MS_REC != 0)
			if err != nil {
				return fail(err)
			}
			trees = append(trees, fd)
			is := "dir"
			if fi, err := os.Stat(m.Source); err == nil && !fi.IsDir() {
				is = "file"
			}
			plan.Mounts = append(plan.Mounts, Mount{Kind: "tree", Dest: m.Destination, Tree: len(trees) - 1, Is: is})
			continue
		}
		plan.Mounts = append(plan.Mounts, Mount{Kind: "fs", Dest: m.Destination, Source: m.Source,
			FSType: m.Device, Flags: m.Flags, Data: m.Data})
		if m.Destination == "/dev" {
			// libcontainer's /dev in a user namespace: the host's nodes,
			// bound, and its symlinks.
			for _, d := range cfg.Devices {
				if d.Path == "" {
					continue
				}
				fd, err := cloneTree(d.Path, unix.MS_NOSUID|unix.MS_NOEXEC, false)
				if err != nil {
					return fail(err)
				}
				trees = append(trees, fd)
				plan.Mounts = append(plan.Mounts, Mount{Kind: "tree", Dest: d.Path, Tree: len(trees) - 1, Is: "file"})
			}
			for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
				{"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}, {"pts/ptmx", "/dev/ptmx"}} {
				plan.Mounts = append(plan.Mounts, Mount{Kind: "symlink", Dest: l[1], Target: l[0]})
			}
		}
	}
	// Read-only paths before masks, in libcontainer's order: a read-only
	// path is a recursive bind of itself, so a mask below it made first
	// would be copied into that bind and also stay beneath it, the point
	// mounted twice where a cold start has it once.
	for _, p := range cfg.ReadonlyPaths {
		plan.Mounts = append(plan.Mounts, Mount{Kind: "readonly", Dest: p})
	}
	for _, p := range cfg.MaskPaths {
		plan.Mounts = append(plan.Mounts, Mount{Kind: "mask", Dest: p})
	}
	return plan, trees, nil
}
