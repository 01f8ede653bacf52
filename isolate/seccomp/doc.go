// Package seccomp builds a sandbox's seccomp allowlist (Docker's default
// profile for a process with no capabilities, made stricter) and reads
// filter programs back from live threads, through this binary re-executed
// as a short-lived or kept-running helper, so that a restored or forked
// sandbox's filters can be compared with a cold start's.
//
// It must never produce a filter wider than Docker's default profile for
// an unprivileged container, nor let an unknown rule or argument condition
// count as refusing: what it cannot judge, it fails closed on. It knows
// nothing of sandboxes, disks or hosts; isolate holds the per-host caches.
package seccomp
