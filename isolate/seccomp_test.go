package isolate

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// netlinkProbe tries netlink sockets from inside a sandbox and prints each
// outcome: 0 for a socket, else the errno.
const netlinkProbe = `
import ctypes, json, platform, socket
out = {}
def attempt(key, fn):
    try:
        fn().close()
        out[key] = 0
    except OSError as e:
        out[key] = e.errno
attempt("audit_raw", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9))
attempt("audit_dgram", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 9))
attempt("route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
# The kernel truncates the protocol to int: 9 with garbage in the upper
# half is NETLINK_AUDIT to it.
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {"x86_64": 41, "aarch64": 198}[platform.machine()]
fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(16), ctypes.c_long(3), ctypes.c_long(9 | 1 << 32))
out["audit_upper_bits"] = 0 if fd >= 0 else ctypes.get_errno()
print(json.dumps(out), flush=True)
`

// TestHostileNetlinkAudit: a cell cannot open a NETLINK_AUDIT socket
// (Docker-era profiles refuse it without CAP_AUDIT_WRITE; the audit
// subsystem is not namespaced), not even with the protocol's upper bits
// set, while NETLINK_ROUTE (getifaddrs, if_nameindex) still works.
func TestHostileNetlinkAudit(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	d, err := h.NewDisk("netlinkaudit"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(); err != nil {
			t.Errorf("destroy disk: %v", err)
		}
	})
	logf, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", netlinkProbe},
		Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work", Log: logf})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	select {
	case <-sb.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("probe did not finish in 60 s")
	}
	raw, _ := os.ReadFile(logf.Name())
	var got map[string]int
	if err := json.Unmarshal(raw, &got); err != nil || sb.Exit().Code != 0 {
		t.Fatalf("probe (%s): %q: %v", sb.Exit(), raw, err)
	}
	t.Logf("netlink: %v", got)
	eperm := int(policy.Errnos[p.SeccompErrno])
	for _, k := range []string{"audit_raw", "audit_dgram", "audit_upper_bits"} {
		if got[k] != eperm {
			t.Errorf("%s: %d, want refused by the filter (errno %d)", k, got[k], eperm)
		}
	}
	if v, ok := got["route"]; !ok || v != 0 {
		t.Errorf("NETLINK_ROUTE socket: %d, want it allowed as in Docker's profile", v)
	}
}
