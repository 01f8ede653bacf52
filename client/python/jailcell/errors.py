"""One exception class per wire error code (docs/service.md, "Errors").

A cell that raises is not an error of the call: its exception is
Execution.error. These are for what jailcell itself refused or could not do.
"""

from typing import Dict, Optional, Type

__all__ = [
    "JailcellError",
    "BadRequestError",
    "NotFoundError",
    "LimitError",
    "BusyError",
    "UnavailableError",
    "InternalError",
    "ForbiddenError",
    "SandboxException",
    "InvalidArgumentException",
    "NotFoundException",
    "FileNotFoundException",
    "SandboxNotFoundException",
    "AuthenticationException",
    "error_for",
]


class JailcellError(Exception):
    """An error answered by jailcell: code is the wire code, status the
    HTTP status (0 through `jailcell json`, which has none). state is
    "lost" on a not_found for a session that existed and was lost with its
    kernel (its node was killed, its kernel died while no daemon held it):
    its variables are gone, its persisted files remain; None otherwise."""

    code = "internal"

    def __init__(self, status: int, code: str, message: str, state: Optional[str] = None) -> None:
        super().__init__("%s: %s" % (code, message))
        self.status = status
        self.code = code
        self.message = message
        self.state = state


class BadRequestError(JailcellError):
    """bad_request: the request is wrong; the message names the field."""

    code = "bad_request"


class NotFoundError(JailcellError):
    """not_found: no such session (closed, expired, another user's) or file."""

    code = "not_found"


class ExpiredError(NotFoundError):
    """expired: the session reached its max_lifetime and was ended; its
    variables and files are gone. A NotFoundError too, so code that treats
    a vanished session as not found keeps working."""

    code = "expired"


class LimitError(JailcellError):
    """limit: a configured ceiling (live sessions, sizes) was reached."""

    code = "limit"


class BusyError(JailcellError):
    """busy: the session is running another cell (cells never queue)."""

    code = "busy"


class UnavailableError(JailcellError):
    """unavailable: no sandbox could be built, the service is shutting down,
    or the transport is gone (socket refused, `jailcell json` exited)."""

    code = "unavailable"


class InternalError(JailcellError):
    """internal: a bug in jailcell, or an answer this client cannot read."""

    code = "internal"


class ForbiddenError(JailcellError):
    """forbidden: the caller's uid and groups may not use the socket."""

    code = "forbidden"


# E2B's names for the same failures, so that `except NotFoundException:`
# written for E2B's SDK catches what jailcell raises. They are the classes
# above, not subclasses: a caller's check by either name sees one error.
# A missing file and a missing sandbox are both NotFoundError here.
SandboxException = JailcellError
InvalidArgumentException = BadRequestError
NotFoundException = NotFoundError
FileNotFoundException = NotFoundError
SandboxNotFoundException = NotFoundError
AuthenticationException = ForbiddenError

_BY_CODE: Dict[str, Type[JailcellError]] = {
    c.code: c
    for c in (BadRequestError, NotFoundError, ExpiredError, LimitError, BusyError, UnavailableError, InternalError, ForbiddenError)
}


def error_for(status: int, code: Optional[str], message: Optional[str], state: Optional[str] = None) -> JailcellError:
    """The exception for a wire error; an unknown code is a JailcellError
    that keeps it, so a newer server's code is not lost."""
    code = code or "internal"
    cls = _BY_CODE.get(code, JailcellError)
    return cls(status, code, message or "no error message", state)
