package session

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/jailcell/jailcell/isolate"
	"golang.org/x/sys/unix"
)

// The kernel charges some counts to every user namespace up to the
// initial one, so what a cell holds is also held by host root's uid (a
// sandbox's namespace is root's) and, for a zygote's forks, by the
// zygote's uid, shared by its siblings. countsCell takes as much of each
// as the sandbox can, keeps it (the kernel's own process holds the
// queued signals, the queues and the locked segments) and prints a line
// per count: "NAME got ERRNO".
const countsCell = `
import ctypes, ctypes.util, errno, os, signal
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
rt = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
MAX = 100000

# Queued real-time signals, to a child that blocks them: they stay
# pending, charged to the child's user, for as long as it lives.
r, w = os.pipe()
HELD_CHILD = os.fork()
if HELD_CHILD == 0:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    os.write(w, b"x")
    while True:
        signal.pause()
os.read(r, 1)
n, e = 0, "none"
while n < MAX:
    if libc.sigqueue(HELD_CHILD, int(signal.SIGRTMIN), ctypes.c_void_p(0)) != 0:
        e = err(); break
    n += 1
print("sigpending", n, e)

# POSIX message queues, the smallest there are.
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("cur", ctypes.c_long), ("pad", ctypes.c_long * 4)]
rt.mq_open.restype = ctypes.c_int
attr = Attr(0, 1, 1024, 0)
HELD_MQ = []
n, e = 0, "none"
while n < MAX:
    fd = rt.mq_open(("/held%d" % n).encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
    if fd < 0:
        e = err(); break
    HELD_MQ.append(fd); n += 1
print("msgqueue", n, e)

# SysV shared memory locked with SHM_LOCK (charged as locked memory).
IPC_PRIVATE, SHM_LOCK = 0, 11
HELD_SHM = []
n, e = 0, "none"
while n < MAX:
    sid = libc.shmget(IPC_PRIVATE, 4096, 0o600 | 0o1000)
    if sid < 0:
        e = err(); break
    HELD_SHM.append(sid)
    if libc.shmctl(sid, SHM_LOCK, None) != 0:
        e = err(); break
    n += 1
print("memlock", n, e)

# inotify and fanotify: refused by the filter, so nothing is held.
print("inotify", libc.inotify_init1(0), err())
print("fanotify", libc.fanotify_init(0, 0), err())
# New namespaces (each kind is a count of its own): refused too.
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWIPC = 0x10000000, 0x00020000, 0x08000000
for name, flag in (("userns", CLONE_NEWUSER), ("mntns", CLONE_NEWNS), ("ipcns", CLONE_NEWIPC)):
    print(name, libc.unshare(flag), err())
`

// countsOf parses countsCell's output.
func countsOf(t *testing.T, out string) map[string][2]string {
	t.Helper()
	got := map[string][2]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("counts cell printed %q:\n%s", l, out)
		}
		got[f[0]] = [2]string{f[1], f[2]}
	}
	return got
}

// wantShares: each rlimit count stopped at the sandbox's own share (n
// taken, then the errno a full count gives), and every refused call was
// refused.
func wantShares(t *testing.T, who string, got map[string][2]string) {
	t.Helper()
	for name, want := range map[string]struct {
		max   int
		errno string
	}{
		"sigpending": {isolate.SigpendingShare, "EAGAIN"},
		// 1 message of 1 KiB costs a little over 1 KiB.
		"msgqueue": {isolate.MsgqueueShare / 1024, "EMFILE"},
		"memlock":  {isolate.MemlockShare / 4096, "ENOMEM"},
	} {
		g := got[name]
		var n int
		fmt.Sscan(g[0], &n)
		if n < 1 || n > want.max || g[1] != want.errno {
			t.Errorf("%s: %s took %s then %s; want 1..%d then %s", who, name, g[0], g[1], want.max, want.errno)
		}
	}
	for _, name := range []string{"inotify", "fanotify", "userns", "mntns", "ipcns"} {
		if g := got[name]; g[0] != "-1" || g[1] != "EPERM" {
			t.Errorf("%s: %s returned %s (%s); want -1 EPERM (refused)", who, name, g[0], g[1])
		}
	}
}

// TestHostileKernelCountsStayPerSession: a cell takes every count the
// kernel charges up the user namespaces and keeps it; another session
// still gets its own share, and a root process on the host still gets
// each. Before the shares, one cell took 96,367 queued signals and
// 128 inotify instances from host root. Cold starts and zygote forks
// (whose charges also meet at the zygote's uid) alike.
func TestHostileKernelCountsStayPerSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		wait bool
	}{
		{"cold", nil, false},
		{"zygote", func(c *Config) { c.Preload = []string{"json"}; c.NoTemplate = true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.mod)
			start := ""
			if tc.wait {
				waitZygote(t, e.m)
				start = StartZygote
			}
			mk := func() string {
				if start != "" {
					return createStarted(t, e.m, start)
				}
				return e.create(t, CreateOptions{})
			}
			a, b := mk(), mk()
			resA := e.exec(t, a, countsCell, 120*time.Second)
			wantStatus(t, resA, StatusOK)
			wantShares(t, "session A", countsOf(t, resA.Stdout))

			// While A holds its shares: another session gets its own, and
			// host root gets one of each.
			resB := e.exec(t, b, countsCell, 120*time.Second)
			wantStatus(t, resB, StatusOK)
			wantShares(t, "session B", countsOf(t, resB.Stdout))
			hostRootGetsOneOfEach(t)

			// A still holds what it took (the counts were kept, not given
			// back at the end of the cell).
			res := e.exec(t, a, `print(len(HELD_MQ), open("/proc/%d/status" % HELD_CHILD).read().split("SigQ:")[1].split("/")[0].strip())`, 0)
			wantStatus(t, res, StatusOK)
			if f := strings.Fields(res.Stdout); len(f) != 2 || f[0] == "0" || f[1] != fmt.Sprint(isolate.SigpendingShare) {
				t.Errorf("session A gave its counts back: %q", res.Stdout)
			}
		})
	}
}

// hostRootGetsOneOfEach: this test process (host root, the initial user
// namespace) queues a real-time signal to itself, opens a POSIX message
// queue and an inotify instance, and gives each back. Locked memory is not
// tried: host root passes its limit by CAP_IPC_LOCK. Go, not Python: the
// cgroup v2 guest has no Python outside the rootfs, and running the
// rootfs's Python on the host would write into the tree every sandbox
// shares.
func hostRootGetsOneOfEach(t *testing.T) {
	t.Helper()
	// A queued signal: counted when it is queued, freed when the runtime
	// takes it (a real-time signal nothing listens for is dropped).
	const sig = 40
	var info [128]byte
	code := int32(-1) // SI_QUEUE
	*(*int32)(unsafe.Pointer(&info[0])) = sig
	*(*int32)(unsafe.Pointer(&info[8])) = code
	*(*int32)(unsafe.Pointer(&info[16])) = int32(os.Getpid())
	if _, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(os.Getpid()), sig, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		t.Errorf("host root could not queue a signal while sessions held theirs: %v", e)
	}
	// The smallest POSIX message queue.
	name := fmt.Sprintf("jailcell-test-%d", os.Getpid())
	attr := [8]int64{0, 1, 1024, 0}
	nameb, _ := unix.BytePtrFromString(name)
	fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(nameb)), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600, uintptr(unsafe.Pointer(&attr[0])), 0, 0)
	if e != 0 {
		t.Errorf("host root could not open a message queue while sessions held theirs: %v", e)
	} else {
		unix.Close(int(fd))
		if _, _, e := unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(nameb)), 0, 0); e != 0 {
			t.Errorf("remove the test's message queue %s: %v", name, e)
		}
	}
	if ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("host root could not make an inotify instance: %v", err)
	} else {
		unix.Close(ifd)
	}
}
