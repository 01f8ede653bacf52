"""Output capture: fds 1 and 2 are pipes that one thread drains into
stream frames for the running cell."""

import codecs
import fcntl
import io
import os
import select
import signal
import struct
import sys
import termios
import threading
import time
import traceback

from .state import _on_sigint, _State, _log

# A SIGINT can reach the kernel and stay unhandled while the cell sleeps
# on: CPython runs a Python-level handler only on the main thread, between
# bytecodes, and a blocking call wakes for it only if the signal lands on
# the main thread during the call. One that lands on another thread, or on
# the main thread just before it enters the call (time.sleep after a print
# that told the host to interrupt), is noted and left pending: the
# interrupt was lost, and a timeout's SIGINT became a kill after the grace
# with the session's state gone. So the pump, which sees every signal
# arrive through the wakeup fd, wakes the main thread with KICK_SIGNAL (a
# handler that does nothing) until the SIGINT handler has run: the blocking
# call ends with EINTR and CPython runs the pending handler.
KICK_SIGNAL = signal.SIGRTMAX
KICK_AFTER = (0.005, 0.05, 0.5, 2.0)  # seconds after the SIGINT arrived

STREAM_CHUNK = 64 << 10  # coalesce output up to this many characters a frame
STREAM_INTERVAL = 0.010  # ... or for this long, whichever comes first
PIPE_SIZE = 1 << 20  # the unprivileged maximum; fewer wake-ups under floods
DEFAULT_MAX_OUTPUT = 1 << 20  # per stream, when the host does not say


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
        self._install_wakeup()
        self.capture = None
        self.pending = []  # [stream index, text], in arrival order
        self.pending_size = 0
        self.pending_since = 0.0
        self.last_sent = 0.0  # time.monotonic() of the last stream frame
        self.lock = threading.Lock()

    def _install_wakeup(self):
        """On the main thread: the wakeup fd every Python-level signal
        writes its number to, and the kick's handler."""
        self.wake_r = self.wake_w = -1
        self.kicks = []  # times left to wake the main thread at
        self.kick_runs = 0  # _State.sigint_runs when the SIGINT arrived
        self.kick_for = 0  # _State.runs_begun then: the cell or wait kicked
        self.main_ident = threading.main_thread().ident
        try:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            signal.signal(KICK_SIGNAL, _on_kick)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (OSError, ValueError):
            return  # no kicks: a SIGINT is handled as CPython alone does
        self.wake_r, self.wake_w = r, w

    def own_signals(self):
        """Take the kernel's signal handling back before a cell or a
        command: a cell's own handling of SIGINT lasts that cell, as under
        ipykernel, which installs its handler for each request. A cell
        that set SIGINT to SIG_DFL left the next interrupt (a timeout's)
        to kill the kernel and lose the session's state; one that ignored,
        blocked or took it left every later cell uninterruptible, each
        timeout then a kill; a job started after it inherited the blocked
        or ignored SIGINT. The kick's handler too: SIGRTMAX's default
        ends the process."""
        try:
            if signal.getsignal(signal.SIGINT) is not _on_sigint:
                signal.signal(signal.SIGINT, _on_sigint)
            if self.wake_w >= 0 and signal.getsignal(KICK_SIGNAL) is not _on_kick:
                signal.signal(KICK_SIGNAL, _on_kick)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, KICK_SIGNAL})
        except (OSError, ValueError):
            pass  # not the main thread: nothing of it is the cells' to change
        self._own_wakeup()

    def _own_wakeup(self):
        """Take the wakeup fd back if a cell left it unset (asyncio resets
        it to none when its loop closes); one a cell set is kept."""
        if self.wake_w < 0:
            return
        try:
            old = signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
            if old not in (-1, self.wake_w):
                signal.set_wakeup_fd(old)
        except ValueError:
            pass

    def _woken(self):
        """Read what the wakeup fd holds (the numbers of signals with a
        Python-level handler, the cells' own included); a SIGINT among it,
        while a cell or a command wait runs, starts the kicks, which stop
        once the handler has run (it may have already: a kick then only
        restarts a blocking call)."""
        try:
            data = os.read(self.wake_r, 512)
        except (BlockingIOError, InterruptedError):
            return
        if signal.SIGINT in data and (_State.executing or _State.command_wait):
            now = time.monotonic()
            self.kick_runs = _State.sigint_runs
            self.kick_for = _State.runs_begun
            self.kicks = [now + d for d in KICK_AFTER]

    def _kick(self):
        """Wake the main thread at the times due, while the cell or wait
        runs and the SIGINT handler has not run since the signal was read."""
        now = time.monotonic()
        while self.kicks and self.kicks[0] <= now:
            self.kicks.pop(0)
            # Only the cell or wait the SIGINT came for: the handler may
            # have run before the signal was read here (then sigint_runs
            # never moves again for it), and a kick into a later cell
            # lands where that cell's own handling of KICK_SIGNAL rules.
            if (not (_State.executing or _State.command_wait) or _State.sigint_runs != self.kick_runs
                    or _State.runs_begun != self.kick_for):
                self.kicks = []
                return
            # Never into a disposition the cell chose: a SIGINT read late
            # (its handler ran in the cell before) arms kicks for the cell
            # now running, and one that set KICK_SIGNAL to its default was
            # ended by them. Checked and sent holding the GIL, so the cell
            # cannot change it in between.
            if signal.getsignal(KICK_SIGNAL) is not _on_kick:
                self.kicks = []
                return
            try:
                signal.pthread_kill(self.main_ident, KICK_SIGNAL)
            except OSError:
                self.kicks = []
                return

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
            self.last_sent = 0.0  # a cell's first line goes out at once (poke)
            self.capture = _Capture(exec_id, limit)

    def display(self, item):
        """Send a display item of the running cell now, after the output the
        cell wrote before it: the frame that shows a figure as it is made."""
        with _sigint_deferred():
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

    def poke(self):
        """Forward what the main thread just wrote, from the main thread, if
        nothing went out for a while.

        The pump thread needs the GIL to forward output, and a cell's next
        statement may hold it until the kernel dies: print('loading...')
        then bytearray(8 << 30) is one C call that the OOM killer ends, and
        the line the agent needs to see why would die in the pipe. Within
        STREAM_INTERVAL of the last frame the pump coalesces as before, so
        a flood still costs one frame per chunk, not one per line; a line
        written then, right before the kernel dies, can still be lost."""
        # The cheapest test first: in a flood, most writes stop at it.
        if self.capture is None or time.monotonic() - self.last_sent < STREAM_INTERVAL:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if os.getpid() != self.link.pid:
            # A cell's forked child: reading the pipe here would take the
            # output away from the kernel's pump, and the child may not
            # speak on the kernel's socket.
            return
        with _sigint_deferred():
            # Blocking: if the pump holds the lock it may be sending this
            # very line, and the cell must not go on (to os._exit, say)
            # before it is on the wire.
            with self.lock:
                self._drain_all()
                self._flush()

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
        if self.wake_r >= 0:
            poller.register(self.wake_r, select.POLLIN)
        while True:
            timeout = None
            if self.pending:
                left = self.pending_since + STREAM_INTERVAL - time.monotonic()
                timeout = max(0, int(left * 1000) + 1)
            if self.kicks:
                left = max(0, int((self.kicks[0] - time.monotonic()) * 1000) + 1)
                timeout = left if timeout is None else min(timeout, left)
            try:
                events = poller.poll(timeout)
            except InterruptedError:
                continue
            if self.kicks:
                self._kick()
            try:
                with self.lock:
                    for fd, _ in events:
                        if fd == _State.init_pipe:
                            os._exit(128 + signal.SIGKILL)  # the init is gone; so is the sandbox
                        if fd == self.wake_r:
                            self._woken()
                            continue
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
        if pending:
            self.last_sent = time.monotonic()


def _on_kick(signum, frame):
    """KICK_SIGNAL's handler: nothing. Its arrival ended the main thread's
    blocking call, so CPython now runs the handlers still pending."""


class _sigint_deferred:
    """On the main thread, a SIGINT while frames are written is only noted
    and raised once they are whole: a KeyboardInterrupt inside sendall
    would tear a frame and lose the connection.

    A class, not a contextlib generator: the KeyboardInterrupt is raised
    from __exit__, a frame of this package that tracebacks leave out; a
    generator's would show contextlib's frame as where the cell stopped."""

    __slots__ = ("main",)

    def __enter__(self):
        self.main = threading.current_thread() is threading.main_thread()
        if self.main:
            _State.deferred_sigint = False  # one left by a raise below
            _State.deferring = True
        return self

    def __exit__(self, *exc):
        if self.main:
            _State.deferring = False
            if _State.deferred_sigint:
                _State.deferred_sigint = False
                if _State.executing:
                    _State.interrupted = True
                    raise KeyboardInterrupt
        return False


class _TextStream(io.TextIOWrapper):
    """sys.stdout or sys.stderr: a line-buffered text stream on fd 1 or 2
    that pokes the pump once a line reached the pipe (see _Pump.poke).

    The poke sits on the text layer, above buffers that are all C: a
    KeyboardInterrupt raised in Python code between the write to the fd
    and the buffer counting it written would leave the line in the buffer,
    and the end of the cell would write it a second time."""

    def write(self, s):
        n = super().write(s)
        # Line buffering flushed the buffer to the fd if s holds a newline
        # or carriage return; other writes wait in the buffer.
        if self._poke is not None and ("\n" in s or "\r" in s):
            self._poke()
        return n

    def flush(self):
        super().flush()
        if self._poke is not None:
            self._poke()


def _text_stream(fd, poke=None):
    # Line-buffered like a terminal, so print() and os.system() output from
    # one cell arrive in the order they were written.
    # The raw end is never closed with them: closing sys.stdout must not
    # close fd 1 under the cell's child processes.
    raw = io.FileIO(fd, "w", closefd=False)
    text = _TextStream(io.BufferedWriter(raw), encoding="utf-8", errors="replace", line_buffering=True)
    text._poke = poke
    text.mode = "w"
    return text


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
