// Package criu drives CRIU for isolate's checkpoints and restores: the
// configuration files and options handed to libcontainer, the probe that
// a host's criu really dumps and restores, the bound on each operation
// (one criu of this process at a time, killed with its descendants past
// its bound), the checkpoint images' ownership and the user namespace
// image moved to another uid slot.
//
// It knows nothing of sandboxes, disks or hosts; isolate's Checkpoint and
// Restore call it. It must never leave a criu of its own running past its
// bound, kill a process that is not a criu child of this one (or that
// child's descendants), or give an image to anyone but the sandbox's
// mapped root and host root.
package criu
