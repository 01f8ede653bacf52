"""The connection to the host: connect (and reconnect), hello, and the
reader that turns the host's frames into requests for the kernel."""

import json
import os
import socket
import struct
import threading
import time
import traceback

from .assist import _AssistRequest
from .capture import DEFAULT_MAX_OUTPUT
from .commands import _CommandRequest
from .frames import MAX_FRAME, _encode, _recv_exact
from .seed import _reseed
from .state import _log

RECONNECT_DELAY = 0.05


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


class _ExecRequest:
    __slots__ = ("id", "code", "max_output", "gen", "context", "cwd", "reset")

    @classmethod
    def parse(cls, msg, gen):
        exec_id, code, limit = msg.get("id"), msg.get("code"), msg.get("max_output")
        if not isinstance(exec_id, str) or not isinstance(code, str):
            return None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            limit = DEFAULT_MAX_OUTPUT
        context, cwd, reset = msg.get("context"), msg.get("cwd"), msg.get("reset")
        req = cls()
        req.id, req.code, req.max_output, req.gen = exec_id, code, limit, gen
        req.context = context if isinstance(context, str) else ""
        req.cwd = cwd if isinstance(cwd, str) and cwd.startswith("/") else ""
        req.reset = reset is True
        return req
