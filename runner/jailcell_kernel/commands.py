"""Commands and environment (the "command" and "env" frames)."""

import os
import signal
import subprocess
import threading

from .capture import DEFAULT_MAX_OUTPUT, _Pump
from .errors import _safe_str


# ---------------------------------------------------------------------------
# Commands and environment (the "command" and "env" frames)
#
# {"t":"command","id":..,"action":"start","cmd":..,"envs":{..},"cwd":..,
#  "max_output":N,"wait_s":S,"timeout_s":T,"grace_s":G,"stream":bool}
# runs cmd with bash -c as a child of this kernel, in its own process group;
# {"action":"wait","job":..,"wait_s":S,"stream":bool} waits for a job,
# {"action":"kill","job":..} SIGKILLs its group. Each is answered with one
# {"t":"command","id":..,"job":..,"done":..,"exit_code":..,"stdout":..,...},
# after "stream" frames with the same id while the host waits with stream.
# {"t":"env","id":..,"set":{..},"unset":[..]} edits os.environ (what cells
# and later commands inherit) and is answered {"t":"env","id":..}.
#
# A command runs inside this sandbox with the kernel's own isolation; the
# host validates every field, and bounds again what it reads back.

COMMAND_JOBS = 16  # jobs kept per kernel, finished ones dropped first
COMMAND_READ = 64 << 10
COMMAND_ACTIONS = ("start", "wait", "kill")


class _CommandRequest:
    __slots__ = ("t", "id", "action", "cmd", "envs", "unset", "cwd", "limit", "wait", "timeout", "grace", "stream", "job", "gen")

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
        return req


class _Job:
    """One command: its process, what it wrote (up to limit bytes a stream)
    and who listens for more."""

    def __init__(self, name, proc, limit, link):
        self.name, self.proc, self.limit, self.link = name, proc, limit, link
        self.out = [bytearray(), bytearray()]
        self.cut = [False, False]
        self.sent = [0, 0]  # bytes already streamed to a host
        self.listener = None  # the request id a waiting host streams under
        self.timed_out = False
        self.lock = threading.Lock()
        self.readers = []
        self.timer = None
        for i, pipe in enumerate((proc.stdout, proc.stderr)):
            th = threading.Thread(target=self._read, args=(i, pipe), name="jailcell-cmd", daemon=True)
            th.start()
            self.readers.append(th)

    def _read(self, i, pipe):
        fd = pipe.fileno()
        while True:
            try:
                b = os.read(fd, COMMAND_READ)
            except OSError:
                b = b""
            if not b:
                pipe.close()
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
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        for th in self.readers:
            # The group's other processes may hold the pipes open: do not
            # wait for them past a moment.
            th.join(0.5)
        return True

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass

    def stop(self, grace):
        """Interrupt, then kill the whole group after grace seconds."""
        self.signal(signal.SIGINT)
        if not self.wait(grace):
            self.signal(signal.SIGKILL)
            self.wait(5)
        else:
            self.signal(signal.SIGKILL)  # leftovers of the group

    def expire(self, grace):
        self.timed_out = True
        self.stop(grace)

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


def _command_action(req, link):
    if req.action == "start":
        if not isinstance(req.cmd, str) or not isinstance(req.cwd, str):
            return {"t": "command", "id": req.id, "error": "no command"}
        live = [n for n, j in _JOBS.items() if j.proc.poll() is None]
        if len(live) >= COMMAND_JOBS:
            return {"t": "command", "id": req.id, "error": "%d commands are running, at most %d" % (len(live), COMMAND_JOBS)}
        while len(_JOBS) >= COMMAND_JOBS:
            done = [n for n, j in _JOBS.items() if j.proc.poll() is not None]
            del _JOBS[done[0]]
        env = dict(os.environ)
        env.update(req.envs)
        # A shell's pwd trusts PWD when it names the directory it is in; the
        # workspace has two names, so a PWD inherited from the kernel could
        # name the other one.
        env["PWD"] = req.cwd
        proc = subprocess.Popen(
            ["/bin/bash", "-c", req.cmd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=req.cwd,
            env=env,
            start_new_session=True,  # its own group: a kill reaches its children
            close_fds=True,
        )
        _JOB_SEQ[0] += 1
        job = _Job("job-%d" % _JOB_SEQ[0], proc, req.limit, link)
        _JOBS[job.name] = job
        if req.timeout > 0:
            job.timer = threading.Timer(req.timeout, job.expire, (req.grace,))
            job.timer.daemon = True
            job.timer.start()
    else:
        job = _JOBS.get(req.job) if isinstance(req.job, str) else None
        if job is None:
            return {"t": "command", "id": req.id, "error": "no job %r" % (req.job,)}
        if req.action == "kill":
            job.signal(signal.SIGKILL)
            job.wait(5)
    if req.wait > 0:
        # While the host waits, its interrupt (SIGINT to the sandbox, which
        # PID 1 forwards here) goes to the command's group, not the kernel.
        # Set before the output is streamed: the host may interrupt as soon
        # as it sees some, and a SIGINT before this went to the kernel's
        # idle handler and was lost (TestCommandInterrupt, under load).
        prev = signal.signal(signal.SIGINT, lambda signum, frame: job.signal(signal.SIGINT))
        try:
            if req.stream:
                job.listen(req.id)
            job.wait(req.wait)
        finally:
            signal.signal(signal.SIGINT, prev)
            if req.stream:
                job.unlisten()
    if job.proc.poll() is not None and job.timer is not None:
        job.timer.cancel()
    return job.report(req.id)
