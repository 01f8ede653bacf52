"""Jupyter fidelity: what libraries, the pager, input() and the debugger see
under ipykernel."""

import builtins
import sys

from .display import TEXT_PLAIN_LIMIT, _cut_utf8, _put
from .hooks import _spec_then
from .state import _ensure_shell, _State


# ---------------------------------------------------------------------------
# Jupyter fidelity: what libraries, values, the pager, input() and the
# debugger look like under ipykernel (Debian 12: ipykernel 6.17, IPython
# 8.5, pandas 1.5), at none of IPython's start-up cost until a cell needs it.


class _JupyterKernel:
    """Stands for ipykernel's Kernel on get_ipython().kernel: libraries only
    test that it is there (pandas' is_terminal())."""

    __slots__ = ()
    implementation = "jailcell"


class ZMQInteractiveShell:
    """What get_ipython() returns to a library before any cell loaded
    IPython. Named as ipykernel's shell, because libraries read the name:

    - pandas 1.5, at import (core/config_init.is_terminal): an object with
      a `kernel` attribute means a Jupyter kernel, so display.max_columns
      is 20, and a frame wider than display.width wraps in blocks with `\\`
      instead of hiding its middle columns behind `...`;
    - pandas, on every frame repr (io/formats/console.in_ipython_frontend):
      "zmq" in the type's name means widths come from display.width, not
      from a terminal;
    - tqdm.autonotebook: "IPKernelApp" in config means a notebook.

    matplotlib 3.6 looks at sys.modules["IPython"] only, never at this.
    Anything else loads the real shell and is read from it."""

    __module__ = "jailcell"
    kernel = _JupyterKernel()
    config = {"IPKernelApp": {}}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)  # copy, pickle and hasattr probes
        shell = _ensure_shell()
        if shell is None:
            raise AttributeError(name)
        return getattr(shell, name)

    def __repr__(self):
        return "<jailcell.ZMQInteractiveShell (IPython not loaded)>"


_SHELL_STUB = ZMQInteractiveShell()


def _jupyter_shell_class(base):
    """IPython's InteractiveShell under ipykernel's class name and with a
    kernel, so that libraries keep seeing a Jupyter kernel once a cell
    loaded IPython (see ZMQInteractiveShell)."""

    class ZMQInteractiveShell(base):
        kernel = _JupyterKernel()

    ZMQInteractiveShell.__module__ = "jailcell"
    return ZMQInteractiveShell


def _show_in_pager(shell, data, start=0, screen_lines=0, **kwargs):
    """IPython's show_in_pager hook (%quickref, obj?, %pdoc, %prun...):
    the text goes to the cell's display list as one item marked "pager",
    where ipykernel sends a `page` payload, never to stdout."""
    bundle = {}
    if isinstance(data, dict):
        for mime, value in data.items():
            _put(bundle, mime, value)
    else:
        _put(bundle, "text/plain", data if isinstance(data, str) else str(data))
    if not isinstance(bundle.get("text/plain"), str):
        return
    bundle["text/plain"] = _cut_utf8(bundle["text/plain"], TEXT_PLAIN_LIMIT, "pager")
    cell = _State.kernel.cell if _State.kernel is not None else None
    if cell is not None:
        cell.add_display(bundle, pager=True)


class _NoStdin(NotImplementedError):
    """Stands in for IPython's StdinNotImplementedError where IPython is
    not installed."""


def _stdin_error(what):
    """ipykernel's error for a read from a frontend that allows no stdin."""
    try:
        # Loads the shell through _IPythonHook: input() is rare, and the
        # class must be the one a cell can catch from IPython.core.error.
        from IPython.core.error import StdinNotImplementedError as cls
    except ImportError:
        cls = _NoStdin
    return cls("%s was called, but this frontend does not support input requests." % what)


def _no_input(prompt=""):
    """input() as in ipykernel with allow_stdin=False: no cell can be
    answered, so asking fails at once instead of reading fd 0. pdb and
    %debug read their commands through it, and fail the same way."""
    raise _stdin_error("raw_input")


def _no_getpass(prompt="Password: ", stream=None):
    raise _stdin_error("getpass")


def _no_breakpoint(*args, **kwargs):
    """breakpoint() as in ipykernel, whose debugpy hook returns at once
    when no debugger client is attached: nothing happens."""
    return None


def _install_no_stdin():
    builtins.input = _no_input
    if any(isinstance(f, _StdinHook) for f in sys.meta_path):
        return  # prepare() did the rest (start.py)
    sys.breakpointhook = _no_breakpoint
    # getpass and pdb are patched when first imported, not imported here:
    # a kernel start pays for neither.
    sys.meta_path.insert(0, _StdinHook())
    for name, patch in _STDIN_PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])


def _patch_getpass(getpass):
    getpass.getpass = _no_getpass


def _patch_pdb(pdb):
    """ipykernel replaces pdb's Pdb and set_trace with IPython's
    (IPKernelApp.init_pdb): pdb.set_trace() then shows
    the code around the stop as IPython's debugger does. Until the shell
    is loaded, set_trace loads it first."""
    if _State.shell is not None:
        try:
            from IPython.core import debugger
        except ImportError:
            return
        if hasattr(debugger, "InterruptiblePdb"):
            debugger.Pdb = debugger.InterruptiblePdb
            pdb.Pdb = debugger.Pdb
            pdb.set_trace = debugger.set_trace
        return
    if getattr(pdb.set_trace, "_jailcell", False):
        return
    stdlib_set_trace = pdb.set_trace

    def set_trace(*args, **kwargs):
        frame = kwargs.pop("frame", None) or (args[0] if args else None) or sys._getframe().f_back
        if _ensure_shell() is None or getattr(pdb.set_trace, "_jailcell", False):
            return stdlib_set_trace(*args, **kwargs)
        return pdb.set_trace(frame)

    set_trace._jailcell = True
    pdb.set_trace = set_trace


_STDIN_PATCHES = {"getpass": _patch_getpass, "pdb": _patch_pdb}


class _StdinHook:
    """Meta path finder that patches getpass and pdb the moment something
    imports them (see _patch_getpass, _patch_pdb)."""

    def find_spec(self, name, path=None, target=None):
        patch = _STDIN_PATCHES.get(name)
        if patch is None:
            return None
        return _spec_then(self, name, path, target, patch)


def _kernel_magics(shell):
    """What ipykernel adds to IPython's magics and aliases, under the same
    names and doc lines (%quickref and %lsmagic list them): its
    KernelMagics as far as they mean anything in a sandbox, the storemagic
    extension it loads, and the colour flag of the ls aliases, which IPython
    drops under NoColor (this shell's own text stays colourless)."""
    import warnings
    from IPython.core import page
    from IPython.core.alias import default_aliases
    from IPython.core.error import UsageError

    def clear(line=""):
        """Clear the terminal."""
        shell.system("clear")

    def less(line=""):
        """Show a file through the pager.

        Files ending in .py are syntax-highlighted."""
        if not line:
            raise UsageError("Missing filename.")
        if line.endswith(".py"):
            from IPython.utils import openpy

            cont = shell.pycolorize(openpy.read_py_file(line, skip_encoding_cookie=False))
        else:
            with open(line) as f:
                cont = f.read()
        page.page(cont)

    def man(line=""):
        """Find the man page for the given command and display in pager."""
        page.page(shell.getoutput("man %s | col -b" % line, split=False))

    def connect_info(line=""):
        """Print information for connecting other clients to this kernel"""
        warnings.warn("Could not get connection info: a jailcell session has no Jupyter connection file")

    def qtconsole(line=""):
        """Open a qtconsole connected to this kernel."""
        warnings.warn("Could not start qtconsole: there is no display in a jailcell sandbox")

    def autosave(line=""):
        """Set the autosave interval in the notebook (in seconds)."""
        try:
            interval = int(line)
        except ValueError as e:
            raise UsageError("%%autosave requires an integer, got %r" % line) from e
        js = "IPython.notebook.set_autosave_interval(%i)" % (1000 * interval)
        _State.kernel.display({"application/javascript": js}, raw=True)
        print("Autosaving every %i seconds" % interval if interval else "Autosave disabled")

    for fn in (clear, less, man, connect_info, qtconsole, autosave):
        shell.register_magic_function(fn, "line", fn.__name__)
    shell.register_magic_function(less, "line", "more")
    for name, cmd in default_aliases():
        if cmd.startswith("ls "):
            shell.alias_manager.soft_define_alias(name, cmd)
    try:
        shell.extension_manager.load_extension("storemagic")
    except Exception:
        pass  # %store is missing, as in a kernel without the extension


def _remember_error(exc):
    """sys.last_* as IPython's showtraceback leaves them: %debug opens the
    last error's traceback from there."""
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
