// Package isolate turns a policy.Policy into a running sandbox: user, pid,
// mount, network, ipc, uts and cgroup namespaces, cgroup limits, a seccomp
// allowlist, no capabilities and no_new_privs, around an overlay of the
// read-only Python rootfs. It is built on libcontainer, embedded.
//
// isolate owns every kernel-facing step and nothing else: it knows nothing of
// Python, cells or sessions. It must never run a process with less isolation
// than the policy asks for: a feature the host cannot give is an error, not a
// silent downgrade.
//
// Mechanisms with a clean seam live in sub-packages that never import
// isolate: seccomp (the allowlist and reading filters back), criu
// (driving CRIU, its bounds and images), network (the egress gateway) and
// zygote (the zygote's program, the fork plan it is sent, its answers and
// the id mapper; the Host still starts zygotes and forks, as it still
// checkpoints a sandbox, because both act on its own sandboxes).
// internal/ holds what they share below them: the sentinel errors
// (errdefs, re-exported here), the re-executed line helper (helper) and
// /proc/PID/stat reading (procfs).
package isolate
