package errdefs

import "errors"

// ErrUnsupported: the host cannot give an isolation feature the policy
// asks for (user namespaces, idmapped mounts, overlayfs, a cgroup
// controller, seccomp). Fail closed. isolate.ErrUnsupported is this value.
var ErrUnsupported = errors.New("isolation feature not supported by this host")
