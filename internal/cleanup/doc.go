// Package cleanup is one stack of undo steps for multi-step setup (after
// gVisor's pkg/cleanup): each step's undo is added right after the step
// succeeds, and on failure they run last first; on success the stack is
// released and the owner undoes the setup in its own time. It must never
// hide an undo's error: Run returns them all.
package cleanup
