"""Directory watches: the events of a watched directory and the handle
that polls them (E2B's FilesystemEvent, FilesystemEventType, WatchHandle)."""

import enum
from dataclasses import dataclass
from typing import Any, Dict, List

from .commands import _Caller
from .errors import BadRequestError, NotFoundError

__all__ = ["FilesystemEvent", "FilesystemEventType", "WatchHandle"]


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

    def __init__(self, sandbox: _Caller, watch: str) -> None:
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
