"""What a cell produced, shaped like E2B's code-interpreter SDK (Execution,
Result, Logs, ExecutionError) plus what jailcell adds: the status decided on
the host, the files the cell changed, what it cost, and the fix-and-retry
attempts. Everything here is built from a wire result (docs/service.md)."""

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from .charts import ChartTypes, deserialize_chart

__all__ = ["Execution", "Result", "Logs", "ExecutionError", "FileChange", "EntryInfo", "Attempt", "MIME_FIELDS"]

# The MIME types a Result has an attribute for, as in E2B's Result.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}


def unquoted(text: str) -> str:
    """text/plain as E2B's Result.text has it: one pair of enclosing quotes
    (a str value's repr) removed, anything else as it is."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


@dataclass
class Result:
    """One rich output: a figure or an object passed to display(), or the
    value of the cell's last expression (is_main_result). Images (png,
    jpeg) are base64 strings, as E2B gives them; text formats are str; json
    is the decoded object. text is a str value without its repr's quotes
    (bar for 'bar'), as E2B gives it; the wire's text/plain keeps them."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Optional[Any] = None
    javascript: Optional[str] = None
    # Formats without an attribute, by MIME type.
    extra: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    # Set on text a magic sent to IPython's pager (%quickref, obj?, %prun):
    # Jupyter's `page` payload, never part of stdout.
    is_pager: bool = False
    # The data a matplotlib figure plotted, beside its png (jailcell.charts;
    # as E2B's Result.chart); None for anything else.
    chart: Optional[ChartTypes] = None
    # A pandas DataFrame's columns, {name: [values]} in column order (at
    # most 10000 cells), as E2B's Result.data; None for anything else.
    data: Optional[Dict[str, List[Any]]] = None

    @classmethod
    def from_bundle(cls, bundle: Dict[str, Any], is_main_result: bool = False) -> "Result":
        r = cls(is_main_result=is_main_result)
        for mime, data in bundle.items():
            name = MIME_FIELDS.get(mime)
            if name is None:
                r.extra[mime] = data
            else:
                setattr(r, name, data)
        if isinstance(r.text, str):
            r.text = unquoted(r.text)
        return r

    @classmethod
    def from_display(cls, item: Dict[str, Any]) -> "Result":
        """A wire display item {"mime", "data", "bundle", "pager"}: every
        format of its bundle, and its own mime/data in case the bundle is
        absent."""
        bundle = dict(item.get("bundle") or {})
        mime, data = item.get("mime"), item.get("data")
        if isinstance(mime, str) and mime not in bundle:
            bundle[mime] = data
        r = cls.from_bundle(bundle)
        r.is_pager = item.get("pager") is True
        r.chart = deserialize_chart(item.get("chart"))
        if isinstance(item.get("table"), dict):
            r.data = item["table"]  # a DataFrame's columns, E2B's Result.data
        return r

    def formats(self) -> List[str]:
        """The formats this result has: attribute names, then extra MIME types."""
        have = [name for name in MIME_FIELDS.values() if getattr(self, name) is not None]
        if self.chart is not None:
            have.append("chart")
        return have + list(self.extra)

    def png_bytes(self) -> Optional[bytes]:
        """The PNG decoded, or None."""
        return base64.b64decode(self.png) if self.png is not None else None

    def __str__(self) -> str:
        return self.text or ""

    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_png_(self) -> Optional[str]:
        return self.png


class OutputMessage(str):
    """One chunk of a cell's stdout or stderr, as run_code hands it to
    on_stdout and on_stderr: the text itself (so print(m), m.strip() and
    "".join(...) work as on a str) with E2B's fields: .line (the text),
    .timestamp (when it arrived, in nanoseconds since the epoch) and .error
    (True for stderr)."""

    timestamp: int
    error: bool

    def __new__(cls, line: str, timestamp: int = 0, error: bool = False) -> "OutputMessage":
        m = super().__new__(cls, line)
        m.timestamp, m.error = timestamp, error
        return m

    @property
    def line(self) -> str:
        return str.__str__(self)


@dataclass
class Logs:
    """The cell's output in the chunks it was streamed in."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """The exception a cell raised: name (its type), value (its message) and
    the formatted traceback of the cell's frames. exit_code is set when a
    shell command (`!cmd`, %pip) exited non-zero and ended the cell (name
    subprocess.CalledProcessError): its exit status, negative for a signal."""

    name: str
    value: str
    traceback: str
    frames: List[Dict[str, Any]] = field(default_factory=list)
    exit_code: Optional[int] = None

    def __str__(self) -> str:
        return "%s: %s" % (self.name, self.value)


@dataclass
class FileChange:
    """A file the cell created, modified or deleted. data is its content
    for a one-shot cell (its sandbox is gone afterwards), else None."""

    path: str
    size: int
    change: str
    data: Optional[bytes] = None
    omitted: bool = False


@dataclass
class EntryInfo:
    """A file, directory or symlink of the session's workspace, with E2B's
    names: type "file", "dir" or "symlink" (a link is never followed: its
    mode is 0), mode the permission bits (0o777), permissions Go's FileMode
    text ("-rw-r--r--", "Lrwxrwxrwx"), owner and group names ("root",
    "nobody" for an id the sandbox does not map, else the number), and
    symlink_target a link's target made absolute against its directory
    (untrusted: the sandbox wrote it), and metadata the file's metadata
    (what files.write gave it, or a program in the sandbox set in its
    user.e2b.* attributes: untrusted, though bounded as a write's; None if
    none). is_dir and mtime are jailcell's."""

    name: str
    path: str
    size: int
    is_dir: bool
    mtime: str
    type: str = "file"
    mode: int = 0
    permissions: str = ""
    owner: str = ""
    group: str = ""
    symlink_target: Optional[str] = None
    metadata: Optional[Dict[str, str]] = None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _id_name(v: Any) -> str:
    # The two ids the sandbox's rootfs names; any other is its number, as
    # E2B's envd answers an id without a name.
    i = _int(v)
    return {0: "root", 65534: "nobody"}.get(i, str(i))


def _permissions(kind: str, bits: int) -> str:
    """Go's os.FileMode.String() of an entry of this kind with st_mode bits."""
    s = {"dir": "d", "symlink": "L"}.get(kind, "")
    s += "u" if bits & 0o4000 else ""
    s += "g" if bits & 0o2000 else ""
    s += "t" if bits & 0o1000 else ""
    s = s or "-"
    return s + "".join(c if bits & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


def _clean(p: str) -> str:
    """An absolute path with ".", ".." and repeated slashes resolved lexically (Go's path.Clean)."""
    out: List[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
        else:
            out.append(part)
    return "/" + "/".join(out)


def _entry(e: Any, fallback: str, workdir: str) -> EntryInfo:
    """EntryInfo of a wire entry whose path is relative to workdir."""
    if not isinstance(e, dict):
        e = {}
    p = e.get("path")
    p = p if isinstance(p, str) else fallback
    kind = "dir" if e.get("dir") is True else "symlink" if e.get("symlink") is True else "file"
    bits = _int(e.get("mode")) & 0o7777
    info = EntryInfo(name=p.rsplit("/", 1)[-1], path=p, size=_int(e.get("size")), is_dir=kind == "dir",
                     mtime=str(e.get("mtime", "")), type=kind, mode=0 if kind == "symlink" else bits & 0o777,
                     permissions=_permissions(kind, bits), owner=_id_name(e.get("uid")), group=_id_name(e.get("gid")))
    link = e.get("link")
    if kind == "symlink" and isinstance(link, str) and link:
        info.symlink_target = _clean(link if link.startswith("/") else "%s/%s/%s" % (workdir, p.rpartition("/")[0], link))
    info.metadata = _metadata(e.get("metadata"))
    return info


def _metadata(m: Any) -> Optional[Dict[str, str]]:
    """The string entries of a wire metadata map; None for none or anything
    but an object."""
    if not isinstance(m, dict):
        return None
    out = {k: v for k, v in m.items() if isinstance(k, str) and isinstance(v, str)}
    return out or None


def _workdir(info: Any) -> str:
    """The directory entry paths are under, as the sandbox names it."""
    return "/home/user" if isinstance(info, dict) and info.get("cwd") == "/home/user" else "/work"


@dataclass
class Attempt:
    """One run of a fix-and-retry loop (docs/workflow.md)."""

    attempt: int
    code: str
    status: str
    error: Optional[ExecutionError] = None
    stdout: str = ""
    stderr: str = ""


def _error(e: Any) -> Optional[ExecutionError]:
    if not isinstance(e, dict):
        return None
    code = e.get("exit_code")
    return ExecutionError(name=str(e.get("type", "")), value=str(e.get("message", "")),
                          traceback=str(e.get("traceback", "")), frames=list(e.get("frames") or []),
                          exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None)


@dataclass
class Execution:
    """The outcome of run_code.

    status is decided on the host: ok, error (the cell raised: see error),
    timeout, oom or killed. results holds the cell's displays in order and
    last the value of its last expression (is_main_result); text is that
    value's text/plain."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    status: str = "ok"
    # jailcell's own.
    files: List[FileChange] = field(default_factory=list)
    usage: Dict[str, Any] = field(default_factory=dict)
    state: str = ""
    state_reason: str = ""
    limits: List[str] = field(default_factory=list)
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    # Fix-and-retry (docs/workflow.md): every run, the fallback when the
    # loop failed, "degraded" when the result came from a stateless rerun,
    # and the remembered failure behind a "skipped" result.
    attempts: List[Attempt] = field(default_factory=list)
    fallback: Optional[Dict[str, Any]] = None
    mode: str = ""
    known: Optional[Dict[str, Any]] = None
    # The wire response, as received.
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> Optional[str]:
        """The text/plain of the last expression's value, or None."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results)

    def tool_text(self, max_chars: int = 8000) -> str:
        """The execution as a model should read it back from a tool call:
        status, output, the value, the error's traceback, what figures were
        shown and which files changed; cut to max_chars (its end is kept:
        that is where a traceback ends)."""
        parts = ["status: %s" % self.status]
        out, err = "".join(self.logs.stdout), "".join(self.logs.stderr)
        if out:
            parts.append("stdout:\n" + out.rstrip("\n"))
        if err:
            parts.append("stderr:\n" + err.rstrip("\n"))
        if self.error is not None:
            parts.append("error: %s\n%s" % (self.error, self.error.traceback.rstrip("\n")))
        shown = [r for r in self.results if not r.is_main_result]
        if shown:
            parts.append("displayed: " + ", ".join("/".join(r.formats()) for r in shown))
        if self.text is not None:
            parts.append("value: " + self.text)
        if self.files:
            parts.append("files: " + ", ".join("%s (%s)" % (f.path, f.change) for f in self.files))
        if self.limits:
            parts.append("limits hit: " + ", ".join(self.limits))
        text = "\n".join(parts)
        if len(text) > max_chars:
            text = "[... %d characters cut ...]\n" % (len(text) - max_chars) + text[-max_chars:]
        return text

    @classmethod
    def from_response(cls, resp: Dict[str, Any], stdout: Optional[List[str]] = None,
                      stderr: Optional[List[str]] = None) -> "Execution":
        """An Execution from an exec response; stdout/stderr are the
        streamed chunks (the result's whole text is used when none came)."""
        res = resp.get("result") or {}
        out = stdout if stdout else ([res["stdout"]] if res.get("stdout") else [])
        err = stderr if stderr else ([res["stderr"]] if res.get("stderr") else [])
        results = [Result.from_display(d) for d in res.get("display") or [] if isinstance(d, dict)]
        if isinstance(res.get("value"), dict) and res["value"]:
            results.append(Result.from_bundle(res["value"], is_main_result=True))
            results[-1].chart = deserialize_chart(res.get("value_chart"))
            if isinstance(res.get("value_table"), dict):
                results[-1].data = res["value_table"]
        files = []
        for f in res.get("files") or []:
            data = f.get("data")
            files.append(FileChange(path=f.get("path", ""), size=int(f.get("size", 0)), change=f.get("change", ""),
                                    data=base64.b64decode(data) if isinstance(data, str) else None,
                                    omitted=bool(f.get("omitted"))))
        attempts = [Attempt(attempt=int(a.get("attempt", 0)), code=a.get("code", ""), status=a.get("status", ""),
                            error=_error(a.get("error")), stdout=a.get("stdout", ""), stderr=a.get("stderr", ""))
                    for a in resp.get("attempts") or []]
        count = res.get("execution_count")
        return cls(results=results, logs=Logs(stdout=list(out), stderr=list(err)), error=_error(res.get("error")),
                   execution_count=count if isinstance(count, int) else None, status=res.get("status", ""),
                   files=files, usage=dict(res.get("usage") or {}), state=res.get("state", ""),
                   state_reason=res.get("state_reason", ""), limits=list(res.get("limits") or []),
                   stdout_truncated=bool(res.get("stdout_truncated")),
                   stderr_truncated=bool(res.get("stderr_truncated")),
                   attempts=attempts, fallback=resp.get("fallback"), mode=resp.get("mode", ""),
                   known=resp.get("known"), raw=resp)
