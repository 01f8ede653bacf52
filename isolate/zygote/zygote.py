"""jailcell zygote: one preloaded interpreter per policy that sessions fork from.

The daemon starts this as a libcontainer sandbox of its own (its own mount,
net, ipc, uts and cgroup namespaces, an unprivileged host uid, no
capabilities, no_new_privs) and talks to it over fd 3, a SOCK_SEQPACKET
socket: one JSON message per request, descriptors beside it.

  {"op": "fork", "nonce": "...", "plan": {...}}   + fds: session socket, log, mount trees
  -> {"pid": N, "nonce": "..."} or {"error": "...", "nonce": "..."}

The child is cloned with CLONE_PARENT (the daemon is its parent and reaps
it, as it reaps a cold start's init) and fresh user, mount, pid, net, ipc
and uts namespaces. It waits on its session socket until the daemon has
written its uid and gid maps (its own uid slot) and put it in the session's
cgroup, then builds the sandbox's mounts from the trees the daemon opened
(root, binds, devices) and its own proc, sysfs, devpts, mqueue and tmpfs,
pivots into it, drops every capability, loads the seccomp program a cold
start loads, says "R" and runs the kernel. Nothing of this file's state
survives into the session but the imported modules. The host then checks
the child's posture against a cold start's before handing it out.

Only this file's code runs before the seccomp filter is in place (nothing is
imported between the fork and the filter: the import path is then the
session's root, which cells write); a cell's code runs only after, in the
kernel. x86_64 and aarch64.
"""

import array
import base64
import ctypes
import fcntl
import gc
import importlib
import importlib.machinery
import json
import os
import platform
import resource
import socket
import struct
import sys
import types

_SYSCALLS = {
    # name: (x86_64, aarch64)
    "clone": (56, 220),
    "unshare": (272, 97),
    "pivot_root": (155, 41),
    "move_mount": (429, 429),
    "seccomp": (317, 277),
    "capset": (126, 91),
}
_ARCH = {"x86_64": 0, "aarch64": 1}.get(platform.machine())

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_PARENT = 0x00008000
SIGCHLD = 17
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_SET_MODE_FILTER = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

# Where the child attaches its new root before pivoting: a directory of the
# rootfs, empty in it, that nothing else uses in the zygote.
NEWROOT = "/mnt"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


class SetupError(Exception):
    pass


def _check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise SetupError("%s: %s" % (what, os.strerror(e)))
    return r


def _sys(name, *args):
    return _check(_libc.syscall(_SYSCALLS[name][_ARCH], *args), name)


def _mount(src, target, fstype, flags, data=None):
    _check(_libc.mount(src.encode() if src else None, target.encode(),
                       fstype.encode() if fstype else None, flags,
                       data.encode() if data else None),
           "mount %s on %s" % (fstype or src, target))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _drop_capabilities():
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop capability %d from the bounding set" % cap)
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    hbuf = ctypes.create_string_buffer(header, len(header))
    dbuf = ctypes.create_string_buffer(24)  # two zeroed cap_user_data_t
    _sys("capset", hbuf, dbuf)


def _load_seccomp(prog):
    if len(prog) % 8 or not prog:
        raise SetupError("seccomp program of %d bytes" % len(prog))
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _sys("seccomp", SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(fprog))


def _loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def _under(path):
    return NEWROOT + path


def _ensure(path, kind):
    """Make the mount point path (inside the new root) as kind ("dir" or
    "file"). Paths are resolved in this child's own mount namespace, which
    only it can change."""
    full = _under(path)
    if kind == "dir":
        os.makedirs(full, mode=0o755, exist_ok=True)
    elif not os.path.lexists(full):
        os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
        os.close(os.open(full, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))


def _build(plan, trees):
    """Build the sandbox's mounts under NEWROOT, in plan order."""
    _sys("move_mount", trees[plan["root"]], b"", AT_FDCWD, NEWROOT.encode(), MOVE_MOUNT_F_EMPTY_PATH)
    for m in plan["mounts"]:
        kind, dest = m["kind"], m["dest"]
        if kind == "tree":
            _ensure(dest, m.get("is", "dir"))
            _sys("move_mount", trees[m["tree"]], b"", AT_FDCWD, _under(dest).encode(), MOVE_MOUNT_F_EMPTY_PATH)
        elif kind == "fs":
            _ensure(dest, "dir")
            _mount(m["source"], _under(dest), m["fstype"], m["flags"], m.get("data"))
        elif kind == "symlink":
            if not os.path.lexists(_under(dest)):
                os.symlink(m["target"], _under(dest))
        elif kind == "mask":
            full = _under(dest)
            if os.path.isdir(full):
                _mount("tmpfs", full, "tmpfs", MS_RDONLY, None)
            elif os.path.lexists(full):
                _mount(_under("/dev/null"), full, None, MS_BIND, None)
        elif kind == "readonly":
            full = _under(dest)
            if os.path.lexists(full):
                _mount(full, full, None, MS_BIND | MS_REC, None)
                _mount(None, full, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        else:
            raise SetupError("plan: unknown mount kind %r" % kind)
    os.chdir(NEWROOT)
    _sys("pivot_root", b".", b".")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the zygote's root")
    os.chdir("/")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)


def _close_all_but(keep):
    lo = 3
    for fd in sorted(keep):
        if fd >= lo:
            os.closerange(lo, fd)
            lo = fd + 1
    os.closerange(lo, 1 << 20)


def _seal_imports():
    """Until the seccomp filter is in, nothing is imported: after the
    pivot the import path is the session's root, which its cells write (a
    resource.py of theirs, imported here, ran with every capability of its
    user namespace and no filter). Only built-in and frozen modules stay
    importable. Returns what _unseal_imports puts back."""
    saved = (sys.path[:], sys.meta_path[:])
    sys.path[:] = []
    sys.meta_path[:] = [m for m in sys.meta_path
                        if m in (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter)]
    sys.path_importer_cache.clear()
    return saved


def _unseal_imports(saved):
    sys.path[:], sys.meta_path[:] = saved
    sys.path_importer_cache.clear()


def _child(sock, log, trees, plan, prog, run):
    """The forked child: become the session's sandbox, then its kernel."""
    sealed = _seal_imports()
    # The zygote's control socket (fd 3) and anything else it held are
    # not the child's: with the socket, code in the child could read other
    # sessions' fork requests (their mount trees) and forge answers.
    _close_all_but([sock.fileno(), log] + list(trees))
    # The daemon writes the id maps and moves us into the session's
    # cgroup, then says go.
    if sock.recv(16) != b"G":
        os._exit(121)
    # Its own session, as libcontainer's init makes one: criu refuses to
    # dump a tree whose session leader (the zygote) is outside it.
    os.setsid()
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    _sys("unshare", CLONE_NEWCGROUP)
    _build(plan, trees)
    name = plan["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    _loopback_up()
    for res, soft, hard in plan["rlimits"]:
        inf = resource.RLIM_INFINITY
        resource.setrlimit(res, (inf if soft >= 1 << 63 else soft, inf if hard >= 1 << 63 else hard))
    for fd in trees:
        os.close(fd)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 20)
    os.chdir(plan.get("cwd") or "/")
    os.environ.clear()
    for kv in plan["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    _drop_capabilities()
    # The uid change made it undumpable (its /proc files root's: criu's
    # prlimit and ptrace of it failed); a cold start's init is dumpable,
    # its execve having reset the flag.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "set dumpable")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    _load_seccomp(prog)
    _unseal_imports(sealed)
    sock.send(b"R")
    sock.close()
    # The kernel, as `python3 SCRIPT ARGS...` would run it.
    argv0, code = run
    sys.argv = argv0 + plan["args"]
    main = types.ModuleType("__main__")
    if argv0[0] != "-c":
        main.__file__ = argv0[0]
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(code, main.__dict__)
    os._exit(0)


def _fork(req, fds, prog, run):
    plan = req["plan"]
    sock = socket.socket(fileno=fds[0])
    log, trees = fds[1], fds[2:]
    flags = (CLONE_PARENT | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET
             | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD)
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _libc.syscall(_SYSCALLS["clone"][_ARCH], flags, 0, 0, 0, 0)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        try:
            _child(sock, log, trees, plan, prog, run)
        except BaseException as e:  # noqa: B036: anything ends the child, said
            try:
                sock.send(b"E" + ("%s: %s" % (type(e).__name__, e)).encode()[:4000])
            finally:
                os._exit(122)
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    sock.close()
    for fd in fds[1:]:
        os.close(fd)
    if pid < 0:
        return {"error": "clone: " + os.strerror(err)}
    return {"pid": pid}


def main():
    if _ARCH is None:
        print("zygote: unsupported architecture %s" % platform.machine(), file=sys.stderr)
        sys.exit(2)
    conf = json.loads(os.environ.pop("JAILCELL_ZYGOTE", "{}"))
    prog = base64.b64decode(conf["seccomp"])
    # What a fork runs, as the interpreter would: `-c PROGRAM ARGS...`
    # (argv ["-c", ARGS...]) or `SCRIPT ARGS...` (argv [SCRIPT, ARGS...]).
    cmd = conf["command"]
    if cmd[0] == "-c":
        code = compile(cmd[1], "<string>", "exec")
        argv0 = ["-c"] + cmd[2:]
    else:
        with open(cmd[0], "rb") as f:
            code = compile(f.read(), cmd[0], "exec")
        argv0 = cmd
    for name in conf.get("preload", []):
        importlib.import_module(name)
    # The program's own warm-up, "module:function" called with its
    # arguments (the kernel's hooks, preload and first figure).
    warm = conf.get("warm")
    if warm and warm.get("call"):
        mod, _, fn = warm["call"].partition(":")
        getattr(importlib.import_module(mod), fn)(*warm.get("args", []))
    import threading
    if threading.active_count() != 1:
        # A fork copies only the thread that forks: a lock another held
        # would stay held in every fork.
        print("zygote: %d threads after the preload; a zygote must have one" % threading.active_count(), file=sys.stderr)
        sys.exit(3)
    # Collected objects would dirty shared pages in every child; what was
    # imported is kept for good.
    gc.collect()
    gc.freeze()
    ctl = socket.socket(fileno=3)
    ctl.send(json.dumps({"ready": True}).encode())
    maxfds = 16
    while True:
        msg, anc, _, _ = ctl.recvmsg(1 << 16, socket.CMSG_SPACE(maxfds * 4))
        if not msg:
            return
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(data[:len(data) - len(data) % a.itemsize])
                fds.extend(a)
        nonce = None
        try:
            req = json.loads(msg)
            nonce = req.get("nonce")
            if req.get("op") != "fork" or len(fds) < 3:
                raise ValueError("want a fork request with a socket, a log and a root")
            reply = _fork(req, fds, prog, (argv0, code))
        except Exception as e:  # noqa: BLE001: said to the daemon
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        # The daemon ties an answer to its request by the nonce it sent.
        reply["nonce"] = nonce
        ctl.send(json.dumps(reply).encode())


if __name__ == "__main__":
    main()
