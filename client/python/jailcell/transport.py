"""The two ways to reach jailcell: the service's Unix socket (`jailcell
serve`, HTTP/1.1) and a `jailcell json` subprocess (JSON lines on its
stdin/stdout). Both take the same wire requests (an op and its fields) and
give back the same response objects, so everything above is written once.

Every read of what jailcell sends is bounded: a line or body may hold at
most MAX_LINE bytes.
"""

import base64
import collections
import http.client
import inspect
import itertools
import json
import os
import queue
import select
import socket
import subprocess
import threading
import time
import urllib.parse
from typing import IO, Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from .errors import InternalError, JailcellError, UnavailableError, error_for

__all__ = ["Transport", "SocketTransport", "JsonLinesTransport", "DEFAULT_SOCKET", "MAX_LINE"]

DEFAULT_SOCKET = "/run/jailcell/jailcell.sock"

# Bounds what one response line or body may hold: a result with its files,
# base64 (the service's own bound on a JSON body is 32 MiB; a one-shot
# result may carry up to the policy's return_file_bytes).
MAX_LINE = 400 << 20

# Default bound, in seconds, on one call: above the longest cell a policy
# allows (max_timeout, 10 min by default).
DEFAULT_TIMEOUT = 900.0

Event = Dict[str, Any]
OnEvent = Callable[[Event], None]


def _encode(obj: Any) -> Any:
    """json.dumps default: bytes travel as standard base64."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode("ascii")
    raise TypeError("cannot send %s as JSON" % type(obj).__name__)


def _decode(status: int, data: bytes) -> Dict[str, Any]:
    """A response object; an error response raises its exception class."""
    try:
        msg = json.loads(data)
    except ValueError:
        raise InternalError(status, "internal", "response is not JSON: %r" % data[:200])
    if not isinstance(msg, dict):
        raise InternalError(status, "internal", "response is not a JSON object: %r" % data[:200])
    return _checked(status, msg)


def _checked(status: int, msg: Dict[str, Any]) -> Dict[str, Any]:
    if not msg.get("ok"):
        err = msg.get("error")
        if not isinstance(err, dict):
            err = {}
        state = err.get("state")
        raise error_for(status, err.get("code"), err.get("message"), state if isinstance(state, str) else None)
    return msg


class Transport:
    """What Sandbox needs from a way to reach jailcell."""

    def call(self, op: str, fields: Dict[str, Any], on_event: Optional[OnEvent] = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send one request (op and its wire fields; bytes values are sent
        as base64) and return its response object; on_event, for an exec,
        receives the streamed events first. A download's "data" is bytes.
        timeout: seconds this call may wait (None: the transport's bound)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the transport holds."""


def takes_timeout(call: Callable[..., Any]) -> bool:
    """Whether a transport's call accepts timeout=: one written before it
    did keeps working, bounded by its own timeout."""
    try:
        params = inspect.signature(call).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "timeout" or p.kind is p.VAR_KEYWORD for p in params)


def call_with_timeout(t: Transport, op: str, fields: Dict[str, Any], on_event: Optional[OnEvent],
                      timeout: Optional[float]) -> Dict[str, Any]:
    """t.call bounded by timeout seconds (None: t's own bound)."""
    if timeout is not None and takes_timeout(t.call):
        return t.call(op, fields, on_event, timeout=timeout)
    return t.call(op, fields, on_event)


def exec_timeout(transport: Any, timeout: Optional[float], request_timeout: Optional[float]) -> Optional[float]:
    """The bound on one exec call: request_timeout if given; with a cell
    timeout, the cell's time and a minute more, never less than the
    transport's own bound (a cell allowed 20 minutes must not be cut off at
    the default 15); otherwise None, the transport's bound."""
    if request_timeout is not None:
        return float(request_timeout)
    if timeout is None:
        return None
    own = getattr(transport, "timeout", None)
    own = float(own) if isinstance(own, (int, float)) and not isinstance(own, bool) else DEFAULT_TIMEOUT
    return max(own, float(timeout) + 60)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over AF_UNIX: the host part of the URL is ignored."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("jailcell", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError as e:
            s.close()
            raise UnavailableError(0, "unavailable", "connect to %s: %s" % (self._path, e)) from e
        self.sock = s

    def stale(self) -> bool:
        """Whether an idle kept-alive connection cannot take a request."""
        return self.sock is None or _readable(self.sock)


def _readable(sock: Any) -> bool:
    """Whether an idle connection has something to read: the service closed
    it (EOF) or sent something unasked; either way it cannot take the next
    request. poll, not recv: a socket with a timeout waits in recv even
    with MSG_DONTWAIT."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock.fileno(), select.POLLIN | select.POLLPRI)
            return bool(p.poll(0))
        r, _, _ = select.select([sock.fileno()], [], [], 0)
        return bool(r)
    except (OSError, ValueError):
        return True


# Ops with a route of their own and no body: POST /v1/sessions/{id}/<op>.
_LIFE_OPS = ("hibernate", "restore", "fork", "snapshot", "rollback", "interrupt")

# Methods that may be sent again when a kept-alive connection turns out to
# have been closed by the service under the request (a restart, its idle
# timeout). A POST never is: it may have arrived, and a create or an exec
# sent twice makes two sessions or runs a cell twice.
_IDEMPOTENT = frozenset(("GET", "HEAD", "DELETE", "PUT"))

# The pool of idle connections: at most MAX_IDLE kept, each for at most
# IDLE_AGE seconds, well under the service's http.idle_timeout (2 min by
# default), so the service seldom closes one just as it is reused.
MAX_IDLE = 4
IDLE_AGE = 30.0

# What a connection closed under a request raises: a send on a Unix socket
# whose peer is gone fails with EPIPE, a read with no answer is
# RemoteDisconnected (a ConnectionResetError) or a reset.
_CLOSED = (ConnectionError,)


class SocketTransport(Transport):
    """`jailcell serve` on its Unix socket. Connections are kept alive and
    reused: a call takes an idle one (or opens one) and gives it back once
    its answer is read to the end, so one transport may be shared between
    threads, each call on a connection of its own. close() closes the idle
    ones; a later call opens a new one."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._lock = threading.Lock()  # guards _idle
        self._idle: List[Tuple[_UnixConnection, float]] = []  # (connection, idle since), newest last

    def __repr__(self) -> str:
        return "SocketTransport(%r)" % self.socket_path

    def close(self) -> None:
        """Close the idle connections; calls still running keep theirs."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def __del__(self) -> None:
        # The idle connections are the transport's own: closed with it, not
        # left to the garbage collector (a ResourceWarning each).
        try:
            self.close()
        except Exception:
            pass

    def _take(self, timeout: float) -> Tuple[_UnixConnection, bool]:
        """A connection for one request, its socket operations bounded by
        timeout, and whether it was reused."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                conn, since = self._idle.pop()
            if time.monotonic() - since <= IDLE_AGE and not conn.stale():
                _bound(conn, timeout)
                return conn, True
            conn.close()
        return _UnixConnection(self.socket_path, timeout), False

    def _give(self, conn: _UnixConnection, resp: http.client.HTTPResponse) -> None:
        """Keep conn for the next request if its answer was read to the end
        and neither side asked to close it; otherwise close it."""
        if conn.sock is None or resp.will_close or not resp.isclosed():
            conn.close()
            return
        _bound(conn, self.timeout)  # a call's own bound ends with it
        now, drop, kept = time.monotonic(), [], False
        with self._lock:
            while self._idle and now - self._idle[0][1] > IDLE_AGE:
                drop.append(self._idle.pop(0)[0])
            if len(self._idle) < MAX_IDLE:
                self._idle.append((conn, now))
                kept = True
        if not kept:
            drop.append(conn)
        for c in drop:
            c.close()

    def _drop_idle(self) -> None:
        """One kept connection was found closed: the service probably
        restarted, so the others are closed too."""
        self.close()

    def _send(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str],
              timeout: Optional[float] = None) -> Tuple[_UnixConnection, http.client.HTTPResponse]:
        """Send one request and read its response head; the caller reads the
        body and gives the connection back (or closes it). timeout bounds
        each socket operation (None: the transport's)."""
        t = self.timeout if timeout is None else timeout
        retried = False
        while True:
            if retried:  # on a new connection: any idle one may be stale too
                conn, reused = _UnixConnection(self.socket_path, t), False
            else:
                conn, reused = self._take(t)
            try:
                conn.request(method, path, body=body, headers=headers)
                return conn, conn.getresponse()
            except _CLOSED as e:
                conn.close()
                if not reused:
                    raise UnavailableError(0, "unavailable", "%s closed the connection before answering %s %s: %s"
                                           % (self.socket_path, method, path, str(e) or type(e).__name__)) from e
                self._drop_idle()
                if method in _IDEMPOTENT and not retried:
                    retried = True
                    continue
                # Not re-sent: the request may have reached the service, and
                # a POST sent twice could run a cell (or create a session) twice.
                raise UnavailableError(0, "unavailable", "%s closed the kept-alive connection under %s %s (%s); "
                                       "not sent again, since it may have arrived"
                                       % (self.socket_path, method, path, str(e) or type(e).__name__)) from e
            except BaseException:
                conn.close()
                raise

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None,
                timeout: Optional[float] = None) -> Tuple[int, Dict[str, str], bytes]:
        """One raw HTTP exchange: status, headers (lower-case names), body."""
        conn, resp = self._send(method, path, body, headers or {}, timeout)
        try:
            data = resp.read(MAX_LINE + 1)
            if len(data) > MAX_LINE:
                raise InternalError(resp.status, "internal", "response body over %d bytes" % MAX_LINE)
            out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        except BaseException:
            conn.close()
            raise
        self._give(conn, resp)
        return out

    @staticmethod
    def _session_path(session: Any, *rest: str) -> str:
        if not isinstance(session, str) or not session:
            raise BadRequest("this op needs a session id")
        p = "/v1/sessions/" + urllib.parse.quote(session, safe="")
        for r in rest:
            p += "/" + r
        return p

    def call(self, op: str, fields: Dict[str, Any], on_event: Optional[OnEvent] = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        fields = {k: v for k, v in fields.items() if v is not None}
        session = fields.pop("session", None)

        def _json(method: str, path: str, payload: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
            return self._json(method, path, payload, timeout)

        if op == "ping":
            return _json("GET", "/healthz")
        if op == "sessions":
            return _json("GET", "/v1/sessions")
        if op == "create":
            return _json("POST", "/v1/sessions", fields)
        if op == "close":
            return _json("DELETE", self._session_path(session))
        if op == "files":
            return _json("GET", self._session_path(session, "files"))
        if op in _LIFE_OPS:
            return _json("POST", self._session_path(session, op))
        if op == "upload":
            data = fields.get("data", b"")
            if isinstance(data, str):
                data = data.encode()
            headers = {"Content-Type": "application/octet-stream"}
            meta = _metadata_header(fields.get("metadata"))
            if meta is not None:
                headers[METADATA_HEADER] = meta
            status, _, body = self.request("PUT", self._file_path(session, fields.get("path")), bytes(data), headers,
                                           timeout)
            return _decode(status, body)
        if op == "download":
            status, hdrs, body = self.request("GET", self._file_path(session, fields.get("path")), timeout=timeout)
            if status != 200:
                _decode(status, body)
                raise InternalError(status, "internal", "download answered %d without an error" % status)
            return {"ok": True, "path": fields.get("path"), "data": body, "size": len(body),
                    "sha256": hdrs.get("x-jailcell-sha256", "")}
        if op == "exec":
            path = self._session_path(session, "exec") if session else "/v1/exec"
            fields.pop("stream", None)
            return self._exec(path, fields, on_event, timeout)
        if op == "command":
            fields.pop("stream", None)
            if on_event is None:
                return _json("POST", self._session_path(session, "commands"), fields)
            return self._exec(self._session_path(session, "commands"), fields, on_event, timeout)
        if op == "info":
            return _json("GET", self._session_path(session))
        if op == "set_timeout":
            return _json("POST", self._session_path(session, "timeout"), fields)
        if op == "metrics":
            return _json("GET", self._session_path(session, "metrics"))
        if op == "watch":
            return _json("POST", self._session_path(session, "watch"), fields)
        if op == "stat":
            return _json("GET", self._path_of(session, "stat", fields.get("path")))
        if op == "remove":
            return _json("DELETE", self._file_path(session, fields.get("path")))
        if op == "mkdir":
            return _json("PUT", self._path_of(session, "dirs", fields.get("path")))
        if op == "rename":
            return _json("POST", self._session_path(session, "rename"), fields)
        raise BadRequest("op %r has no route on the service's socket; allowed: ping, sessions, create, close, "
                         "exec, upload, download, files, command, info, set_timeout, metrics, watch, stat, remove, "
                         "mkdir, rename, %s" % (op, ", ".join(_LIFE_OPS)))

    @staticmethod
    def _path_of(session: Any, kind: str, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise BadRequest("this op needs a path relative to the working directory")
        return SocketTransport._session_path(session, kind, urllib.parse.quote(path))

    @staticmethod
    def _file_path(session: Any, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise BadRequest("a file op needs a path relative to the working directory")
        return SocketTransport._session_path(session, "files", urllib.parse.quote(path))

    def _json(self, method: str, path: str, payload: Optional[Dict[str, Any]] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        body, headers = None, {}
        if payload is not None:
            body = json.dumps(payload, default=_encode).encode()
            headers["Content-Type"] = "application/json"
        status, _, data = self.request(method, path, body, headers, timeout)
        return _decode(status, data)

    def _exec(self, path: str, payload: Dict[str, Any], on_event: Optional[OnEvent],
              timeout: Optional[float] = None) -> Dict[str, Any]:
        if on_event is None:
            # Nothing to stream to: a plain JSON answer (the service streams
            # only when the Accept header or "stream" asks).
            return self._json("POST", path, payload, timeout)
        body = json.dumps(payload, default=_encode).encode()
        conn, resp = self._send("POST", path, body, {
            "Content-Type": "application/json", "Accept": "application/x-ndjson"}, timeout)
        try:
            if not (resp.getheader("Content-Type") or "").startswith("application/x-ndjson"):
                # Refused before any output: a plain JSON error (or answer).
                line = resp.read(MAX_LINE + 1)
                if len(line) > MAX_LINE:
                    raise InternalError(resp.status, "internal", "response body over %d bytes" % MAX_LINE)
            else:
                line = self._read_stream(resp, on_event)
                # The result is the last line: read the body's end so that
                # the connection can carry the next request (_give closes
                # it if more than that was left).
                resp.read(64 << 10)
        except BaseException:
            conn.close()
            raise
        self._give(conn, resp)
        return _decode(resp.status, line)

    @staticmethod
    def _read_stream(resp: http.client.HTTPResponse, on_event: OnEvent) -> bytes:
        """Hand the streamed events to on_event; the result's line."""
        while True:
            line = resp.readline(MAX_LINE + 1)
            if not line:
                raise InternalError(resp.status, "internal", "stream ended before the result")
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                raise InternalError(resp.status, "internal", "streamed line over %d bytes" % MAX_LINE)
            if not line.strip():
                continue
            msg = json.loads(line)
            if isinstance(msg, dict) and "event" in msg:
                on_event(msg)
                continue
            return line


def _bound(conn: _UnixConnection, timeout: float) -> None:
    """Bound each socket operation of conn (and of a socket it opens later)."""
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)


def BadRequest(message: str) -> JailcellError:
    """A request this client refuses before sending it."""
    return error_for(0, "bad_request", message)


# Carries an HTTP upload's metadata as one JSON object of strings
# (api/metadata.go).
METADATA_HEADER = "Jailcell-Metadata"

# The longest header a map the service keeps can make: 4096 bytes in all,
# no byte escaped to more than two, and each key's 9-byte share covering
# its quotes, colon and comma. A longer one is refused here, since past the
# service's header bound (16 KiB) it would be answered 431, not bad_request.
_MAX_METADATA_HEADER = 2 * 4096 + 2


def _metadata_header(m: Any) -> Optional[str]:
    """An upload's metadata as the header's JSON (None for none), in ASCII:
    json's ensure_ascii escapes DEL and every non-ASCII character, so a key
    the service refuses reaches it intact and is refused by name, as over
    JSON lines, not mangled by the header's Latin-1."""
    if m is None:
        return None
    if not isinstance(m, dict):
        raise BadRequest("metadata must be a dict of str to str")
    if not m:
        return None
    v = json.dumps(m, ensure_ascii=True, separators=(",", ":"))
    if len(v) > _MAX_METADATA_HEADER:
        raise BadRequest("metadata of %d bytes as JSON: a file's metadata is at most 4096 bytes (each key counted "
                         "with a 9-byte prefix)" % len(v))
    return v


class _Pending:
    __slots__ = ("q",)

    def __init__(self) -> None:
        self.q: "queue.Queue[Union[Event, BaseException]]" = queue.Queue()


class JsonLinesTransport(Transport):
    """A `jailcell json` subprocess, spoken to in JSON lines. Requests run
    at once on jailcell's side and answers are matched by id, so one
    transport may be shared between threads and sandboxes. Closing it
    closes jailcell's stdin: jailcell answers what is running, closes the
    sessions it made and exits.

        t = JsonLinesTransport(["jailcell", "json"])
    """

    def __init__(self, command: Sequence[str] = ("jailcell", "json"), *, env: Optional[Dict[str, str]] = None,
                 timeout: float = DEFAULT_TIMEOUT, stderr: Optional[IO[bytes]] = None,
                 max_line: int = MAX_LINE) -> None:
        # stderr: where jailcell's log goes; by default its last 64 KiB are
        # kept and quoted if the process dies. max_line bounds one line
        # read from jailcell.
        self.command = list(command)
        self.timeout = timeout
        self.max_line = max_line
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _pending, _dead, _tail
        # Writes have their own lock: a write may block while jailcell
        # pauses reading (too much in flight), and the reader must still
        # be able to hand out the answers that unblock it.
        self._wlock = threading.Lock()
        self._pending: Dict[int, _Pending] = {}
        self._dead: Optional[JailcellError] = None
        self._tail: Deque[bytes] = collections.deque()
        self._tail_len = 0
        try:
            self._proc = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr if stderr is not None else subprocess.PIPE, env=env)
        except OSError as e:
            raise UnavailableError(0, "unavailable", "start %s: %s" % (" ".join(self.command), e)) from e
        self._reader = threading.Thread(target=self._read, name="jailcell-json-reader", daemon=True)
        self._reader.start()
        self._err_reader: Optional[threading.Thread] = None
        if stderr is None:
            self._err_reader = threading.Thread(target=self._read_stderr, name="jailcell-json-stderr", daemon=True)
            self._err_reader.start()

    def __repr__(self) -> str:
        return "JsonLinesTransport(%r)" % (self.command,)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stderr_tail(self) -> str:
        """The last 64 KiB jailcell wrote to its stderr (when not redirected)."""
        with self._lock:
            return b"".join(self._tail).decode("utf-8", "replace")

    def _read_stderr(self) -> None:
        err = self._proc.stderr
        assert err is not None
        while True:
            chunk: bytes = err.read1(4096)  # type: ignore[attr-defined]
            if not chunk:
                return
            with self._lock:
                self._tail.append(chunk)
                self._tail_len += len(chunk)
                while self._tail_len > 64 << 10 and len(self._tail) > 1:
                    self._tail_len -= len(self._tail.popleft())

    def _read(self) -> None:
        assert self._proc.stdout is not None
        why = "jailcell json closed its stdout"
        try:
            while True:
                line = self._proc.stdout.readline(self.max_line + 1)
                if not line:
                    break
                if len(line) > self.max_line and not line.endswith(b"\n"):
                    why = "jailcell json sent a line over %d bytes" % self.max_line
                    break
                if not line.strip():
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    why = "jailcell json sent a line that is not JSON: %r" % line[:200]
                    break
                rid = msg.get("id") if isinstance(msg, dict) else None
                if not isinstance(rid, int):
                    continue  # not an answer to us: our ids are integers
                with self._lock:
                    p = self._pending.get(rid)
                if p is not None:
                    # Unbounded on purpose: jailcell bounds what one cell
                    # may print (the policy's output_bytes), and a bounded
                    # queue here would stall every other request's answers.
                    p.q.put(msg)
        except (OSError, ValueError) as e:
            why = "read from jailcell json: %s" % e
        self._fail(why)

    def _fail(self, why: str) -> None:
        if self._err_reader is not None:
            self._err_reader.join(timeout=2)
        code = self._proc.poll()
        if code is None:
            try:
                code = self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        msg = why if code is None else "%s (exit status %s)" % (why, code)
        tail = self.stderr_tail().strip()
        if tail:
            msg += "; its log ends: " + tail[-2000:]
        err = UnavailableError(0, "unavailable", msg)
        with self._lock:
            self._dead = err
            pending, self._pending = self._pending, {}
        for p in pending.values():
            p.q.put(err)

    def call(self, op: str, fields: Dict[str, Any], on_event: Optional[OnEvent] = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        limit = self.timeout if timeout is None else timeout
        rid = next(self._ids)
        req = {k: v for k, v in fields.items() if v is not None}
        req["id"], req["op"] = rid, op
        if op == "exec" or (op == "command" and on_event is not None):
            req["stream"] = True
        line = json.dumps(req, default=_encode).encode() + b"\n"
        p = _Pending()
        with self._lock:
            if self._dead is not None:
                raise self._dead
            self._pending[rid] = p
        try:
            with self._wlock:
                assert self._proc.stdin is not None
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
        except (OSError, ValueError) as e:
            with self._lock:
                self._pending.pop(rid, None)
                dead = self._dead
            if dead is not None:
                raise dead from e
            raise UnavailableError(0, "unavailable", "write to jailcell json: %s" % e) from e
        deadline = time.monotonic() + limit
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("jailcell json did not answer %s (id %d) within %gs" % (op, rid, limit))
                try:
                    msg = p.q.get(timeout=left)
                except queue.Empty:
                    continue
                if isinstance(msg, BaseException):
                    raise msg
                if "event" in msg:
                    if on_event is not None:
                        on_event(msg)
                    continue
                resp = _checked(0, msg)
                if op == "download" and isinstance(resp.get("data"), str):
                    resp["data"] = base64.b64decode(resp["data"])
                return resp
        finally:
            with self._lock:
                self._pending.pop(rid, None)

    def close(self, wait: float = 30.0) -> None:
        """Close jailcell's stdin and wait up to wait seconds for it to exit
        (it closes its sessions first); then kill it."""
        with self._lock:
            if self._dead is None:
                self._dead = UnavailableError(0, "unavailable", "the transport is closed")
        try:
            with self._wlock:
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)
        if self._err_reader is not None:
            self._err_reader.join(timeout=5)
        for f in (self._proc.stdout, self._proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.poll()

    def __enter__(self) -> "JsonLinesTransport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def transport_for(socket_path: Optional[str], command: Optional[Sequence[str]], timeout: float) -> Tuple[Transport, bool]:
    """The transport a Sandbox builds for itself, and that it owns it."""
    if socket_path is not None and command is not None:
        raise BadRequest("give socket or command, not both: socket is a `jailcell serve`, command starts `jailcell json`")
    if command is not None:
        return JsonLinesTransport(command, timeout=timeout), True
    return SocketTransport(socket_path or _env_socket(), timeout=timeout), True


def _env_socket() -> str:
    return os.environ.get("JAILCELL_SOCKET") or DEFAULT_SOCKET
