"""Start-up: PID 1 of the sandbox forks; the parent stays behind as a bare
init and the child becomes the kernel (main)."""

# Only os, signal and sys may be imported before the fork below: the process
# that stays behind as PID 1 should not carry the kernel's modules.
import os
import signal
import sys

from .state import _State, _log, _on_sigint

# Signals PID 1 forwards to the kernel.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)

# What PID 1 runs after the fork, exec'd into a bare interpreter: forward
# signals to the kernel, reap every orphan, leave with the kernel's status.
#
# It takes its signals synchronously: they stay blocked and sigwaitinfo
# dequeues them, one by one. A Python-level handler here lost signals:
# CPython runs one between bytecodes, and a signal that came after the last
# check but before os.wait() entered wait4 (the init was just starting,
# slowed by load, when the host interrupted the first cell) stayed pending
# until the next signal, 30 s later at the cell's timeout. A blocked signal
# is also never dropped: in a pid namespace PID 1 gets only the signals it
# handles or blocks.
_INIT = """
import os, signal, sys
pid = int(sys.argv[1])
F = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
W = set(F) | {signal.SIGCHLD}
signal.pthread_sigmask(signal.SIG_BLOCK, W)
def reap():
    while True:
        try:
            wpid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            os._exit(1)
        if wpid == 0:
            return
        if wpid == pid:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)
reap()  # whatever ended before SIGCHLD was blocked
while True:
    sig = signal.sigwaitinfo(W).si_signo
    if sig == signal.SIGCHLD:
        reap()
        continue
    try:
        os.kill(pid, sig)
    except OSError:
        pass
"""


def _become_init():
    """Fork. The child returns and becomes the kernel; the parent stays
    behind as a minimal init and never returns."""
    # Block the forwarded signals across the fork so that none is lost, or
    # handled with the wrong disposition, before each side has set up.
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    # In a pid namespace the kernel dies with PID 1 anyway; this pipe makes
    # it do so everywhere else too (tests, a host that signals PID 1 only).
    death_r, death_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(death_w)
        _State.init_pipe = death_r
        # A Python-level handler (not SIG_IGN) so that programs the cells
        # exec still get the default SIGINT disposition.
        signal.signal(signal.SIGINT, _on_sigint)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        return
    os.close(death_r)
    # Stay behind as a fresh, bare interpreter running only _INIT: a few MB
    # instead of this process's pages, which every checkpoint of the
    # sandbox would carry twice (here and, copy-on-write, in the kernel).
    # The forwarded signals stay blocked across the exec, and in _INIT,
    # which waits for them; the pipe's write end stays open in it.
    os.set_inheritable(death_w, True)
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _INIT, str(pid)])
    except OSError:
        pass  # no exec: run the same loop in this process
    sys.argv = ["", str(pid)]
    exec(_INIT, {"__name__": "_jailcell_init"})


_USAGE = "usage: jailcell_kernel --connect SOCKET [--preload MODULE,...]"


def _parse_args(argv):
    path, preload = None, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--connect" and i + 1 < len(argv):
            path = argv[i + 1]
            i += 2
        elif arg == "--preload" and i + 1 < len(argv):
            preload = [n.strip() for n in argv[i + 1].split(",") if n.strip()]
            i += 2
        else:
            raise SystemExit("jailcell_kernel: unexpected argument %r\n%s" % (arg, _USAGE))
    if path is None:
        raise SystemExit(_USAGE)
    return path, preload


def main(argv):
    """Everything the kernel's process does, from argv (--connect SOCKET
    [--preload MODULE,...]): become PID 1's init and the kernel
    (_become_init), then run the kernel until it ends (_run)."""
    _become_init()
    _run(argv)


def prepare(preload):
    """What the kernel does before it serves that needs no thread, no
    descriptor and no host: the import hooks (before anything they patch
    is imported), the preload and its warm-up. A zygote runs it once
    before it forks (isolate/zygote/zygote.py), so that each fork starts with it
    done; a kernel whose process did it already skips it."""
    if _State.prepared:
        return
    import builtins

    from .charts import _PyplotHook
    from .jupyter import _install_no_stdin
    from .kernel import _preload
    from .shell import _get_ipython, _IPythonHook

    # Headless; the deployment sets it too, this keeps a bare run the same.
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.meta_path.insert(0, _PyplotHook())
    sys.meta_path.insert(0, _IPythonHook())
    # What libraries look at when imported: pandas sizes its tables for a
    # notebook (display.max_columns 20) only if get_ipython() answers then.
    builtins.get_ipython = _get_ipython
    _install_no_stdin()
    _preload(preload)
    _State.prepared = True


def _run(argv):
    # From here on only the kernel process runs: the kernel's modules are
    # imported now, not before the fork.
    import threading
    import traceback

    from .kernel import _Kernel

    path, preload = _parse_args(argv)
    # Notebook conventions: the working directory is importable, no argv.
    sys.argv = [""]
    if sys.path:
        sys.path[0] = ""
    else:
        sys.path.insert(0, "")
    try:
        # The hooks and what libraries see at import first, then the
        # preload (its output goes to the kernel's log: no cell runs yet),
        # then the kernel.
        prepare(preload)
        _State.kernel = _Kernel(path)
        threading.Thread(target=_State.kernel.pump.run, name="jailcell-pump", daemon=True).start()
        # Connecting only now makes hello mean "ready": preload is done.
        threading.Thread(target=_State.kernel.link.run, name="jailcell-link", daemon=True).start()
        _State.kernel.serve()
    except BaseException:
        _log("fatal: %s" % traceback.format_exc())
        raise
