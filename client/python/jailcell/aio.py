"""AsyncSandbox: the asyncio face of Sandbox, over asyncio transports.

With socket= (or JAILCELL_SOCKET) it speaks HTTP/1.1 to `jailcell serve`
over asyncio streams on the Unix socket; with command= it drives a
`jailcell json` child through asyncio's subprocess pipes. No thread is
involved, so many sandboxes (and many cells) wait at once under one event
loop. A blocking Transport passed as transport= (one shared with
Sandboxes) is driven from worker threads instead (ThreadedTransport).

Callbacks may be plain functions or coroutine functions; they run on the
loop in the order the output happened, and coroutines they return are
awaited before the call returns."""

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .aio_transport import (AsyncJsonLinesTransport, AsyncSocketTransport, AsyncTCPTransport, AsyncTransport,
                            ThreadedTransport, call_with_timeout_async)
from .commands import (DEFAULT_COMMAND_TIMEOUT, PTY_COMMAND, CommandExitException, CommandResult, PtySize, _check_envs,
                       _pty_size, _pty_start, _result, _stdin_text)
from .info import SandboxInfo, SandboxMetrics
from .errors import BadRequestError, JailcellError, NotFoundError
from .lifecycle import check_created, hibernate_field
from .models import EntryInfo, Execution, ExecutionError, Result, _entry, _workdir
from .sandbox import Data, _bytes, _check_metadata, _Collector, _exec_fields, _written
from .transport import DEFAULT_TIMEOUT, Transport, _env_socket, exec_timeout
from .watch import FilesystemEvent, _fs_events

__all__ = ["AsyncSandbox", "AsyncFiles", "AsyncCommands", "AsyncCommandHandle", "AsyncPty", "AsyncWatchHandle"]

AsyncOutputHandler = Callable[[str], Union[Any, Awaitable[Any]]]
AsyncPtyHandler = Callable[[bytes], Union[Any, Awaitable[Any]]]
AsyncResultHandler = Callable[[Result], Union[Any, Awaitable[Any]]]


class _Tasks:
    """Calls callbacks in order; coroutines they return are gathered at
    the end of the call."""

    def __init__(self) -> None:
        self.tasks: List["asyncio.Future[Any]"] = []

    def wrap(self, cb: Optional[Callable[[Any], Any]]) -> Optional[Callable[[Any], None]]:
        if cb is None:
            return None
        fn = cb

        def run(arg: Any) -> None:
            out = fn(arg)
            if inspect.isawaitable(out):
                self.tasks.append(asyncio.ensure_future(out))
        return run

    async def done(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks)


def _events(t: _Tasks, on_stdout: Optional[AsyncOutputHandler], on_stderr: Optional[AsyncOutputHandler]
            ) -> Optional[Callable[[Dict[str, Any]], None]]:
    out, err = t.wrap(on_stdout), t.wrap(on_stderr)
    if out is None and err is None:
        return None

    def on_event(ev: Dict[str, Any]) -> None:
        text = ev.get("text")
        if isinstance(text, str):
            cb = out if ev.get("event") == "stdout" else err if ev.get("event") == "stderr" else None
            if cb is not None:
                cb(text)
    return on_event


class AsyncFiles:
    """sandbox.files, awaitable."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sbx = sandbox

    async def write(self, path: str, data: Data, *, metadata: Optional[Dict[str, str]] = None) -> EntryInfo:
        resp = await self._sbx._call("upload", {"path": path, "data": _bytes(data), "metadata": _check_metadata(metadata)})
        return _written(path, resp)

    async def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        if format not in ("text", "bytes"):
            raise BadRequestError(0, "bad_request", "format = %r: allowed \"text\" or \"bytes\"" % (format,))
        got = (await self._sbx._call("download", {"path": path})).get("data", b"")
        data = got if isinstance(got, bytes) else bytes(got)
        return data.decode("utf-8") if format == "text" else data

    async def list(self, path: str = "") -> List[EntryInfo]:
        prefix = path.strip("/")
        if prefix in ("", "."):
            prefix = ""
        out = []
        for e in (await self._sbx._call("files", {})).get("files") or []:
            p = e.get("path", "")
            if prefix and p != prefix and not p.startswith(prefix + "/"):
                continue
            out.append(_entry(e, p, _workdir(self._sbx.info)))
        return out

    async def exists(self, path: str) -> bool:
        try:
            await self._sbx._call("stat", {"path": path})
            return True
        except NotFoundError:
            return False

    async def get_info(self, path: str) -> EntryInfo:
        e = (await self._sbx._call("stat", {"path": path})).get("entry") or {}
        return _entry(e, path, _workdir(self._sbx.info))

    async def remove(self, path: str) -> None:
        await self._sbx._call("remove", {"path": path})

    async def rename(self, old_path: str, new_path: str) -> EntryInfo:
        e = (await self._sbx._call("rename", {"path": old_path, "to": new_path})).get("entry") or {}
        return _entry(e, new_path, _workdir(self._sbx.info))

    async def make_dir(self, path: str) -> bool:
        return bool((await self._sbx._call("mkdir", {"path": path})).get("created"))

    async def watch_dir(self, path: str, on_event: Optional[Callable[[FilesystemEvent], Any]] = None,
                        recursive: bool = False, interval: float = 0.5) -> "AsyncWatchHandle":
        """Watch a directory (E2B's AsyncSandbox.files.watch_dir): with
        on_event, a task polls every interval seconds (at least 0.1) and
        hands each event to it until stop(); get_new_events() polls once."""
        resp = await self._sbx._call("watch", {"action": "start", "path": path, "recursive": bool(recursive)})
        h = AsyncWatchHandle(self._sbx, str(resp.get("watch", "")))
        if on_event is not None:
            h._start(on_event, max(interval, 0.1))
        return h


class AsyncWatchHandle:
    """A directory watch of an AsyncSandbox."""

    def __init__(self, sandbox: "AsyncSandbox", watch: str) -> None:
        self._sbx, self._watch = sandbox, watch
        self._task: Optional["asyncio.Task[None]"] = None
        self._stopped = False
        self.overflowed = False

    async def get_new_events(self) -> List[FilesystemEvent]:
        resp = await self._sbx._call("watch", {"action": "poll", "watch": self._watch})
        self.overflowed = self.overflowed or bool(resp.get("overflow"))
        return _fs_events(resp)

    def _start(self, on_event: Callable[[FilesystemEvent], Any], interval: float) -> None:
        async def loop() -> None:
            while not self._stopped:
                for ev in await self.get_new_events():
                    out = on_event(ev)
                    if inspect.isawaitable(out):
                        await out
                await asyncio.sleep(interval)
        self._task = asyncio.ensure_future(loop())

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, NotFoundError):
                pass
        try:
            await self._sbx._call("watch", {"action": "stop", "watch": self._watch})
        except NotFoundError:
            pass


class AsyncCommandHandle:
    """A background command of an AsyncSandbox: await wait() or kill(),
    send_stdin() and close_stdin() (stdin=True), resize() (a terminal). As
    CommandHandle, input and resizes are refused (BusyError) while a
    wait() of the sandbox waits."""

    def __init__(self, sandbox: "AsyncSandbox", job: str, pid: int, on_stdout: Optional[AsyncOutputHandler],
                 on_stderr: Optional[AsyncOutputHandler]) -> None:
        self._sbx, self._job, self.pid = sandbox, job, pid
        self._on_stdout, self._on_stderr = on_stdout, on_stderr
        self._result: Optional[CommandResult] = None
        self._streamed = False

    @property
    def exit_code(self) -> Optional[int]:
        return self._result.exit_code if self._result is not None else None

    async def wait(self, on_stdout: Optional[AsyncOutputHandler] = None,
                   on_stderr: Optional[AsyncOutputHandler] = None) -> CommandResult:
        self._on_stdout = on_stdout or self._on_stdout
        self._on_stderr = on_stderr or self._on_stderr
        t = _Tasks()
        while self._result is None:
            self._streamed = True
            c = (await self._sbx._call("command", {"action": "wait", "job": self._job},
                                       _events(t, self._on_stdout, self._on_stderr))).get("command") or {}
            if c.get("done"):
                self._result = _result(c)
        if not self._streamed:
            self._streamed = True
            for text, cb in ((self._result.stdout, t.wrap(self._on_stdout)), (self._result.stderr, t.wrap(self._on_stderr))):
                if text and cb is not None:
                    cb(text)
        await t.done()
        if self._result.exit_code != 0:
            raise CommandExitException(self._result)
        return self._result

    async def kill(self) -> bool:
        if self._result is not None:
            return False
        try:
            c = (await self._sbx._call("command", {"action": "kill", "job": self._job})).get("command") or {}
        except NotFoundError:
            return False
        if c.get("done"):
            self._result = _result(c)
        return True

    async def _tell(self, fields: Dict[str, Any]) -> None:
        fields["job"] = self._job
        await self._sbx._call("command", fields)

    async def send_stdin(self, data: Union[str, bytes], request_timeout: Optional[float] = None) -> None:
        """CommandHandle.send_stdin, awaitable."""
        await self._tell({"action": "input", "input": _stdin_text(data)})

    async def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        """CommandHandle.close_stdin, awaitable."""
        await self._tell({"action": "input", "input": "", "eof": True})

    async def resize(self, size: PtySize) -> None:
        """CommandHandle.resize, awaitable."""
        await self._tell({"action": "resize", "pty": _pty_size(size)})


class AsyncCommands:
    """sandbox.commands, awaitable."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sbx = sandbox
        self._handles: Dict[int, AsyncCommandHandle] = {}

    async def _start(self, fields: Dict[str, Any], on_stdout: Optional[AsyncOutputHandler],
                     on_stderr: Optional[AsyncOutputHandler]) -> AsyncCommandHandle:
        c = (await self._sbx._call("command", fields)).get("command") or {}
        h = AsyncCommandHandle(self._sbx, str(c.get("job", "")), int(c.get("pid", 0)), on_stdout, on_stderr)
        if c.get("done"):
            h._result = _result(c)
        self._handles[h.pid] = h
        return h

    def connect(self, pid: int) -> AsyncCommandHandle:
        """The handle of a background command started through this object."""
        h = self._handles.get(pid)
        if h is None:
            raise NotFoundError(0, "not_found", "no background command with pid %d started through this sandbox" % pid)
        return h

    async def kill(self, pid: int) -> bool:
        """Kill a background command started through this object, by pid."""
        h = self._handles.get(pid)
        return await h.kill() if h is not None else False

    async def send_stdin(self, pid: int, data: Union[str, bytes], request_timeout: Optional[float] = None) -> None:
        """Commands.send_stdin, awaitable."""
        await self.connect(pid).send_stdin(data)

    async def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        """Commands.close_stdin, awaitable."""
        await self.connect(pid).close_stdin()

    async def run(self, cmd: str, background: bool = False, envs: Optional[Dict[str, str]] = None,
                  user: Optional[str] = None, cwd: Optional[str] = None,
                  on_stdout: Optional[AsyncOutputHandler] = None, on_stderr: Optional[AsyncOutputHandler] = None,
                  stdin: Optional[bool] = None, timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
                  request_timeout: Optional[float] = None) -> Any:
        """Sandbox.commands.run, awaitable."""
        if not isinstance(cmd, str) or not cmd:
            raise BadRequestError(0, "bad_request", "cmd must be a non-empty string: a bash command line")
        if user not in (None, "root", "user"):
            raise BadRequestError(0, "bad_request", "user = %r: commands run as the sandbox's root" % (user,))
        fields: Dict[str, Any] = {"cmd": cmd, "envs": _check_envs(envs), "cwd": cwd}
        if timeout:
            fields["timeout_s"] = float(timeout)
        if stdin:
            fields["stdin"] = True
        if background:
            fields["background"] = True
            return await self._start(fields, on_stdout, on_stderr)
        t = _Tasks()
        c = (await self._sbx._call("command", fields, _events(t, on_stdout, on_stderr))).get("command") or {}
        await t.done()
        res = _result(c)
        if res.exit_code != 0:
            raise CommandExitException(res)
        return res


class AsyncPty:
    """sandbox.pty, awaitable (E2B's AsyncSandbox.pty): on_data gets the
    terminal's output as UTF-8 bytes while the handle's wait() waits."""

    def __init__(self, commands: AsyncCommands) -> None:
        self._commands = commands

    async def create(self, size: PtySize, on_data: AsyncPtyHandler, user: Optional[str] = None,
                     cwd: Optional[str] = None, envs: Optional[Dict[str, str]] = None,
                     timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
                     request_timeout: Optional[float] = None) -> AsyncCommandHandle:
        """Pty.create, awaitable."""
        def on_stdout(text: str) -> Any:
            return on_data(text.encode("utf-8"))
        return await self._commands._start(_pty_start(PTY_COMMAND, size, envs, user, cwd, timeout), on_stdout, None)

    async def send_stdin(self, pid: int, data: bytes, request_timeout: Optional[float] = None) -> None:
        """Pty.send_stdin, awaitable."""
        await self._commands.send_stdin(pid, data)

    async def resize(self, pid: int, size: PtySize, request_timeout: Optional[float] = None) -> None:
        """Pty.resize, awaitable."""
        await self._commands.connect(pid).resize(size)

    async def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Pty.kill, awaitable."""
        return await self._commands.kill(pid)


class AsyncSandbox:
    """A jailcell session for asyncio code; make one with
    `await AsyncSandbox.create(...)` (the arguments of Sandbox).

        async with await AsyncSandbox.create(socket=path) as sbx:
            ex = await sbx.run_code("1 + 1")
    """

    def __init__(self, transport: AsyncTransport, info: Dict[str, Any], owns: bool,
                 metadata: Optional[Dict[str, str]] = None) -> None:
        self.transport = transport
        self.info = info
        self._owns = owns
        self._closed = False
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.files = AsyncFiles(self)
        self.commands = AsyncCommands(self)
        self.pty = AsyncPty(self.commands)

    @staticmethod
    async def _transport(socket: Optional[str], command: Optional[Sequence[str]], transport: Any,
                         request_timeout: float, url: Optional[str] = None,
                         token: Optional[str] = None) -> "tuple[AsyncTransport, bool]":
        if url is not None:
            if socket is not None or command is not None or transport is not None:
                raise BadRequestError(0, "bad_request", "give url, socket, command or transport: one of them")
            return AsyncTCPTransport(url, token, timeout=request_timeout), True
        if transport is not None and (socket is not None or command is not None):
            raise BadRequestError(0, "bad_request", "give transport, or socket or command; not both")
        if socket is not None and command is not None:
            raise BadRequestError(0, "bad_request", "give socket or command, not both")
        if isinstance(transport, AsyncTransport):
            return transport, False
        if isinstance(transport, Transport):
            return ThreadedTransport(transport), False
        if transport is not None:
            raise BadRequestError(0, "bad_request", "transport must be an AsyncTransport or a Transport")
        if command is not None:
            return await AsyncJsonLinesTransport.start(command, timeout=request_timeout), True
        return AsyncSocketTransport(socket or _env_socket(), timeout=request_timeout), True

    @classmethod
    async def create(cls, socket: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
                     transport: Any = None, ttl: Optional[float] = None,
                     policy: Optional[str] = None, limits: Optional[Dict[str, Any]] = None,
                     persist: Optional[str] = None, requirements: Optional[List[str]] = None,
                     max_lifetime: Optional[float] = None, request_timeout: float = DEFAULT_TIMEOUT,
                     envs: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
                     metadata: Optional[Dict[str, str]] = None, template: Optional[str] = None,
                     api_key: Optional[str] = None, domain: Optional[str] = None, url: Optional[str] = None,
                     token: Optional[str] = None, hibernate_on_idle: Optional[bool] = None,
                     lifecycle: Optional[Mapping[str, Any]] = None) -> "AsyncSandbox":
        """url (tcp://HOST:PORT) and token reach a node's TCP listener;
        socket a local `jailcell serve`; command a `jailcell json` child."""
        if timeout is not None and ttl is not None:
            raise BadRequestError(0, "bad_request", "give ttl or timeout (E2B's name for it), not both")
        if template is not None:
            raise BadRequestError(0, "bad_request", "template = %r: jailcell has no templates; name a configured "
                                                    "policy with policy=" % (template,))
        hibernate = hibernate_field(hibernate_on_idle, lifecycle)
        t, owns = await cls._transport(socket, command, transport, request_timeout, url, token)
        try:
            info = await t.call("create", {
                "ttl_s": timeout if ttl is None else ttl, "policy": policy, "limits": limits, "persist": persist,
                "requirements": requirements, "max_lifetime_s": max_lifetime, "envs": _check_envs(envs),
                "hibernate_on_idle": hibernate})
            ignored = check_created(hibernate, info)
            if ignored is not None:
                try:
                    await t.call("close", {"session": info.get("session")})
                except JailcellError:
                    pass  # the create's refusal says more than the close's
                raise ignored
        except BaseException:
            if owns:
                await t.close()
            raise
        return cls(t, info, owns, metadata)

    @classmethod
    async def connect(cls, sandbox_id: str, socket: Optional[str] = None, *,
                      command: Optional[Sequence[str]] = None, transport: Any = None,
                      request_timeout: float = DEFAULT_TIMEOUT, url: Optional[str] = None,
                      token: Optional[str] = None, **ignored: Any) -> "AsyncSandbox":
        """Attach to a live session by its id (E2B's AsyncSandbox.connect)."""
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise BadRequestError(0, "bad_request", "sandbox_id must be a session id")
        t, owns = await cls._transport(socket, command, transport, request_timeout, url, token)
        try:
            info = await t.call("info", {"session": sandbox_id})
        except BaseException:
            if owns:
                await t.close()
            raise
        return cls(t, info, owns)

    @property
    def sandbox_id(self) -> str:
        return str(self.info["session"])

    id = sandbox_id

    def __repr__(self) -> str:
        return "AsyncSandbox(%s via %r)" % (self.info.get("session"), self.transport)

    async def _call(self, op: str, fields: Dict[str, Any],
                    on_event: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
        fields = dict(fields)
        fields["session"] = self.sandbox_id
        return await self.transport.call(op, fields, on_event)

    async def run_code(self, code: str, on_stdout: Optional[AsyncOutputHandler] = None,
                       on_stderr: Optional[AsyncOutputHandler] = None, on_result: Optional[AsyncResultHandler] = None,
                       timeout: Optional[float] = None, *, files: Optional[Dict[str, Data]] = None,
                       fix_attempts: Optional[int] = None, force: bool = False, snapshot: bool = False,
                       raw_ansi: bool = False, envs: Optional[Dict[str, str]] = None, language: Optional[str] = None,
                       on_error: Optional[Callable[[ExecutionError], Any]] = None,
                       request_timeout: Optional[float] = None) -> Execution:
        """Sandbox.run_code, awaitable; callbacks run on this loop."""
        if language not in (None, "python", "py", "python3"):
            raise BadRequestError(0, "bad_request", "language = %r: jailcell runs Python only" % (language,))
        t = _Tasks()
        c = _Collector(t.wrap(on_stdout), t.wrap(on_stderr), t.wrap(on_result))
        fields = _exec_fields(code, self.sandbox_id, timeout, files, fix_attempts, force, snapshot, None,
                              raw_ansi=raw_ansi, envs=envs)
        ex = c.finish(await call_with_timeout_async(self.transport, "exec", fields, c.event,
                                                    exec_timeout(self.transport, timeout, request_timeout)))
        await t.done()
        if on_error is not None and ex.error is not None:
            out = on_error(ex.error)
            if inspect.isawaitable(out):
                await out
        return ex

    async def kill(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        try:
            await self._call("close", {})
            return True
        except NotFoundError:
            return False
        finally:
            if self._owns:
                await self.transport.close()

    close = kill

    async def interrupt(self) -> bool:
        return bool((await self._call("interrupt", {})).get("interrupted"))

    async def is_running(self) -> bool:
        if self._closed:
            return False
        return any(s.get("session") == self.sandbox_id
                   for s in (await self.transport.call("sessions", {})).get("sessions") or [])

    async def get_info(self) -> SandboxInfo:
        self.info = await self._call("info", {})
        return SandboxInfo.from_info(self.info, self.metadata)

    async def set_timeout(self, timeout: float) -> None:
        self.info = await self._call("set_timeout", {"timeout_s": float(timeout)})

    async def get_metrics(self, start: Any = None, end: Any = None) -> List[SandboxMetrics]:
        return [SandboxMetrics.from_wire((await self._call("metrics", {})).get("metrics") or {})]

    async def snapshot(self) -> Dict[str, Any]:
        self.info = await self._call("snapshot", {})
        return self.info

    async def rollback(self) -> Dict[str, Any]:
        self.info = await self._call("rollback", {})
        return self.info

    async def hibernate(self) -> Dict[str, Any]:
        self.info = await self._call("hibernate", {})
        return self.info

    async def restore(self) -> Dict[str, Any]:
        self.info = await self._call("restore", {})
        return self.info

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kill()
