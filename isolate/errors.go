package isolate

import (
	"errors"
	"fmt"

	"github.com/jailcell/jailcell/isolate/internal/errdefs"
)

// Sentinel errors. The API layer maps them to wire codes with errors.Is.
var (
	// ErrUnsupported: the host cannot give an isolation feature the policy
	// asks for (user namespaces, idmapped mounts, overlayfs, a cgroup
	// controller, seccomp). Fail closed.
	ErrUnsupported = errdefs.ErrUnsupported
	// ErrNotFound: no sandbox with that id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrNotMounted: a disk's tmpfs is gone (the host rebooted); it is an
	// ErrNotFound.
	ErrNotMounted = fmt.Errorf("%w: disk not mounted", ErrNotFound)
	// ErrExhausted: no free uid slot is left for another sandbox.
	ErrExhausted = errors.New("sandbox slots exhausted")
	// ErrCopyBudget: a copy of a disk's files (SaveUpper, CopyUpper,
	// CopyFileData) would allocate more than its Meter allows.
	ErrCopyBudget = errors.New("copy over its byte budget")
	// ErrTimeout: a checkpoint or restore passed its bound (criu hung);
	// the criu it started was killed.
	ErrTimeout = errdefs.ErrTimeout
	// ErrBusy: RestoreIfIdle found another checkpoint or restore of this
	// process running (they run one at a time); nothing was restored.
	ErrBusy = errdefs.ErrBusy
	// ErrPosture: a restored sandbox's confinement (seccomp, capabilities,
	// no_new_privs, id maps, namespaces, cgroup, mounts), read from /proc,
	// differs from a cold start's; it was destroyed. The images asked for
	// less isolation than the policy (edited, or not this node's).
	ErrPosture = errors.New("restored kernel's posture differs from a cold start's")
)
