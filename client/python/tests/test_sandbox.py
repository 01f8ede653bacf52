"""Tests of Sandbox and AsyncSandbox against the real jailcell, through both
transports: a `jailcell serve` socket (JAILCELL_SOCKET) and a `jailcell json`
subprocess (JAILCELL_JSON_COMMAND, a JSON array: the command line).

Run by test/pyclient/python_test.go after installing the package into a venv; by
hand, as root:

    JAILCELL_SOCKET=/tmp/jc.sock JAILCELL_JSON_COMMAND='["sh", "-c", "exec jailcell json \\
        --state-dir $(mktemp -d)"]' python3 -m unittest -v tests.test_sandbox

(each `jailcell json` needs a state directory of its own).

JAILCELL_FIXER=1 says the jailcell under test has testdata/fixer/
fix_name_error.py as its fixer.
"""

import asyncio
import base64
import json
import os
import threading
import unittest
from typing import Any, List, Optional, Tuple

import jailcell
from jailcell import (AsyncSandbox, BadRequestError, Execution, ExecutionError, JailcellError, JsonLinesTransport,
                      NotFoundError, OutputMessage, Result, Sandbox, SocketTransport, Transport)

# A session id: the node.id (from the host name by default), "-", 128 random bits.
SESSION_ID = r"^[a-z0-9]{1,16}-[0-9a-f]{32}$"

SOCKET = os.environ.get("JAILCELL_SOCKET")
JSON_COMMAND: Optional[List[str]] = json.loads(os.environ["JAILCELL_JSON_COMMAND"]) if os.environ.get(
    "JAILCELL_JSON_COMMAND") else None
FIXER = os.environ.get("JAILCELL_FIXER") == "1"

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

FIGURE = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
          "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n")


class _Cases:
    """The sync cases, run once per transport by the subclasses below."""

    assertEqual: Any
    assertIn: Any
    assertIsNone: Any
    assertIsNotNone: Any
    assertTrue: Any
    assertRaises: Any

    def transport(self) -> Transport:
        raise NotImplementedError

    def sandbox(self, **kw: Any) -> Sandbox:
        sbx = Sandbox(transport=self.transport(), ttl=120, **kw)
        self.addCleanup(sbx.kill)  # type: ignore[attr-defined]
        return sbx

    def test_variable_persists(self) -> None:
        sbx = self.sandbox()
        self.assertRegex(sbx.sandbox_id, SESSION_ID)
        ex = sbx.run_code("x = 41")
        self.assertEqual((ex.status, ex.error, ex.text, ex.results), ("ok", None, None, []))
        ex = sbx.run_code("x + 1")
        self.assertEqual(ex.text, "42")
        self.assertTrue(ex.results[-1].is_main_result)
        self.assertEqual(ex.results[-1].formats(), ["text"])
        self.assertEqual(ex.state, "kept")
        self.assertIn("wall_ms", ex.usage)
        self.assertTrue(sbx.is_running())

    def test_stdout_callback_order(self) -> None:
        sbx = self.sandbox()
        calls: List[Tuple[str, Any]] = []
        ex = sbx.run_code(
            "import sys, time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.02)\n"
            "print('warn', file=sys.stderr, flush=True)\n'done'",
            on_stdout=lambda t: calls.append(("out", t)),
            on_stderr=lambda t: calls.append(("err", t)),
            on_result=lambda r: calls.append(("result", r)))
        self.assertEqual(ex.status, "ok")
        outs = [t for k, t in calls if k == "out"]
        self.assertEqual("".join(outs), "0\n1\n2\n3\n4\n")
        # E2B's OutputMessage: .line, .timestamp and .error on the str.
        self.assertEqual("".join(m.line for m in outs), "0\n1\n2\n3\n4\n")
        self.assertTrue(all(isinstance(m, OutputMessage) and not m.error and m.timestamp > 0 for m in outs))
        errs = [t for k, t in calls if k == "err"]
        self.assertTrue(errs and all(m.error for m in errs))
        self.assertEqual(ex.logs.stdout, outs)  # logs hold the chunks as they came
        self.assertEqual("".join(ex.logs.stderr), "warn\n")
        # stdout before stderr as printed, the value last.
        kinds = [k for k, _ in calls]
        self.assertEqual(kinds[-1], "result")
        self.assertEqual(kinds.index("err"), len(kinds) - 2)
        self.assertEqual(calls[-1][1].text, "done")

    def test_figure(self) -> None:
        sbx = self.sandbox()
        seen: List[Result] = []
        ex = sbx.run_code(FIGURE + "from IPython.display import HTML, display\ndisplay(HTML('<b>hi</b>'))\n6 * 7",
                          on_result=seen.append)
        self.assertEqual(ex.status, "ok", ex.error)
        self.assertEqual(len(ex.results), 3)
        fig, html, value = ex.results
        self.assertIsNotNone(fig.png)
        self.assertEqual(base64.b64decode(fig.png or "")[:8], PNG_MAGIC)
        self.assertEqual((fig.png_bytes() or b"")[:8], PNG_MAGIC)
        self.assertIn("png", fig.formats())
        self.assertIn("Figure", fig.text)
        self.assertEqual(html.html, "<b>hi</b>")
        self.assertTrue(value.is_main_result)
        self.assertEqual(ex.text, "42")
        # Each display reaches on_result once (as an event, or from the
        # final result when the wire has no display events), the value last.
        self.assertEqual([r.formats() for r in seen], [r.formats() for r in ex.results])
        self.assertEqual(seen[0].png, fig.png)
        self.assertTrue(seen[-1].is_main_result)

    def test_chart(self) -> None:
        # Each figure's Result has .chart beside .png, as E2B's Result.chart,
        # with the numbers, labels and title the cell drew.
        sbx = self.sandbox()
        ex = sbx.run_code(
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [2.5, -1, 4], label='sales')\nplt.title('Q1')\nplt.xlabel('Month')\n"
            "plt.ylabel('Revenue (USD)')\nplt.show()\n"
            "plt.bar(['a', 'b'], [3, 4.5], label='kg')\nplt.show()\n"
            "plt.pie([1, 3], labels=['x', 'y'])\nplt.show()\n"
            "plt.hist([1, 2, 2, 3], bins=[0, 2, 4])\nplt.show()\n"
            "plt.boxplot([[1, 2, 3, 4, 5, 50]], labels=['d'])\nplt.show()\n"
            "plt.imshow([[0, 1], [1, 0]])\nplt.show()\n")
        self.assertEqual(ex.status, "ok", ex.error)
        line, bar, pie, hist, box, image = [r.chart for r in ex.results]
        assert isinstance(box, jailcell.BoxAndWhiskerChart)
        self.assertEqual([(e.label, e.min, e.first_quartile, e.median, e.third_quartile, e.max, e.outliers)
                          for e in box.elements], [("d", 1, 2.25, 3.5, 4.75, 5, [50])])
        self.assertIn("chart", ex.results[0].formats())
        self.assertIsInstance(line, jailcell.LineChart)
        assert isinstance(line, jailcell.LineChart)
        self.assertEqual((line.type, line.title, line.x_label, line.y_label, line.y_unit),
                         (jailcell.ChartType.LINE, "Q1", "Month", "Revenue (USD)", "USD"))
        self.assertEqual([(e.label, e.points) for e in line.elements], [("sales", [(1, 2.5), (2, -1), (3, 4)])])
        self.assertEqual(line.x_scale, jailcell.ScaleType.LINEAR)
        assert isinstance(bar, jailcell.BarChart)
        self.assertEqual([(e.label, e.group, e.value) for e in bar.elements], [("a", "kg", 3), ("b", "kg", 4.5)])
        self.assertEqual(bar.orientation, "vertical")
        assert isinstance(pie, jailcell.PieChart)
        self.assertEqual([(e.label, e.angle, e.radius) for e in pie.elements], [("x", 90, 1), ("y", 270, 1)])
        assert isinstance(hist, jailcell.HistogramChart)
        self.assertEqual([(e.edges, e.counts) for e in hist.elements], [([0, 2, 4], [1, 3])])
        assert image is not None
        self.assertEqual((image.type, image.elements), (jailcell.ChartType.UNKNOWN, []))
        self.assertIn("image", image.reason or "")
        self.assertEqual(line.to_dict()["elements"][0]["points"], [[1, 2.5], [2, -1], [3, 4]])
        # A Figure as the cell's value: the main result has the chart.
        ex = sbx.run_code("fig, ax = plt.subplots()\nax.scatter([1], [2], label='one')\nfig")
        main = ex.results[-1]
        self.assertTrue(main.is_main_result)
        assert isinstance(main.chart, jailcell.ScatterChart)
        self.assertEqual([(e.label, e.points) for e in main.chart.elements], [("one", [(1, 2)])])
        self.assertIsNone(sbx.run_code("1").results[-1].chart)

    def test_error(self) -> None:
        sbx = self.sandbox()
        ex = sbx.run_code("def f():\n    return 1/0\nf()")
        self.assertEqual(ex.status, "error")
        self.assertIsNotNone(ex.error)
        assert ex.error is not None
        self.assertEqual((ex.error.name, ex.error.value), ("ZeroDivisionError", "division by zero"))
        self.assertIn("return 1/0", ex.error.traceback)
        self.assertTrue(ex.error.traceback.rstrip().endswith("ZeroDivisionError: division by zero"))
        self.assertIn("f", [fr["name"] for fr in ex.error.frames])
        self.assertEqual(ex.state, "kept")
        self.assertEqual(sbx.run_code("'still here'").text, "still here")

    def test_shell_failure_and_raw_ansi(self) -> None:
        sbx = self.sandbox()
        ex = sbx.run_code("!exit 3")
        self.assertEqual(ex.status, "error")
        assert ex.error is not None
        self.assertEqual((ex.error.name, ex.error.exit_code), ("subprocess.CalledProcessError", 3))
        other = sbx.run_code("1/0").error
        assert other is not None
        self.assertIsNone(other.exit_code)
        code = "print('\\x1b[31mred\\x1b[0m', end='\\r\\n')"
        self.assertEqual("".join(sbx.run_code(code).logs.stdout), "red\n")
        self.assertEqual("".join(sbx.run_code(code, raw_ansi=True).logs.stdout), "\x1b[31mred\x1b[0m\r\n")

    def test_files_round_trip(self) -> None:
        sbx = self.sandbox()
        sbx.files.write("dir/in put.bin", bytes(range(256)))
        sbx.files.write("note.txt", "héllo\n")
        ex = sbx.run_code("open('out.bin','wb').write(open('dir/in put.bin','rb').read()[::-1])")
        self.assertEqual(ex.status, "ok")
        self.assertEqual([(f.path, f.change, f.size) for f in ex.files], [("out.bin", "created", 256)])
        self.assertEqual(sbx.files.read("out.bin", format="bytes"), bytes(reversed(range(256))))
        self.assertEqual(sbx.files.read("note.txt"), "héllo\n")
        paths = {e.path: e for e in sbx.files.list()}
        self.assertIn("out.bin", paths)
        self.assertTrue(paths["dir"].is_dir)
        self.assertEqual(paths["dir/in put.bin"].size, 256)
        self.assertEqual([e.path for e in sbx.files.list("dir")], ["dir", "dir/in put.bin"])
        self.assertTrue(sbx.files.exists("note.txt"))
        self.assertTrue(not sbx.files.exists("missing.txt"))
        with self.assertRaises(NotFoundError):
            sbx.files.read("missing.txt")
        with self.assertRaises(BadRequestError) as cm:
            sbx.files.read("../../etc/passwd")
        self.assertIn("..", cm.exception.message)
        with self.assertRaises(BadRequestError):
            sbx.files.read("x", format="hex")

    def test_run_once(self) -> None:
        ex = Sandbox.run_once("open('o.txt','w').write(open('i.txt').read().upper())", transport=self.transport(),
                              files={"i.txt": b"abc"})
        self.assertEqual(ex.status, "ok")
        self.assertEqual({f.path: f.data for f in ex.files}.get("o.txt"), b"ABC")

    def test_errors_and_kill(self) -> None:
        with self.assertRaises(BadRequestError) as cm:
            Sandbox(transport=self.transport(), policy="no-such-policy")
        self.assertIn("no-such-policy", cm.exception.message)
        with self.assertRaises(BadRequestError):
            Sandbox(transport=self.transport(), limits={"memry_bytes": 1})
        sbx = self.sandbox()
        with self.assertRaises(BadRequestError):
            sbx.run_code("")
        with self.assertRaises(BadRequestError):
            sbx.run_code("1", fix_attempts=0)
        self.assertTrue(sbx.kill())
        self.assertTrue(not sbx.kill())  # already ended
        with self.assertRaises(NotFoundError) as nf:
            sbx.run_code("1")
        self.assertIsInstance(nf.exception, JailcellError)  # type: ignore[attr-defined]
        self.assertEqual(nf.exception.code, "not_found")

    def test_context_manager(self) -> None:
        with Sandbox(transport=self.transport(), ttl=60) as sbx:
            sid = sbx.sandbox_id
            self.assertEqual(sbx.run_code("1 + 1").text, "2")
        live = [s["session"] for s in self.transport().call("sessions", {})["sessions"]]
        self.assertTrue(sid not in live, "the session outlived its with block")

    def test_timeout(self) -> None:
        sbx = self.sandbox()
        sbx.run_code("y = 1")
        ex = sbx.run_code("import time\ntime.sleep(30)", timeout=1)
        self.assertEqual(ex.status, "timeout")
        self.assertIn("time", ex.limits)

    def test_interrupt(self) -> None:
        sbx = self.sandbox()
        sbx.run_code("kept = 'yes'")
        ready = threading.Event()
        done: List[Execution] = []
        runner = threading.Thread(target=lambda: done.append(sbx.run_code(
            "import time\nprint('ready', flush=True)\ntime.sleep(600)", on_stdout=lambda _: ready.set())))
        runner.start()
        try:
            self.assertTrue(ready.wait(60), "the cell did not start")
            try:
                interrupted = sbx.interrupt()
            except (BadRequestError, NotFoundError) as e:
                # A jailcell from before the interrupt op: it refuses the
                # op by name (and the cell is ended by kill below).
                self.assertIn("interrupt", e.message)
                sbx.kill()
                runner.join(60)
                return
            self.assertTrue(interrupted)
            runner.join(60)
            self.assertEqual(len(done), 1, "run_code did not return after the interrupt")
            ex = done[0]
            self.assertEqual((ex.status, ex.error.name if ex.error else None, ex.state),
                             ("error", "KeyboardInterrupt", "kept"))
            self.assertEqual(sbx.run_code("kept").text, "yes")
            self.assertTrue(not sbx.interrupt())  # nothing is running now
        finally:
            if runner.is_alive():
                sbx.kill()
                runner.join(60)

    @unittest.skipUnless(FIXER, "JAILCELL_FIXER is not set: the jailcell under test has no fixer")
    def test_fix_and_retry(self) -> None:
        sbx = self.sandbox()
        ex = sbx.run_code("pritn(6 * 7)", fix_attempts=3)
        self.assertEqual(ex.status, "ok", ex.raw)
        self.assertEqual("".join(ex.logs.stdout), "42\n")
        self.assertEqual([(a.attempt, a.status) for a in ex.attempts], [(1, "error"), (2, "ok")])
        first = ex.attempts[0].error
        self.assertIsInstance(first, ExecutionError)  # type: ignore[attr-defined]
        assert first is not None
        self.assertEqual(first.name, "NameError")
        self.assertEqual(ex.attempts[1].code, "print(6 * 7)")
        self.assertIsNone(ex.fallback)
        # The fixer cannot repair this one: the loop ends with a fallback.
        ex = sbx.run_code("1/0", fix_attempts=2)
        self.assertEqual(ex.status, "error")
        self.assertIsNotNone(ex.fallback)
        assert ex.fallback is not None
        self.assertEqual(ex.fallback["code"], "1/0")


@unittest.skipUnless(SOCKET, "JAILCELL_SOCKET is not set: no jailcell serve to test against")
class SocketSandboxTest(_Cases, unittest.TestCase):
    def transport(self) -> Transport:
        assert SOCKET is not None
        return SocketTransport(SOCKET, timeout=120)

    def test_socket_argument(self) -> None:
        with Sandbox(socket=SOCKET) as sbx:
            self.assertEqual(repr(sbx.transport), "SocketTransport(%r)" % SOCKET)
            self.assertEqual(sbx.run_code("print('via socket')").logs.stdout, ["via socket\n"])

    def test_missing_socket(self) -> None:
        with self.assertRaises(jailcell.UnavailableError) as cm:
            Sandbox(socket=SOCKET + ".missing")  # type: ignore[operator]
        self.assertIn(".missing", cm.exception.message)


@unittest.skipUnless(JSON_COMMAND, "JAILCELL_JSON_COMMAND is not set: no `jailcell json` to start")
class JsonLinesSandboxTest(_Cases, unittest.TestCase):
    shared: JsonLinesTransport

    @classmethod
    def setUpClass(cls) -> None:
        assert JSON_COMMAND is not None
        cls.shared = JsonLinesTransport(JSON_COMMAND, timeout=120)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.shared.close()
        assert cls.shared.returncode == 0, "jailcell json exited %s: %s" % (
            cls.shared.returncode, cls.shared.stderr_tail())

    def transport(self) -> Transport:
        return self.shared

    def test_command_argument(self) -> None:
        # A sandbox with its own `jailcell json`, ended with it.
        sbx = Sandbox(command=JSON_COMMAND)
        t = sbx.transport
        assert isinstance(t, JsonLinesTransport)
        self.assertEqual(sbx.run_code("x = 2\nx ** 10").text, "1024")
        self.assertTrue(sbx.kill())
        self.assertEqual(t.returncode, 0)

    def test_process_death(self) -> None:
        t = JsonLinesTransport(["/bin/sh", "-c", "read line; echo 'going away' >&2; exit 3"], timeout=30)
        with self.assertRaises(jailcell.UnavailableError) as cm:
            Sandbox(transport=t)
        self.assertIn("exit status 3", cm.exception.message)
        self.assertIn("going away", cm.exception.message)
        t.close()


class _AsyncCases:
    assertEqual: Any
    assertTrue: Any
    assertIn: Any

    def transport(self) -> Transport:
        raise NotImplementedError

    def test_async_sandboxes_run_at_once(self) -> None:
        asyncio.run(self._two_sandboxes())

    async def _two_sandboxes(self) -> None:
        a = await AsyncSandbox.create(transport=self.transport(), ttl=120)
        b = await AsyncSandbox.create(transport=self.transport(), ttl=120)
        try:
            await asyncio.gather(a.run_code("who = 'a'"), b.run_code("who = 'b'"))
            # a's cell waits until it is killed; b's cells run meanwhile.
            # That b finished while a's call was still pending proves the
            # two ran at once, with no clock involved.
            a_ready = asyncio.Event()
            a_out: List[str] = []

            async def on_a(text: str) -> None:  # a coroutine callback, on this loop
                a_out.append(text)
                a_ready.set()

            a_task = asyncio.ensure_future(a.run_code(
                "import time\nprint(who, flush=True)\nwhile True:\n    time.sleep(0.1)", on_stdout=on_a))
            await asyncio.wait_for(a_ready.wait(), 60)
            b_out: List[str] = []
            ex_b = await b.run_code("print(who); who", on_stdout=b_out.append)
            self.assertEqual((ex_b.text, b_out), ("b", ["b\n"]))
            await b.files.write("f.txt", "from b")
            self.assertEqual(await b.files.read("f.txt"), "from b")
            self.assertEqual([e.path for e in await b.files.list()], ["f.txt"])
            self.assertTrue(not a_task.done(), "a's cell ended before it was killed")
            self.assertTrue(await a.kill())
            ex_a = await asyncio.wait_for(a_task, 60)
            self.assertIn(ex_a.status, ("killed", "error"))
            self.assertEqual(a_out, ["a\n"])
        finally:
            await a.kill()
            await b.kill()


@unittest.skipUnless(SOCKET, "JAILCELL_SOCKET is not set: no jailcell serve to test against")
class SocketAsyncTest(_AsyncCases, unittest.TestCase):
    def transport(self) -> Transport:
        assert SOCKET is not None
        return SocketTransport(SOCKET, timeout=120)

    def test_async_with(self) -> None:
        async def go() -> Tuple[str, List[Result]]:
            async with await AsyncSandbox.create(SOCKET) as sbx:
                seen: List[Result] = []
                ex = await sbx.run_code(FIGURE, on_result=seen.append)
                self.assertEqual(ex.status, "ok")
                return sbx.sandbox_id, seen
        sid, seen = asyncio.run(go())
        self.assertRegex(sid, SESSION_ID)
        self.assertEqual(base64.b64decode(seen[0].png or "")[:8], PNG_MAGIC)


@unittest.skipUnless(JSON_COMMAND, "JAILCELL_JSON_COMMAND is not set: no `jailcell json` to start")
class JsonLinesAsyncTest(_AsyncCases, unittest.TestCase):
    def setUp(self) -> None:
        assert JSON_COMMAND is not None
        self.t = JsonLinesTransport(JSON_COMMAND, timeout=120)
        self.addCleanup(self.t.close)

    def transport(self) -> Transport:
        return self.t


@unittest.skipUnless(os.environ.get("JAILCELL_PY_INSTALLED") == "1", "JAILCELL_PY_INSTALLED is not set: "
                     "the package under test may be a source tree, not an install")
class InstalledTest(unittest.TestCase):
    def test_installed_typed_package(self) -> None:
        # The tests run against the installed package, typed.
        where = os.path.dirname(jailcell.__file__)
        self.assertIn("site-packages", where)
        self.assertTrue(os.path.exists(os.path.join(where, "py.typed")))


if __name__ == "__main__":
    unittest.main()
