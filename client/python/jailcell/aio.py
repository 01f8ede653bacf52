"""AsyncSandbox: the asyncio face of Sandbox.

Each call runs the blocking client in a worker thread, so many sandboxes
(and many cells) run at once under one event loop; callbacks are brought
back to the loop in the order they happened and may be coroutine
functions."""

import asyncio
import functools
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from .models import EntryInfo, Execution, Result
from .sandbox import Data, Sandbox
from .transport import DEFAULT_TIMEOUT, Transport

__all__ = ["AsyncSandbox", "AsyncFiles"]

T = TypeVar("T")
AsyncOutputHandler = Callable[[str], Union[Any, Awaitable[Any]]]
AsyncResultHandler = Callable[[Result], Union[Any, Awaitable[Any]]]


async def _thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


class _OnLoop:
    """Wraps a callback so that a worker thread's calls run on the loop, in
    order; coroutines it returns are awaited before run_code returns."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cb: Callable[[Any], Any], tasks: List["asyncio.Future[Any]"]):
        self.loop, self.cb, self.tasks = loop, cb, tasks

    def _run(self, arg: Any) -> None:
        out = self.cb(arg)
        if inspect.isawaitable(out):
            self.tasks.append(asyncio.ensure_future(out))

    def __call__(self, arg: Any) -> None:
        self.loop.call_soon_threadsafe(self._run, arg)


class AsyncFiles:
    """sandbox.files, awaitable."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sbx = sandbox

    async def write(self, path: str, data: Data) -> EntryInfo:
        return await _thread(self._sbx.files.write, path, data)

    async def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        return await _thread(self._sbx.files.read, path, format)

    async def list(self, path: str = "") -> List[EntryInfo]:
        return await _thread(self._sbx.files.list, path)

    async def exists(self, path: str) -> bool:
        return await _thread(self._sbx.files.exists, path)


class AsyncSandbox:
    """A jailcell session for asyncio code; make one with
    `await AsyncSandbox.create(...)` (the arguments of Sandbox).

        async with await AsyncSandbox.create(socket=path) as sbx:
            ex = await sbx.run_code("1 + 1")
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sbx = sandbox
        self.files = AsyncFiles(sandbox)

    @classmethod
    async def create(cls, socket: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
                     transport: Optional[Transport] = None, ttl: Optional[float] = None,
                     policy: Optional[str] = None, limits: Optional[Dict[str, Any]] = None,
                     persist: Optional[str] = None, requirements: Optional[List[str]] = None,
                     max_lifetime: Optional[float] = None, request_timeout: float = DEFAULT_TIMEOUT) -> "AsyncSandbox":
        sbx = await _thread(Sandbox, socket, command=command, transport=transport, ttl=ttl, policy=policy,
                            limits=limits, persist=persist, requirements=requirements, max_lifetime=max_lifetime,
                            request_timeout=request_timeout)
        return cls(sbx)

    @property
    def sandbox_id(self) -> str:
        return self._sbx.sandbox_id

    @property
    def info(self) -> Dict[str, Any]:
        return self._sbx.info

    @property
    def sync(self) -> Sandbox:
        """The blocking Sandbox underneath."""
        return self._sbx

    def __repr__(self) -> str:
        return "Async" + repr(self._sbx)

    async def run_code(self, code: str, on_stdout: Optional[AsyncOutputHandler] = None,
                       on_stderr: Optional[AsyncOutputHandler] = None, on_result: Optional[AsyncResultHandler] = None,
                       timeout: Optional[float] = None, *, files: Optional[Dict[str, Data]] = None,
                       fix_attempts: Optional[int] = None, force: bool = False, snapshot: bool = False,
                       raw_ansi: bool = False) -> Execution:
        """Sandbox.run_code, awaitable; callbacks run on this loop."""
        loop = asyncio.get_running_loop()
        tasks: List["asyncio.Future[Any]"] = []

        def wrap(cb: Optional[Callable[[Any], Any]]) -> Optional[Callable[[Any], None]]:
            return _OnLoop(loop, cb, tasks) if cb is not None else None

        ex = await _thread(self._sbx.run_code, code, wrap(on_stdout), wrap(on_stderr), wrap(on_result), timeout,
                           files=files, fix_attempts=fix_attempts, force=force, snapshot=snapshot, raw_ansi=raw_ansi)
        # Callbacks scheduled by the worker ran before this resumed (the
        # loop runs call_soon callbacks in order); wait for their coroutines.
        await asyncio.sleep(0)
        if tasks:
            await asyncio.gather(*tasks)
        return ex

    async def kill(self) -> bool:
        return await _thread(self._sbx.kill)

    close = kill

    async def interrupt(self) -> bool:
        return await _thread(self._sbx.interrupt)

    async def is_running(self) -> bool:
        return await _thread(self._sbx.is_running)

    async def snapshot(self) -> Dict[str, Any]:
        return await _thread(self._sbx.snapshot)

    async def rollback(self) -> Dict[str, Any]:
        return await _thread(self._sbx.rollback)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kill()
