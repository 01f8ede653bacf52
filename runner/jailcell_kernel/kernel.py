"""The kernel: one persistent namespace (and the named ones of code
contexts), the loop that serves the host's requests one at a time, and
running a cell."""

import ast
import builtins
import linecache
import os
import queue
import sys
import types
import __future__

from .assist import _AssistRequest, _assist
from .capture import _Pump, _flush_c_stdio, _text_stream
from .commands import _CommandRequest, _command
from .display import _display_item, _figure_bundle, _mime_bundle, _put
from .errors import _error_info, _safe_str
from .frames import _encoded_size
from .jupyter import _install_no_stdin, _remember_error
from .link import _Link
from .shell import _ensure_shell, _get_ipython, _is_quiet, _may_be_ipython
from .state import _State

RICH_BUDGET = 32 << 20  # value + display items of one cell, encoded
DISPLAY_LIMIT = 999  # display items kept per cell; the host keeps 1000 (this + one note)

# Compiler flags of __future__ imports: one in a cell applies to later cells,
# as in a notebook.
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def _drop_leading_indent(source):
    """source with the first non-blank line's indentation removed from each
    line that starts with it (IPython's leading_indent), or None if that
    line is not indented. Blank lines stay, so a traceback's line numbers
    still name the lines the caller sent."""
    lines = source.splitlines(True)
    for line in lines:
        if line.strip():
            break
    else:
        return None
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    if not indent:
        return None
    n = len(indent)
    return "".join(l[n:] if l.startswith(indent) else l for l in lines)


class _Cell:
    """One running cell: where display() and figures go."""

    def __init__(self, req, number):
        self.req = req
        self.filename = "<cell-%d>" % number
        self.value = None
        self.display = []
        self.error = None
        self.rich_used = 0
        self.dropped = 0  # display items left out, told in one note at the end

    def set_error(self, exc):
        if self.error is None:
            self.error = _error_info(exc)

    def _charge(self, obj):
        """Count obj against the cell's rich-output budget; False if over."""
        try:
            size = _encoded_size(obj)
        except (TypeError, ValueError, RecursionError):
            return False
        if self.rich_used + size > RICH_BUDGET:
            return False
        self.rich_used += size
        return True

    def add_display(self, bundle, pager=False):
        if len(self.display) >= DISPLAY_LIMIT:
            self.dropped += 1
            return
        item = _display_item(bundle)
        if pager:
            item["pager"] = True
        if not self._charge(item):
            self.dropped += 1
            return
        self.display.append(item)
        if _State.kernel is not None:
            _State.kernel.pump.display(item)

    def display_items(self):
        """The display list, ending with one note if items were dropped."""
        if not self.dropped:
            return self.display
        note = "[%d display items dropped: over the limit of %d items and %d MiB for one cell]" % (
            self.dropped,
            DISPLAY_LIMIT,
            RICH_BUDGET >> 20,
        )
        return self.display + [{"mime": "text/plain", "data": note, "bundle": {"text/plain": note}}]

    def set_value(self, bundle):
        chart = getattr(bundle, "chart", None)  # a Figure's (see _chart_of)
        table = getattr(bundle, "table", None)  # a DataFrame's (see _table_of)
        if not self._charge(bundle):
            bundle = {"text/plain": "[value dropped: over the %d MiB limit for one cell]" % (RICH_BUDGET >> 20)}
            chart = table = None
        self.value = bundle
        self.value_chart = chart if chart is not None and self._charge(chart) else None
        self.value_table = table if table is not None and self._charge(table) else None


class _Namespace:
    """The globals cells run in, with their notebook history: the main one
    (__main__) or a code context's. A context's cells keep their own
    working directory, entered around each of its cells."""

    __slots__ = ("ns", "out", "inputs", "last", "cwd")

    def __init__(self, ns=None, cwd=None):
        if ns is None:
            ns = {"__name__": "__main__", "__builtins__": builtins}
        self.ns = ns
        # Notebook history: Out[n] and _n for values, In[n] for sources.
        self.out = {}
        self.inputs = [""]
        self.last = None
        self.cwd = cwd
        ns["Out"] = self.out
        ns["In"] = self.inputs


def _preload(names):
    """Import names (errors are left to the cell that needs the module) and,
    with pyplot among them, draw one figure."""
    for name in names:
        try:
            __import__(name)
        except BaseException:
            pass  # the cell that needs it will see the error itself
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        # Font and renderer setup costs the first figure a lot; pay it
        # here, before hello, not in the user's first plotting cell.
        try:
            fig = plt.figure()
            fig.add_subplot().plot([0, 1])
            fig.canvas.draw()
            plt.close(fig)
        except Exception:
            pass


class _Kernel:
    def __init__(self, sock_path):
        self.pid = os.getpid()
        self.cells = 0
        self.busy = False
        self.cell = None
        self.requests = queue.SimpleQueue()
        self.future_flags = 0
        self.link = _Link(sock_path, self)
        self.pump = _Pump(self.link)
        self.stdout = _text_stream(1, self.pump.poke)
        self.stderr = _text_stream(2, self.pump.poke)
        sys.stdout = sys.__stdout__ = self.stdout
        sys.stderr = sys.__stderr__ = self.stderr

        # A real module as __main__, so that pickle and friends find classes
        # and functions the cells define. The kernel's own modules stay
        # reachable under their package's name, jailcell_kernel.
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        self.main = _Namespace(main.__dict__)
        self.ns, self.out, self.inputs = self.main.ns, self.main.out, self.main.inputs
        # The namespace of the running cell, and the code contexts' by name.
        self.space = self.main
        self.contexts = {}
        builtins.display = self.display
        builtins.get_ipython = _get_ipython
        _install_no_stdin()

    def hello(self):
        return {
            "t": "hello",
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "cells": self.cells,
            "busy": self.busy,
            "acks": True,
        }

    def display(self, *objs, raw=False, **kwargs):
        """Show each object as a rich output item of the running cell.

        With raw=True each object is taken as a ready MIME bundle (a dict of
        MIME type to data), as in IPython. Other IPython keywords are
        accepted and ignored."""
        cell = self.cell
        if cell is None:
            return  # a thread outliving its cell: there is no output to add to
        for obj in objs:
            if raw and isinstance(obj, dict):
                bundle = {}
                for mime, value in obj.items():
                    _put(bundle, mime, value)
                if not bundle:
                    continue
            else:
                bundle = _mime_bundle(obj)
            cell.add_display(bundle)

    def flush_figures(self):
        """Render every open pyplot figure into the cell's output and close it."""
        plt = sys.modules.get("matplotlib.pyplot")
        cell = self.cell
        if plt is None or cell is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf

            managers = sorted(Gcf.get_all_fig_managers(), key=lambda m: m.num)
        except Exception:
            return
        for manager in managers:
            fig = manager.canvas.figure
            try:
                # Like IPython: a figure nothing was drawn on is not output.
                if fig.axes or fig.lines:
                    cell.add_display(_figure_bundle(fig))
            except Exception as exc:
                msg = "jailcell: cannot render figure %s: %s" % (manager.num, _safe_str(exc))
                print(msg, file=sys.stderr)
            finally:
                try:
                    plt.close(fig)
                except Exception:
                    pass

    def preload(self, names):
        _preload(names)

    def serve(self):
        while True:
            req = None
            try:
                req = self.requests.get()
                if req.gen != self.link.gen:
                    continue  # its host has gone; a new one does not know the id
                if isinstance(req, _CommandRequest):
                    # Between cells, like assist: see _command below.
                    # A job inherits the signals' mask and ignored
                    # dispositions of this thread, as a cell left them.
                    if req.t == "command" and req.action == "start":
                        self.pump.own_signals()
                    self.link.send(_command(req, self.link))
                    continue
                if isinstance(req, _AssistRequest):
                    # Between cells, on this thread: the namespace is not
                    # changing under the completer, as in ipykernel.
                    self.link.send(_assist(req))
                    continue
                # Before any of the cell's code: the host then knows that a
                # kernel gone without this frame never ran the cell.
                if not self.link.send({"t": "started", "id": req.id}):
                    continue
                self.busy = True
                msg = self.run_cell(req)
            except KeyboardInterrupt as exc:
                # Last resort for SIGINTs that hit kernel code twice at the
                # cell's boundary: the host must still get a result.
                _State.executing = False
                self.cell = None
                if req is None:
                    continue
                cap = self.pump.end() if self.pump.capture is not None else None
                msg = self._result(req, None, [], _error_info(exc), cap, True)
            try:
                self.link.send(msg)
            except (TypeError, ValueError, RecursionError) as exc:
                # Too large or not JSON after all: say so instead of leaving
                # the host waiting.
                err = {
                    "type": "KernelError",
                    "message": "cannot send the result: %s" % exc,
                    "traceback": "",
                    "frames": [],
                }
                self.link.send(self._result(req, None, [], err, None, msg.get("interrupted")))
            self.busy = False

    def _result(self, req, value, display, error, cap, interrupted):
        return {
            "t": "result",
            "id": req.id,
            "status": "error" if error is not None else "ok",
            "value": value,
            "display": display,
            "error": error,
            "stdout_truncated": bool(cap and cap.truncated[0]),
            "stderr_truncated": bool(cap and cap.truncated[1]),
            "interrupted": bool(interrupted),
        }

    def run_cell(self, req):
        self.cells += 1
        self.space = self.main  # heals a context left entered by a torn cell
        cell = _Cell(req, self.cells)
        self.pump.redirect()
        self._restore_stdio()
        self.pump.begin(req.id, req.max_output)
        self.pump.own_signals()
        self.cell = cell
        _State.interrupted = False
        try:
            try:
                _State.runs_begun += 1
                _State.executing = True
                self._execute_in_context(cell)
            except KeyboardInterrupt as exc:
                # Landed in the kernel's own code around the user's.
                cell.set_error(exc)
            finally:
                _State.executing = False
        except KeyboardInterrupt as exc:
            # Landed between the handler above and the flag reset.
            _State.executing = False
            cell.set_error(exc)
        if os.getpid() != self.pid:
            # The cell forked and this child returned here: it is not the
            # kernel, and must not pretend to be.
            self._flush_stdio()
            os._exit(0)
        self._flush_stdio()
        cap = self.pump.end()
        self.cell = None
        res = self._result(req, cell.value, cell.display_items(), cell.error, cap, _State.interrupted)
        if getattr(cell, "value_chart", None) is not None:
            res["value_chart"] = cell.value_chart
        if getattr(cell, "value_table", None) is not None:
            res["value_table"] = cell.value_table
        return res

    def _remember(self, value):
        """_, __, ___, Out[n] and _n, as IPython's displayhook keeps them.
        A `_` the user assigned is left alone, as in IPython."""
        space = self.space
        ns = space.ns
        if "_" not in ns or ns["_"] is space.last:
            ns["___"], ns["__"], ns["_"] = ns.get("__"), ns.get("_"), value
            space.last = value
        space.out[self.cells] = value
        ns["_%d" % self.cells] = value

    def _execute_in_context(self, cell):
        """Run the cell in its context's namespace and working directory
        (the main namespace, as it is, without one)."""
        req = cell.req
        if not req.context:
            self._execute(cell)
            return
        if req.reset:
            self.contexts.pop(req.context, None)
            if not req.code.strip():
                return  # a removed context: nothing is made again
        try:
            prev = os.getcwd()
        except OSError:
            prev = None  # the main cells removed their own directory
        space = self.contexts.get(req.context)
        if space is None:
            space = _Namespace(cwd=req.cwd or prev or "/")
        try:
            os.chdir(space.cwd)
        except OSError as exc:
            # A context whose directory is gone (or never was) runs nothing.
            cell.set_error(exc)
            return
        self.contexts[req.context] = space
        self.space = space
        try:
            self._execute(cell)
        finally:
            self.space = self.main
            try:
                space.cwd = os.getcwd()
            except OSError:
                pass  # it removed its directory: the next cell says so
            if prev is not None:
                try:
                    os.chdir(prev)
                except OSError:
                    pass

    def _flush_stdio(self):
        for stream in (self.stdout, self.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        _flush_c_stdio()

    def _restore_stdio(self):
        """Reopen the standard streams if a cell closed them."""
        # exit() (site.Quitter) closes sys.stdin before raising SystemExit;
        # the kernel lives on, so later input() should see EOF, not a closed file.
        stdin = sys.stdin
        if stdin is None or getattr(stdin, "closed", False):
            try:
                fresh = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
            except OSError:
                fresh = None  # no fd 0 at all: leave it as it is
            if fresh is not None:
                sys.stdin = fresh
                if sys.__stdin__ is stdin or sys.__stdin__ is None:
                    sys.__stdin__ = fresh
        for name, fd in (("stdout", 1), ("stderr", 2)):
            mine = getattr(self, name)
            if not mine.closed:
                continue
            fresh = _text_stream(fd, self.pump.poke)
            setattr(self, name, fresh)
            for attr in (name, "__%s__" % name):
                if getattr(sys, attr, None) is mine:
                    setattr(sys, attr, fresh)

    def _execute(self, cell):
        source = cell.req.code
        # Registered so that tracebacks and inspect show the cell's lines; an
        # mtime of None keeps linecache.checkcache from evicting it.
        linecache.cache[cell.filename] = (len(source), None, source.splitlines(True), cell.filename)
        flags = self.future_flags
        self.space.inputs.append(source)
        if _State.shell is not None:
            _State.shell.execution_count = self.cells
        try:
            try:
                tree = compile(source, cell.filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
            except SyntaxError as exc:
                tree = None
                # Code pasted from a function body, a list item or a
                # model's reply arrives indented as a whole: run it as
                # IPython does, the first line's indentation removed.
                dedented = _drop_leading_indent(source) if isinstance(exc, IndentationError) else None
                if dedented is not None:
                    try:
                        tree = compile(dedented, cell.filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
                    except SyntaxError:
                        pass
                if tree is None:
                    # Magics, `!` and `?` are never valid Python: only a
                    # cell that fails to compile is worth IPython's
                    # transforms (which remove the indentation too).
                    shell = _ensure_shell() if _may_be_ipython(source) else None
                    if shell is None:
                        raise
                    source = shell.transform_cell(source)
                    tree = compile(source, cell.filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                # Like IPython: the value of a trailing expression is the
                # cell's value.
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, cell.filename, "exec", flags, dont_inherit=True)
            tail = compile(last, cell.filename, "eval", flags, dont_inherit=True) if last is not None else None
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # SyntaxError, and ValueError for NUL bytes
            cell.set_error(exc)
            return
        self.future_flags |= body.co_flags & _FUTURE_FLAGS
        try:
            ns = self.space.ns
            exec(body, ns)
            value = eval(tail, ns) if tail is not None else None
        except BaseException as exc:  # SystemExit and KeyboardInterrupt included
            cell.set_error(exc)
            _remember_error(exc)
        else:
            if value is not None and not _is_quiet(cell.req.code):
                self._remember(value)
                cell.set_value(_mime_bundle(value))
        self.flush_figures()
        # The cell may have put its own objects in sys.stdout/err; their
        # flush is user code, so it runs while SIGINT can still stop it.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
