"""Sandbox: one jailcell session, with the surface of E2B's code-interpreter
SDK (run_code, files, kill), over either transport."""

import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .commands import Commands, Pty, _check_envs
from .info import SandboxInfo, SandboxMetrics
from .errors import BadRequestError, JailcellError, NotFoundError
from .lifecycle import check_created, hibernate_field
from .models import EntryInfo, Execution, ExecutionError, OutputMessage, Result, _entry, _metadata, _workdir
from .transport import DEFAULT_TIMEOUT, Transport, call_with_timeout, exec_timeout, transport_for
from .watch import WatchHandle

__all__ = ["Sandbox", "Files", "OutputHandler"]

OutputHandler = Callable[[str], Any]
ResultHandler = Callable[[Result], Any]

Data = Union[str, bytes, bytearray, memoryview]


def _bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def _check_metadata(metadata: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    """files.write's metadata: a dict of str to str, or None. The service
    checks the rest (printable ASCII, key lengths, 4096 bytes in all) and
    names what it refuses."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise BadRequestError(0, "bad_request", "metadata must be a dict of str to str, got %s" % type(metadata).__name__)
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise BadRequestError(0, "bad_request", "metadata key %.60r is %s: keys must be str" % (k, type(k).__name__))
        if not isinstance(v, str):
            raise BadRequestError(0, "bad_request", "metadata[%.60r] is %s: values must be str" % (k, type(v).__name__))
    return dict(metadata)


def _written(path: str, resp: Dict[str, Any]) -> EntryInfo:
    """The EntryInfo of a file an upload wrote, as its response says."""
    size = resp.get("size")
    return EntryInfo(name=path.rsplit("/", 1)[-1], path=path, size=size if isinstance(size, int) else 0,
                     is_dir=False, mtime="", metadata=_metadata(resp.get("metadata")))


def _exec_fields(code: str, session: Optional[str], timeout: Optional[float], files: Optional[Dict[str, Data]],
                 fix_attempts: Optional[int], force: bool, snapshot: bool, policy: Optional[str],
                 raw_ansi: bool = False, envs: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    if not isinstance(code, str) or not code:
        raise BadRequestError(0, "bad_request", "code must be a non-empty string of Python source")
    fields: Dict[str, Any] = {"code": code, "session": session}
    if envs:
        fields["envs"] = _check_envs(envs)
    if timeout is not None:
        fields["timeout_s"] = float(timeout)
    if files:
        fields["files"] = [{"path": p, "data": _bytes(d)} for p, d in files.items()]
    if fix_attempts is not None:
        if not isinstance(fix_attempts, int) or fix_attempts < 1:
            raise BadRequestError(0, "bad_request", "fix_attempts = %r: must be an integer >= 1 (every run counts, "
                                                    "the first included)" % (fix_attempts,))
        fields["fix"] = {"max_attempts": fix_attempts}
    if force:
        fields["force"] = True
    if snapshot:
        fields["snapshot"] = True
    if raw_ansi:
        fields["raw_ansi"] = True
    if policy is not None:
        fields["policy"] = policy
    return fields


class _Collector:
    """Turns an exec's streamed events into callbacks and logs. Figures
    reach on_result as they are displayed when the wire has display events;
    otherwise the final result's displays are handed over at the end. The
    last expression's value always comes last."""

    def __init__(self, on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler],
                 on_result: Optional[ResultHandler]) -> None:
        self.on_stdout, self.on_stderr, self.on_result = on_stdout, on_stderr, on_result
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.shown: List[Result] = []  # from display events

    def event(self, ev: Dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "stdout" or kind == "stderr":
            text = ev.get("text")
            if not isinstance(text, str):
                return
            (self.stdout if kind == "stdout" else self.stderr).append(text)
            cb = self.on_stdout if kind == "stdout" else self.on_stderr
            if cb is not None:
                cb(OutputMessage(text, time.time_ns(), kind == "stderr"))
        elif kind == "display":
            item = ev.get("display")
            if isinstance(item, dict):
                r = Result.from_display(item)
                self.shown.append(r)
                if self.on_result is not None:
                    self.on_result(r)

    def finish(self, resp: Dict[str, Any]) -> Execution:
        ex = Execution.from_response(resp, self.stdout, self.stderr)
        if self.shown and not any(not r.is_main_result for r in ex.results):
            # The figures came only as events: keep them in the results.
            ex.results[:0] = self.shown
        if self.on_result is not None:
            for r in ex.results:
                if r.is_main_result or not self.shown:
                    self.on_result(r)
        return ex


class Files:
    """The session's working directory (/work): sandbox.files."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox

    def write(self, path: str, data: Data, *, metadata: Optional[Dict[str, str]] = None) -> EntryInfo:
        """Write data (str as UTF-8, or bytes) to path, relative to the
        working directory; parent directories are made. The file's metadata
        becomes metadata (E2B's: kept in its user.e2b.* extended
        attributes; keys and values printable ASCII, at most 4096 bytes in
        all), or none: BadRequestError naming a key the service refuses,
        and no file written."""
        resp = self._sbx._call("upload", {"path": path, "data": _bytes(data), "metadata": _check_metadata(metadata)})
        return _written(path, resp)

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The file's content: format "text" (UTF-8, the default) or "bytes"."""
        if format not in ("text", "bytes"):
            raise BadRequestError(0, "bad_request", "format = %r: allowed \"text\" or \"bytes\"" % (format,))
        got = self._sbx._call("download", {"path": path}).get("data", b"")
        data = got if isinstance(got, bytes) else bytes(got)
        return data.decode("utf-8") if format == "text" else data

    def list(self, path: str = "") -> List[EntryInfo]:
        """The files and directories under path ("" or "." for all)."""
        prefix = path.strip("/")
        if prefix in ("", "."):
            prefix = ""
        out = []
        for e in self._sbx._call("files", {}).get("files") or []:
            p = e.get("path", "")
            if prefix and p != prefix and not p.startswith(prefix + "/"):
                continue
            out.append(_entry(e, p, _workdir(self._sbx.info)))
        return out

    def exists(self, path: str) -> bool:
        """Whether anything (a file, a directory) is at path."""
        try:
            self._sbx._call("stat", {"path": path})
            return True
        except NotFoundError:
            return False

    def get_info(self, path: str) -> EntryInfo:
        """What is at path (NotFoundError if nothing)."""
        e = self._sbx._call("stat", {"path": path}).get("entry") or {}
        return _entry(e, path, _workdir(self._sbx.info))

    def remove(self, path: str) -> None:
        """Remove a file, or a directory with everything in it."""
        self._sbx._call("remove", {"path": path})

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Move a file or directory to new_path (E2B's files.rename) in one
        rename(2): the sandbox sees the old path or the new, never a copy
        half made, and metadata goes along; new_path's missing parents are
        made. A file may replace a file; a directory moves only to where
        nothing is, and nothing onto or into itself (BadRequestError).
        NotFoundError if nothing is at old_path. Returns the entry at
        new_path."""
        e = self._sbx._call("rename", {"path": old_path, "to": new_path}).get("entry") or {}
        return _entry(e, new_path, _workdir(self._sbx.info))

    def make_dir(self, path: str) -> bool:
        """Make a directory and its parents; False if it was there already."""
        return bool(self._sbx._call("mkdir", {"path": path}).get("created"))

    def watch_dir(self, path: str, recursive: bool = False) -> WatchHandle:
        """Watch a directory of the workspace ("" for all of it); the
        handle's get_new_events() answers the changes since its last call."""
        resp = self._sbx._call("watch", {"action": "start", "path": path, "recursive": bool(recursive)})
        return WatchHandle(self._sbx, str(resp.get("watch", "")))


class Sandbox:
    """A jailcell session: a stateful Python kernel in its own sandbox.

        with Sandbox() as sbx:                       # JAILCELL_SOCKET or /run/jailcell/jailcell.sock
            sbx.run_code("x = 41")
            print(sbx.run_code("x + 1").text)        # 42

    socket: a `jailcell serve` socket path; command: start a private
    `jailcell json` (e.g. ["jailcell", "json"]) for this sandbox alone
    (one jailcell process per state directory: for several sandboxes,
    share one JsonLinesTransport, or give each command its own
    --state-dir); transport: a transport shared with other sandboxes (not
    closed by kill). The rest shape the session: ttl (idle seconds), policy (a
    configured name), limits (tighten the policy: {"memory_bytes": ...}),
    persist, requirements, max_lifetime (seconds), hibernate_on_idle (at
    its ttl the session is hibernated, its next cell bringing its variables
    back, instead of ended; or E2B's lifecycle={"on_timeout": "pause"})."""

    def __init__(self, socket: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
                 transport: Optional[Transport] = None, ttl: Optional[float] = None, policy: Optional[str] = None,
                 limits: Optional[Dict[str, Any]] = None, persist: Optional[str] = None,
                 requirements: Optional[List[str]] = None, max_lifetime: Optional[float] = None,
                 request_timeout: float = DEFAULT_TIMEOUT, envs: Optional[Dict[str, str]] = None,
                 timeout: Optional[float] = None, metadata: Optional[Dict[str, str]] = None,
                 template: Optional[str] = None, api_key: Optional[str] = None, domain: Optional[str] = None,
                 hibernate_on_idle: Optional[bool] = None, lifecycle: Optional[Mapping[str, Any]] = None,
                 _connect: Optional[str] = None) -> None:
        # E2B's spelling: timeout is the seconds the sandbox lives unused
        # (set_timeout renews it); template, api_key and domain name E2B's
        # cloud and have no meaning here (a template is a policy).
        if timeout is not None and ttl is not None:
            raise BadRequestError(0, "bad_request", "give ttl or timeout (E2B's name for it), not both")
        if template is not None:
            raise BadRequestError(0, "bad_request", "template = %r: jailcell has no templates; name a configured "
                                                    "policy with policy=" % (template,))
        ttl = timeout if ttl is None else ttl
        hibernate = hibernate_field(hibernate_on_idle, lifecycle)
        self.metadata: Dict[str, str] = dict(metadata or {})
        if transport is not None and (socket is not None or command is not None):
            raise BadRequestError(0, "bad_request", "give transport, or socket or command; not both")
        if transport is None:
            transport, self._owns_transport = transport_for(socket, command, request_timeout)
        else:
            self._owns_transport = False
        self.transport = transport
        self._lock = threading.Lock()
        self._closed = False
        try:
            if _connect is not None:
                self.info: Dict[str, Any] = transport.call("info", {"session": _connect})
            else:
                self.info = transport.call("create", {
                    "ttl_s": ttl, "policy": policy, "limits": limits, "persist": persist,
                    "requirements": requirements, "max_lifetime_s": max_lifetime, "envs": _check_envs(envs),
                    "hibernate_on_idle": hibernate})
                ignored = check_created(hibernate, self.info)
                if ignored is not None:
                    try:
                        transport.call("close", {"session": self.info.get("session")})
                    except JailcellError:
                        pass  # the create's refusal says more than the close's
                    raise ignored
        except BaseException:
            if self._owns_transport:
                transport.close()
            raise
        self.files = Files(self)
        self.commands = Commands(self)
        self.pty = Pty(self.commands)

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> "Sandbox":
        """The same as Sandbox(...), E2B's spelling."""
        return cls(*args, **kwargs)

    @classmethod
    def connect(cls, sandbox_id: str, socket: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
                transport: Optional[Transport] = None, request_timeout: float = DEFAULT_TIMEOUT,
                **ignored: Any) -> "Sandbox":
        """Attach to a live session by its id (E2B's Sandbox.connect): the
        same variables and files. NotFoundError if it ended or is another
        user's. Over `jailcell json` only the same process's sessions can
        be reached (command= starts a new one, with none)."""
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise BadRequestError(0, "bad_request", "sandbox_id must be a session id")
        bad = set(ignored) - {"api_key", "domain", "timeout", "debug"}
        if bad:
            raise BadRequestError(0, "bad_request", "connect does not take %s" % ", ".join(sorted(bad)))
        sbx = cls(socket, command=command, transport=transport, request_timeout=request_timeout, _connect=sandbox_id)
        if ignored.get("timeout"):
            # As E2B's connect: a timeout only ever moves the end later.
            end = SandboxInfo.from_info(sbx.info, None).end_at
            if end is None or end.timestamp() < time.time() + float(ignored["timeout"]):
                sbx.set_timeout(float(ignored["timeout"]))
        return sbx

    def get_info(self) -> SandboxInfo:
        """The session as it is now: state, started_at, end_at (when it ends
        unless used), policy (E2B's get_info)."""
        self.info = self._call("info", {})
        return SandboxInfo.from_info(self.info, self.metadata)

    def set_timeout(self, timeout: float) -> None:
        """End the session timeout seconds from now unless it is used again
        (E2B's set_timeout; every request renews it too). Past the server's
        max_idle_ttl or the session's lifetime: BadRequestError saying the
        limit."""
        self.info = self._call("set_timeout", {"timeout_s": float(timeout)})

    def get_metrics(self, start: Any = None, end: Any = None) -> List[SandboxMetrics]:
        """The session's usage now, one sample in a list (E2B keeps a
        history every 5 s; jailcell reads the cgroup when asked, so start
        and end are accepted and ignored)."""
        return [SandboxMetrics.from_wire(self._call("metrics", {}).get("metrics") or {})]

    @property
    def sandbox_id(self) -> str:
        """The session's id."""
        return str(self.info["session"])

    id = sandbox_id

    def __repr__(self) -> str:
        return "Sandbox(%s via %r)" % (self.info.get("session"), self.transport)

    def _call(self, op: str, fields: Dict[str, Any], on_event: Optional[Callable[[Dict[str, Any]], None]] = None
              ) -> Dict[str, Any]:
        fields = dict(fields)
        fields["session"] = self.sandbox_id
        return self.transport.call(op, fields, on_event)

    def run_code(self, code: str, on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None, on_result: Optional[ResultHandler] = None,
                 timeout: Optional[float] = None, *, files: Optional[Dict[str, Data]] = None,
                 fix_attempts: Optional[int] = None, force: bool = False, snapshot: bool = False,
                 raw_ansi: bool = False, envs: Optional[Dict[str, str]] = None, language: Optional[str] = None,
                 on_error: Optional[Callable[[ExecutionError], Any]] = None,
                 request_timeout: Optional[float] = None) -> Execution:
        """Run a cell in this sandbox's kernel; variables persist between
        calls. on_stdout/on_stderr get output as it is printed, on_result
        each figure or display() as it is shown and the last expression's
        value last. timeout: the cell's limit in seconds (default: the
        policy's). files: {path: data} placed first. fix_attempts: run up to
        this many times, asking the configured fixer for new code after an
        error (docs/workflow.md); force: run even if failure memory would
        skip it; snapshot: save the session first, the target of rollback();
        raw_ansi: keep the output as written (by default ANSI escape
        sequences are removed and "\r\n" comes as "\n").
        request_timeout: seconds the call may take (default: the
        transport's bound, or timeout + 60 s if that is more).

        An exception in the cell is Execution.error, not raised; errors of
        jailcell itself (busy, not_found, ...) raise JailcellError. envs
        are set for this cell only; language may be "python" (the only one);
        on_error gets the cell's exception, as E2B's."""
        if language not in (None, "python", "py", "python3"):
            raise BadRequestError(0, "bad_request", "language = %r: jailcell runs Python only" % (language,))
        c = _Collector(on_stdout, on_stderr, on_result)
        fields = _exec_fields(code, self.sandbox_id, timeout, files, fix_attempts, force, snapshot, None,
                              raw_ansi=raw_ansi, envs=envs)
        ex = c.finish(call_with_timeout(self.transport, "exec", fields, c.event,
                                        exec_timeout(self.transport, timeout, request_timeout)))
        if on_error is not None and ex.error is not None:
            on_error(ex.error)
        return ex

    def kill(self) -> bool:
        """End the session now (a running cell is killed with it). True if
        it was live, False if it had already ended (closed or expired)."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        try:
            self._call("close", {})
            return True
        except NotFoundError:
            return False
        finally:
            if self._owns_transport:
                self.transport.close()

    close = kill

    def is_running(self) -> bool:
        """Whether the session is still live."""
        if self._closed:
            return False
        return any(s.get("session") == self.sandbox_id for s in self.transport.call("sessions", {}).get("sessions") or [])

    def interrupt(self) -> bool:
        """Send the running cell a KeyboardInterrupt, as Jupyter's
        interrupt: its run_code returns with error KeyboardInterrupt and
        the kernel's variables kept. True if a cell was running."""
        return bool(self._call("interrupt", {}).get("interrupted"))

    # Session operations jailcell adds (docs/hibernate.md).

    def snapshot(self) -> Dict[str, Any]:
        """Save the kernel and files as the rollback target."""
        self.info = self._call("snapshot", {})
        return self.info

    def rollback(self) -> Dict[str, Any]:
        """Return to the snapshot, in place."""
        self.info = self._call("rollback", {})
        return self.info

    def hibernate(self) -> Dict[str, Any]:
        self.info = self._call("hibernate", {})
        return self.info

    def restore(self) -> Dict[str, Any]:
        self.info = self._call("restore", {})
        return self.info

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    @staticmethod
    def run_once(code: str, *, socket: Optional[str] = None, command: Optional[Sequence[str]] = None,
                 transport: Optional[Transport] = None, timeout: Optional[float] = None,
                 files: Optional[Dict[str, Data]] = None, policy: Optional[str] = None,
                 fix_attempts: Optional[int] = None, on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None, on_result: Optional[ResultHandler] = None,
                 request_timeout: Optional[float] = None) -> Execution:
        """One cell in a fresh sandbox that ends with it; the files it made
        come back in Execution.files with their data. request_timeout as
        run_code's."""
        own = transport is None
        if transport is None:
            transport, _ = transport_for(socket, command, DEFAULT_TIMEOUT)
        try:
            c = _Collector(on_stdout, on_stderr, on_result)
            fields = _exec_fields(code, None, timeout, files, fix_attempts, False, False, policy)
            return c.finish(call_with_timeout(transport, "exec", fields, c.event,
                                              exec_timeout(transport, timeout, request_timeout)))
        finally:
            if own:
                transport.close()
