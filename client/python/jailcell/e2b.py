"""The parts of E2B's SDK surface that are not cells: sandbox.commands,
command results and handles, sandbox info and metrics, filesystem watch
events. Names and fields follow E2B's (e2b / e2b_code_interpreter), so code
written for it keeps working after `from jailcell import Sandbox`; the
client's README lists what differs."""

import datetime
import enum
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from .errors import BadRequestError, JailcellError, NotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = [
    "CommandResult", "CommandExitException", "CommandHandle", "Commands", "SandboxInfo", "SandboxMetrics",
    "FilesystemEvent", "FilesystemEventType", "WatchHandle",
]

OutputHandler = Callable[[str], Any]

# E2B's default limit of a command, in seconds.
DEFAULT_COMMAND_TIMEOUT = 60.0


@dataclass
class CommandResult:
    """What a finished command did (E2B's CommandResult)."""

    stdout: str
    stderr: str
    exit_code: int
    error: Optional[str] = None
    # jailcell's own: the command ran out of time (interrupted, then killed),
    # and whether each stream was cut at the policy's output limit.
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False


class CommandExitException(JailcellError):
    """A command exited with a code other than 0 (E2B's
    CommandExitException): it carries the command's result."""

    code = "command_exit"

    def __init__(self, result: CommandResult) -> None:
        why = "timed out" if result.timed_out else "exited with code %d" % result.exit_code
        super().__init__(0, "command_exit", "command %s: %s" % (why, result.stderr[-500:]))
        self.result = result
        self.stdout, self.stderr, self.exit_code, self.error = result.stdout, result.stderr, result.exit_code, result.error


def _result(c: Dict[str, Any]) -> CommandResult:
    code = int(c.get("exit_code", 0))
    timed_out = bool(c.get("timed_out"))
    err = None
    if timed_out:
        err = "command timed out; it was interrupted, then killed"
    elif code < 0:
        err = "command killed by signal %d" % -code
    return CommandResult(stdout=str(c.get("stdout", "")), stderr=str(c.get("stderr", "")), exit_code=code, error=err,
                         timed_out=timed_out, stdout_truncated=bool(c.get("stdout_truncated")),
                         stderr_truncated=bool(c.get("stderr_truncated")))


def _events(on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler]) -> Optional[Callable[[Dict[str, Any]], None]]:
    if on_stdout is None and on_stderr is None:
        return None

    def on_event(ev: Dict[str, Any]) -> None:
        text = ev.get("text")
        if not isinstance(text, str):
            return
        if ev.get("event") == "stdout" and on_stdout is not None:
            on_stdout(text)
        elif ev.get("event") == "stderr" and on_stderr is not None:
            on_stderr(text)
    return on_event


def _check_envs(envs: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    if envs is None:
        return None
    if not isinstance(envs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
        raise BadRequestError(0, "bad_request", "envs must be a dict of str to str")
    return dict(envs)


class CommandHandle:
    """A command started with background=True (E2B's CommandHandle):
    wait() for its result, kill() it. It runs inside the sandbox between
    requests; while wait() waits, the session is busy (a cell then is
    refused: BusyError)."""

    def __init__(self, sandbox: "Sandbox", job: str, pid: int, timeout: Optional[float],
                 on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler]) -> None:
        self._sbx, self._job, self.pid = sandbox, job, pid
        self._timeout = timeout
        self._on_stdout, self._on_stderr = on_stdout, on_stderr
        self._result: Optional[CommandResult] = None
        self._streamed = False  # a wait streamed its output to the callbacks
        self._lock = threading.Lock()

    @property
    def job(self) -> str:
        """The job's name in the sandbox."""
        return self._job

    @property
    def exit_code(self) -> Optional[int]:
        return self._result.exit_code if self._result is not None else None

    @property
    def stdout(self) -> str:
        return self._result.stdout if self._result is not None else ""

    @property
    def stderr(self) -> str:
        return self._result.stderr if self._result is not None else ""

    def _ask(self, action: str, wait: Optional[float], stream: bool) -> Dict[str, Any]:
        fields: Dict[str, Any] = {"action": action, "job": self._job}
        if wait is not None:
            fields["timeout_s"] = wait
        on_event = _events(self._on_stdout, self._on_stderr) if stream else None
        return self._sbx._call("command", fields, on_event).get("command") or {}

    def wait(self, on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None) -> CommandResult:
        """Wait for the command to end and return its result; raise
        CommandExitException if its exit code is not 0. Output not yet
        delivered reaches on_stdout/on_stderr (or those given to run)."""
        if on_stdout is not None:
            self._on_stdout = on_stdout
        if on_stderr is not None:
            self._on_stderr = on_stderr
        with self._lock:
            while self._result is None:
                self._streamed = True
                c = self._ask("wait", None, True)
                if c.get("done"):
                    self._result = _result(c)
            if not self._streamed:
                # It ended before anyone listened: its output in one piece.
                self._streamed = True
                if self._result.stdout and self._on_stdout is not None:
                    self._on_stdout(self._result.stdout)
                if self._result.stderr and self._on_stderr is not None:
                    self._on_stderr(self._result.stderr)
        if self._result.exit_code != 0:
            raise CommandExitException(self._result)
        return self._result

    def kill(self) -> bool:
        """SIGKILL the command and its children. True if it was running."""
        if self._result is not None:
            return False
        try:
            c = self._ask("kill", None, False)
        except NotFoundError:
            return False
        if c.get("done"):
            self._result = _result(c)
        return True

    def disconnect(self) -> None:
        """Stop listening; the command runs on (E2B's disconnect)."""
        self._on_stdout = self._on_stderr = None


class Commands:
    """sandbox.commands: shell commands run inside the session's sandbox
    (bash -c, as a child of its kernel, cwd under /work)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox
        self._handles: Dict[int, CommandHandle] = {}

    def run(self, cmd: str, background: bool = False, envs: Optional[Dict[str, str]] = None,
            user: Optional[str] = None, cwd: Optional[str] = None, on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
            request_timeout: Optional[float] = None) -> Any:
        """Run cmd. In the foreground, return its CommandResult once it
        ends, raising CommandExitException for an exit code other than 0;
        output reaches on_stdout/on_stderr as it is written. With
        background=True, return a CommandHandle at once. timeout: seconds
        (0 or None: the policy's cell timeout in the foreground, none in
        the background). user is accepted for E2B's signature: every
        command runs as the sandbox's root, like the cells."""
        if not isinstance(cmd, str) or not cmd:
            raise BadRequestError(0, "bad_request", "cmd must be a non-empty string: a bash command line")
        if user not in (None, "root", "user"):
            raise BadRequestError(0, "bad_request", "user = %r: commands run as the sandbox's root" % (user,))
        fields: Dict[str, Any] = {"cmd": cmd, "envs": _check_envs(envs), "cwd": cwd}
        if timeout:
            fields["timeout_s"] = float(timeout)
        if background:
            fields["background"] = True
            c = self._sbx._call("command", fields).get("command") or {}
            h = CommandHandle(self._sbx, str(c.get("job", "")), int(c.get("pid", 0)), timeout, on_stdout, on_stderr)
            if c.get("done"):
                h._result = _result(c)
            self._handles[h.pid] = h
            return h
        c = self._sbx._call("command", fields, _events(on_stdout, on_stderr)).get("command") or {}
        res = _result(c)
        if res.exit_code != 0:
            raise CommandExitException(res)
        return res

    def kill(self, pid: int) -> bool:
        """Kill a background command started through this object, by pid."""
        h = self._handles.get(pid)
        return h.kill() if h is not None else False

    def connect(self, pid: int) -> CommandHandle:
        """The handle of a background command started through this object."""
        h = self._handles.get(pid)
        if h is None:
            raise NotFoundError(0, "not_found", "no background command with pid %d started through this sandbox" % pid)
        return h


def _time(v: Any) -> Optional[datetime.datetime]:
    if not isinstance(v, str) or not v:
        return None
    s = v.replace("Z", "+00:00")
    # Python 3.10's fromisoformat takes at most 6 fractional digits.
    if "." in s:
        head, _, tail = s.partition(".")
        digits = "".join(ch for ch in tail if ch.isdigit())
        rest = tail[len(digits):]
        s = head + "." + digits[:6].ljust(6, "0") + rest
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        return None


@dataclass
class SandboxInfo:
    """A sandbox as it is now (E2B's SandboxInfo). state is E2B's
    "running" or "paused" (hibernated); jailcell_state is the session's own
    (ready, busy, starting, hibernated)."""

    sandbox_id: str
    started_at: Optional[datetime.datetime]
    end_at: Optional[datetime.datetime]
    state: str
    jailcell_state: str
    policy: str
    cells: int
    metadata: Dict[str, str] = field(default_factory=dict)
    template_id: Optional[str] = None
    name: Optional[str] = None

    @classmethod
    def from_info(cls, info: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> "SandboxInfo":
        st = str(info.get("state", ""))
        return cls(sandbox_id=str(info.get("session", "")), started_at=_time(info.get("created_at")),
                   end_at=_time(info.get("expires_at")), state="paused" if st == "hibernated" else "running",
                   jailcell_state=st, policy=str(info.get("policy", "")), cells=int(info.get("cells", 0)),
                   metadata=dict(metadata or {}), template_id=str(info.get("policy", "")) or None)


@dataclass
class SandboxMetrics:
    """One sample of a sandbox's usage (E2B's SandboxMetrics), read by the
    host from the session's cgroup and disk."""

    timestamp: Optional[datetime.datetime]
    cpu_used_pct: float
    cpu_count: float
    mem_used: int
    mem_total: int
    disk_used: int
    disk_total: int
    cpu_seconds: float = 0.0
    mem_peak: int = 0
    running: bool = True

    @classmethod
    def from_wire(cls, m: Dict[str, Any]) -> "SandboxMetrics":
        return cls(timestamp=_time(m.get("timestamp")), cpu_used_pct=float(m.get("cpu_used_pct", 0)),
                   cpu_count=float(m.get("cpu_count", 0)), mem_used=int(m.get("mem_used", 0)),
                   mem_total=int(m.get("mem_total", 0)), disk_used=int(m.get("disk_used", 0)),
                   disk_total=int(m.get("disk_total", 0)), cpu_seconds=float(m.get("cpu_seconds", 0)),
                   mem_peak=int(m.get("mem_peak", 0)), running=bool(m.get("running")))


class FilesystemEventType(str, enum.Enum):
    """E2B's event types; jailcell does not report chmod."""

    CHMOD = "chmod"
    CREATE = "create"
    REMOVE = "remove"
    RENAME = "rename"
    WRITE = "write"


@dataclass
class FilesystemEvent:
    """One change in a watched directory. name is relative to it, as the
    sandbox wrote it: untrusted text."""

    name: str
    type: FilesystemEventType


def _fs_events(resp: Dict[str, Any]) -> List[FilesystemEvent]:
    out = []
    for e in resp.get("events") or []:
        if not isinstance(e, dict):
            continue
        try:
            t = FilesystemEventType(e.get("type"))
        except ValueError:
            continue  # a newer server's kind
        out.append(FilesystemEvent(name=str(e.get("name", "")), type=t))
    return out


class WatchHandle:
    """A directory watch (E2B's WatchHandle): get_new_events() answers the
    changes since the last call; stop() ends it. The server polls the
    workspace for it: at most 8 per sandbox, 1000 events per call
    (overflowed says when more happened), calls closer than 100 ms answer
    nothing new."""

    def __init__(self, sandbox: "Sandbox", watch: str) -> None:
        self._sbx, self._watch = sandbox, watch
        self._stopped = False
        self.overflowed = False

    def get_new_events(self) -> List[FilesystemEvent]:
        if self._stopped:
            raise BadRequestError(0, "bad_request", "the watch was stopped")
        resp = self._sbx._call("watch", {"action": "poll", "watch": self._watch})
        self.overflowed = self.overflowed or bool(resp.get("overflow"))
        return _fs_events(resp)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._sbx._call("watch", {"action": "stop", "watch": self._watch})
        except NotFoundError:
            pass  # the session (and its watches) already ended

    close = stop

