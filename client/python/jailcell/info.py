"""A sandbox's info and metrics, as E2B's SDK names them (SandboxInfo,
SandboxMetrics)."""

import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

__all__ = ["SandboxInfo", "SandboxMetrics"]


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
    (ready, busy, starting, hibernated). hibernate_on_idle: its timeout
    hibernates it rather than ending it; lifecycle says the same in E2B's
    words ({"on_timeout": "pause" or "kill", "auto_resume": ...}: a paused
    jailcell sandbox comes back on its next cell)."""

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
    hibernate_on_idle: bool = False
    lifecycle: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_info(cls, info: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> "SandboxInfo":
        st = str(info.get("state", ""))
        hib = info.get("hibernate_on_idle") is True
        return cls(sandbox_id=str(info.get("session", "")), started_at=_time(info.get("created_at")),
                   end_at=_time(info.get("expires_at")), state="paused" if st == "hibernated" else "running",
                   jailcell_state=st, policy=str(info.get("policy", "")), cells=int(info.get("cells", 0)),
                   metadata=dict(metadata or {}), template_id=str(info.get("policy", "")) or None,
                   hibernate_on_idle=hib, lifecycle={"on_timeout": "pause" if hib else "kill", "auto_resume": hib})


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
