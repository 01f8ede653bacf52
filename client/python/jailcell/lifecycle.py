"""What a sandbox's idle timeout does to it: end it (the default) or
hibernate it (hibernate_on_idle; E2B's lifecycle={"on_timeout": "pause"}).

What jailcell cannot do is refused by name, never dropped: a sandbox that
ends where its caller expected it paused loses its state."""

from typing import Any, Dict, Mapping, Optional

from .errors import BadRequestError, UnavailableError

__all__ = ["hibernate_field", "check_created"]


def _bad(message: str) -> BadRequestError:
    return BadRequestError(0, "bad_request", message)


def _pause_on_timeout(lifecycle: Any) -> bool:
    """Whether E2B's lifecycle asks for a pause at the timeout."""
    if not isinstance(lifecycle, Mapping):
        raise _bad('lifecycle = %.60r: must be a dict, {"on_timeout": "kill" | "pause", "auto_resume": bool}'
                   % (lifecycle,))
    on_timeout = lifecycle.get("on_timeout")
    action = on_timeout
    if isinstance(on_timeout, Mapping):
        action = on_timeout.get("action")
        keep = on_timeout.get("keep_memory")
        if keep is False:
            raise _bad('lifecycle["on_timeout"]["keep_memory"] = False: jailcell pauses a sandbox with its memory '
                       "(its variables and processes), never its files alone; leave it unset or True")
        if keep is not None and keep is not True:
            raise _bad('lifecycle["on_timeout"]["keep_memory"] = %.60r: must be True or unset' % (keep,))
        if keep is True and action != "pause":
            raise _bad('lifecycle["on_timeout"]["keep_memory"] goes with action "pause" only, not %.60r' % (action,))
    if not isinstance(action, str) or action not in ("kill", "pause"):
        raise _bad('lifecycle["on_timeout"] = %.60r: allowed "kill" (the default: the timeout ends the sandbox), '
                   '"pause" (it hibernates it, memory and all) or {"action": "kill" | "pause", "keep_memory": True}'
                   % (on_timeout,))
    auto_resume = lifecycle.get("auto_resume")
    if auto_resume is not None and not isinstance(auto_resume, bool):
        raise _bad('lifecycle["auto_resume"] = %.60r: must be a bool' % (auto_resume,))
    if auto_resume and action != "pause":
        raise _bad('lifecycle["auto_resume"] = True needs on_timeout "pause": only a paused sandbox resumes')
    return action == "pause"


def hibernate_field(hibernate_on_idle: Optional[bool], lifecycle: Optional[Mapping[str, Any]]) -> Optional[bool]:
    """The create's hibernate_on_idle field: True, or None (absent)."""
    if hibernate_on_idle is not None and lifecycle is not None:
        raise _bad("give hibernate_on_idle or lifecycle (E2B's name for it), not both")
    if hibernate_on_idle is not None and not isinstance(hibernate_on_idle, bool):
        raise _bad("hibernate_on_idle = %.60r: must be a bool" % (hibernate_on_idle,))
    pause = _pause_on_timeout(lifecycle) if lifecycle is not None else bool(hibernate_on_idle)
    return True if pause else None


def check_created(asked: Optional[bool], info: Dict[str, Any]) -> Optional[UnavailableError]:
    """The error for a create answered without the hibernate_on_idle it
    asked for (a server older than the field ignores it, and its session
    would end at its TTL), after which the caller closes that session;
    None if the answer is what was asked."""
    if asked and info.get("hibernate_on_idle") is not True:
        return UnavailableError(0, "unavailable", "the service ignored hibernate_on_idle (it is older than the "
                                                  "field): session %s would end at its TTL, so it was closed"
                                % (info.get("session"),))
    return None
