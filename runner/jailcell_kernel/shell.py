"""Notebook semantics: IPython's shell, loaded on demand, for magics, shell
escapes and get_ipython()."""

import builtins
import codecs
import io
import os
import select
import signal
import sys
import termios
import time
import traceback
import types

from .errors import _safe_str, _strip_kernel_frames, _type_name
from .hooks import _spec_then
from .jupyter import _SHELL_STUB, _jupyter_shell_class, _kernel_magics, _patch_pdb, _show_in_pager
from .state import _State, _log


# ---------------------------------------------------------------------------
# Notebook semantics: magics, shell escapes, get_ipython()
#
# Debian's IPython in the rootfs does the parsing (TransformerManager turns
# `%time x`, `!ls`, `%%writefile f` into get_ipython() calls) and provides
# the magics. Importing any part of IPython costs ~0.5 s, so it is loaded only
# when a cell needs it: a cell that is not valid Python but would be after
# IPython's transforms, a call to get_ipython(), an import of IPython by the
# cell, or "IPython" in the preload list. The kernel still compiles and runs
# the transformed cell itself; the shell is only the magics' host.

# A line starting with a magic, shell escape or help, or an assignment from
# one: only such cells can change under IPython's transforms.
_MAGIC_HINTS = ("%", "!", "?")


def _may_be_ipython(source):
    return any(h in source for h in _MAGIC_HINTS)


def _get_ipython():
    """The builtin get_ipython(): loads the shell on first use.

    Libraries only probe it (pandas calls it at import and whenever it
    formats a frame, to detect a notebook frontend): for callers installed
    under sys.prefix, until a cell loaded the shell, it returns _SHELL_STUB,
    which answers those probes as ipykernel's shell would and loads the
    shell only if asked for anything else. Loading IPython (and jedi) for a
    probe costs ~25 MB of kernel memory and of every hibernation image."""
    if _State.shell is None and sys._getframe(1).f_code.co_filename.startswith(sys.prefix + os.sep):
        return _SHELL_STUB
    return _ensure_shell()


def _ensure_shell():
    """Create the InteractiveShell on the kernel's namespace, once.

    Returns None if IPython is not installed."""
    if _State.shell is not None or _State.kernel is None or _State.shell_loading:
        return _State.shell
    _State.shell_loading = True
    try:
        return _make_shell()
    except ImportError:
        return None
    finally:
        _State.shell_loading = False


_State.shell_loader = _ensure_shell


def _make_shell():
    from traitlets.config import Config
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    kernel = _State.kernel

    class _Publisher(DisplayPublisher):
        # IPython.display.display() and friends end up here.
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            kernel.display(data, raw=True)

        def clear_output(self, wait=False):
            _clear_output(wait)

    cfg = Config()
    # No sqlite file, no history thread: the host keeps the cells.
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "NoColor"
    cfg.IPKernelApp.jailcell = True  # see ZMQInteractiveShell
    saved = {k: kernel.ns[k] for k in _HISTORY_NAMES if k in kernel.ns}
    shell = _jupyter_shell_class(InteractiveShell).instance(config=cfg, user_module=sys.modules["__main__"])
    shell.display_pub = _Publisher(shell=shell, parent=shell)
    shell.set_hook("show_in_pager", _show_in_pager, 99)
    shell.system = types.MethodType(_shell_system, shell)
    shell.showtraceback = types.MethodType(_shell_showtraceback, shell)
    shell.register_magic_function(_magic_matplotlib, "line", "matplotlib")
    _kernel_magics(shell)
    shell.execution_count = kernel.cells
    # The shell's init put its own builtins and history in place; the
    # kernel's own display() and history stay authoritative.
    builtins.display = kernel.display
    builtins.get_ipython = _get_ipython
    for name in _HISTORY_NAMES:
        if name in saved:
            kernel.ns[name] = saved[name]
        else:
            kernel.ns.pop(name, None)
    # The shell's exit and quit ask a frontend to end the kernel; here
    # exit() stays the builtin that raises SystemExit and ends the cell.
    for name in ("exit", "quit"):
        if kernel.ns.get(name) is getattr(shell, "exiter", None):
            kernel.ns.pop(name, None)
    kernel.ns["Out"] = kernel.ns["_oh"] = kernel.out
    kernel.ns["In"] = kernel.ns["_ih"] = kernel.inputs
    for name in ("Out", "In", "_oh", "_ih", "get_ipython", "display"):
        shell.user_ns_hidden[name] = kernel.ns.get(name)
    _State.shell = shell
    import pdb  # stdlib; ipykernel patches it at start (see _patch_pdb)

    _patch_pdb(pdb)
    return shell


def _clear_output(wait=False):
    """IPython.display.clear_output() as ipykernel does it: what the cell
    wrote so far goes out first, then {"clear": true, "wait": ...} on the
    display path, which the Jupyter front door sends as a clear_output
    message. No output of its own: it is not in the result's display list."""
    kernel = _State.kernel
    if kernel is None or kernel.cell is None:
        return  # a thread outliving its cell: there is no output to clear
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    kernel._flush_stdio()
    kernel.pump.display({"clear": True, "wait": bool(wait)})


def _shell_system(shell, cmd):
    """`!cmd` and %pip: run cmd with /bin/sh inside the sandbox, its output
    (stdout and stderr merged, on a pty as in Jupyter) written to the cell's
    stdout; $? lands in _exit_code. A non-zero status ends the cell with
    subprocess.CalledProcessError (see _shell_failed)."""
    cmd = shell.var_expand(cmd, depth=1)
    if cmd.rstrip().endswith("&"):
        raise OSError("Background processes not supported.")
    sys.stdout.flush()
    code = _shell_pty(cmd)
    if code is None:
        # No pty in this sandbox: a pipe gives the same text, minus
        # terminal-only formatting.
        import subprocess

        proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sys.stdout.write(dec.decode(chunk))
            sys.stdout.write(dec.decode(b"", True))
        finally:
            code = proc.wait()
            proc.stdout.close()
    sys.stdout.flush()
    shell.user_ns["_exit_code"] = code
    if code:
        raise _shell_failed(cmd, code)


def _shell_failed(cmd, code):
    """The error of a shell command that failed: IPython only sets
    _exit_code and the cell reports success, so an agent reading the result
    would believe a failed `%pip install` worked. The cell stops here, as
    at any exception; subprocess.run(check=True) raises the same error, and
    the result's error carries the status as exit_code."""
    import subprocess

    return subprocess.CalledProcessError(code, cmd)


def _shell_pty(cmd):
    """Run cmd with /bin/sh on a new pty, stdout and stderr merged, written
    to the cell's stdout as it comes; return its exit status (negative: the
    signal that ended it), or None if no pty can be had.

    A pty, as Jupyter gives `!cmd`: programs see a terminal (line-buffered
    output, progress bars). Unlike Jupyter's, its output translation
    (ONLCR) is off, so a "\n" the program wrote arrives as "\n", not
    "\r\n"; a "\r" it wrote stays. stdin is the pty too, as in Jupyter.
    On SIGINT (interrupt, timeout) the command's process group gets it,
    then SIGKILL if it is still there, and the KeyboardInterrupt goes on."""
    import subprocess

    try:
        master, slave = os.openpty()
    except OSError:
        return None
    try:
        try:
            attrs = termios.tcgetattr(slave)
            attrs[1] &= ~termios.ONLCR
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            proc = subprocess.Popen(
                ["/bin/sh", "-c", cmd], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
            )
        finally:
            os.close(slave)
    except BaseException:
        os.close(master)
        raise
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        _shell_copy(master, dec)
    except KeyboardInterrupt:
        _shell_stop(proc, master, dec)
        raise
    finally:
        os.close(master)
        sys.stdout.write(dec.decode(b"", True))
        sys.stdout.flush()
    return proc.wait()


def _shell_copy(master, dec, deadline=None):
    """Copy the pty's output to stdout until every writer closed it (EIO on
    Linux), or until deadline (time.monotonic())."""
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([master], [], [], left)[0]:
                return
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer is gone
            return
        if not chunk:
            return
        sys.stdout.write(dec.decode(chunk))


def _shell_stop(proc, master, dec):
    """Interrupt the command's process group as ^C would, keep its last
    words for a moment, then kill what is left: well within the host's
    interrupt grace (2 s by default), which kills the whole sandbox."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            _shell_copy(master, dec, time.monotonic() + 0.2)
            proc.wait(timeout=0.2)
            return
        except Exception:
            continue


def _shell_showtraceback(shell, exc_tuple=None, *args, **kwargs):
    """An exception a magic caught itself (`%time 1/0`): as in Jupyter the
    cell still succeeds and the traceback is shown, here on stderr."""
    etype, value, tb = exc_tuple if exc_tuple else sys.exc_info()
    if value is None:
        return
    try:
        te = traceback.TracebackException(etype, value, tb, compact=True)
        _strip_kernel_frames(te, set())
        sys.stderr.write("".join(te.format()))
    except Exception:
        sys.stderr.write("%s: %s\n" % (_type_name(etype), _safe_str(value)))


def _magic_matplotlib(line=""):
    """::

      %matplotlib [gui]

    jailcell: figures are always shown inline, as PNG, at plt.show() and
    at the end of the cell; other backends are not available here."""
    gui = line.strip().split()[0] if line.strip() else "inline"
    if gui not in ("inline", "agg", "Agg"):
        print("jailcell: %%matplotlib %s is not available; figures are shown inline" % gui, file=sys.stderr)


def _is_quiet(source):
    """IPython's rule: a cell whose last token is ';' shows no value."""
    tail = source.rstrip()
    if ";" not in tail[tail.rfind("\n") + 1 :]:
        return False
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return False
    for tok in reversed(tokens):
        if tok.type in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            continue
        return tok.type == tokenize.OP and tok.string == ";"
    return False


class _IPythonHook:
    """Meta path finder that gives a cell importing IPython (for
    IPython.display, say) the kernel's shell, so its display() publishes to
    the cell rather than printing a repr."""

    def find_spec(self, name, path=None, target=None):
        if name != "IPython" or _State.shell is not None or _State.shell_loading:
            return None
        return _spec_then(self, name, path, target, _after_ipython)


def _after_ipython(module):
    sys.modules[module.__name__] = module
    try:
        _ensure_shell()
    except Exception:
        _log("cannot start the IPython shell: %s" % traceback.format_exc())


_HISTORY_NAMES = ("_", "__", "___")
