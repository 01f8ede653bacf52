"""Client: the service's routes one to one, returning the wire's JSON
objects as dicts (the single-file client jailcell_client.py was; that name
still imports it). Sandbox is the higher-level surface.

    from jailcell import Client

    jc = Client()                                # /run/jailcell/jailcell.sock
    with jc.session(ttl_s=600) as s:             # closed on exit
        s.exec("import pandas as pd\\nx = 41")
        r = s.exec("print(x + 1)")
        print(r["status"], r["stdout"])          # ok 42
        s.upload("data.csv", b"a,b\\n1,2\\n")
        print(s.download("data.csv"))
    print(jc.exec("print('one-shot')")["stdout"])  # a fresh sandbox

A result is the JSON object documented in docs/service.md: status (ok,
error, timeout, oom, killed), stdout, stderr, error, value, display, files,
usage, state; and mode "degraded" when the service's workflow ran the
cell in a fresh stateless sandbox instead of the session. Errors jailcell
answers raise a JailcellError subclass (one per wire code) with its HTTP
status, code and state ("lost": the session was lost with its kernel).
"""

import base64
import json
import urllib.parse
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from .errors import InternalError, JailcellError, NotFoundError
from .lifecycle import check_created
from .transport import DEFAULT_SOCKET, METADATA_HEADER, SocketTransport, _decode, _metadata_header

__all__ = ["Client", "Session", "JailcellError", "DEFAULT_SOCKET"]

Files = Union[Dict[str, Union[str, bytes]], Iterable[Tuple[str, Union[str, bytes]]]]


def _files(files: Optional[Files]) -> Optional[List[Dict[str, str]]]:
    """{path: bytes} or [(path, bytes)] -> wire files."""
    if not files:
        return None
    items: Iterable[Tuple[str, Union[str, bytes]]] = files.items() if isinstance(files, dict) else files
    out = []
    for path, data in items:
        if isinstance(data, str):
            data = data.encode()
        out.append({"path": path, "data": base64.b64encode(data).decode("ascii")})
    return out


# An exec response's fields beside its result (api/wire.go Response).
_WORKFLOW_FIELDS = ("mode", "fallback", "attempts", "known")


def _result(resp: Dict[str, Any]) -> Dict[str, Any]:
    """An exec's result with the response's workflow fields copied onto it:
    a caller reading only the result must still see that a degraded run
    left its session untouched."""
    result: Dict[str, Any] = resp["result"]
    if isinstance(result, dict):
        for k in _WORKFLOW_FIELDS:
            if k in resp and k not in result:
                result[k] = resp[k]
    return result


class Client:
    """A client of one jailcell service. Calls reuse kept-alive connections
    (SocketTransport's), each call on one of its own, so a Client may be
    shared between threads."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 900) -> None:
        # timeout (seconds) bounds each socket operation; keep it above the
        # longest cell you allow (the policy's max_timeout, 10 min).
        self.socket_path = socket_path
        self.timeout = timeout
        self._t = SocketTransport(socket_path, timeout)

    # -- plumbing ---------------------------------------------------------

    def _request(self, method: str, path: str, body: Optional[bytes] = None,
                 headers: Optional[Dict[str, str]] = None) -> Tuple[int, str, bytes]:
        status, hdrs, data = self._t.request(method, path, body, headers)
        return status, hdrs.get("content-type", ""), data

    def _json(self, method: str, path: str, payload: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        body, headers = None, {}
        if payload is not None:
            body = json.dumps({k: v for k, v in payload.items() if v is not None}).encode()
            headers["Content-Type"] = "application/json"
        status, _, data = self._request(method, path, body, headers)
        return _decode(status, data)

    @staticmethod
    def _session_path(session_id: str, *rest: str) -> str:
        p = "/v1/sessions/" + urllib.parse.quote(session_id, safe="")
        for r in rest:
            p += "/" + r
        return p

    # -- routes -----------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """GET /healthz: version and the host's isolation features."""
        return self._json("GET", "/healthz")

    def create(self, ttl_s: Optional[float] = None, policy: Optional[str] = None,
               limits: Optional[Dict[str, Any]] = None, persist: Optional[str] = None,
               requirements: Optional[List[str]] = None, max_lifetime_s: Optional[float] = None,
               hibernate_on_idle: bool = False) -> Dict[str, Any]:
        """POST /v1/sessions: a new session (dict with "session", "expires_at", ...).
        hibernate_on_idle: at its TTL the session is hibernated (its next
        exec or restore brings it back), not ended; a host without
        checkpoint/restore refuses it (UnavailableError)."""
        info = self._json("POST", "/v1/sessions", {
            "ttl_s": ttl_s, "policy": policy, "limits": limits,
            "persist": persist, "requirements": requirements, "max_lifetime_s": max_lifetime_s,
            "hibernate_on_idle": True if hibernate_on_idle else None,
        })
        ignored = check_created(hibernate_on_idle, info)
        if ignored is not None:
            try:
                self.close(str(info.get("session")))
            except JailcellError:
                pass  # the create's refusal says more than the close's
            raise ignored
        return info

    def session(self, **create_args: Any) -> "Session":
        """A new Session, usable as a context manager that closes it."""
        return Session(self, self.create(**create_args))

    def sessions(self) -> List[Dict[str, Any]]:
        """GET /v1/sessions: your live sessions."""
        sessions: List[Dict[str, Any]] = self._json("GET", "/v1/sessions")["sessions"]
        return sessions

    def close(self, session_id: str) -> None:
        """DELETE /v1/sessions/{id}."""
        self._json("DELETE", self._session_path(session_id))

    def exec(self, code: str, session: Optional[str] = None, timeout_s: Optional[float] = None,
             files: Optional[Files] = None, policy: Optional[str] = None,
             on_output: Optional[Callable[[str, str], Any]] = None, snapshot: Optional[bool] = None,
             raw_ansi: Optional[bool] = None) -> Dict[str, Any]:
        """Run code in a session, or one-shot in a fresh sandbox when session
        is None. files: {path: bytes} placed in the working directory first.
        snapshot=True saves the session first, the target of rollback().
        raw_ansi=True keeps the output as written: by default ANSI escape
        sequences are removed and "\r\n" comes as "\n".
        on_output(stream, text), if given, is called as output happens
        (the response is then streamed as JSON lines). Returns the result,
        with what the response carries beside it when the service's
        workflow ran the cell: "mode" ("degraded": the cell ran once in a
        fresh stateless sandbox, so nothing it defined is in the session),
        "fallback", "attempts" and "known" (docs/workflow.md)."""
        path = self._session_path(session, "exec") if session else "/v1/exec"
        payload = {"code": code, "timeout_s": timeout_s, "files": _files(files), "policy": policy, "snapshot": snapshot,
                   "raw_ansi": raw_ansi}
        if on_output is None:
            return _result(self._json("POST", path, payload))
        out = on_output

        def on_event(ev: Dict[str, Any]) -> None:
            if ev.get("event") in ("stdout", "stderr"):
                out(ev["event"], ev.get("text", ""))

        fields = {k: v for k, v in payload.items() if v is not None}
        return _result(self._t._exec(path, fields, on_event))

    def upload(self, session_id: str, path: str, data: Union[str, bytes], *,
               metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """PUT /v1/sessions/{id}/files/{path}: raw bytes into the workspace,
        with metadata as the file's whole metadata (header
        Jailcell-Metadata; none clears what it had)."""
        if isinstance(data, str):
            data = data.encode()
        headers = {"Content-Type": "application/octet-stream"}
        meta = _metadata_header(metadata)
        if meta is not None:
            headers[METADATA_HEADER] = meta
        status, _, body = self._request(
            "PUT", self._session_path(session_id, "files", urllib.parse.quote(path)), data, headers)
        return _decode(status, body)

    def download(self, session_id: str, path: str) -> bytes:
        """GET /v1/sessions/{id}/files/{path}: the file's bytes."""
        status, ctype, body = self._request(
            "GET", self._session_path(session_id, "files", urllib.parse.quote(path)))
        if status != 200:
            _decode(status, body)
            raise InternalError(status, "internal", "unexpected status %d" % status)
        return body

    def files(self, session_id: str) -> List[Dict[str, Any]]:
        """GET /v1/sessions/{id}/files: the workspace listing."""
        files: List[Dict[str, Any]] = self._json("GET", self._session_path(session_id, "files"))["files"]
        return files

    def hibernate(self, session_id: str) -> Dict[str, Any]:
        """POST /v1/sessions/{id}/hibernate: checkpoint to disk, free its memory."""
        return self._json("POST", self._session_path(session_id, "hibernate"))

    def restore(self, session_id: str) -> Dict[str, Any]:
        """POST /v1/sessions/{id}/restore: bring a hibernated session back now."""
        return self._json("POST", self._session_path(session_id, "restore"))

    def fork(self, session_id: str) -> Dict[str, Any]:
        """POST /v1/sessions/{id}/fork: a new session, an exact copy of this one."""
        return self._json("POST", self._session_path(session_id, "fork"))

    def snapshot(self, session_id: str) -> Dict[str, Any]:
        """POST /v1/sessions/{id}/snapshot: save kernel and files as the rollback target."""
        return self._json("POST", self._session_path(session_id, "snapshot"))

    def rollback(self, session_id: str) -> Dict[str, Any]:
        """POST /v1/sessions/{id}/rollback: back to the snapshot, in place."""
        return self._json("POST", self._session_path(session_id, "rollback"))

    def interrupt(self, session_id: str) -> bool:
        """POST /v1/sessions/{id}/interrupt: send the running cell a
        KeyboardInterrupt, as Jupyter's interrupt. True if a cell was
        running; its own exec() then returns an error result, state kept."""
        return bool(self._json("POST", self._session_path(session_id, "interrupt")).get("interrupted"))

    def metrics(self) -> str:
        """GET /metrics: Prometheus text."""
        status, _, body = self._request("GET", "/metrics")
        if status != 200:
            _decode(status, body)
        return body.decode()


class Session:
    """A session bound to its client; closing it ends the session."""

    def __init__(self, client: Client, info: Dict[str, Any]) -> None:
        self.client = client
        self.info = info
        self.id = info["session"]

    def exec(self, code: str, **kw: Any) -> Dict[str, Any]:
        return self.client.exec(code, session=self.id, **kw)

    def upload(self, path: str, data: Union[str, bytes], *, metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        return self.client.upload(self.id, path, data, metadata=metadata)

    def download(self, path: str) -> bytes:
        return self.client.download(self.id, path)

    def files(self) -> List[Dict[str, Any]]:
        return self.client.files(self.id)

    def hibernate(self) -> Dict[str, Any]:
        self.info = self.client.hibernate(self.id)
        return self.info

    def restore(self) -> Dict[str, Any]:
        self.info = self.client.restore(self.id)
        return self.info

    def fork(self) -> "Session":
        """A new Session that starts as an exact copy of this one."""
        return Session(self.client, self.client.fork(self.id))

    def snapshot(self) -> Dict[str, Any]:
        self.info = self.client.snapshot(self.id)
        return self.info

    def rollback(self) -> Dict[str, Any]:
        self.info = self.client.rollback(self.id)
        return self.info

    def interrupt(self) -> bool:
        return self.client.interrupt(self.id)

    def close(self) -> None:
        self.client.close(self.id)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except NotFoundError:  # already ended: expired or closed
            pass

