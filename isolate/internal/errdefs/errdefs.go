package errdefs

import "errors"

// Each is re-exported by isolate under the same name (isolate/errors.go).

// ErrUnsupported: the host cannot give an isolation feature the policy
// asks for (user namespaces, idmapped mounts, overlayfs, a cgroup
// controller, seccomp). Fail closed.
var ErrUnsupported = errors.New("isolation feature not supported by this host")

// ErrTimeout: a checkpoint or restore passed its bound (criu hung);
// the criu it started was killed.
var ErrTimeout = errors.New("checkpoint/restore timed out")

// ErrBusy: RestoreIfIdle found another checkpoint or restore of this
// process running (they run one at a time); nothing was restored.
var ErrBusy = errors.New("another checkpoint or restore is running")
