"""Client-side protocol tests that need no jailcell: a small script speaks
the JSON-lines wire on stdin/stdout, replaying what a `jailcell json` would
send, so the transport, the event handling and the errors are exercised
exactly as with the real process. Here: the `display` event (figures reach
on_result as they are shown, once), bounds and error mapping."""

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import textwrap
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

from jailcell import (AsyncSandbox, BusyError, ChartType, Client, JailcellError, JsonLinesTransport, LimitError,
                      NotFoundError, Result, Sandbox, ScaleType, ScatterChart, SocketTransport, SuperChart, Transport,
                      UnavailableError)
from jailcell.aio_transport import route
from jailcell.errors import BadRequestError, error_for
from jailcell.models import _entry, _workdir
from jailcell.transport import _checked

PNG = "iVBORw0KGgo="  # base64 of the PNG magic's first bytes: enough to tell it apart

# Answers create with a session; exec with the events its code names
# ("events:display" or "events:plain"); any other op with the error code
# it is named after. Echoes ids; reads until EOF.
REPLAY = textwrap.dedent('''
    import json, sys
    FIG = {"mime": "image/png", "data": %(png)r, "bundle": {"image/png": %(png)r, "text/plain": "<Figure>"}}
    def out(m):
        sys.stdout.write(json.dumps(m) + "\\n"); sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line); i = req["id"]; op = req["op"]
        if op == "create":
            out({"id": i, "ok": True, "session": "s" * 32, "state": "ready"})
        elif op == "exec":
            out({"id": i, "event": "stdout", "text": "before\\n"})
            if req["code"].startswith("events:display"):
                out({"id": i, "event": "display", "display": FIG})
            out({"id": i, "event": "future-kind", "text": "ignored"})
            out({"id": i, "event": "stdout", "text": "after\\n"})
            out({"id": i, "ok": True, "result": {"status": "ok", "stdout": "before\\nafter\\n", "stderr": "",
                "display": [] if req["code"] == "events:display-only" else [FIG],
                "value": {"text/plain": "7"}, "usage": {"wall_ms": 1}, "state": "kept",
                "execution_count": 3}})
        elif op == "close":
            out({"id": i, "ok": True})
        elif op == "huge":
            sys.stdout.write("x" * int(req["path"])); sys.stdout.flush()
        else:
            out({"id": i, "ok": False, "error": {"code": op, "message": "replayed " + op}})
''') % {"png": PNG}


class ReplayTest(unittest.TestCase):
    def setUp(self) -> None:
        self.t = JsonLinesTransport([sys.executable, "-c", REPLAY], timeout=30)
        self.addCleanup(self.t.close)
        self.sbx = Sandbox(transport=self.t)

    def run_code(self, code: str) -> Tuple[Any, List[Tuple[str, Any]]]:
        calls: List[Tuple[str, Any]] = []
        ex = self.sbx.run_code(code, on_stdout=lambda s: calls.append(("out", s)),
                               on_result=lambda r: calls.append(("result", r)))
        return ex, calls

    def check(self, ex: Any, calls: List[Tuple[str, Any]], want: List[str]) -> None:
        self.assertEqual([k if k == "out" else ("main" if v.is_main_result else "figure") for k, v in calls], want)
        figs = [v for k, v in calls if k == "result" and not v.is_main_result]
        self.assertEqual(len(figs), 1, "the figure must reach on_result exactly once")
        self.assertIsInstance(figs[0], Result)
        self.assertEqual((figs[0].png, figs[0].text), (PNG, "<Figure>"))
        self.assertEqual([r.formats() for r in ex.results], [["text", "png"], ["text"]])
        self.assertEqual((ex.text, ex.execution_count, ex.logs.stdout), ("7", 3, ["before\n", "after\n"]))

    def test_display_event(self) -> None:
        # With display events on the wire, the figure arrives between the
        # outputs it was shown between, and not again from the result.
        ex, calls = self.run_code("events:display")
        self.check(ex, calls, ["out", "figure", "out", "main"])

    def test_display_event_only(self) -> None:
        # Figures that came only as events stay in the results.
        ex, calls = self.run_code("events:display-only")
        self.check(ex, calls, ["out", "figure", "out", "main"])

    def test_no_display_event(self) -> None:
        # Without them (an older jailcell), the result's figures are handed
        # over at the end, before the value.
        ex, calls = self.run_code("events:plain")
        self.check(ex, calls, ["out", "out", "figure", "main"])

    def test_pager_item(self) -> None:
        # Text IPython sent to its pager is a display item marked pager.
        r = Result.from_display({"mime": "text/plain", "data": "Docstring: x", "pager": True})
        self.assertEqual((r.text, r.is_pager), ("Docstring: x", True))
        self.assertFalse(Result.from_display({"mime": "text/plain", "data": "x"}).is_pager)
        self.assertFalse(Result.from_display({"mime": "text/plain", "data": "x", "pager": "yes"}).is_pager)

    def test_e2b_exception_names(self) -> None:
        # E2B's names are jailcell's classes: a handler written for either
        # catches what the server answered.
        import jailcell
        for e2b, ours in [("SandboxException", "JailcellError"), ("InvalidArgumentException", "BadRequestError"),
                          ("NotFoundException", "NotFoundError"), ("FileNotFoundException", "NotFoundError"),
                          ("SandboxNotFoundException", "NotFoundError"), ("AuthenticationException", "ForbiddenError")]:
            self.assertIs(getattr(jailcell, e2b), getattr(jailcell, ours), e2b)
            self.assertIn(e2b, jailcell.__all__)
        with self.assertRaises(jailcell.FileNotFoundException):
            raise error_for(404, "not_found", "no such file")
        with self.assertRaises(jailcell.SandboxException):
            raise error_for(400, "bad_request", "bad")

    def test_text_unquoted(self) -> None:
        # E2B's Result.text: a str value's repr without its quotes; any
        # other text/plain as sent.
        for plain, want in [("'bar'", "bar"), ('"it\'s"', "it's"), ("'", "'"), ("''", ""), ("42", "42"),
                            ("('a', 'b')", "('a', 'b')"), ("'a' + 'b'x", "'a' + 'b'x")]:
            self.assertEqual(Result.from_bundle({"text/plain": plain}).text, want, plain)

    def test_chart_item(self) -> None:
        # A display item's chart becomes Result.chart, E2B's classes by type.
        sub = {"type": "scatter", "title": "s", "x_scale": "log", "elements": [{"label": "p", "points": [[1, 2]]}]}
        r = Result.from_display({"mime": "image/png", "data": PNG, "chart": {
            "type": "superchart", "title": "both", "truncated": True,
            "elements": [sub, {"type": "unknown", "title": "", "elements": [], "reason": "3d axes"},
                         {"type": "superchart", "title": "", "elements": []}]}})
        self.assertIsInstance(r.chart, SuperChart)
        assert isinstance(r.chart, SuperChart)
        self.assertEqual((r.chart.type, r.chart.title, r.chart.truncated, len(r.chart.elements)),
                         (ChartType.SUPERCHART, "both", True, 2))
        scatter, unknown = r.chart.elements
        assert isinstance(scatter, ScatterChart)
        self.assertEqual((scatter.x_scale, scatter.elements[0].label, scatter.elements[0].points),
                         (ScaleType.LOG, "p", [(1, 2)]))
        self.assertEqual((unknown.type, unknown.reason), (ChartType.UNKNOWN, "3d axes"))
        self.assertEqual(r.formats(), ["png", "chart"])
        self.assertIsNone(Result.from_display({"mime": "image/png", "data": PNG}).chart)
        self.assertEqual(Result.from_display({"mime": "image/png", "data": PNG, "chart": {"type": "sankey"}}).chart.type,
                         ChartType.UNKNOWN)

    def test_error_classes(self) -> None:
        for code, cls in (("busy", BusyError), ("limit", LimitError)):
            with self.assertRaises(cls) as cm:
                self.t.call(code, {})
            self.assertEqual((cm.exception.code, cm.exception.message, cm.exception.status), (code, "replayed " + code, 0))
        with self.assertRaises(JailcellError) as cm2:
            self.t.call("new_code_from_a_newer_server", {})
        self.assertEqual(type(cm2.exception), JailcellError)
        self.assertEqual(cm2.exception.code, "new_code_from_a_newer_server")

    def test_entry_fields(self) -> None:
        # E2B's EntryInfo from a wire entry: Go's FileMode text, id names,
        # a link's target made absolute against its directory, and what a
        # forged entry cannot do (a target climbing past / stays at /).
        cases = (
            ({"path": "d", "dir": True, "mode": 0o755}, ("dir", 0o755, "drwxr-xr-x", "root", "root", None)),
            ({"path": "s", "mode": 0o4755, "uid": 1000, "gid": 65534},
             ("file", 0o755, "urwxr-xr-x", "1000", "nobody", None)),
            ({"path": "t", "dir": True, "mode": 0o1777}, ("dir", 0o777, "dtrwxrwxrwx", "root", "root", None)),
            ({"path": "a/b/ln", "symlink": True, "link": "../c", "mode": 0o777},
             ("symlink", 0, "Lrwxrwxrwx", "root", "root", "/home/user/a/c")),
            ({"path": "ln", "symlink": True, "link": "/etc//x/../passwd"},
             ("symlink", 0, "L---------", "root", "root", "/etc/passwd")),
            ({"path": "ln", "symlink": True, "link": "../../../x"}, ("symlink", 0, "L---------", "root", "root", "/x")),
            ({"path": "u", "size": 2}, ("file", 0, "----------", "root", "root", None)),
            ({"path": "v", "mode": True, "uid": "0"}, ("file", 0, "----------", "root", "root", None)),
        )
        for wire, want in cases:
            e = _entry(wire, "", _workdir({"cwd": "/home/user"}))
            self.assertEqual((e.type, e.mode, e.permissions, e.owner, e.group, e.symlink_target), want, wire)
        self.assertEqual(_workdir({}), "/work")
        # Metadata: the map's string entries, None for none or a forged
        # shape.
        for wire_meta, want_meta in (({"a": "1", "B c": ""}, {"a": "1", "B c": ""}), (None, None), ({}, None),
                                     ("a=1", None), ([["a", "1"]], None), ({"a": 1, "b": "2"}, {"b": "2"})):
            e = _entry({"path": "f", "metadata": wire_meta}, "", "/work")
            self.assertEqual(e.metadata, want_meta, wire_meta)
        self.assertIsNone(_entry({"path": "f"}, "", "/work").metadata)

    def test_metadata_header(self) -> None:
        # The HTTP upload's header is the map as ASCII JSON, whatever it
        # holds: a key the service must refuse by name reaches it intact,
        # and what no valid map can make is refused here (the service's
        # header bound would answer 431). Over JSON lines it is a field.
        for meta in ({"author": "ana", "Mixed Case": '"q" <&> \\ ~', "empty": ""},
                     {"a\nb": "tab\there", "del\x7f": "caf\u00e9", "emoji \U0001F600": "\u2028"},
                     {"big": '"' * 4080}):
            method, path, body, ctype, kind, extra = route("upload", {"session": "s1", "path": "d/a b.txt",
                                                                      "data": b"x", "metadata": meta}, False)
            self.assertEqual((method, path, body, ctype, kind), ("PUT", "/v1/sessions/s1/files/d/a%20b.txt", b"x",
                                                                  "application/octet-stream", "json"))
            self.assertEqual(len(extra), 1)
            name, _, value = extra[0].partition(": ")
            self.assertEqual(name, "Jailcell-Metadata")
            self.assertTrue(all(0x20 <= ord(c) <= 0x7e for c in value), value)
            self.assertEqual(json.loads(value), meta)
        for none in (None, {}):
            self.assertEqual(route("upload", {"session": "s1", "path": "a", "data": b"", "metadata": none}, False)[5], [])
        with self.assertRaises(BadRequestError) as cm:
            route("upload", {"session": "s1", "path": "a", "data": b"", "metadata": {"k": "v" * 9000}}, False)
        self.assertIn("4096", cm.exception.message)
        with self.assertRaises(BadRequestError):
            self.sbx.files.write("a", "x", metadata={"k": 1})  # type: ignore[dict-item]
        with self.assertRaises(BadRequestError):
            self.sbx.files.write("a", "x", metadata="k=v")  # type: ignore[arg-type]

    def test_line_bound(self) -> None:
        t = JsonLinesTransport([sys.executable, "-c", REPLAY], timeout=30, max_line=1 << 10)
        self.addCleanup(t.close)
        with self.assertRaises(UnavailableError) as cm:
            t.call("huge", {"path": str(4 << 10)})  # no newline: the reader stops at the bound
        self.assertIn("over 1024 bytes", cm.exception.message)
        with self.assertRaises(UnavailableError):  # the transport is dead after a protocol error
            Sandbox(transport=t)


# An exec answered by the degraded stateless run: the workflow's fields
# travel beside the result.
DEGRADED = {"id": 1, "ok": True, "mode": "degraded",
            "fallback": {"code": "import pandas", "error": "ModuleNotFoundError", "reason": "the fixer gave up",
                         "tried": ["attempt 1", "degraded stateless run"]},
            "result": {"status": "ok"}}


class _FakeSocket:
    """Stands in for Client's SocketTransport: every exec answers resp."""

    def __init__(self, resp: Dict[str, Any]) -> None:
        self.resp = resp

    def request(self, method: str, path: str, body: Any = None, headers: Any = None,
                timeout: Any = None) -> Tuple[int, Dict[str, str], bytes]:
        return 200, {"content-type": "application/json"}, json.dumps(self.resp).encode()

    def _exec(self, path: str, fields: Dict[str, Any], on_event: Any, timeout: Any = None) -> Dict[str, Any]:
        on_event({"event": "stdout", "text": "x\n"})
        return json.loads(json.dumps(self.resp))


class _Recorder(Transport):
    """A transport that records the bound each exec was given."""

    def __init__(self, timeout: float = 900.0) -> None:
        self.timeout = timeout
        self.bounds: List[Optional[float]] = []

    def call(self, op: str, fields: Dict[str, Any], on_event: Any = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        if op == "create":
            return {"ok": True, "session": "s" * 32, "state": "ready"}
        self.bounds.append(timeout)
        return {"ok": True, "result": {"status": "ok"}}


class _OldTransport(Transport):
    """A transport written before call took timeout=."""

    def call(self, op: str, fields: Dict[str, Any], on_event: Any = None) -> Dict[str, Any]:
        if op == "create":
            return {"ok": True, "session": "s" * 32, "state": "ready"}
        return {"ok": True, "result": {"status": "ok"}}


class FakePeerTest(unittest.TestCase):
    """What the wire carries beside a result or an error reaches the caller,
    and each call's bound reaches the transport; fakes stand in for jailcell."""

    def test_client_exec_degraded(self) -> None:
        # A caller of Client.exec must see that the cell ran in a fresh
        # stateless sandbox: its variables are not in the session.
        jc = Client("/nonexistent/jailcell.sock")
        jc._t = _FakeSocket(DEGRADED)  # type: ignore[assignment]
        for kw in ({}, {"on_output": lambda stream, text: None}):
            r = jc.exec("import pandas", session="s1", **kw)  # type: ignore[arg-type]
            self.assertEqual((r["status"], r.get("mode")), ("ok", "degraded"), kw)
            self.assertEqual(r.get("fallback"), DEGRADED["fallback"], kw)
        plain = dict(DEGRADED, result={"status": "ok"})
        for k in ("mode", "fallback"):
            del plain[k]
        jc._t = _FakeSocket(plain)  # type: ignore[assignment]
        self.assertEqual(jc.exec("1", session="s1"), {"status": "ok"})

    def test_error_state_lost(self) -> None:
        # A session lost with its kernel: not_found with state "lost".
        with self.assertRaises(NotFoundError) as cm:
            _checked(404, {"ok": False, "error": {"code": "not_found", "message": "m", "state": "lost"}})
        self.assertEqual((cm.exception.state, cm.exception.status, cm.exception.message), ("lost", 404, "m"))
        with self.assertRaises(NotFoundError) as cm:
            _checked(404, {"ok": False, "error": {"code": "not_found", "message": "m"}})
        self.assertIsNone(cm.exception.state)
        with self.assertRaises(NotFoundError) as cm:
            _checked(404, {"ok": False, "error": {"code": "not_found", "message": "m", "state": ["forged"]}})
        self.assertIsNone(cm.exception.state)

    def test_run_code_request_timeout(self) -> None:
        # request_timeout bounds the call; a cell timeout alone gives the
        # cell a minute more, never less than the transport's own bound.
        cases = [({"request_timeout": 5}, 5.0), ({"timeout": 1200}, 1260.0), ({"timeout": 10}, 900.0),
                 ({"timeout": 1200, "request_timeout": 30}, 30.0), ({}, None)]
        rec = _Recorder()
        sbx = Sandbox(transport=rec)
        for kw, _ in cases:
            sbx.run_code("x = 1", **kw)  # type: ignore[arg-type]
        self.assertEqual(rec.bounds, [want for _, want in cases])
        rec = _Recorder(timeout=2000)
        Sandbox(transport=rec).run_code("x = 1", timeout=10)
        Sandbox.run_once("x = 1", transport=rec, timeout=3000)
        self.assertEqual(rec.bounds, [2000.0, 3060.0])

        async def aio() -> List[Optional[float]]:
            r = _Recorder()
            a = await AsyncSandbox.create(transport=r)  # a blocking transport, through ThreadedTransport
            for kw, _ in cases:
                await a.run_code("x = 1", **kw)  # type: ignore[arg-type]
            return r.bounds
        self.assertEqual(asyncio.run(aio()), [want for _, want in cases])
        # A transport without timeout= keeps working, on its own bound.
        self.assertEqual(Sandbox(transport=_OldTransport()).run_code("x = 1", timeout=1200).status, "ok")

    def test_call_timeout_reaches_the_wire(self) -> None:
        # A per-call bound shorter than the transport's ends a call that
        # gets no answer: over the socket and over JSON lines.
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, "s")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        self.addCleanup(srv.close)
        t = SocketTransport(path, timeout=60)
        self.addCleanup(t.close)
        start = time.monotonic()
        with self.assertRaises(OSError):  # socket.timeout
            t.call("exec", {"session": "s1", "code": "x"}, timeout=0.3)
        self.assertLess(time.monotonic() - start, 10)
        j = JsonLinesTransport([sys.executable, "-c", "import sys\nfor _ in sys.stdin: pass"], timeout=60)
        self.addCleanup(j.close)
        start = time.monotonic()
        with self.assertRaises(TimeoutError):
            j.call("exec", {"session": "s1", "code": "x"}, timeout=0.3)
        self.assertLess(time.monotonic() - start, 10)


if __name__ == "__main__":
    unittest.main()
