"""Commands and environment (the "command" and "env" frames)."""

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
import time

from .capture import DEFAULT_MAX_OUTPUT, _Pump
from .errors import _safe_str
from .state import _State


# ---------------------------------------------------------------------------
# Commands and environment (the "command" and "env" frames)
#
# {"t":"command","id":..,"action":"start","cmd":..,"envs":{..},"cwd":..,
#  "max_output":N,"wait_s":S,"timeout_s":T,"grace_s":G,"stream":bool}
# runs cmd with bash -c as a child of this kernel, in its own process group;
# {"action":"wait","job":..,"wait_s":S,"stream":bool} waits for a job,
# {"action":"kill","job":..} SIGKILLs its group. A start with "stdin": true
# keeps the job's stdin a pipe, one with "pty": {"rows":R,"cols":C} runs it
# in a new terminal (its stdin, stdout and stderr; the output comes as
# stdout); {"action":"input","job":..,"input":TEXT,"eof":bool} queues TEXT
# for its stdin (eof: then close it, a pipe only) and {"action":"resize",
# "job":..,"pty":{..}} sizes its terminal. Each is answered with one
# {"t":"command","id":..,"job":..,"done":..,"exit_code":..,"stdout":..,...},
# after "stream" frames with the same id while the host waits with stream.
# {"t":"env","id":..,"set":{..},"unset":[..]} edits os.environ (what cells
# and later commands inherit) and is answered {"t":"env","id":..}.
#
# A command runs inside this sandbox with the kernel's own isolation; the
# host validates every field, and bounds again what it reads back.

COMMAND_JOBS = 16  # jobs kept per kernel, finished ones dropped first
COMMAND_READ = 64 << 10
# The most a wait for a command's end waits for its readers to take what
# is left in its pipes (see _Job.wait).
DRAIN_BOUND = 5.0
COMMAND_ACTIONS = ("start", "wait", "kill", "input", "resize")
# Input a job has not read yet, at most: a command that never reads its
# stdin must not grow the kernel's memory without bound.
COMMAND_INPUT_PENDING = 1 << 20
SETSID = "/usr/bin/setsid"


class _CommandRequest:
    __slots__ = ("t", "id", "action", "cmd", "envs", "unset", "cwd", "limit", "wait", "timeout", "grace", "stream", "job", "gen", "stdin", "pty", "input", "eof")

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
        req.stdin = msg.get("stdin") is True
        req.eof = msg.get("eof") is True
        data = msg.get("input")
        req.input = data if isinstance(data, str) else ""
        req.pty = None
        pty = msg.get("pty")
        if isinstance(pty, dict):
            rows, cols = pty.get("rows"), pty.get("cols")
            if all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 for v in (rows, cols)):
                req.pty = (rows, cols)
        return req


def _unread(fd):
    """Bytes waiting in pipe fd (0 once it is closed, or for a terminal
    whose count cannot be read)."""
    try:
        buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return struct.unpack("i", buf)[0]


class _Job:
    """One command: its process, what it wrote (up to limit bytes a stream)
    and who listens for more."""

    def __init__(self, name, proc, limit, link, stdin=None, pty=None):
        self.name, self.proc, self.limit, self.link = name, proc, limit, link
        # stdin: the descriptor input is written to (the pipe's, or a copy
        # of the terminal's master), owned by the writer thread; None: the
        # job reads /dev/null. pty: the terminal's master, for resizes,
        # used and closed under input_cv.
        self.stdin_fd, self.pty = stdin, pty
        self.had_stdin, self.terminal = stdin is not None, pty is not None
        self.pending = []  # input not yet written, in order
        self.pending_bytes = 0
        self.eof = False  # close stdin once pending is written
        self.writing = False  # the writer is in os.write on stdin_fd
        self.deferred_close = None  # stdin_fd, closed by the writer after its write
        self.input_cv = threading.Condition(threading.Lock())
        self.out = [bytearray(), bytearray()]
        self.cut = [False, False]
        self.sent = [0, 0]  # bytes already streamed to a host
        self.listener = None  # the request id a waiting host streams under
        self.timed_out = False
        self.lock = threading.Lock()
        self.readers = []
        self.timer = None
        # Set once the process is reaped: a wait returns at its exit, not
        # at the next step of Popen.wait's sleep-and-poll (up to 50 ms).
        self.exited = threading.Event()
        pipes = (proc.stdout, proc.stderr) if pty is None else (os.fdopen(os.dup(pty), "rb", buffering=0),)
        self.read_fds = [p.fileno() for p in pipes]
        for i, pipe in enumerate(pipes):
            th = threading.Thread(target=self._read, args=(i, pipe), name="jailcell-cmd", daemon=True)
            th.start()
            self.readers.append(th)
        if stdin is not None:
            # Writes block while the job does not read: on a thread of
            # their own, never on the kernel's, which answers every frame.
            threading.Thread(target=self._write, name="jailcell-cmd-in", daemon=True).start()

    def _write(self):
        while True:
            with self.input_cv:
                while not self.pending and not self.eof and self.stdin_fd is not None:
                    self.input_cv.wait()
                if self.stdin_fd is None:
                    return
                if not self.pending:  # eof with everything written
                    self._close_stdin_locked()
                    return
                chunk, fd = self.pending.pop(0), self.stdin_fd
                self.writing = True
            failed = False
            try:
                while chunk:
                    chunk = chunk[os.write(fd, chunk):]
            except OSError:
                # The job closed its end or ended: what it did not read is
                # dropped, as a pipe drops it.
                failed = True
            with self.input_cv:
                self.writing = False
                if failed:
                    self.pending = []
                    self._close_stdin_locked()
                self.pending_bytes = sum(len(c) for c in self.pending)
                if self.deferred_close is not None:
                    # Closed while this thread wrote through it: only now,
                    # or the number could name another file by then and
                    # the rest of the input would go there.
                    os.close(self.deferred_close)
                    self.deferred_close = None
                    return

    def _close_stdin_locked(self):
        fd, self.stdin_fd = self.stdin_fd, None
        if fd is not None:
            if self.writing:
                self.deferred_close = fd
            else:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.input_cv.notify_all()

    def send_input(self, data, eof):
        """Queue data for the job's stdin; None, or why it was refused."""
        b = data.encode("utf-8", "surrogatepass")
        with self.input_cv:
            if not self.had_stdin:
                return "%s was started without stdin: start it with stdin (or a pty) to write to it" % self.name
            if self.eof:
                return "%s: its stdin was closed (eof)" % self.name
            if eof and self.terminal:
                return "%s runs in a terminal, which has no end of input: send Ctrl-D (\\u0004) instead of eof" % self.name
            if self.proc.poll() is not None:
                return "%s has ended: its stdin is closed" % self.name
            if self.stdin_fd is None:
                return "%s closed its stdin" % self.name
            if self.pending_bytes + len(b) > COMMAND_INPUT_PENDING:
                return "stdin is full: %s has %d bytes of input it has not read, at most %d" % (self.name, self.pending_bytes, COMMAND_INPUT_PENDING)
            if b:
                self.pending.append(b)
                self.pending_bytes += len(b)
            self.eof = eof
            self.input_cv.notify_all()
        return None

    def release(self):
        """Close the job's stdin and terminal: it ended, or is forgotten."""
        with self.input_cv:
            self.pending, self.pending_bytes = [], 0
            self._close_stdin_locked()
            master, self.pty = self.pty, None
        if master is not None:
            try:
                os.close(master)
            except OSError:
                pass

    def resize(self, rows, cols):
        with self.input_cv:
            if self.pty is None:
                if self.proc.poll() is not None:
                    return "%s has ended: no terminal to resize" % self.name
                if not self.terminal:
                    return "%s has no terminal to resize: start it with pty" % self.name
                return "%s: its terminal was closed" % self.name
            try:
                fcntl.ioctl(self.pty, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            except OSError as exc:
                return "resize %s: %s" % (self.name, _safe_str(exc))
        return None

    def _read(self, i, pipe):
        fd = pipe.fileno()
        while True:
            try:
                b = os.read(fd, COMMAND_READ)
            except OSError:
                b = b""
            if not b:
                pipe.close()
                if self.pty is not None:
                    # Every holder of the terminal is gone (EIO): its
                    # master goes too, and input with it.
                    self.release()
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
        if not self.exited.wait(seconds):
            return False
        bound = time.monotonic() + DRAIN_BOUND  # for the whole wait, not per reader
        for th, fd in zip(self.readers, self.read_fds):
            # The group's other processes may hold the pipes open: do not
            # wait for them past a moment, unless the pipe still holds
            # bytes the process wrote that the reader has not taken yet
            # (under load a reader waited longer than the moment for the
            # CPU, and a command's last line of stderr was lost), and never
            # past DRAIN_BOUND (a group that keeps writing).
            moment = time.monotonic() + 0.5
            while th.is_alive():
                th.join(0.05)
                now = time.monotonic()
                if now >= bound or (now >= moment and not _unread(fd)):
                    break
        return True

    def start_reaper(self, timeout, grace):
        """Reap the process on a thread of its own, ending it at timeout
        seconds (0: none), as stop does. With a pidfd the thread sleeps in
        poll(2) until the exit or the timeout, and is also the job's timer;
        without one (a kernel before 5.3) it blocks in waitpid and a Timer
        keeps the timeout."""
        try:
            fd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            fd = None
        if fd is None:
            threading.Thread(target=self._reap_blocking, name="jailcell-cmd-wait", daemon=True).start()
            if timeout > 0:
                self.timer = threading.Timer(timeout, self.expire, (grace,))
                self.timer.daemon = True
                self.timer.start()
            return
        threading.Thread(target=self._reap_pidfd, args=(fd, timeout, grace), name="jailcell-cmd-wait", daemon=True).start()

    def _reap_blocking(self):
        try:
            self.proc.wait()
        finally:
            self.exited.set()

    def _reap_pidfd(self, fd, timeout, grace):
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)

            def ended(seconds):
                while True:
                    try:
                        return bool(poller.poll(None if seconds is None else int(seconds * 1000)))
                    except InterruptedError:
                        continue

            if not ended(timeout if timeout > 0 else None):
                self.expire(grace, ended)
            self.proc.wait()
        finally:
            os.close(fd)
            self.exited.set()

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass
        if self.terminal:
            # setsid makes the group only once it runs: a signal sent
            # before that must reach the process itself.
            try:
                os.kill(self.proc.pid, sig)
            except OSError:
                pass

    def stop(self, grace, ended=None):
        """Interrupt, then kill the whole group after grace seconds.
        ended(seconds) waits for the exit: the job's wait, or, on the
        reaper's own thread, which sets the exit, its poll of the pidfd."""
        ended = ended or self.wait
        self.signal(signal.SIGINT)
        if not ended(grace):
            self.signal(signal.SIGKILL)
            ended(5)
        else:
            self.signal(signal.SIGKILL)  # leftovers of the group

    def expire(self, grace, ended=None):
        self.timed_out = True
        self.stop(grace, ended)

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
_START_DIR_SET = [False]  # the env frame's cwd was applied (once a kernel)


def _command(req, link):
    if req.t == "env":
        for k in req.unset:
            os.environ.pop(k, None)
        for k, v in req.envs.items():
            try:
                os.environ[k] = v
            except (ValueError, OSError):
                pass
        if isinstance(req.cwd, str) and not _START_DIR_SET[0]:
            # The session's start directory, set once in the kernel's life:
            # a kernel restored from an image (a resume, a fork, a
            # rollback) keeps the directory its cells chose since. PWD
            # with it, or shells would keep naming the old directory when
            # both are names of the same one.
            try:
                os.chdir(req.cwd)
                os.environ["PWD"] = req.cwd
            except (ValueError, OSError) as exc:
                return {"t": "env", "id": req.id, "error": "cwd %s: %s" % (_safe_str(req.cwd), _safe_str(exc))}
            _START_DIR_SET[0] = True
        return {"t": "env", "id": req.id}
    try:
        return _command_action(req, link)
    except BaseException as exc:  # the kernel must answer, whatever happened
        return {"t": "command", "id": req.id, "error": "%s: %s" % (type(exc).__name__, _safe_str(exc))}


def _start_in_terminal(req, env):
    """Start req's command in a new terminal of req.pty's size: its own
    session with the terminal as its controlling one (setsid --ctty), so
    that a shell's job control and ^C work as in a terminal."""
    if not os.access(SETSID, os.X_OK):
        raise OSError("%s is not in this sandbox's root: a terminal needs it" % SETSID)
    master, slave = os.openpty()
    try:
        rows, cols = req.pty
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        if "TERM" not in req.envs:
            env["TERM"] = "xterm-256color"
        # Not start_new_session: setsid must find itself no group's leader,
        # or it forks and the job's pid is of a process that has exited.
        proc = subprocess.Popen(
            [SETSID, "--ctty", "/bin/bash", "-c", req.cmd],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=req.cwd,
            env=env,
            close_fds=True,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return proc, master


def _command_action(req, link):
    if req.action == "start":
        if not isinstance(req.cmd, str) or not isinstance(req.cwd, str):
            return {"t": "command", "id": req.id, "error": "no command"}
        live = [n for n, j in _JOBS.items() if j.proc.poll() is None]
        if len(live) >= COMMAND_JOBS:
            return {"t": "command", "id": req.id, "error": "%d commands are running, at most %d" % (len(live), COMMAND_JOBS)}
        while len(_JOBS) >= COMMAND_JOBS:
            done = [n for n, j in _JOBS.items() if j.proc.poll() is not None]
            _JOBS.pop(done[0]).release()
        env = dict(os.environ)
        env.update(req.envs)
        # A shell's pwd trusts PWD when it names the directory it is in; the
        # workspace has two names, so a PWD inherited from the kernel could
        # name the other one.
        env["PWD"] = req.cwd
        if req.pty is not None:
            proc, master = _start_in_terminal(req, env)
            stdin = os.dup(master)
        else:
            master = None
            proc = subprocess.Popen(
                ["/bin/bash", "-c", req.cmd],
                stdin=subprocess.PIPE if req.stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=req.cwd,
                env=env,
                start_new_session=True,  # its own group: a kill reaches its children
                close_fds=True,
            )
            stdin = None
            if req.stdin:
                # Written unbuffered through the descriptor (_Job._write).
                stdin = os.dup(proc.stdin.fileno())
                proc.stdin.close()
        _JOB_SEQ[0] += 1
        job = _Job("job-%d" % _JOB_SEQ[0], proc, req.limit, link, stdin, master)
        _JOBS[job.name] = job
        job.start_reaper(req.timeout, req.grace)
    else:
        job = _JOBS.get(req.job) if isinstance(req.job, str) else None
        if job is None:
            return {"t": "command", "id": req.id, "error": "no job %r" % (req.job,)}
        if req.action == "kill":
            job.signal(signal.SIGKILL)
            job.wait(5)
        elif req.action == "input":
            why = job.send_input(req.input, req.eof)
            if why is not None:
                return {"t": "command", "id": req.id, "error": why}
        elif req.action == "resize":
            why = job.resize(*req.pty) if req.pty is not None else "resize needs pty rows and cols"
            if why is not None:
                return {"t": "command", "id": req.id, "error": why}
    if req.wait > 0:
        # While the host waits, its interrupt (SIGINT to the sandbox, which
        # PID 1 forwards here) goes to the command's group, not the kernel.
        # Set before the output is streamed: the host may interrupt as soon
        # as it sees some, and a SIGINT before this went to the kernel's
        # idle handler and was lost (TestCommandInterrupt, under load).
        def forward(signum, frame):
            _State.sigint_runs += 1
            job.signal(signal.SIGINT)

        prev = signal.signal(signal.SIGINT, forward)
        # The pump wakes this wait as it does a cell for a SIGINT left
        # pending (capture.KICK_SIGNAL): one is forwarded late otherwise.
        _State.runs_begun += 1
        _State.command_wait = True
        try:
            if req.stream:
                job.listen(req.id)
            job.wait(req.wait)
        finally:
            _State.command_wait = False
            signal.signal(signal.SIGINT, prev)
            if req.stream:
                job.unlisten()
    if job.proc.poll() is not None and job.timer is not None:
        job.timer.cancel()
    return job.report(req.id)
