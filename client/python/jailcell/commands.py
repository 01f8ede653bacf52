"""sandbox.commands and sandbox.pty: shell commands run inside a session's
sandbox, their results and handles, their stdin and terminals. Names and
fields follow E2B's SDK (CommandResult, CommandHandle, CommandExitException,
send_stdin, close_stdin, PtySize, pty.create/send_stdin/resize/kill), so
code written for it keeps working; the client's README lists what
differs."""

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Protocol, Union

from .errors import BadRequestError, JailcellError, NotFoundError

__all__ = ["CommandResult", "CommandExitException", "CommandHandle", "Commands", "PtySize", "Pty"]


class _Caller(Protocol):
    """What commands and watches need of their sandbox: one request of the
    session (Sandbox._call). A protocol, so that this module need not import
    the sandbox that imports it."""

    def _call(self, op: str, fields: Dict[str, Any],
              on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]: ...


OutputHandler = Callable[[str], Any]
PtyHandler = Callable[[bytes], Any]

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


@dataclass
class PtySize:
    """A terminal's size in character cells, each 1 to 1000 (E2B's PtySize)."""

    rows: int
    cols: int


def _pty_size(size: PtySize) -> Dict[str, int]:
    rows, cols = getattr(size, "rows", None), getattr(size, "cols", None)
    if not isinstance(rows, int) or not isinstance(cols, int) or isinstance(rows, bool) or isinstance(cols, bool):
        raise BadRequestError(0, "bad_request", "size must be a PtySize(rows, cols): whole numbers, each 1 to 1000")
    return {"rows": rows, "cols": cols}


def _stdin_text(data: Union[str, bytes]) -> str:
    """data as the wire carries it: text."""
    if isinstance(data, str):
        return data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadRequestError(0, "bad_request", "stdin data must be str or bytes, got %s" % type(data).__name__)
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        # Replacing the bytes would send the command something it was not given.
        raise BadRequestError(0, "bad_request", "stdin data is not UTF-8: jailcell carries a command's input as text") from None


def _pty_start(cmd: str, size: PtySize, envs: Optional[Dict[str, str]], user: Optional[str], cwd: Optional[str],
               timeout: Optional[float]) -> Dict[str, Any]:
    """The fields that start cmd in a terminal, in the background."""
    if user not in (None, "root", "user"):
        raise BadRequestError(0, "bad_request", "user = %r: commands run as the sandbox's root" % (user,))
    fields: Dict[str, Any] = {"cmd": cmd, "envs": _check_envs(envs), "cwd": cwd, "pty": _pty_size(size),
                              "background": True}
    if timeout:
        fields["timeout_s"] = float(timeout)
    return fields


# E2B's terminal: an interactive login bash (TERM is xterm-256color unless
# envs set it).
PTY_COMMAND = "bash -i -l"


def _check_envs(envs: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    if envs is None:
        return None
    if not isinstance(envs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
        raise BadRequestError(0, "bad_request", "envs must be a dict of str to str")
    return dict(envs)


class CommandHandle:
    """A command started with background=True (E2B's CommandHandle):
    wait() for its result, kill() it, send_stdin() and close_stdin() if it
    was started with stdin=True, resize() its terminal if it has one
    (sandbox.pty). It runs inside the sandbox between requests; while
    wait() waits, the session is busy: a cell, send_stdin or resize then
    is refused (BusyError), so send the input, then wait."""

    def __init__(self, sandbox: "_Caller", job: str, pid: int, timeout: Optional[float],
                 on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler],
                 terminal: bool = False) -> None:
        self._sbx, self._job, self.pid = sandbox, job, pid
        self._timeout = timeout
        self._on_stdout, self._on_stderr = on_stdout, on_stderr
        self._terminal = terminal
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

    def wait(self, on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None,
             on_pty: Optional[PtyHandler] = None) -> CommandResult:
        """Wait for the command to end and return its result; raise
        CommandExitException if its exit code is not 0. Output not yet
        delivered reaches on_stdout/on_stderr (or those given to run); a
        terminal's, all of it stdout, reaches on_pty as UTF-8 bytes if
        given (E2B's on_pty)."""
        if on_pty is not None and self._terminal:
            pty_cb = on_pty

            def on_stdout(text: str) -> None:
                pty_cb(text.encode("utf-8"))
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

    def _tell(self, fields: Dict[str, Any]) -> None:
        fields["job"] = self._job
        self._sbx._call("command", fields)

    def send_stdin(self, data: Union[str, bytes], request_timeout: Optional[float] = None) -> None:
        """Write data (str, or bytes that are UTF-8) to the command's stdin
        (E2B's send_stdin). BadRequestError if it was started without
        stdin (or a terminal) or has ended; LimitError past 1 MiB a call,
        or while it has 1 MiB of input it has not read. request_timeout is
        accepted for E2B's signature (the transport's bound applies)."""
        self._tell({"action": "input", "input": _stdin_text(data)})

    def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        """Close the command's stdin, an end of file to it (E2B's
        close_stdin). A terminal refuses it: send b"\x04" (Ctrl-D)."""
        self._tell({"action": "input", "input": "", "eof": True})

    def resize(self, size: PtySize) -> None:
        """Resize the command's terminal (one started by sandbox.pty)."""
        self._tell({"action": "resize", "pty": _pty_size(size)})


class Commands:
    """sandbox.commands: shell commands run inside the session's sandbox
    (bash -c, as a child of its kernel, cwd under /work)."""

    def __init__(self, sandbox: "_Caller") -> None:
        self._sbx = sandbox
        self._handles: Dict[int, CommandHandle] = {}

    def run(self, cmd: str, background: bool = False, envs: Optional[Dict[str, str]] = None,
            user: Optional[str] = None, cwd: Optional[str] = None, on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, stdin: Optional[bool] = None,
            timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT, request_timeout: Optional[float] = None) -> Any:
        """Run cmd. In the foreground, return its CommandResult once it
        ends, raising CommandExitException for an exit code other than 0;
        output reaches on_stdout/on_stderr as it is written. With
        background=True, return a CommandHandle at once; with stdin=True
        too, its stdin stays open for send_stdin and close_stdin (else it
        is /dev/null; a foreground command cannot take input). timeout:
        seconds (0 or None: the policy's cell timeout in the foreground,
        none in the background). user is accepted for E2B's signature:
        every command runs as the sandbox's root, like the cells."""
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
            return self._start(fields, timeout, on_stdout, on_stderr)
        c = self._sbx._call("command", fields, _events(on_stdout, on_stderr)).get("command") or {}
        res = _result(c)
        if res.exit_code != 0:
            raise CommandExitException(res)
        return res

    def _start(self, fields: Dict[str, Any], timeout: Optional[float], on_stdout: Optional[OutputHandler],
               on_stderr: Optional[OutputHandler]) -> CommandHandle:
        """Start a background command; its handle is known by pid to kill,
        connect, send_stdin and sandbox.pty."""
        c = self._sbx._call("command", fields).get("command") or {}
        h = CommandHandle(self._sbx, str(c.get("job", "")), int(c.get("pid", 0)), timeout, on_stdout, on_stderr,
                          terminal="pty" in fields)
        if c.get("done"):
            h._result = _result(c)
        self._handles[h.pid] = h
        return h

    def kill(self, pid: int) -> bool:
        """Kill a background command started through this object, by pid."""
        h = self._handles.get(pid)
        return h.kill() if h is not None else False

    def send_stdin(self, pid: int, data: Union[str, bytes], request_timeout: Optional[float] = None) -> None:
        """Write to the stdin of a background command started through this
        object with stdin=True (CommandHandle.send_stdin)."""
        self.connect(pid).send_stdin(data)

    def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        """Close the stdin of a background command started through this
        object (CommandHandle.close_stdin)."""
        self.connect(pid).close_stdin()

    def connect(self, pid: int) -> CommandHandle:
        """The handle of a background command started through this object."""
        h = self._handles.get(pid)
        if h is None:
            raise NotFoundError(0, "not_found", "no background command with pid %d started through this sandbox" % pid)
        return h


class Pty:
    """sandbox.pty (E2B's): an interactive bash in a new terminal, a
    background command whose handle is a CommandHandle. Its output reaches
    wait(on_pty=...) while wait() waits; input and resizes are requests of
    their own, refused (BusyError) while a wait() of the sandbox waits."""

    def __init__(self, commands: Commands) -> None:
        self._commands = commands

    def create(self, size: PtySize, user: Optional[str] = None, cwd: Optional[str] = None,
               envs: Optional[Dict[str, str]] = None, timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
               request_timeout: Optional[float] = None) -> CommandHandle:
        """Start bash -i -l in a terminal of size; timeout as commands.run's
        (seconds, 0 or None: none)."""
        return self._commands._start(_pty_start(PTY_COMMAND, size, envs, user, cwd, timeout), timeout, None, None)

    def send_stdin(self, pid: int, data: bytes, request_timeout: Optional[float] = None) -> None:
        """Type into the terminal: UTF-8 bytes (b"\x03" is Ctrl-C, b"\x04" Ctrl-D)."""
        self._commands.send_stdin(pid, data)

    def resize(self, pid: int, size: PtySize, request_timeout: Optional[float] = None) -> None:
        """Resize the terminal."""
        self._commands.connect(pid).resize(size)

    def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """SIGKILL the terminal's processes; False if none is known or it had ended."""
        return self._commands.kill(pid)
