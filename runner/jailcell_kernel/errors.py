"""Errors: a cell's exception as the result frame's error object, with the
kernel's own frames left out."""

import os
import sys
import traceback

from .display import _cut_utf8

MESSAGE_LIMIT = 64 << 10  # bytes of str(exception) kept
TRACEBACK_LIMIT = 1 << 20  # bytes of formatted traceback kept
FRAMES_LIMIT = 200  # structured frames kept (half from each end)

# Frames whose code comes from this package are the kernel's, not the
# user's: tracebacks leave them out.
_KERNEL_DIR = os.path.dirname(__file__)


def _type_name(cls):
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", "?")
    if module in (None, "builtins", "__main__"):
        return name
    return "%s.%s" % (module, name)


def _strip_kernel_frames(te, seen):
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if os.path.dirname(f.filename) != _KERNEL_DIR])
    _strip_kernel_frames(te.__cause__, seen)
    _strip_kernel_frames(te.__context__, seen)
    for sub in getattr(te, "exceptions", None) or ():
        _strip_kernel_frames(sub, seen)


def _safe_str(exc):
    try:
        return str(exc)
    except Exception:
        return "<str() of the exception raised>"


def _error_info(exc):
    """The error object of a result frame, with the kernel's own frames removed."""
    try:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
        _strip_kernel_frames(te, set())
        text = "".join(te.format())
        stack = list(te.stack)
    except Exception:
        text, stack = "%s: %s\n" % (_type_name(type(exc)), _safe_str(exc)), []
    frames = [
        {
            "file": f.filename,
            "line": f.lineno or 0,
            "name": f.name,
            "code": _cut_utf8((f.line or "").strip(), 1024, "line"),
        }
        for f in stack
    ]
    if isinstance(exc, SyntaxError):
        message = exc.msg if isinstance(exc.msg, str) else _safe_str(exc)
        if not frames and exc.filename:
            frames = [
                {
                    "file": exc.filename,
                    "line": exc.lineno or 0,
                    "name": "<module>",
                    "code": _cut_utf8((exc.text or "").strip(), 1024, "line"),
                }
            ]
    else:
        message = _safe_str(exc)
    if len(frames) > FRAMES_LIMIT:
        # The outermost frames lead from the cell, the innermost to the raise.
        half = FRAMES_LIMIT // 2
        frames = frames[:half] + frames[-half:]
    b = text.encode("utf-8", "replace")
    if len(b) > TRACEBACK_LIMIT:
        half = TRACEBACK_LIMIT // 2
        text = (
            b[:half].decode("utf-8", "ignore")
            + "\n[... traceback truncated: %d bytes total ...]\n" % len(b)
            + b[-half:].decode("utf-8", "ignore")
        )
    info = {
        "type": _type_name(type(exc)),
        "message": _cut_utf8(message, MESSAGE_LIMIT, "message"),
        "traceback": text,
        "frames": frames,
    }
    code = _exit_code_of(exc)
    if code is not None:
        info["exit_code"] = code
    return info


def _exit_code_of(exc):
    """A failed command's exit status, for the error's exit_code: that of a
    CalledProcessError (a failed `!cmd` or %pip, subprocess's check=True),
    if the host would take it (-128 to 255)."""
    mod = sys.modules.get("subprocess")
    if mod is None or not isinstance(exc, mod.CalledProcessError):
        return None
    code = exc.returncode
    if isinstance(code, int) and not isinstance(code, bool) and -128 <= code <= 255:
        return code
    return None
