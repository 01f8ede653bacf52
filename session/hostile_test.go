package session

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// refusalProbe tries each system call through raw ctypes syscall(2), not
// the os module, and prints {name: errno} (0 means it succeeded).
const refusalProbe = `
import ctypes, json, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
def sock(domain, typ, proto=0):
    try:
        socket.socket(domain, typ, proto).close(); return 0
    except OSError as e:
        return e.errno
buf = ctypes.create_string_buffer(256)
out = {
  "mount": sc(165, ctypes.addressof(ctypes.create_string_buffer(b"none")), ctypes.addressof(ctypes.create_string_buffer(b"/tmp")), ctypes.addressof(ctypes.create_string_buffer(b"tmpfs")), 0, 0),
  "unshare_user": sc(272, 0x10000000),
  "unshare_net": sc(272, 0x40000000),
  "setns": sc(308, 0, 0),
  "ptrace_traceme": sc(101, 0, 0, 0, 0),
  "keyctl": sc(250, 0, 0, 0, 0),
  "add_key": sc(248, ctypes.addressof(ctypes.create_string_buffer(b"user")), ctypes.addressof(ctypes.create_string_buffer(b"k")), 0, 0, -2),
  "bpf": sc(321, 0, ctypes.addressof(buf), 48),
  "perf_event_open": sc(298, ctypes.addressof(buf), 0, -1, -1, 0),
  "userfaultfd": sc(323, 0),
  "io_uring_setup": sc(425, 8, ctypes.addressof(buf)),
  "clock_settime": sc(227, 0, ctypes.addressof(buf)),
  "reboot": sc(169, 0xfee1dead, 672274793, 0x4321fedc, 0),
  "kexec_load": sc(246, 0, 0, 0, 0),
  "init_module": sc(175, 0, 0, 0),
  "open_by_handle_at": sc(304, 0, ctypes.addressof(buf), 0),
  "af_alg": sock(38, socket.SOCK_SEQPACKET),
  "af_packet": sock(17, socket.SOCK_RAW),
  "af_vsock": sock(40, socket.SOCK_STREAM),
  "raw_inet": sock(socket.AF_INET, socket.SOCK_RAW, 1),
  # Families and protocols whose socket has the host load a module.
  "af_tipc": sock(30, socket.SOCK_SEQPACKET),
  "af_rds": sock(21, socket.SOCK_SEQPACKET),
  "af_can": sock(29, socket.SOCK_RAW, 1),
  "af_kcm": sock(41, socket.SOCK_DGRAM),
  "af_inet_sctp": sock(socket.AF_INET, socket.SOCK_STREAM, 132),
  "af_inet_l2tp": sock(socket.AF_INET, socket.SOCK_DGRAM, 115),
  "af_netlink_netfilter": sock(16, socket.SOCK_RAW, 12),
  "af_xdp": sock(44, socket.SOCK_RAW),
  "af_inet_mptcp": sock(socket.AF_INET, socket.SOCK_STREAM, 262),
  "af_inet_udplite": sock(socket.AF_INET, socket.SOCK_DGRAM, 136),
  "af_tipc_socketpair": sc(53, 30, socket.SOCK_SEQPACKET, 0, ctypes.addressof(buf)),
  "modify_ldt": sc(154, 0, ctypes.addressof(buf), 16),
  # One AIO context of 65536 events took the host's whole fs.aio-max-nr.
  "io_setup": sc(206, 65536, ctypes.addressof(ctypes.c_ulong(0))),
  # Huge pages of the host's pool, charged to no memory limit. Without a
  # pool the kernel itself answers ENOMEM (mmap, shmget) or succeeds
  # (memfd_create): EPERM is the filter's.
  "mmap_hugetlb": sc(9, 0, 2 << 20, 3, 0x22 | 0x40000, -1, 0),
  "shmget_hugetlb": sc(29, 0, 2 << 20, 0o1000 | 0o4000 | 0o600),
  "memfd_create_hugetlb": sc(319, ctypes.addressof(ctypes.create_string_buffer(b"h")), 4),
  # The same calls without the flag stay allowed.
  "allowed_mmap": sc(9, 0, 2 << 20, 3, 0x22, -1, 0),
  "allowed_shmget": sc(29, 0, 2 << 20, 0o1000 | 0o600),
  "allowed_memfd_create": sc(319, ctypes.addressof(ctypes.create_string_buffer(b"h")), 0),
}
# x32 ABI: getpid with the x32 bit. A bad-ABI call may kill the caller, so
# it runs in a child; anything but a successful return is a refusal.
x32 = subprocess.run([sys.executable, "-c", "import ctypes;l=ctypes.CDLL(None,use_errno=True);r=l.syscall(ctypes.c_long(0x40000000|39));print(r, ctypes.get_errno())"], capture_output=True, text=True)
out["x32_getpid"] = -x32.returncode if x32.returncode else int(x32.stdout.split()[1]) if x32.stdout.split()[0] == "-1" else 0
# 32-bit entry: int 0x80 getpid (20) from a tiny machine-code stub.
import mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax,20; int 0x80; ret
i386 = subprocess.run([sys.executable, "-c", "import ctypes,mmap;m=mmap.mmap(-1,4096,prot=7);m.write(%r);f=ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)));print(f())" % code], capture_output=True, text=True)
out["int80_getpid"] = -i386.returncode if i386.returncode else (0 if i386.stdout.strip().isdigit() and int(i386.stdout) > 0 else 1)
# CVE-2019-5736: no process's exe can be opened for writing.
def wopen(p):
    try:
        open(p, "r+b").close(); return 0
    except OSError as e:
        return e.errno
out["write_proc_self_exe"] = wopen("/proc/self/exe")
# Read-only /proc/sys and /sys, masked /proc entries.
def wfile(p, data):
    try:
        with open(p, "w") as f: f.write(data)
        return 0
    except OSError as e:
        return e.errno
out["ro_proc_sys"] = wfile("/proc/sys/kernel/hostname", "x")
out["ro_sys"] = wfile("/sys/kernel/uevent_helper", "/tmp/x")
out["ro_sysrq"] = wfile("/proc/sysrq-trigger", "b")
out["masked_kcore"] = len(open("/proc/kcore", "rb").read(16)) if os.path.exists("/proc/kcore") else 0
out["masked_keys"] = len(open("/proc/keys").read()) if os.path.exists("/proc/keys") else 0
# The host's boot id: the same in every sandbox, a host identifier.
out["masked_boot_id"] = len(open("/proc/sys/kernel/random/boot_id").read())
# TIOCSTI: inject input into a terminal (CVE-2017-5226 class).
import fcntl, termios
def sti(fd):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x"); return 0
    except OSError as e:
        return e.errno
out["tiocsti_stdin"] = sti(0)
try:
    ttyfd = os.open("/dev/tty", os.O_RDWR)
    out["tiocsti_tty"] = sti(ttyfd)
except OSError as e:
    out["tiocsti_tty"] = e.errno
out["write_proc_1_exe"] = wopen("/proc/1/exe")
print(json.dumps(out))
`

// TestSeccompRefusesDangerousSyscalls runs each call named by the hostile
// suite from inside a real sandbox and checks it is refused with the
// policy's errno (EPERM), or for bad-ABI entries, refused at all.
func TestSeccompRefusesDangerousSyscalls(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, refusalProbe, 60*time.Second)
	wantStatus(t, res, StatusOK)
	var got map[string]int
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &got); err != nil {
		t.Fatalf("probe output %q: %v", res.Stdout, err)
	}
	const eperm = 1
	for name, errno := range got {
		switch {
		case strings.HasPrefix(name, "af_") || name == "raw_inet":
			// Socket families outside the allowlist: EPERM from the filter
			// or EAFNOSUPPORT (97) where the family is not even built.
			if errno != eperm && errno != 97 {
				t.Errorf("%s: errno %d, want EPERM", name, errno)
			}
		case strings.HasPrefix(name, "masked_"):
			if errno != 0 {
				t.Errorf("%s: %d bytes readable, want a masked (empty) file", name, errno)
			}
		case strings.HasPrefix(name, "ro_") || strings.HasPrefix(name, "tiocsti"):
			// EROFS, EACCES, EPERM, ENOTTY, ENXIO: refused, whichever.
			if errno == 0 {
				t.Errorf("%s: allowed", name)
			}
		case strings.HasPrefix(name, "write_proc"):
			if errno == 0 {
				t.Errorf("%s: opened for writing", name)
			}
		case strings.HasPrefix(name, "allowed_"):
			if errno != 0 {
				t.Errorf("%s: errno %d, want allowed", name, errno)
			}
		case name == "x32_getpid" || name == "int80_getpid":
			if errno == 0 {
				t.Errorf("%s: succeeded, want refused", name)
			}
		default:
			if errno != eperm {
				t.Errorf("%s: errno %d, want EPERM (%d)", name, errno, eperm)
			}
		}
	}
	if len(got) < 20 {
		t.Fatalf("probe reported only %d calls: %v", len(got), got)
	}
	t.Logf("refusals: %v", got)
}

func TestCPULimitThrottles(t *testing.T) {
	e := newEnv(t, nil)
	cpus := 0.2
	info, err := e.m.Create(context.Background(), CreateOptions{Override: &policy.Override{CPUs: &cpus}})
	if err != nil {
		t.Fatal(err)
	}
	res := e.exec(t, info.ID, "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass", 30*time.Second)
	wantStatus(t, res, StatusOK)
	// A ratio within one run, not a timing: with a 0.2-core quota the
	// busy loop gets about a fifth of its wall time on a CPU.
	if ratio := float64(res.Usage.CPUMS) / float64(res.Usage.WallMS); ratio > 0.5 {
		t.Fatalf("cpu %d ms over wall %d ms = %.2f, want throttled near 0.2", res.Usage.CPUMS, res.Usage.WallMS, ratio)
	}
}

func TestEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("JAILCELL_HOST_SECRET", "leak")
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, "import os, socket\nprint(sorted(os.environ))\nprint(socket.gethostname())", 0)
	wantStatus(t, res, StatusOK)
	if strings.Contains(res.Stdout, "JAILCELL_HOST_SECRET") || strings.Contains(res.Stdout, "GOPATH") {
		t.Fatalf("host environment leaked: %q", res.Stdout)
	}
	host, _ := os.Hostname()
	if lines := strings.Split(strings.TrimSpace(res.Stdout), "\n"); len(lines) != 2 || lines[1] != "sandbox" || lines[1] == host {
		t.Fatalf("hostname: %q", res.Stdout)
	}
}
