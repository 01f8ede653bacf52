"""jailcell kernel: runs notebook-style Python cells for the host, inside a sandbox.

Started as PID 1 of the sandbox's pid namespace:

    python3 -s /run/jailcell/kernel.py --connect /run/jailcell/host.sock \
        [--preload numpy,pandas,matplotlib.pyplot]

The host listens and this kernel connects, retrying every 50 ms forever, so a
restarted host daemon can re-adopt a live kernel with its variables intact.
After every (re)connect it sends a hello frame, then runs exec requests one at
a time in one persistent namespace, streaming what the cell writes to fds 1
and 2 and ending each cell with a result frame.

Framing, both directions: a 4-byte big-endian length N, then N bytes of a
UTF-8 JSON object whose "t" key names its type.

The user's code runs in this very process and can rewrite anything here, so
this file is not a security boundary (the sandbox is) and the host treats
every frame it sends as untrusted. This file only has to be robust against
honest code that misbehaves: floods, hangs, exceptions, stray signals.

stdlib only, and cheap to start: the host waits for hello before the first
cell, so nothing heavy is imported unless it was asked for with --preload.
"""

# Only os, signal and sys may be imported before the fork below: the process
# that stays behind as PID 1 should not carry the kernel's modules.
import os
import signal
import sys

# Signals PID 1 forwards to the kernel. In a pid namespace, PID 1 receives
# only the signals it has handlers for, so each needs one to be forwarded.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


class _State:
    # True only while a cell runs. The host sends SIGINT on a timeout; if it
    # lands after the cell finished it must not kill an idle kernel.
    executing = False
    # Set when a SIGINT was turned into KeyboardInterrupt during this cell.
    interrupted = False
    # Read end of a pipe whose only writer is the init: it reports EOF when
    # the init is gone.
    init_pipe = None
    # The sandbox's original stderr (the host's kernel log), kept for the
    # kernel's own troubles once fd 2 belongs to the cells.
    log_fd = 2
    # True while the IPython shell is being built: its own imports must not
    # start another.
    shell_loading = False
    # True while the main thread writes a display frame: a KeyboardInterrupt
    # raised inside sendall would tear the frame and lose the connection, so
    # a SIGINT then is only noted, and raised once the frame is whole.
    deferring = False
    deferred_sigint = False


def _on_sigint(signum, frame):
    if _State.executing:
        if _State.deferring:
            _State.deferred_sigint = True
            return
        _State.interrupted = True
        raise KeyboardInterrupt


# What PID 1 runs after the fork, exec'd into a bare interpreter: forward
# signals to the kernel, reap every orphan, leave with the kernel's status.
_INIT = """
import os, signal, sys
pid = int(sys.argv[1])
F = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except OSError:
        pass
for sig in F:
    signal.signal(sig, forward)
signal.pthread_sigmask(signal.SIG_UNBLOCK, F)
while True:
    try:
        wpid, status = os.wait()
    except ChildProcessError:
        os._exit(1)
    if wpid == pid:
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
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
    # The forwarded signals stay blocked across the exec until _INIT has
    # its handlers; the pipe's write end stays open in it.
    os.set_inheritable(death_w, True)
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _INIT, str(pid)])
    except OSError:
        pass  # no exec: run the same loop in this process
    sys.argv = ["", str(pid)]
    exec(_INIT, {"__name__": "_jailcell_init"})


if __name__ == "__main__":
    _become_init()

# From here on only the kernel process runs this file.
import ast  # noqa: E402
import base64  # noqa: E402
import builtins  # noqa: E402
import codecs  # noqa: E402
import fcntl  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import queue  # noqa: E402
import select  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import termios  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import __future__  # noqa: E402

MAX_FRAME = 64 << 20  # refuse larger frames from the host
STREAM_CHUNK = 64 << 10  # coalesce output up to this many characters a frame
STREAM_INTERVAL = 0.010  # ... or for this long, whichever comes first
PIPE_SIZE = 1 << 20  # the unprivileged maximum; fewer wake-ups under floods
DEFAULT_MAX_OUTPUT = 1 << 20  # per stream, when the host does not say
TEXT_PLAIN_LIMIT = 64 << 10  # bytes of repr() kept in text/plain
MIME_LIMIT = 16 << 20  # larger entries of a rich bundle are left out
RICH_BUDGET = 32 << 20  # value + display items of one cell, encoded
DISPLAY_LIMIT = 999  # display items kept per cell; the host keeps 1000 (this + one note)
MESSAGE_LIMIT = 64 << 10  # bytes of str(exception) kept
TRACEBACK_LIMIT = 1 << 20  # bytes of formatted traceback kept
FRAMES_LIMIT = 200  # structured frames kept (half from each end)
RECONNECT_DELAY = 0.05

# Compiler flags of __future__ imports: one in a cell applies to later cells,
# as in a notebook.
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag

# Frames whose code comes from this file are the kernel's, not the user's:
# tracebacks leave them out.
_KERNEL_FILE = _on_sigint.__code__.co_filename

# display() preference for an item's primary MIME type, best first.
_PRIMARY_ORDER = (
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "text/html",
    "text/markdown",
    "application/json",
    "text/latex",
    "text/plain",
)

# IPython's rich-repr protocol, one method per MIME type.
_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("text/latex", "_repr_latex_"),
)

_KERNEL = None  # the running _Kernel, for display() and pyplot.show()
_SHELL = None  # IPython's InteractiveShell, once a cell needed it (see _Notebook)


def _log(text):
    """Report a kernel fault to the host's log, never to a cell's output."""
    try:
        os.write(_State.log_fd, ("jailcell kernel: %s\n" % text.rstrip()).encode("utf-8", "replace"))
    except OSError:
        pass


# ---------------------------------------------------------------------------
# Framing


# ensure_ascii=False keeps non-ASCII output compact; lone surrogates
# (possible in str(exc) or a bundle) cannot be UTF-8, so they become "?".
# allow_nan=False: NaN is not JSON and would make the host reject the frame.
# One encoder for every frame: json.dumps with options builds a new one per
# call, a third of the cost of a small frame (two per cell).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode(obj):
    """One frame, header included. Raises ValueError if obj cannot be sent."""
    data = _ENCODER.encode(obj).encode("utf-8", "replace")
    if len(data) > MAX_FRAME:
        raise ValueError("frame of %d bytes exceeds %d" % (len(data), MAX_FRAME))
    return struct.pack(">I", len(data)) + data


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("host closed the connection")
        got += k
    return bytes(buf)


class _Link:
    """The connection to the host.

    The link thread owns connecting and reading; any thread may send. One
    lock keeps each frame whole on the wire and makes hello the first frame
    of every connection."""

    def __init__(self, path, kernel):
        self.path = path
        self.kernel = kernel
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.sock = None
        # Bumped on every connect. Exec requests remember theirs, so the ones
        # queued on a connection that has since dropped are not run for a
        # host that no longer waits for them.
        self.gen = 0

    def send(self, obj):
        """Send one frame; False if no host is connected or the write failed."""
        if os.getpid() != self.pid:
            # A cell forked and the child came back through kernel code: it
            # must never speak on the kernel's socket.
            return False
        data = _encode(obj)
        with self.lock:
            sock = self.sock
            if sock is None:
                return False
            try:
                sock.sendall(data)
                return True
            except OSError:
                self._drop(sock)
                return False

    def _drop(self, sock):
        # Caller holds the lock. shutdown, not close: it wakes the link
        # thread's blocked recv, and only that thread closes the socket.
        if self.sock is sock:
            self.sock = None
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def run(self):
        while True:
            # Non-inheritable by default (O_CLOEXEC): programs the cells run
            # never get the socket.
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
            except OSError:
                sock.close()
                time.sleep(RECONNECT_DELAY)
                continue
            with self.lock:
                self.gen += 1
                gen = self.gen
                self.sock = sock
                try:
                    sock.sendall(_encode(self.kernel.hello()))
                except OSError:
                    self._drop(sock)
            try:
                self._read(sock, gen)
            except (OSError, EOFError):
                pass  # the host went away; it or its successor will listen again
            except Exception:
                # Whatever broke this connection, the next one starts afresh.
                _log("connection dropped: %s" % traceback.format_exc())
            with self.lock:
                self._drop(sock)
            sock.close()
            time.sleep(RECONNECT_DELAY)

    def _read(self, sock, gen):
        while True:
            (n,) = struct.unpack(">I", _recv_exact(sock, 4))
            if n > MAX_FRAME:
                # Cannot skip it without reading it: the stream is lost.
                raise ValueError("host frame of %d bytes exceeds %d" % (n, MAX_FRAME))
            raw = _recv_exact(sock, n)
            try:
                msg = json.loads(raw)
            except (ValueError, RecursionError):
                continue  # the framing is intact, so only this frame is lost
            if not isinstance(msg, dict):
                continue
            t = msg.get("t")
            if t == "ping":
                if msg.get("reseed") is True:
                    _reseed()
                ping_id = msg.get("id")
                self.send({"t": "pong", "id": ping_id if isinstance(ping_id, str) else None})
            elif t == "exec":
                req = _ExecRequest.parse(msg, gen)
                if req is not None:
                    self.kernel.requests.put(req)
            elif t == "assist":
                req = _AssistRequest.parse(msg, gen)
                if req is not None:
                    self.kernel.requests.put(req)
            elif t in ("command", "env"):
                req = _CommandRequest.parse(msg, gen)
                if req is not None:
                    self.kernel.requests.put(req)
            # Unknown types are ignored: an older kernel must survive a newer host.


def _reseed():
    """New seeds, from this kernel's own os.urandom, for every generator
    seeded once at import. A kernel restored from a template checkpoint
    (session/template.go) would otherwise draw the same numbers as every
    other session restored from it, as a VM restored from one snapshot
    would. Only modules already imported are touched: the others seed
    themselves when first imported. The str hash secret cannot be changed
    in a running interpreter (SECURITY.md)."""
    import random

    random.seed()
    tf = sys.modules.get("tempfile")
    if tf is not None:
        tf._name_sequence = None  # rebuilt, with a new Random, on next use
    nprand = sys.modules.get("numpy.random")
    if nprand is not None:
        nprand.seed()
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process().authkey = mp.AuthenticationString(os.urandom(32))


class _ExecRequest:
    __slots__ = ("id", "code", "max_output", "gen")

    @classmethod
    def parse(cls, msg, gen):
        exec_id, code, limit = msg.get("id"), msg.get("code"), msg.get("max_output")
        if not isinstance(exec_id, str) or not isinstance(code, str):
            return None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            limit = DEFAULT_MAX_OUTPUT
        req = cls()
        req.id, req.code, req.max_output, req.gen = exec_id, code, limit, gen
        return req


# ---------------------------------------------------------------------------
# Output capture


class _Capture:
    """What one cell wrote to fds 1 and 2, as far as it was kept."""

    def __init__(self, exec_id, limit):
        self.id = exec_id
        self.limit = limit
        self.used = [0, 0]
        self.truncated = [False, False]
        # Incremental, so a multi-byte character split across reads survives.
        self.decoders = [_UTF8Decoder("replace"), _UTF8Decoder("replace")]


_UTF8Decoder = codecs.getincrementaldecoder("utf-8")


class _Pump:
    """Owns fds 1 and 2: they are pipes that one thread drains into stream
    frames for the running cell, and discards between cells.

    Capturing at the fd level (not just sys.stdout) catches C extensions and
    child processes too. The pump never stops reading, so a flooding cell or
    a leftover background process never blocks on a full pipe."""

    NAMES = ("stdout", "stderr")

    def __init__(self, link):
        self.link = link
        self.read_fds = []
        self.write_fds = []
        for _ in range(2):
            r, w = os.pipe()  # both non-inheritable
            os.set_blocking(r, False)
            try:
                fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass  # a smaller pipe only means more wake-ups
            self.read_fds.append(r)
            self.write_fds.append(w)
        st = [os.fstat(w) for w in self.write_fds]
        self.write_inos = [(x.st_dev, x.st_ino) for x in st]
        try:
            _State.log_fd = os.dup(2)  # non-inheritable: cells never get it
        except OSError:
            _State.log_fd = -1
        self.redirect()
        self.capture = None
        self.pending = []  # [stream index, text], in arrival order
        self.pending_size = 0
        self.pending_since = 0.0
        self.lock = threading.Lock()

    def redirect(self):
        """Point fds 1 and 2 at the pipes again if a cell moved or closed them."""
        for fd, w, ino in zip((1, 2), self.write_fds, self.write_inos):
            try:
                st = os.fstat(fd)
                same = (st.st_dev, st.st_ino) == ino
            except OSError:
                same = False
            if not same:
                os.dup2(w, fd)  # inheritable: child processes write here too

    def begin(self, exec_id, limit):
        """Start capturing for a cell; what was written before is dropped."""
        with self.lock:
            self.capture = None  # what is in the pipes now predates the cell
            self._drain_all()
            self.pending = []
            self.pending_size = 0
            self.capture = _Capture(exec_id, limit)

    def display(self, item):
        """Send a display item of the running cell now, after the output the
        cell wrote before it: the frame that shows a figure as it is made."""
        main = threading.current_thread() is threading.main_thread()
        if main:
            _State.deferred_sigint = False  # one left by a raise in a finally below
            _State.deferring = True
        try:
            with self.lock:
                cap = self.capture
                if cap is None:
                    return
                self._drain_all()
                self._flush()
                try:
                    self.link.send({"t": "display", "id": cap.id, "item": item})
                except (TypeError, ValueError, RecursionError):
                    pass  # the result's display list still has it
        finally:
            if main:
                _State.deferring = False
                if _State.deferred_sigint:
                    _State.deferred_sigint = False
                    if _State.executing:
                        _State.interrupted = True
                        raise KeyboardInterrupt

    def end(self):
        """Forward everything written so far, then stop capturing.

        Returns the capture. The caller flushed its buffers first, so once
        this returns every byte the cell wrote is on the wire, ahead of the
        result frame."""
        with self.lock:
            self._drain_all()
            cap = self.capture
            if cap is not None:
                for i, dec in enumerate(cap.decoders):
                    self._queue(i, dec.decode(b"", True))
                self._flush()
            self.capture = None
            return cap

    def _drain_all(self):
        # Everything written before the call is already in the pipes; take
        # exactly that much, so a writer that never stops (a background
        # `yes`) cannot keep us here. The caller holds the lock.
        for fd in self.read_fds:
            self._drain(fd)

    def run(self):
        # The main thread's begin() and end() read the pipes too, directly
        # and under the same lock: a cell's boundaries cost no thread
        # handoff.
        poller = select.poll()
        for fd in self.read_fds:
            poller.register(fd, select.POLLIN)
        if _State.init_pipe is not None:
            poller.register(_State.init_pipe, select.POLLIN)
        while True:
            timeout = None
            if self.pending:
                left = self.pending_since + STREAM_INTERVAL - time.monotonic()
                timeout = max(0, int(left * 1000) + 1)
            try:
                events = poller.poll(timeout)
            except InterruptedError:
                continue
            try:
                with self.lock:
                    for fd, _ in events:
                        if fd == _State.init_pipe:
                            os._exit(128 + signal.SIGKILL)  # the init is gone; so is the sandbox
                        self._read(fd, None)
                    if self.pending and (
                        self.pending_size >= STREAM_CHUNK
                        or time.monotonic() - self.pending_since >= STREAM_INTERVAL
                    ):
                        self._flush()
            except Exception:
                # Losing some output beats losing the pump: without it the
                # cells block on full pipes and the main thread on end().
                with self.lock:
                    self.pending, self.pending_size = [], 0
                _log("output pump: %s" % traceback.format_exc())

    def _drain(self, fd):
        try:
            avail = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            # A stricter seccomp filter may refuse the ioctl: read until the
            # pipe is empty instead, within a bound for endless writers.
            avail = 4 * PIPE_SIZE
        while avail > 0:
            n = self._read(fd, avail)
            if n <= 0:
                break
            avail -= n

    def _read(self, fd, limit):
        """Read one chunk from fd into the capture; returns the bytes read."""
        try:
            data = os.read(fd, min(limit or PIPE_SIZE, PIPE_SIZE))
        except (BlockingIOError, InterruptedError):
            return 0
        n = len(data)
        cap = self.capture
        if cap is None:
            return n  # between cells: discarded
        idx = self.read_fds.index(fd)
        room = cap.limit - cap.used[idx]
        if n > room:
            # Keep reading past the limit, only to throw it away: the cell
            # must never block on a full pipe.
            cap.truncated[idx] = True
            data = data[: max(room, 0)]
        if data:
            cap.used[idx] += len(data)
            self._queue(idx, cap.decoders[idx].decode(data))
        return n

    def _queue(self, idx, text):
        if not text:
            return
        if not self.pending:
            self.pending_since = time.monotonic()
        if self.pending and self.pending[-1][0] == idx:
            self.pending[-1][1] += text
        else:
            self.pending.append([idx, text])
        self.pending_size += len(text)

    def _flush(self):
        cap = self.capture
        pending, self.pending, self.pending_size = self.pending, [], 0
        if cap is None:
            return
        for idx, text in pending:
            for i in range(0, len(text), STREAM_CHUNK):
                chunk = text[i : i + STREAM_CHUNK]
                self.link.send({"t": "stream", "id": cap.id, "name": self.NAMES[idx], "text": chunk})


def _text_stream(fd):
    # Line-buffered like a terminal, so print() and os.system() output from
    # one cell arrive in the order they were written.
    return open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


_libc = None


def _flush_c_stdio():
    """Flush C stdio buffers too, but only if the cell could have filled them
    through ctypes; loading ctypes otherwise would slow every cell."""
    global _libc
    ctypes = sys.modules.get("ctypes")
    if ctypes is None:
        return
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:
        pass


# ---------------------------------------------------------------------------
# Rich output


def _cut_utf8(s, limit, what):
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore") + "\n[%s truncated: %d bytes total]" % (what, len(b))


def _plain(obj, lines=False):
    try:
        text = repr(obj)
    except Exception as exc:
        text = "<%s object; repr() raised %s>" % (type(obj).__name__, type(exc).__name__)
    else:
        if lines:
            # IPython's _repr_pprint: the repr's lines, joined by "\n".
            text = "\n".join(text.splitlines())
    return _cut_utf8(text, TEXT_PLAIN_LIMIT, "output")


def _repr_method(obj, name):
    if isinstance(obj, type):
        return None  # on a class, _repr_*_ are unbound functions
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _is_jsonish(mime):
    return mime == "application/json" or mime.endswith("+json")


def _put(bundle, mime, value):
    """Store value under mime in a JSON-safe form, or leave it out."""
    if not isinstance(mime, str) or not mime or value is None:
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        if mime.startswith("text/") or mime == "image/svg+xml":
            value = bytes(value).decode("utf-8", "replace")
        else:
            value = base64.b64encode(value).decode("ascii")
    elif _is_jsonish(mime) and isinstance(value, (dict, list)):
        try:
            size = len(json.dumps(value, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return
        if size > MIME_LIMIT:
            return
        bundle[mime] = value
        return
    if not isinstance(value, str) or len(value) > MIME_LIMIT:
        return
    bundle[mime] = value


class _FigureBundle(dict):
    """A figure's MIME bundle; its chart (see _chart_of) goes in the
    display item beside the bundle, not in it as a MIME type."""

    chart = None


def _figure_bundle(obj):
    """PNG bundle for a matplotlib Figure, or None for anything else."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is None or not isinstance(obj, figure.Figure):
        return None
    buf = io.BytesIO()
    try:
        obj.savefig(buf, format="png", bbox_inches="tight")
    except Exception:
        buf = io.BytesIO()  # a tight bbox fails on some artists
        obj.savefig(buf, format="png")
    chart = _chart_of(obj)  # drawn now: tick labels are set
    # Shown now, so the end-of-cell sweep must not show it again.
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        try:
            plt.close(obj)
        except Exception:
            pass
    bundle = _FigureBundle({"text/plain": _plain(obj)})
    bundle.chart = chart
    _put(bundle, "image/png", buf.getvalue())
    return bundle


def _mime_bundle(obj):
    """IPython-style MIME bundle: text/plain always, rich types when the
    object offers them. A raising repr method is skipped, never fatal."""
    try:
        fig = _figure_bundle(obj)
    except Exception:
        fig = None
    if fig is not None:
        return fig
    bundle = {}
    method = _repr_method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            got = method(include=None, exclude=None)
        except Exception:
            got = None
        if isinstance(got, tuple) and got:
            got = got[0]  # (data, metadata)
        if isinstance(got, dict):
            for mime, value in got.items():
                _put(bundle, mime, value)
    for mime, name in _REPR_METHODS:
        if mime in bundle:
            continue
        method = _repr_method(obj, name)
        if method is None:
            continue
        try:
            value = method()
        except Exception:
            continue
        if isinstance(value, tuple) and len(value) == 2:
            value = value[0]  # (data, metadata)
        _put(bundle, mime, value)
    if not isinstance(bundle.get("text/plain"), str):
        bundle["text/plain"] = _pretty(obj)
    else:
        bundle["text/plain"] = _cut_utf8(bundle["text/plain"], TEXT_PLAIN_LIMIT, "output")
    return bundle


def _pretty(obj):
    """text/plain as Jupyter shows it: IPython's display formatter and
    pretty printer (`int` for type(1), long lists broken one item a line,
    sorted sets). Most values print exactly as repr() under it; for those
    the kernel does not load IPython (see _pretty_is_repr)."""
    shell = _SHELL
    if shell is None:
        if _pretty_is_repr(obj):
            return _plain(obj, lines=True)
        shell = _ensure_shell()
    if shell is not None:
        try:
            text = shell.display_formatter.formatters["text/plain"](obj)
        except Exception:
            text = None
        if isinstance(text, str):
            return _cut_utf8(text, TEXT_PLAIN_LIMIT, "output")
    return _plain(obj)


def _display_item(bundle):
    mime = next((m for m in _PRIMARY_ORDER if m in bundle), None)
    if mime is None:
        mime = next(iter(bundle))
    data = bundle[mime]
    if not isinstance(data, str):
        data = json.dumps(data, ensure_ascii=False, allow_nan=False)
    item = {"mime": mime, "data": data, "bundle": bundle}
    chart = getattr(bundle, "chart", None)
    if chart is not None:
        item["chart"] = chart
    return item


def _encoded_size(obj):
    return len(json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace"))


# ---------------------------------------------------------------------------
# Chart data: the numbers a matplotlib figure drew, next to its PNG
#
# A figure's display item carries "chart": the chart type, title, axis
# labels and the plotted series, read from the Figure's artists (Line2D
# data, bar containers, scatter offsets, pie wedges, the histograms
# Axes.hist returned). Field names follow E2B's code-interpreter charts
# (type, title, x_label, y_label, elements...). What this cannot read
# faithfully is "unknown" with a reason, and the PNG is all there is.
# Everything is bounded, and any failure here leaves the PNG alone.

CHART_LIMIT = 1 << 20  # bytes of a chart's JSON; larger becomes "unknown"
CHART_POINTS = 5000  # points kept per series (and bins per histogram)
CHART_NUMBERS = 40000  # numbers kept per figure, all series and ticks
CHART_ELEMENTS = 1000  # elements per figure (bars, series, wedges)
CHART_AXES = 16  # subplots described in a superchart
CHART_TICKS = 100  # ticks kept per axis
CHART_TEXT = 256  # characters kept of a title, label or tick label


class _ChartBudget:
    """What one figure's chart may still hold; truncated says it ran out."""

    def __init__(self):
        self.numbers = CHART_NUMBERS
        self.elements = CHART_ELEMENTS
        self.truncated = False

    def take(self, count, each=1):
        """How many of count items of each numbers fit (at most CHART_POINTS)."""
        n = max(0, min(count, CHART_POINTS, self.numbers // each))
        if n < count:
            self.truncated = True
        self.numbers -= n * each
        return n

    def element(self):
        if self.elements <= 0:
            self.truncated = True
            return False
        self.elements -= 1
        return True


def _chart_text(s):
    s = "" if s is None else str(s)
    return s[:CHART_TEXT]


def _chart_label(artist):
    """An artist's legend label; matplotlib's automatic ones ("_child0",
    "_nolegend_") start with an underscore and mean none."""
    try:
        label = artist.get_label()
    except Exception:
        return ""
    label = _chart_text(label)
    return "" if label.startswith("_") else label


def _chart_floats(values, n):
    """The first n values as finite floats, or None if any is not."""
    import numpy as np

    arr = np.ma.filled(np.ma.asarray(values, dtype=float)[:n], np.nan).ravel()
    if not np.all(np.isfinite(arr)):
        return None
    return arr.tolist()


def _chart_points(xy, budget):
    """[[x, y], ...] of the finite points among the first a budget allows
    of an (N, 2) array; cut first, so a huge series is never copied whole."""
    import numpy as np

    arr = np.ma.asarray(xy)
    n = budget.take(len(arr), 2)
    arr = np.ma.filled(np.ma.asarray(arr[:n], dtype=float), np.nan).reshape(-1, 2)
    arr = arr[np.all(np.isfinite(arr), axis=1)]  # NaN breaks a line: the gap is not kept
    return arr.tolist()


def _chart_unit(label):
    """The unit of a label written "Speed (m/s)" or "Speed [m/s]"."""
    label = label.rstrip()
    for open_, close in (("(", ")"), ("[", "]")):
        if label.endswith(close) and open_ in label:
            unit = label[label.rindex(open_) + 1 : -1].strip()
            if unit and open_ not in unit:
                return unit
    return None


def _chart_scale(axis, scale):
    """linear, log, ... as matplotlib names it, or categorical/datetime when
    the axis converts strings or dates."""
    try:
        converter = axis.converter
        if converter is not None:
            mod = type(converter).__module__
            if mod == "matplotlib.category":
                return "categorical"
            if mod == "matplotlib.dates":
                return "datetime"
    except Exception:
        pass
    return _chart_text(scale)


def _chart_tick_label(text):
    """A tick label as text: log axes draw "$\\mathdefault{10^{2}}$",
    which reads 10^{2}."""
    text = _chart_text(text)
    if len(text) > 1 and text[0] == "$" and text[-1] == "$":
        text = text[1:-1]
        if text.startswith("\\mathdefault{") and text.endswith("}"):
            text = text[len("\\mathdefault{") : -1]
    return text


def _chart_ticks(ax, which, budget):
    """Tick positions inside the view and their labels, as drawn."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    ticks, labels = [], []
    for tick in axis.get_major_ticks():
        loc = tick.get_loc()
        if loc is None or not (lo <= loc <= hi) or len(ticks) >= CHART_TICKS:
            continue
        try:
            loc = float(loc)
        except (TypeError, ValueError):
            continue
        if loc != loc or loc in (float("inf"), float("-inf")) or budget.take(1) < 1:
            continue
        ticks.append(loc)
        labels.append(_chart_tick_label(tick.label1.get_text()))
    return ticks, labels


def _chart_axes_info(ax, chart, budget, ticks=True):
    """Title, axis labels, units, scales and ticks of one Axes."""
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    if title:
        chart["title"] = _chart_text(title)
    for which in ("x", "y"):
        axis = ax.xaxis if which == "x" else ax.yaxis
        label = _chart_text(axis.get_label().get_text())
        chart[which + "_label"] = label
        unit = _chart_unit(label)
        if unit:
            chart[which + "_unit"] = unit
        chart[which + "_scale"] = _chart_scale(axis, ax.get_xscale() if which == "x" else ax.get_yscale())
        if ticks:
            locs, labels = _chart_ticks(ax, which, budget)
            chart[which + "_ticks"] = locs
            chart[which + "_tick_labels"] = labels


def _chart_unknown(reason, title=""):
    return {"type": "unknown", "title": _chart_text(title), "elements": [], "reason": reason}


def _chart_tick_names(axis):
    """Position -> label of the ticks an axis was given names at (a
    categorical axis, or set_xticks with labels as pandas does); empty
    for numeric ticks, whose labels ("1.0", "1.5") are not names."""
    names = {}
    try:
        if type(axis.get_major_locator()).__name__ not in ("FixedLocator", "StrCategoryLocator"):
            return names
        for tick in axis.get_major_ticks()[: CHART_ELEMENTS * 2]:
            loc, text = tick.get_loc(), tick.label1.get_text()
            if loc is not None and text:
                names[round(float(loc), 9)] = _chart_text(text)
    except Exception:
        pass
    return names


def _chart_nearest(names, pos):
    """The name of the tick nearest pos, if closer than half the spacing
    of the ticks: grouped bars sit beside their category's tick."""
    if not names:
        return None
    locs = sorted(names)
    half = min((b - a for a, b in zip(locs, locs[1:])), default=1.0) / 2
    best = min(locs, key=lambda loc: abs(loc - pos))
    return names[best] if abs(best - pos) < half else None


def _chart_bars(ax, containers, budget):
    """A bar chart from BarContainers: one element per bar, labelled by
    the category tick under it and grouped by its container's label."""
    orient = {getattr(c, "orientation", None) or "vertical" for c in containers}
    if len(orient) != 1:
        return _chart_unknown("bars of both orientations in one axes")
    horizontal = orient.pop() == "horizontal"
    chart = {"type": "bar", "orientation": "horizontal" if horizontal else "vertical"}
    _chart_axes_info(ax, chart, budget, ticks=False)
    names = _chart_tick_names(ax.yaxis if horizontal else ax.xaxis)
    elements, stacked = [], False
    for c in containers:
        group = _chart_label(c)
        for rect in c.patches:
            if not budget.element() or budget.take(1) < 1:
                break
            if horizontal:
                pos, value, base = rect.get_y() + rect.get_height() / 2, rect.get_width(), rect.get_x()
            else:
                pos, value, base = rect.get_x() + rect.get_width() / 2, rect.get_height(), rect.get_y()
            value, base, pos = float(value), float(base), float(pos)
            if not all(v == v and abs(v) != float("inf") for v in (value, base, pos)):
                continue  # a missing value draws no bar
            stacked = stacked or base != 0
            label = _chart_nearest(names, pos) or _chart_text("%g" % pos)
            elements.append({"label": label, "group": group, "value": value})
    if stacked and len(containers) > 1:
        chart["stacked"] = True
    chart["elements"] = elements
    return chart


def _chart_histogram(ax, hists, budget):
    """A histogram from what Axes.hist returned: per dataset, the bin
    edges and the counts (or densities; stacked ones cumulative, as
    matplotlib returns them)."""
    import numpy as np

    chart = {"type": "histogram"}
    _chart_axes_info(ax, chart, budget, ticks=False)
    elements = []
    for counts, edges, labels, stacked, horizontal in hists:
        counts = np.asarray(counts, dtype=float)
        if counts.ndim == 1:
            counts = counts[np.newaxis]
        if stacked:
            chart["stacked"] = True
        if horizontal:
            chart["orientation"] = "horizontal"
        for i, row in enumerate(counts):
            if not budget.element():
                break
            n = budget.take(len(row), 2)
            e = _chart_floats(edges, n + 1)
            c = _chart_floats(row, n)
            if e is None or c is None:
                return _chart_unknown("a histogram with non-finite bins or counts", chart.get("title", ""))
            label = labels[i] if i < len(labels) else ""
            elements.append({"label": _chart_text(label), "edges": e, "counts": c})
    chart["elements"] = elements
    return chart


def _chart_axes(ax, budget):
    """The chart of one Axes: its type decided by which artists it has."""
    title = ax.get_title()
    name = getattr(ax, "name", "rectilinear")
    if name != "rectilinear":
        return _chart_unknown("%s axes" % _chart_text(name), title)
    if ax.images:
        return _chart_unknown("an image (imshow, matshow, spy)", title)
    if ax.tables:
        return _chart_unknown("a table", title)
    # Only histograms still drawn: ax.cla() drops the patches, not the record.
    drawn = {id(p) for p in ax.patches}
    hists = [h for h in getattr(ax, "_jailcell_hists", None) or [] if h[5] & drawn]
    drawn |= {id(l) for l in ax.lines}
    boxes = [b for b in getattr(ax, "_jailcell_boxes", None) or [] if b[2] & drawn]
    hist_artists = set()
    for _, _, _, _, _, ids in hists:
        hist_artists |= ids
    for _, _, ids in boxes:
        hist_artists |= ids  # a box plot's lines and patches are not series of their own
    # Reference lines (axhline, axvline) are drawn in axes coordinates:
    # decoration, not data.
    lines = [l for l in ax.lines if l.get_transform() == ax.transData and id(l) not in hist_artists]
    scatters, others = [], []
    for coll in ax.collections:
        if type(coll).__name__ == "PathCollection" and coll.get_offset_transform() == ax.transData:
            scatters.append(coll)
        else:
            others.append(type(coll).__name__)
    if others:
        return _chart_unknown("%s (contour, mesh, fill or error bars)" % others[0], title)
    bars = [c for c in ax.containers if type(c).__name__ == "BarContainer" and not (set(map(id, c.patches)) & hist_artists)]
    bar_patches = {id(p) for c in bars for p in c.patches}
    patches = [p for p in ax.patches if id(p) not in bar_patches and id(p) not in hist_artists]
    if patches and all(type(p).__name__ == "Wedge" for p in patches) and not (lines or scatters or bars or hists or boxes):
        return _chart_pie(ax, patches, budget)
    if patches:
        return _chart_unknown("a %s patch" % type(patches[0]).__name__, title)
    kinds = [k for k, v in (("line", lines), ("scatter", scatters), ("bar", bars), ("histogram", hists),
                            ("box_and_whisker", boxes)) if v]
    if len(kinds) > 1:
        return _chart_unknown("mixed %s in one axes" % " and ".join(kinds), title)
    if not kinds:
        return _chart_unknown("nothing plotted", title)
    if hists:
        return _chart_histogram(ax, [h[:5] for h in hists], budget)
    if boxes:
        return _chart_boxes(ax, boxes, budget)
    if bars:
        return _chart_bars(ax, bars, budget)
    chart = {"type": "line" if lines else "scatter"}
    _chart_axes_info(ax, chart, budget)
    elements = []
    for artist in lines or scatters:
        if not budget.element():
            break
        xy = artist.get_xydata() if lines else artist.get_offsets()
        elements.append({"label": _chart_label(artist), "points": _chart_points(xy, budget)})
    chart["elements"] = elements
    return chart


def _chart_boxes(ax, boxes, budget):
    """A box plot from what Axes.boxplot returned: per box, its whisker
    ends (min, max), quartiles, median and the outliers drawn."""
    import numpy as np

    vert = {b[1] for b in boxes}
    if len(vert) != 1:
        return _chart_unknown("box plots of both orientations in one axes", ax.get_title())
    horizontal = not vert.pop()
    chart = {"type": "box_and_whisker"}
    if horizontal:
        chart["orientation"] = "horizontal"
    _chart_axes_info(ax, chart, budget, ticks=False)
    names = _chart_tick_names(ax.yaxis if horizontal else ax.xaxis)

    def values(line):
        return np.asarray(line.get_xdata() if horizontal else line.get_ydata(), dtype=float).ravel()

    elements = []
    for out, _, _ in boxes:
        medians, whiskers, fliers = (out.get(k) or [] for k in ("medians", "whiskers", "fliers"))
        if len(whiskers) != 2 * len(medians):
            return _chart_unknown("a box plot drawn without its whiskers", chart.get("title", ""))
        for i, med in enumerate(medians):
            if not budget.element() or budget.take(5) < 5:
                break
            # Each whisker runs from its quartile to its end ([q1, low],
            # [q3, high]), notched box or not.
            lo, hi, m = values(whiskers[2 * i]), values(whiskers[2 * i + 1]), values(med)
            outliers = values(fliers[i]) if i < len(fliers) else np.zeros(0)
            outliers = outliers[np.isfinite(outliers)]
            if len(lo) != 2 or len(hi) != 2 or not len(m) or not np.all(np.isfinite(np.concatenate([lo, hi, m[:1]]))):
                continue
            pos = float(np.mean(med.get_ydata() if horizontal else med.get_xdata()))
            n = budget.take(len(outliers))
            elements.append({
                "label": _chart_nearest(names, pos) or _chart_text("%g" % pos),
                "min": float(lo[1]),
                "first_quartile": float(lo[0]),
                "median": float(m[0]),
                "third_quartile": float(hi[0]),
                "max": float(hi[1]),
                "outliers": outliers[:n].tolist(),
            })
    chart["elements"] = elements
    return chart


def _chart_pie(ax, wedges, budget):
    """A pie: each wedge's label, angle (degrees, to 1e-4: matplotlib keeps
    them as float32) and radius; its share of the pie is angle / 360."""
    chart = {"type": "pie", "title": _chart_text(ax.get_title())}
    elements = []
    for w in wedges:
        if not budget.element() or budget.take(2) < 2:
            break
        angle = round(float(w.theta2) - float(w.theta1), 4)
        elements.append({"label": _chart_label(w), "angle": angle, "radius": float(w.r)})
    chart["elements"] = elements
    return chart


def _chart_of(fig):
    """The chart of a drawn Figure as a JSON-ready dict, or None when
    there is nothing to say (no axes). Never raises."""
    try:
        axes = [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]
        if not axes:
            return None
        budget = _ChartBudget()
        suptitle = getattr(fig, "_suptitle", None)
        suptitle = _chart_text(suptitle.get_text()) if suptitle is not None else ""
        if len(axes) == 1:
            chart = _chart_axes(axes[0], budget)
            if suptitle and not chart.get("title"):
                chart["title"] = suptitle
        else:
            # One level only: each subplot is a chart of its own, in
            # the order they were added.
            chart = {"type": "superchart", "title": suptitle, "elements": []}
            if len(axes) > CHART_AXES:
                budget.truncated = True
            for ax in axes[:CHART_AXES]:
                try:
                    chart["elements"].append(_chart_axes(ax, budget))
                except Exception as exc:
                    chart["elements"].append(_chart_unknown("cannot read this axes: %s" % type(exc).__name__))
        chart.setdefault("title", "")
        if budget.truncated:
            chart["truncated"] = True
        if _encoded_size(chart) > CHART_LIMIT:
            return _chart_unknown("chart data over %d KiB" % (CHART_LIMIT >> 10), chart.get("title", ""))
        return chart
    except Exception as exc:
        try:
            return _chart_unknown("cannot read this figure: %s" % type(exc).__name__)
        except Exception:
            return None


def _chart_patch_axes(axes_module):
    """Remember on the Axes what each hist() and boxplot() call returned:
    once drawn, a histogram's bars look like any other bars and a box plot
    is a heap of lines."""
    Axes = getattr(axes_module, "Axes", None)
    _chart_patch_boxplot(Axes)
    hist = getattr(Axes, "hist", None)
    if hist is None or getattr(hist, "_jailcell", False):
        return

    def jailcell_hist(self, x, *args, **kwargs):
        out = hist(self, x, *args, **kwargs)
        try:
            counts, edges, patches = out
            ids = set()
            stack = [patches]
            while stack and len(ids) < 100000:
                p = stack.pop()
                if isinstance(p, (list, tuple)) or type(p).__name__ in ("BarContainer", "silent_list"):
                    stack.extend(p)
                else:
                    ids.add(id(p))
            label = kwargs.get("label")
            labels = [label] if isinstance(label, str) else list(label or [])
            labels = ["" if l is None or str(l).startswith("_") else str(l) for l in labels]
            stacked = bool(kwargs.get("stacked"))
            horizontal = kwargs.get("orientation") == "horizontal"
            if not hasattr(self, "_jailcell_hists"):
                self._jailcell_hists = []
            self._jailcell_hists.append((counts, edges, labels, stacked, horizontal, ids))
        except Exception:
            pass
        return out

    jailcell_hist._jailcell = True
    jailcell_hist.__wrapped__ = hist
    jailcell_hist.__doc__ = hist.__doc__
    Axes.hist = jailcell_hist


def _chart_patch_boxplot(Axes):
    boxplot = getattr(Axes, "boxplot", None)
    if boxplot is None or getattr(boxplot, "_jailcell", False):
        return

    def jailcell_boxplot(self, x, *args, **kwargs):
        out = boxplot(self, x, *args, **kwargs)
        try:
            ids = {id(a) for artists in out.values() for a in artists}
            if not hasattr(self, "_jailcell_boxes"):
                self._jailcell_boxes = []
            self._jailcell_boxes.append((out, kwargs.get("vert", True) is not False, ids))
        except Exception:
            pass
        return out

    jailcell_boxplot._jailcell = True
    jailcell_boxplot.__wrapped__ = boxplot
    jailcell_boxplot.__doc__ = boxplot.__doc__
    Axes.boxplot = jailcell_boxplot


# ---------------------------------------------------------------------------
# matplotlib


class _PatchingLoader:
    """Wraps a module's real loader to patch the module right after it
    runs (pyplot's show, IPython's display, getpass and pdb)."""

    def __init__(self, inner, after):
        self._inner = inner
        self._after = after

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name):
        if name == "_inner":
            raise AttributeError(name)  # not set yet (copy, pickle): no recursion
        return getattr(self._inner, name)  # get_source, is_package, ...


class _PyplotHook:
    """Meta path finder that patches matplotlib.pyplot the moment it is
    imported, so that even a cell that imports pyplot and calls show() in
    one go gets the kernel's show(), without the kernel importing
    matplotlib itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        return _spec_then(self, name, path, target, _patch_pyplot)


def _patch_pyplot(plt):
    show = getattr(plt, "show", None)
    if show is None or getattr(show, "_jailcell", False):
        return

    def jailcell_show(*args, **kwargs):
        """Send every open figure to the cell's output as PNG, then close it."""
        if _KERNEL is not None and _KERNEL.cell is not None:
            _KERNEL.flush_figures()

    jailcell_show._jailcell = True
    jailcell_show.__wrapped__ = show
    plt.show = jailcell_show
    _chart_patch_axes(sys.modules.get("matplotlib.axes"))


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
    if _SHELL is None and sys._getframe(1).f_code.co_filename.startswith(sys.prefix + os.sep):
        return _SHELL_STUB
    return _ensure_shell()


def _ensure_shell():
    """Create the InteractiveShell on the kernel's namespace, once.

    Returns None if IPython is not installed."""
    if _SHELL is not None or _KERNEL is None or _State.shell_loading:
        return _SHELL
    _State.shell_loading = True
    try:
        return _make_shell()
    except ImportError:
        return None
    finally:
        _State.shell_loading = False


def _make_shell():
    global _SHELL
    from traitlets.config import Config
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    kernel = _KERNEL

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
    _SHELL = shell
    import pdb  # stdlib; ipykernel patches it at start (see _patch_pdb)

    _patch_pdb(pdb)
    return shell


def _clear_output(wait=False):
    """IPython.display.clear_output() as ipykernel does it: what the cell
    wrote so far goes out first, then {"clear": true, "wait": ...} on the
    display path, which the Jupyter front door sends as a clear_output
    message. No output of its own: it is not in the result's display list."""
    kernel = _KERNEL
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
        if name != "IPython" or _SHELL is not None or _State.shell_loading:
            return None
        return _spec_then(self, name, path, target, _after_ipython)


def _spec_then(hook, name, path, target, after):
    """The spec the other finders of sys.meta_path give for name, with its
    loader wrapped to call after(module) once the module has run; None if
    none of them finds it. hook is the calling finder, skipped."""
    for finder in sys.meta_path:
        if finder is hook or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(name, path, target)
        if spec is not None:
            break
    else:
        return None
    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _PatchingLoader(spec.loader, after)
    return spec


def _after_ipython(module):
    sys.modules[module.__name__] = module
    try:
        _ensure_shell()
    except Exception:
        _log("cannot start the IPython shell: %s" % traceback.format_exc())


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


# Exact types whose text/plain under IPython is their repr().
_REPR_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))
_REPR_CONTAINERS = frozenset((list, tuple, dict))
# Modules whose types IPython.lib.pretty prints its own way (by type or by
# name: type, functions, sets, exceptions, re, datetime, collections...).
_PRETTY_MODULES = frozenset(("builtins", "collections", "_collections", "re", "datetime", "types", "os"))
PRETTY_WIDTH = 79  # IPython's PlainTextFormatter.max_width


def _pretty_is_repr(obj):
    """True if IPython's pretty printer would show obj as repr() does
    (give or take line breaks), so that the kernel need not load IPython
    to format it. Follows IPython.lib.pretty's lookup: exact scalars;
    short lists, tuples and dicts of them (pretty breaks only what is wider
    than 79 columns); otherwise the first class of the MRO that defines
    __repr__, unless pretty has its own printer for a class before it or
    the MRO reaches object (pretty's default omits the word "object")."""
    cls = type(obj)
    if cls in _REPR_SCALARS:
        return True
    if cls in _REPR_CONTAINERS:
        budget = [64]  # elements looked at, so that a huge value costs nothing
        if not _simple_container(obj, budget, 4):
            return False
        try:
            return len(repr(obj)) <= PRETTY_WIDTH
        except Exception:
            return False
    try:
        for klass in cls.__mro__:
            if klass is object:
                return False
            if getattr(klass, "__module__", None) in _PRETTY_MODULES:
                return False
            d = klass.__dict__
            if "_repr_pretty_" in d:
                return False
            if callable(d.get("__repr__")):
                return True
    except Exception:
        pass
    return False


def _simple_container(obj, budget, depth):
    if depth == 0:
        return False
    items = obj.items() if type(obj) is dict else ((x, None) for x in obj)
    for k, v in items:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        for x in (k, v) if type(obj) is dict else (k,):
            t = type(x)
            if t in _REPR_SCALARS:
                continue
            if t in _REPR_CONTAINERS and _simple_container(x, budget, depth - 1):
                continue
            return False
    return True


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
    cell = _KERNEL.cell if _KERNEL is not None else None
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
    if _SHELL is not None:
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
        _KERNEL.display({"application/javascript": js}, raw=True)
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


# ---------------------------------------------------------------------------
# Errors


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
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != _KERNEL_FILE])
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


# ---------------------------------------------------------------------------
# The kernel


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
        if _KERNEL is not None:
            _KERNEL.pump.display(item)

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
        if not self._charge(bundle):
            bundle = {"text/plain": "[value dropped: over the %d MiB limit for one cell]" % (RICH_BUDGET >> 20)}
            chart = None
        self.value = bundle
        self.value_chart = chart if chart is not None and self._charge(chart) else None


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
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)
        sys.stdout = sys.__stdout__ = self.stdout
        sys.stderr = sys.__stderr__ = self.stderr

        # A real module as __main__, so that pickle and friends find classes
        # and functions the cells define. The kernel's own module stays
        # reachable under another name.
        sys.modules["_jailcell_kernel"] = sys.modules[__name__]
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        builtins.display = self.display
        builtins.get_ipython = _get_ipython
        _install_no_stdin()
        # Notebook history: Out[n] and _n for values, In[n] for sources.
        self.out = {}
        self.last = None
        self.inputs = [""]
        self.ns["Out"] = self.out
        self.ns["In"] = self.inputs

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

    def serve(self):
        while True:
            req = None
            try:
                req = self.requests.get()
                if req.gen != self.link.gen:
                    continue  # its host has gone; a new one does not know the id
                if isinstance(req, _CommandRequest):
                    # Between cells, like assist: see _command below.
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
        cell = _Cell(req, self.cells)
        self.pump.redirect()
        self._restore_stdio()
        self.pump.begin(req.id, req.max_output)
        self.cell = cell
        _State.interrupted = False
        try:
            try:
                _State.executing = True
                self._execute(cell)
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
        return res

    def _remember(self, value):
        """_, __, ___, Out[n] and _n, as IPython's displayhook keeps them.
        A `_` the user assigned is left alone, as in IPython."""
        ns = self.ns
        if "_" not in ns or ns["_"] is self.last:
            ns["___"], ns["__"], ns["_"] = ns.get("__"), ns.get("_"), value
            self.last = value
        self.out[self.cells] = value
        ns["_%d" % self.cells] = value

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
            fresh = _text_stream(fd)
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
        self.inputs.append(source)
        if _SHELL is not None:
            _SHELL.execution_count = self.cells
        try:
            try:
                tree = compile(source, cell.filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
            except SyntaxError:
                # Magics, `!` and `?` are never valid Python: only a cell that
                # fails to compile is worth IPython's transforms.
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
            exec(body, self.ns)
            value = eval(tail, self.ns) if tail is not None else None
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


# ---------------------------------------------------------------------------
# Jupyter's complete, inspect and is_complete (the "assist" frame)
#
# {"t":"assist","id":..,"kind":"complete"|"inspect"|"is_complete","code":..,
#  "cursor_pos":N,"detail_level":0|1} is answered with {"t":"assist","id":..}
# plus the kind's fields, as ipykernel's replies carry them. IPython is
# imported on first use only (the kernel's start stays cheap); without it a
# stdlib fallback answers. Results are bounded here and again by the host.

ASSIST_MATCHES = 1000  # completions kept
ASSIST_MATCH_LEN = 1000  # characters of one completion
ASSIST_TEXT = 1 << 20  # characters of an inspection's text
ASSIST_KINDS = ("complete", "inspect", "is_complete")


class _AssistRequest:
    __slots__ = ("id", "kind", "code", "cursor", "detail", "gen")

    @classmethod
    def parse(cls, msg, gen):
        aid, kind, code = msg.get("id"), msg.get("kind"), msg.get("code")
        if not isinstance(aid, str) or kind not in ASSIST_KINDS or not isinstance(code, str):
            return None
        cursor, detail = msg.get("cursor_pos"), msg.get("detail_level")
        if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= len(code):
            cursor = len(code)
        if detail not in (0, 1):
            detail = 0
        req = cls()
        req.id, req.kind, req.code, req.cursor, req.detail, req.gen = aid, kind, code, cursor, detail, gen
        return req


def _assist(req):
    reply = {"t": "assist", "id": req.id}
    try:
        if req.kind == "complete":
            reply.update(_complete(req.code, req.cursor))
        elif req.kind == "inspect":
            reply.update(_inspect(req.code, req.cursor, req.detail))
        else:
            reply.update(_is_complete(req.code))
    except BaseException as exc:  # the kernel must answer, whatever the completer did
        _log("%s failed: %s" % (req.kind, _safe_str(exc)))
        reply.update({"complete": {"matches": [], "cursor_start": req.cursor, "cursor_end": req.cursor},
                      "inspect": {"found": False, "data": {}},
                      "is_complete": {"status": "unknown"}}[req.kind])
    return reply


def _complete(code, cursor):
    shell = _ensure_shell()
    if shell is not None:
        # As ipykernel's default (its "experimental" completions API): the
        # matches replace [start, end) of the code, in code points.
        from IPython.core.completer import provisionalcompleter, rectify_completions

        with provisionalcompleter():
            found = shell.Completer.completions(code, cursor)
            completions = []
            for c in rectify_completions(code, found):
                completions.append(c)
                if len(completions) >= ASSIST_MATCHES:
                    break
        matches = [c.text for c in completions]
        start = completions[0].start if completions else cursor
        end = completions[0].end if completions else cursor
    else:
        import re
        import rlcompleter

        m = re.search(r"[\w.]*$", code[:cursor])
        text = m.group(0) if m else ""
        completer = rlcompleter.Completer(_KERNEL.ns if _KERNEL is not None else {})
        matches = []
        while len(matches) < ASSIST_MATCHES:
            c = completer.complete(text, len(matches))
            if c is None:
                break
            matches.append(c)
        start, end = cursor - len(text), cursor
    seen, kept = set(), []
    for c in matches:
        if isinstance(c, str) and len(c) <= ASSIST_MATCH_LEN and c not in seen:
            seen.add(c)
            kept.append(c)
            if len(kept) >= ASSIST_MATCHES:
                break
    return {"matches": kept, "cursor_start": max(0, start), "cursor_end": max(start, end)}


def _inspect(code, cursor, detail):
    shell = _ensure_shell()
    data = {}
    if shell is not None:
        from IPython.utils.tokenutil import token_at_cursor

        name = token_at_cursor(code, cursor)
        try:
            bundle = shell.object_inspect_mime(name, detail_level=detail)
        except KeyError:
            bundle = None
        if bundle:
            text = bundle.get("text/plain")
            if isinstance(text, str):
                data["text/plain"] = text[:ASSIST_TEXT]
    else:
        import pydoc
        import re

        m = re.search(r"[\w.]*$", code[:cursor])
        name = m.group(0) if m else ""
        ns = _KERNEL.ns if _KERNEL is not None else {}
        parts = name.split(".") if name else []
        found, obj = False, None
        if parts and parts[0] in ns:
            found, obj = True, ns[parts[0]]
        elif parts and hasattr(builtins, parts[0]):
            found, obj = True, getattr(builtins, parts[0])
        for part in parts[1:]:
            try:
                obj = getattr(obj, part)
            except Exception:
                found = False
                break
        if found:
            data["text/plain"] = pydoc.render_doc(obj, renderer=pydoc.plaintext)[:ASSIST_TEXT]
    return {"found": bool(data), "data": data}


def _is_complete(code):
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        import codeop

        try:
            done = codeop.compile_command(code, "<cell>", "exec")
        except (SyntaxError, ValueError, OverflowError):
            return {"status": "invalid"}
        return {"status": "complete"} if done is not None else {"status": "incomplete", "indent": ""}
    status, indent = TransformerManager().check_complete(code)
    reply = {"status": status if status in ("complete", "incomplete", "invalid") else "unknown"}
    if status == "incomplete":
        reply["indent"] = " " * min(int(indent or 0), 64)
    return reply


_HISTORY_NAMES = ("_", "__", "___")

# ---------------------------------------------------------------------------
# Commands and environment (the "command" and "env" frames)
#
# {"t":"command","id":..,"action":"start","cmd":..,"envs":{..},"cwd":..,
#  "max_output":N,"wait_s":S,"timeout_s":T,"grace_s":G,"stream":bool}
# runs cmd with bash -c as a child of this kernel, in its own process group;
# {"action":"wait","job":..,"wait_s":S,"stream":bool} waits for a job,
# {"action":"kill","job":..} SIGKILLs its group. Each is answered with one
# {"t":"command","id":..,"job":..,"done":..,"exit_code":..,"stdout":..,...},
# after "stream" frames with the same id while the host waits with stream.
# {"t":"env","id":..,"set":{..},"unset":[..]} edits os.environ (what cells
# and later commands inherit) and is answered {"t":"env","id":..}.
#
# A command runs inside this sandbox with the kernel's own isolation; the
# host validates every field, and bounds again what it reads back.

COMMAND_JOBS = 16  # jobs kept per kernel, finished ones dropped first
COMMAND_READ = 64 << 10
COMMAND_ACTIONS = ("start", "wait", "kill")


class _CommandRequest:
    __slots__ = ("t", "id", "action", "cmd", "envs", "unset", "cwd", "limit", "wait", "timeout", "grace", "stream", "job", "gen")

    @classmethod
    def parse(cls, msg, gen):
        req = cls()
        req.t, req.id, req.gen = msg.get("t"), msg.get("id"), gen
        if not isinstance(req.id, str):
            return None

        def num(name, default):
            v = msg.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                return default
            return v

        envs = msg.get("envs") if req.t == "command" else msg.get("set")
        req.envs = {k: v for k, v in envs.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(envs, dict) else {}
        unset = msg.get("unset")
        req.unset = [k for k in unset if isinstance(k, str)] if isinstance(unset, list) else []
        req.action = msg.get("action")
        req.cmd, req.cwd, req.job = msg.get("cmd"), msg.get("cwd"), msg.get("job")
        req.limit = int(num("max_output", DEFAULT_MAX_OUTPUT))
        req.wait, req.timeout, req.grace = num("wait_s", 0), num("timeout_s", 0), num("grace_s", 2)
        req.stream = msg.get("stream") is True
        return req


class _Job:
    """One command: its process, what it wrote (up to limit bytes a stream)
    and who listens for more."""

    def __init__(self, name, proc, limit, link):
        self.name, self.proc, self.limit, self.link = name, proc, limit, link
        self.out = [bytearray(), bytearray()]
        self.cut = [False, False]
        self.sent = [0, 0]  # bytes already streamed to a host
        self.listener = None  # the request id a waiting host streams under
        self.timed_out = False
        self.lock = threading.Lock()
        self.readers = []
        self.timer = None
        for i, pipe in enumerate((proc.stdout, proc.stderr)):
            th = threading.Thread(target=self._read, args=(i, pipe), name="jailcell-cmd", daemon=True)
            th.start()
            self.readers.append(th)

    def _read(self, i, pipe):
        fd = pipe.fileno()
        while True:
            try:
                b = os.read(fd, COMMAND_READ)
            except OSError:
                b = b""
            if not b:
                pipe.close()
                return
            with self.lock:
                room = self.limit - len(self.out[i])
                if room < len(b):
                    self.cut[i] = True
                self.out[i] += b[: max(room, 0)]
                self._forward_locked(i)

    def _forward_locked(self, i):
        if self.listener is None or self.sent[i] >= len(self.out[i]):
            return
        chunk = bytes(self.out[i][self.sent[i]:])
        # Keep a multi-byte character whole: send up to its start.
        end = len(chunk)
        if self.proc.poll() is None:
            for back in range(1, min(4, end) + 1):
                c = chunk[end - back]
                if c & 0xC0 != 0x80:
                    if c >= 0xC0 and back < (2 if c < 0xE0 else 3 if c < 0xF0 else 4):
                        end -= back
                    break
        if end <= 0:
            return
        self.sent[i] += end
        self.link.send({"t": "stream", "id": self.listener, "name": _Pump.NAMES[i], "text": chunk[:end].decode("utf-8", "replace")})

    def listen(self, rid):
        with self.lock:
            self.listener = rid
            for i in (0, 1):
                self._forward_locked(i)

    def unlisten(self):
        with self.lock:
            for i in (0, 1):
                self._forward_locked(i)
            self.listener = None

    def wait(self, seconds):
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        for th in self.readers:
            # The group's other processes may hold the pipes open: do not
            # wait for them past a moment.
            th.join(0.5)
        return True

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass

    def stop(self, grace):
        """Interrupt, then kill the whole group after grace seconds."""
        self.signal(signal.SIGINT)
        if not self.wait(grace):
            self.signal(signal.SIGKILL)
            self.wait(5)
        else:
            self.signal(signal.SIGKILL)  # leftovers of the group

    def expire(self, grace):
        self.timed_out = True
        self.stop(grace)

    def report(self, rid):
        code = self.proc.poll()
        with self.lock:
            return {
                "t": "command",
                "id": rid,
                "job": self.name,
                "pid": self.proc.pid,
                "done": code is not None,
                "exit_code": code,
                "stdout": bytes(self.out[0]).decode("utf-8", "replace"),
                "stderr": bytes(self.out[1]).decode("utf-8", "replace"),
                "stdout_truncated": self.cut[0],
                "stderr_truncated": self.cut[1],
                "timed_out": self.timed_out,
            }


_JOBS = {}
_JOB_SEQ = [0]


def _command(req, link):
    if req.t == "env":
        for k in req.unset:
            os.environ.pop(k, None)
        for k, v in req.envs.items():
            try:
                os.environ[k] = v
            except (ValueError, OSError):
                pass
        return {"t": "env", "id": req.id}
    try:
        return _command_action(req, link)
    except BaseException as exc:  # the kernel must answer, whatever happened
        return {"t": "command", "id": req.id, "error": "%s: %s" % (type(exc).__name__, _safe_str(exc))}


def _command_action(req, link):
    if req.action == "start":
        if not isinstance(req.cmd, str) or not isinstance(req.cwd, str):
            return {"t": "command", "id": req.id, "error": "no command"}
        live = [n for n, j in _JOBS.items() if j.proc.poll() is None]
        if len(live) >= COMMAND_JOBS:
            return {"t": "command", "id": req.id, "error": "%d commands are running, at most %d" % (len(live), COMMAND_JOBS)}
        while len(_JOBS) >= COMMAND_JOBS:
            done = [n for n, j in _JOBS.items() if j.proc.poll() is not None]
            del _JOBS[done[0]]
        env = dict(os.environ)
        env.update(req.envs)
        proc = subprocess.Popen(
            ["/bin/bash", "-c", req.cmd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=req.cwd,
            env=env,
            start_new_session=True,  # its own group: a kill reaches its children
            close_fds=True,
        )
        _JOB_SEQ[0] += 1
        job = _Job("job-%d" % _JOB_SEQ[0], proc, req.limit, link)
        _JOBS[job.name] = job
        if req.timeout > 0:
            job.timer = threading.Timer(req.timeout, job.expire, (req.grace,))
            job.timer.daemon = True
            job.timer.start()
    else:
        job = _JOBS.get(req.job) if isinstance(req.job, str) else None
        if job is None:
            return {"t": "command", "id": req.id, "error": "no job %r" % (req.job,)}
        if req.action == "kill":
            job.signal(signal.SIGKILL)
            job.wait(5)
    if req.wait > 0:
        # While the host waits, its interrupt (SIGINT to the sandbox, which
        # PID 1 forwards here) goes to the command's group, not the kernel.
        # Set before the output is streamed: the host may interrupt as soon
        # as it sees some, and a SIGINT before this went to the kernel's
        # idle handler and was lost (TestCommandInterrupt, under load).
        prev = signal.signal(signal.SIGINT, lambda signum, frame: job.signal(signal.SIGINT))
        try:
            if req.stream:
                job.listen(req.id)
            job.wait(req.wait)
        finally:
            signal.signal(signal.SIGINT, prev)
            if req.stream:
                job.unlisten()
    if job.proc.poll() is not None and job.timer is not None:
        job.timer.cancel()
    return job.report(req.id)


_USAGE = "usage: kernel.py --connect SOCKET [--preload MODULE,...]"


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
            raise SystemExit("kernel.py: unexpected argument %r\n%s" % (arg, _USAGE))
    if path is None:
        raise SystemExit(_USAGE)
    return path, preload


def main(argv):
    global _KERNEL
    path, preload = _parse_args(argv)
    # Notebook conventions: the working directory is importable, no argv.
    sys.argv = [""]
    if sys.path:
        sys.path[0] = ""
    else:
        sys.path.insert(0, "")
    # Headless; the deployment sets it too, this keeps a bare run the same.
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.meta_path.insert(0, _PyplotHook())
    sys.meta_path.insert(0, _IPythonHook())
    try:
        _KERNEL = _Kernel(path)
        threading.Thread(target=_KERNEL.pump.run, name="jailcell-pump", daemon=True).start()
        _KERNEL.preload(preload)
        # Connecting only now makes hello mean "ready": preload is done.
        threading.Thread(target=_KERNEL.link.run, name="jailcell-link", daemon=True).start()
        _KERNEL.serve()
    except BaseException:
        _log("fatal: %s" % traceback.format_exc())
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
