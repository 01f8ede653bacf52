"""A client for `jailcell serve`: Python cells in OS-isolated sandboxes.

One file, standard library only (Python 3.8+): copy it next to your agent.
It speaks HTTP/1.1 over jailcell's Unix socket; the kernel tells jailcell
which uid is calling, and the sessions you create are yours alone.

    from jailcell_client import Client

    jc = Client()                                # /run/jailcell/jailcell.sock
    with jc.session(ttl_s=600) as s:             # closed on exit
        s.exec("import pandas as pd\\nx = 41")
        r = s.exec("print(x + 1)")
        print(r["status"], r["stdout"])          # ok 42
        s.upload("data.csv", b"a,b\\n1,2\\n")
        s.exec("open('out.txt','w').write(open('data.csv').read())")
        print(s.download("out.txt"))
    print(jc.exec("print('one-shot')")["stdout"])  # a fresh sandbox

A result is the JSON object documented in docs/service.md: status (ok,
error, timeout, oom, killed), stdout, stderr, error, value, display, files,
usage, state. Errors jailcell answers raise JailcellError with its HTTP
status and wire code (bad_request, not_found, limit, busy, unavailable,
internal, forbidden).
"""

import base64
import http.client
import json
import socket
import urllib.parse

__all__ = ["Client", "Session", "JailcellError", "DEFAULT_SOCKET"]

DEFAULT_SOCKET = "/run/jailcell/jailcell.sock"

# Bounds what one streamed line may hold: a result with its files, base64.
_MAX_LINE = 400 << 20


class JailcellError(Exception):
    """An error answered by jailcell."""

    def __init__(self, status, code, message):
        super().__init__("%s: %s" % (code, message))
        self.status = status
        self.code = code
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("jailcell", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except Exception:
            s.close()
            raise
        self.sock = s


def _files(files):
    """{path: bytes} or [(path, bytes)] -> wire files."""
    if not files:
        return None
    items = files.items() if isinstance(files, dict) else files
    out = []
    for path, data in items:
        if isinstance(data, str):
            data = data.encode()
        out.append({"path": path, "data": base64.b64encode(data).decode("ascii")})
    return out


class Client:
    """A client of one jailcell service. Each call uses its own connection,
    so a Client may be shared between threads."""

    def __init__(self, socket_path=DEFAULT_SOCKET, timeout=900):
        # timeout (seconds) bounds each socket operation; keep it above the
        # longest cell you allow (the policy's max_timeout, 10 min).
        self.socket_path = socket_path
        self.timeout = timeout

    # -- plumbing ---------------------------------------------------------

    def _request(self, method, path, body=None, headers=None):
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheader("Content-Type", ""), data
        finally:
            conn.close()

    def _json(self, method, path, payload=None):
        body, headers = None, {}
        if payload is not None:
            body = json.dumps({k: v for k, v in payload.items() if v is not None}).encode()
            headers["Content-Type"] = "application/json"
        status, _, data = self._request(method, path, body, headers)
        return _check(status, data)

    @staticmethod
    def _session_path(session_id, *rest):
        p = "/v1/sessions/" + urllib.parse.quote(session_id, safe="")
        for r in rest:
            p += "/" + r
        return p

    # -- routes -----------------------------------------------------------

    def health(self):
        """GET /healthz: version and the host's isolation features."""
        return self._json("GET", "/healthz")

    def create(self, ttl_s=None, policy=None, limits=None, persist=None, requirements=None, max_lifetime_s=None):
        """POST /v1/sessions: a new session (dict with "session", "expires_at", ...)."""
        return self._json("POST", "/v1/sessions", {
            "ttl_s": ttl_s, "policy": policy, "limits": limits,
            "persist": persist, "requirements": requirements, "max_lifetime_s": max_lifetime_s,
        })

    def session(self, **create_args):
        """A new Session, usable as a context manager that closes it."""
        return Session(self, self.create(**create_args))

    def sessions(self):
        """GET /v1/sessions: your live sessions."""
        return self._json("GET", "/v1/sessions")["sessions"]

    def close(self, session_id):
        """DELETE /v1/sessions/{id}."""
        self._json("DELETE", self._session_path(session_id))

    def exec(self, code, session=None, timeout_s=None, files=None, policy=None, on_output=None, snapshot=None):
        """Run code in a session, or one-shot in a fresh sandbox when session
        is None. files: {path: bytes} placed in the working directory first.
        snapshot=True saves the session first, the target of rollback().
        on_output(stream, text), if given, is called as output happens
        (the response is then streamed as JSON lines). Returns the result."""
        path = self._session_path(session, "exec") if session else "/v1/exec"
        payload = {"code": code, "timeout_s": timeout_s, "files": _files(files), "policy": policy, "snapshot": snapshot}
        if on_output is None:
            return self._json("POST", path, payload)["result"]
        body = json.dumps({k: v for k, v in payload.items() if v is not None}).encode()
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            conn.request("POST", path, body=body, headers={
                "Content-Type": "application/json", "Accept": "application/x-ndjson"})
            resp = conn.getresponse()
            if not resp.getheader("Content-Type", "").startswith("application/x-ndjson"):
                return _check(resp.status, resp.read())["result"]
            while True:
                line = resp.readline(_MAX_LINE)
                if not line:
                    raise JailcellError(resp.status, "internal", "stream ended before the result")
                if not line.strip():
                    continue
                msg = json.loads(line)
                if "event" in msg:
                    if msg["event"] in ("stdout", "stderr"):  # not "display"
                        on_output(msg["event"], msg.get("text", ""))
                    continue
                return _check(resp.status, line)["result"]
        finally:
            conn.close()

    def upload(self, session_id, path, data):
        """PUT /v1/sessions/{id}/files/{path}: raw bytes into the workspace."""
        if isinstance(data, str):
            data = data.encode()
        status, _, body = self._request(
            "PUT", self._session_path(session_id, "files", urllib.parse.quote(path)),
            data, {"Content-Type": "application/octet-stream"})
        return _check(status, body)

    def download(self, session_id, path):
        """GET /v1/sessions/{id}/files/{path}: the file's bytes."""
        status, ctype, body = self._request(
            "GET", self._session_path(session_id, "files", urllib.parse.quote(path)))
        if status != 200:
            _check(status, body)
            raise JailcellError(status, "internal", "unexpected status %d" % status)
        return body

    def files(self, session_id):
        """GET /v1/sessions/{id}/files: the workspace listing."""
        return self._json("GET", self._session_path(session_id, "files"))["files"]

    def hibernate(self, session_id):
        """POST /v1/sessions/{id}/hibernate: checkpoint to disk, free its memory."""
        return self._json("POST", self._session_path(session_id, "hibernate"))

    def restore(self, session_id):
        """POST /v1/sessions/{id}/restore: bring a hibernated session back now."""
        return self._json("POST", self._session_path(session_id, "restore"))

    def fork(self, session_id):
        """POST /v1/sessions/{id}/fork: a new session, an exact copy of this one."""
        return self._json("POST", self._session_path(session_id, "fork"))

    def snapshot(self, session_id):
        """POST /v1/sessions/{id}/snapshot: save kernel and files as the rollback target."""
        return self._json("POST", self._session_path(session_id, "snapshot"))

    def rollback(self, session_id):
        """POST /v1/sessions/{id}/rollback: back to the snapshot, in place."""
        return self._json("POST", self._session_path(session_id, "rollback"))

    def interrupt(self, session_id):
        """POST /v1/sessions/{id}/interrupt: send the running cell a
        KeyboardInterrupt, as Jupyter's interrupt. True if a cell was
        running; its own exec() then returns an error result, state kept."""
        return self._json("POST", self._session_path(session_id, "interrupt"))["interrupted"]

    def metrics(self):
        """GET /metrics: Prometheus text."""
        status, _, body = self._request("GET", "/metrics")
        if status != 200:
            _check(status, body)
        return body.decode()


class Session:
    """A session bound to its client; closing it ends the session."""

    def __init__(self, client, info):
        self.client = client
        self.info = info
        self.id = info["session"]

    def exec(self, code, **kw):
        return self.client.exec(code, session=self.id, **kw)

    def upload(self, path, data):
        return self.client.upload(self.id, path, data)

    def download(self, path):
        return self.client.download(self.id, path)

    def files(self):
        return self.client.files(self.id)

    def hibernate(self):
        self.info = self.client.hibernate(self.id)
        return self.info

    def restore(self):
        self.info = self.client.restore(self.id)
        return self.info

    def fork(self):
        """A new Session that starts as an exact copy of this one."""
        return Session(self.client, self.client.fork(self.id))

    def snapshot(self):
        self.info = self.client.snapshot(self.id)
        return self.info

    def rollback(self):
        self.info = self.client.rollback(self.id)
        return self.info

    def close(self):
        self.client.close(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        except JailcellError as e:
            if e.code != "not_found":  # already ended: expired or closed
                raise
        return False


def _check(status, data):
    try:
        msg = json.loads(data)
    except ValueError:
        raise JailcellError(status, "internal", "response is not JSON: %r" % data[:200])
    if not msg.get("ok"):
        err = msg.get("error") or {}
        raise JailcellError(status, err.get("code", "internal"), err.get("message", "no error message"))
    return msg
