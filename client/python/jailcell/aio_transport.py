"""asyncio transports: the service's Unix socket spoken over asyncio streams
(HTTP/1.1, connections kept alive between calls) and a `jailcell json` child spoken to
through asyncio's subprocess pipes. No thread is involved: many sandboxes
and calls wait at once on one event loop.

Every read of what jailcell sends is bounded as the blocking transports'
are: a response head at MAX_HEAD bytes, a line or body at MAX_LINE."""

import asyncio
import base64
import collections
import inspect
import itertools
import json
import ssl
import time
import urllib.parse
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from .errors import InternalError, UnavailableError
from .transport import (_IDEMPOTENT, DEFAULT_TIMEOUT, IDLE_AGE, MAX_IDLE, MAX_LINE, METADATA_HEADER, BadRequest,
                        Transport, _checked, _decode, _encode, _metadata_header, _readable, call_with_timeout,
                        takes_timeout)

__all__ = ["AsyncTransport", "AsyncSocketTransport", "AsyncTCPTransport", "AsyncJsonLinesTransport", "ThreadedTransport"]

MAX_HEAD = 64 << 10  # bytes of a response's status line and headers

Event = Dict[str, Any]
AsyncOnEvent = Callable[[Event], Union[None, Awaitable[None]]]

_LIFE_OPS = ("hibernate", "restore", "fork", "snapshot", "rollback", "interrupt")


async def _deliver(on_event: Optional[AsyncOnEvent], ev: Event) -> None:
    if on_event is None:
        return
    out = on_event(ev)
    if inspect.isawaitable(out):
        await out


class AsyncTransport:
    """What AsyncSandbox needs from a way to reach jailcell."""

    async def call(self, op: str, fields: Dict[str, Any], on_event: Optional[AsyncOnEvent] = None,
                   timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send one request and return its response object; on_event (a
        function or coroutine function) gets the streamed events first.
        timeout: seconds this call may take (None: the transport's bound)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the transport holds."""


async def call_with_timeout_async(t: AsyncTransport, op: str, fields: Dict[str, Any],
                                  on_event: Optional[AsyncOnEvent], timeout: Optional[float]) -> Dict[str, Any]:
    """t.call bounded by timeout seconds (None: t's own bound); one written
    before call took timeout= keeps its own."""
    if timeout is not None and takes_timeout(t.call):
        return await t.call(op, fields, on_event, timeout=timeout)
    return await t.call(op, fields, on_event)


def _path(session: Any, *rest: str) -> str:
    if not isinstance(session, str) or not session:
        raise BadRequest("this op needs a session id")
    p = "/v1/sessions/" + urllib.parse.quote(session, safe="")
    for r in rest:
        p += "/" + r
    return p


def _file(session: Any, kind: str, path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise BadRequest("this op needs a path relative to the working directory")
    return _path(session, kind, urllib.parse.quote(path))


Route = Tuple[str, str, Optional[bytes], str, str, List[str]]


def route(op: str, fields: Dict[str, Any], streamed: bool) -> Route:
    """The HTTP request of a wire request on the service's socket: method,
    path, body, content type, how to read the answer ("json", "raw"
    for a download, "stream" for NDJSON) and any other header lines."""
    fields = {k: v for k, v in fields.items() if v is not None}
    session = fields.pop("session", None)
    fields.pop("stream", None)

    def js(method: str, path: str, body: Optional[Dict[str, Any]] = None, kind: str = "json") -> Route:
        if body is None:
            return method, path, None, "", kind, []
        return method, path, json.dumps(body, default=_encode).encode(), "application/json", kind, []

    if op == "ping":
        return js("GET", "/healthz")
    if op == "sessions":
        return js("GET", "/v1/sessions")
    if op == "create":
        return js("POST", "/v1/sessions", fields)
    if op == "close":
        return js("DELETE", _path(session))
    if op == "info":
        return js("GET", _path(session))
    if op == "files":
        return js("GET", _path(session, "files"))
    if op in _LIFE_OPS:
        return js("POST", _path(session, op))
    if op == "upload":
        data = fields.get("data", b"")
        if isinstance(data, str):
            data = data.encode()
        meta = _metadata_header(fields.get("metadata"))
        extra = [] if meta is None else ["%s: %s" % (METADATA_HEADER, meta)]
        return "PUT", _file(session, "files", fields.get("path")), bytes(data), "application/octet-stream", "json", extra
    if op == "download":
        return "GET", _file(session, "files", fields.get("path")), None, "", "raw", []
    if op == "exec":
        # Nothing to stream to: a plain JSON answer (the service streams
        # only when the Accept header or "stream" asks).
        return js("POST", _path(session, "exec") if session else "/v1/exec", fields, "stream" if streamed else "json")
    if op == "command":
        return js("POST", _path(session, "commands"), fields, "stream" if streamed else "json")
    if op == "set_timeout":
        return js("POST", _path(session, "timeout"), fields)
    if op == "metrics":
        return js("GET", _path(session, "metrics"))
    if op == "watch":
        return js("POST", _path(session, "watch"), fields)
    if op == "stat":
        return js("GET", _file(session, "stat", fields.get("path")))
    if op == "remove":
        return js("DELETE", _file(session, "files", fields.get("path")))
    if op == "mkdir":
        return js("PUT", _file(session, "dirs", fields.get("path")))
    if op == "rename":
        return js("POST", _path(session, "rename"), fields)
    raise BadRequest("op %r has no route on the service's socket" % (op,))


class _Body:
    """A response body read from an asyncio stream: by Content-Length,
    chunked, or to the end; never more than max bytes in all."""

    def __init__(self, reader: asyncio.StreamReader, headers: Dict[str, str], max_bytes: int) -> None:
        self.r, self.max = reader, max_bytes
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        cl = headers.get("content-length")
        self.left: Optional[int] = int(cl) if cl is not None and cl.isdigit() else None
        if self.left is not None and self.left > max_bytes:
            raise InternalError(0, "internal", "response body of %d bytes is over %d" % (self.left, max_bytes))
        self.read_bytes = 0
        # Read to its end as framed (chunked or by length): the connection
        # may carry the next request.
        self.done = False

    def _count(self, n: int) -> None:
        self.read_bytes += n
        if self.read_bytes > self.max:
            raise InternalError(0, "internal", "response body over %d bytes" % self.max)

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.chunked:
            while True:
                size_line = await self.r.readuntil(b"\r\n")
                if len(size_line) > 1024:
                    raise InternalError(0, "internal", "chunk size line too long")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")  # the trailer's end (jailcell sends none)
                    self.done = True
                    return
                self._count(size)
                data = await self.r.readexactly(size)
                await self.r.readexactly(2)
                yield data
        elif self.left is not None:
            while self.left > 0:
                data = await self.r.read(min(self.left, 1 << 20))
                if not data:
                    raise InternalError(0, "internal", "response body ended early")
                self.left -= len(data)
                self._count(len(data))
                yield data
            self.done = True
        else:
            while True:
                data = await self.r.read(1 << 20)
                if not data:
                    return
                self._count(len(data))
                yield data

    async def all(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    async def lines(self) -> AsyncIterator[bytes]:
        buf = b""
        async for c in self.chunks():
            buf += c
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line
            if len(buf) > MAX_LINE:
                raise InternalError(0, "internal", "streamed line over %d bytes" % MAX_LINE)
        if buf:
            yield buf


def _close_quietly(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except (OSError, RuntimeError):  # RuntimeError: its event loop is closed
        pass


class AsyncSocketTransport(AsyncTransport):
    """`jailcell serve` on its Unix socket, over asyncio streams: connections
    are kept alive and reused (at most MAX_IDLE idle, each for IDLE_AGE
    seconds, on the event loop that opened it), each call on one of its
    own, so one transport serves many tasks. close() closes the idle ones;
    a later call opens a new one."""

    # Whether connections are kept between calls (AsyncTCPTransport's are
    # not: a fleet's proxy has its own idle timeouts).
    _keep_alive = True

    def __init__(self, socket_path: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        # (reader, writer, idle since, its event loop), newest last; only
        # touched from event-loop code, which does not await in between.
        self._idle: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter, float, asyncio.AbstractEventLoop]] = []

    def __repr__(self) -> str:
        return "AsyncSocketTransport(%r)" % self.socket_path

    async def close(self) -> None:
        """Close the idle connections; calls still running keep theirs."""
        idle, self._idle = self._idle, []
        for _, w, _, _ in idle:
            _close_quietly(w)

    async def _open(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_unix_connection(self.socket_path, limit=MAX_HEAD)
        except OSError as e:
            raise UnavailableError(0, "unavailable", "connect to %s: %s" % (self.socket_path, e)) from e

    async def _take(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """A connection for one request, and whether it was reused."""
        loop = asyncio.get_running_loop()
        while self._idle:
            r, w, since, on = self._idle.pop()
            if on is loop and time.monotonic() - since <= IDLE_AGE and not self._stale(r, w):
                return r, w, True
            _close_quietly(w)
        r, w = await self._open()
        return r, w, False

    @staticmethod
    def _stale(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        """The service closed an idle connection, or sent something unasked."""
        if w.is_closing() or r.at_eof() or len(getattr(r, "_buffer", b"")) > 0:
            return True
        sock = w.get_extra_info("socket")
        return sock is None or _readable(sock)

    def _give(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        now = time.monotonic()
        while self._idle and now - self._idle[0][2] > IDLE_AGE:
            _close_quietly(self._idle.pop(0)[1])
        if len(self._idle) < MAX_IDLE and not w.is_closing():
            self._idle.append((r, w, now, asyncio.get_running_loop()))
        else:
            _close_quietly(w)

    def _auth(self) -> List[str]:
        return []

    async def call(self, op: str, fields: Dict[str, Any], on_event: Optional[AsyncOnEvent] = None,
                   timeout: Optional[float] = None) -> Dict[str, Any]:
        method, path, body, ctype, kind, extra = route(op, fields, on_event is not None)
        return await asyncio.wait_for(self._exchange(op, fields, method, path, body, ctype, kind, extra, on_event),
                                      self.timeout if timeout is None else timeout)

    async def _exchange(self, op: str, fields: Dict[str, Any], method: str, path: str, body: Optional[bytes],
                        ctype: str, kind: str, extra: List[str], on_event: Optional[AsyncOnEvent]) -> Dict[str, Any]:
        head = ["%s %s HTTP/1.1" % (method, path), "Host: jailcell"] + self._auth() + extra
        if not self._keep_alive:
            head.append("Connection: close")
        if ctype:
            head.append("Content-Type: " + ctype)
        if kind == "stream":
            head.append("Accept: application/x-ndjson")
        head.append("Content-Length: %d" % len(body or b""))
        req = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        retried = False
        while True:
            if self._keep_alive and not retried:
                reader, writer, reused = await self._take()
            else:  # a retry takes a new connection: any idle one may be stale too
                (reader, writer), reused = await self._open(), False
            keep = False
            try:
                try:
                    writer.write(req)
                    await writer.drain()
                    raw = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    raise InternalError(0, "internal", "response head over %d bytes" % MAX_HEAD)
                except (ConnectionError, asyncio.IncompleteReadError) as e:
                    if not reused:
                        raise UnavailableError(0, "unavailable", "%s closed the connection before answering"
                                               % self.socket_path) from e
                    # The service closed a kept connection (a restart, its
                    # idle timeout): the other idle ones are likely gone too.
                    await self.close()
                    if method in _IDEMPOTENT and not retried:
                        retried = True
                        continue
                    # Not re-sent: the request may have reached the service,
                    # and a POST sent twice could run a cell (or create a
                    # session) twice.
                    raise UnavailableError(0, "unavailable", "%s closed the kept-alive connection under %s %s (%s); "
                                           "not sent again, since it may have arrived"
                                           % (self.socket_path, method, path, str(e) or type(e).__name__)) from e
                lines = raw.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ", 2)
                if len(parts) < 2 or not parts[1].isdigit():
                    raise InternalError(0, "internal", "not an HTTP status line: %r" % lines[0][:100])
                status = int(parts[1])
                headers: Dict[str, str] = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                b = _Body(reader, headers, MAX_LINE)
                reusable = self._keep_alive and "close" not in headers.get("connection", "").lower()
                if kind == "raw":
                    data = await b.all()
                    keep = reusable and b.done
                    if status != 200:
                        _decode(status, data)
                        raise InternalError(status, "internal", "download answered %d without an error" % status)
                    return {"ok": True, "path": fields.get("path"), "data": data, "size": len(data),
                            "sha256": headers.get("x-jailcell-sha256", "")}
                if not headers.get("content-type", "").startswith("application/x-ndjson"):
                    data = await b.all()
                    keep = reusable and b.done
                    return _decode(status, data)
                it = b.lines()
                async for line in it:
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if isinstance(msg, dict) and "event" in msg:
                        await _deliver(on_event, msg)
                        continue
                    # The result is the last line: read the body's end so
                    # that the connection can carry the next request.
                    async for _ in it:
                        pass
                    keep = reusable and b.done
                    return _decode(status, line)
                raise InternalError(status, "internal", "stream ended before the result")
            finally:
                if keep:
                    self._give(reader, writer)
                else:
                    _close_quietly(writer)
                    try:
                        await writer.wait_closed()
                    except (OSError, RuntimeError):
                        pass


class AsyncTCPTransport(AsyncSocketTransport):
    """`jailcell serve --listen tcp://HOST:PORT` (a fleet node, or behind
    its proxy), over asyncio streams: each request carries the bearer
    token (Authorization: Bearer), and with ssl_context the connection is
    TLS (a client certificate in the context is mutual TLS). Each call
    opens its own connection.

        t = AsyncTCPTransport("tcp://127.0.0.1:7070", token=os.environ["JAILCELL_TOKEN"])
    """

    def __init__(self, url: str, token: Optional[str] = None, *, ssl_context: Optional[ssl.SSLContext] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        u = urllib.parse.urlsplit(url if "://" in url else "tcp://" + url)
        if u.scheme not in ("tcp", "http", "https") or not u.hostname or not u.port:
            raise BadRequest("url = %r: want tcp://HOST:PORT" % (url,))
        if token is not None and (not token or any(c in token for c in "\r\n ")):
            raise BadRequest("token must be a non-empty string without spaces or line breaks")
        super().__init__(url, timeout)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.ssl_context = ssl_context if ssl_context is not None else (
            ssl.create_default_context() if u.scheme == "https" else None)

    def __repr__(self) -> str:
        return "AsyncTCPTransport(%r)" % ("%s:%d" % (self.host, self.port))

    async def _open(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_connection(self.host, self.port, ssl=self.ssl_context, limit=MAX_HEAD)
        except OSError as e:
            raise UnavailableError(0, "unavailable", "connect to %s:%d: %s" % (self.host, self.port, e)) from e

    def _auth(self) -> List[str]:
        return ["Authorization: Bearer " + self.token] if self.token else []


class AsyncJsonLinesTransport(AsyncTransport):
    """A `jailcell json` child on asyncio pipes; answers are matched by id,
    so many tasks share one. Make one with
    `await AsyncJsonLinesTransport.start(["jailcell", "json"])`."""

    def __init__(self) -> None:
        self.command: Sequence[str] = ()
        self.timeout = DEFAULT_TIMEOUT
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._ids = itertools.count(1)
        self._pending: Dict[int, "asyncio.Queue[Union[Event, BaseException]]"] = {}
        self._dead: Optional[UnavailableError] = None
        self._tail: Deque[bytes] = collections.deque(maxlen=64)
        self._tasks: List["asyncio.Future[None]"] = []

    @classmethod
    async def start(cls, command: Sequence[str] = ("jailcell", "json"), *, env: Optional[Dict[str, str]] = None,
                    timeout: float = DEFAULT_TIMEOUT) -> "AsyncJsonLinesTransport":
        t = cls()
        t.command, t.timeout = list(command), timeout
        try:
            t._proc = await asyncio.create_subprocess_exec(
                *t.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, limit=MAX_LINE)
        except OSError as e:
            raise UnavailableError(0, "unavailable", "start %s: %s" % (" ".join(t.command), e)) from e
        t._tasks = [asyncio.ensure_future(t._read()), asyncio.ensure_future(t._read_stderr())]
        return t

    def __repr__(self) -> str:
        return "AsyncJsonLinesTransport(%r)" % (list(self.command),)

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode if self._proc is not None else None

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while True:
            chunk = await self._proc.stderr.read(4096)
            if not chunk:
                return
            self._tail.append(chunk)

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        why = "jailcell json closed its stdout"
        try:
            while True:
                line = await self._proc.stdout.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    why = "jailcell json sent a line that is not JSON: %r" % line[:200]
                    break
                rid = msg.get("id") if isinstance(msg, dict) else None
                q = self._pending.get(rid) if isinstance(rid, int) else None
                if q is not None:
                    q.put_nowait(msg)
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            why = "read from jailcell json: %s" % e
        tail = b"".join(self._tail).decode("utf-8", "replace").strip()
        self._dead = UnavailableError(0, "unavailable", why + ("; its log ends: " + tail[-2000:] if tail else ""))
        for q in self._pending.values():
            q.put_nowait(self._dead)

    async def call(self, op: str, fields: Dict[str, Any], on_event: Optional[AsyncOnEvent] = None,
                   timeout: Optional[float] = None) -> Dict[str, Any]:
        if self._dead is not None:
            raise self._dead
        assert self._proc is not None and self._proc.stdin is not None
        rid = next(self._ids)
        req = {k: v for k, v in fields.items() if v is not None}
        req["id"], req["op"] = rid, op
        if op == "exec" or (op == "command" and on_event is not None):
            req["stream"] = True
        q: "asyncio.Queue[Union[Event, BaseException]]" = asyncio.Queue()
        self._pending[rid] = q
        try:
            self._proc.stdin.write(json.dumps(req, default=_encode).encode() + b"\n")
            await self._proc.stdin.drain()
            while True:
                msg = await asyncio.wait_for(q.get(), self.timeout if timeout is None else timeout)
                if isinstance(msg, BaseException):
                    raise msg
                if "event" in msg:
                    await _deliver(on_event, msg)
                    continue
                resp = _checked(0, msg)
                if op == "download" and isinstance(resp.get("data"), str):
                    resp["data"] = base64.b64decode(resp["data"])
                return resp
        except (OSError, ConnectionError) as e:
            raise UnavailableError(0, "unavailable", "write to jailcell json: %s" % e) from e
        finally:
            self._pending.pop(rid, None)

    async def close(self) -> None:
        """Close jailcell's stdin: it closes its sessions and exits."""
        if self._proc is None:
            return
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 30)
        except asyncio.TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        for task in self._tasks:
            await task


class ThreadedTransport(AsyncTransport):
    """A blocking Transport used from asyncio: each call in a worker thread,
    its events brought back to the loop in order. For a transport shared
    with blocking Sandboxes; the asyncio transports above need no thread."""

    def __init__(self, transport: Transport) -> None:
        self.sync = transport

    def __repr__(self) -> str:
        return "ThreadedTransport(%r)" % (self.sync,)

    @property
    def timeout(self) -> float:
        """The blocking transport's own bound on a call."""
        t = getattr(self.sync, "timeout", DEFAULT_TIMEOUT)
        return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else DEFAULT_TIMEOUT

    async def call(self, op: str, fields: Dict[str, Any], on_event: Optional[AsyncOnEvent] = None,
                   timeout: Optional[float] = None) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        pending: List["asyncio.Future[Any]"] = []

        def hop(ev: Event) -> None:
            def run() -> None:
                if on_event is None:
                    return
                out = on_event(ev)
                if inspect.isawaitable(out):
                    pending.append(asyncio.ensure_future(out))
            loop.call_soon_threadsafe(run)

        resp = await loop.run_in_executor(
            None, lambda: call_with_timeout(self.sync, op, fields, hop if on_event else None, timeout))
        await asyncio.sleep(0)  # the hops scheduled before this resumed have run
        if pending:
            await asyncio.gather(*pending)
        return resp

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)
