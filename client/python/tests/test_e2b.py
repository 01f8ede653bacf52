"""Tests of the E2B-shaped surface (sandbox.commands, envs, files.remove/
make_dir/exists/rename/watch_dir, get_info, set_timeout, get_metrics,
Sandbox.connect) against the real jailcell, through both transports: a
`jailcell serve` socket (JAILCELL_SOCKET) and a `jailcell json` subprocess
(JAILCELL_JSON_COMMAND); AsyncSandbox also over the service's TCP listener
(JAILCELL_TCP_URL, JAILCELL_TCP_TOKEN). Run by test/pyclient/python_test.go
(TestPythonE2B)."""

import asyncio
import json
import os
import threading
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

from jailcell import (AsyncJsonLinesTransport, JailcellError, AsyncSandbox, AsyncSocketTransport, BadRequestError, BusyError,
                      CommandExitException, CommandHandle, FilesystemEvent, FilesystemEventType, JsonLinesTransport,
                      NotFoundError, PtySize, Sandbox, SocketTransport, Transport, UnavailableError)

SOCKET = os.environ.get("JAILCELL_SOCKET")
TCP_URL = os.environ.get("JAILCELL_TCP_URL")
TCP_TOKEN = os.environ.get("JAILCELL_TCP_TOKEN")

# A 401 for a wrong token: its class depends on the wire code the listener
# answers with; every one is a JailcellError.
ForbiddenOrAuth = JailcellError
JSON_COMMAND: Optional[List[str]] = json.loads(os.environ["JAILCELL_JSON_COMMAND"]) if os.environ.get(
    "JAILCELL_JSON_COMMAND") else None


class _Cases:
    assertEqual: Any
    assertIn: Any
    assertRaisesRegex: Any
    assertTrue: Any
    assertFalse: Any
    assertRaises: Any
    assertGreater: Any
    assertLessEqual: Any
    assertIsInstance: Any
    assertLess: Any
    assertIsNone: Any

    def transport(self) -> Transport:
        raise NotImplementedError

    def sandbox(self, **kw: Any) -> Sandbox:
        sbx = Sandbox(transport=self.transport(), ttl=120, **kw)
        self.addCleanup(sbx.kill)  # type: ignore[attr-defined]
        return sbx

    def test_commands_run(self) -> None:
        sbx = self.sandbox(envs={"FROM_SANDBOX": "sb"})
        out: List[str] = []
        err: List[str] = []
        r = sbx.commands.run('echo "$FROM_SANDBOX $FROM_CMD"; pwd; echo warn >&2', envs={"FROM_CMD": "cmd"},
                             cwd="sub" if sbx.files.make_dir("sub") else None, on_stdout=out.append,
                             on_stderr=err.append)
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.error), (0, "sb cmd\n/work/sub\n", "warn\n", None))
        self.assertEqual("".join(out), r.stdout)
        self.assertEqual("".join(err), r.stderr)
        # A non-zero exit raises, carrying the result, as E2B's does.
        with self.assertRaises(CommandExitException) as cm:
            sbx.commands.run("echo partial; exit 7")
        self.assertEqual((cm.exception.exit_code, cm.exception.stdout), (7, "partial\n"))
        # The timeout: interrupted, then killed; reported, not hung.
        with self.assertRaises(CommandExitException) as cm:
            sbx.commands.run("sleep 600", timeout=1)
        self.assertTrue(cm.exception.result.timed_out)
        # Bad input names what was wrong.
        with self.assertRaises(BadRequestError) as bad:
            sbx.commands.run("true", cwd="/etc")
        self.assertIn("cwd", bad.exception.message)
        with self.assertRaises(BadRequestError):
            sbx.commands.run("true", envs={"A=B": "x"})
        # The cell sees the sandbox's envs and its own, the latter only once.
        self.assertEqual(sbx.run_code("import os; os.environ['FROM_SANDBOX'] + os.environ.get('CELL', '')",
                                      envs={"CELL": "!"}).text, "sb!")
        self.assertEqual(sbx.run_code("os.environ.get('CELL', 'unset')").text, "unset")

    def test_background_command(self) -> None:
        sbx = self.sandbox()
        h = sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.1; done; echo fin > bg.txt", background=True)
        self.assertIsInstance(h, CommandHandle)
        self.assertGreater(h.pid, 0)
        # The session is free while it runs: a cell reads what it made.
        streamed: List[str] = []
        r = h.wait(on_stdout=streamed.append)
        self.assertEqual((r.exit_code, r.stdout), (0, "1\n2\n3\n"))
        self.assertEqual("".join(streamed), "1\n2\n3\n")
        self.assertEqual(sbx.files.read("bg.txt"), "fin\n")
        # A server in the background, queried by a cell, then killed.
        srv = sbx.commands.run("python3 -c \"import socket,time,os\ns=socket.socket(socket.AF_UNIX)\n"
                               "s.bind('/work/.srv.sock'); s.listen(); os.rename('/work/.srv.sock', '/work/srv.sock')\n"
                               "c,_=s.accept(); c.sendall(b'pong')\n"
                               "time.sleep(600)\"", background=True, timeout=0)
        # The socket is renamed into place once listening: a connect between bind and listen is refused.
        ex = sbx.run_code("import socket, time, os\nwhile not os.path.exists('/work/srv.sock'): time.sleep(0.05)\n"
                          "c = socket.socket(socket.AF_UNIX); c.connect('/work/srv.sock'); c.recv(4)")
        self.assertEqual(ex.text, "b'pong'", ex.error)
        self.assertTrue(srv.kill())
        self.assertEqual(srv.exit_code, -9)
        self.assertFalse(srv.kill())

    def test_files_e2b(self) -> None:
        sbx = self.sandbox()
        self.assertTrue(sbx.files.make_dir("data/raw"))
        self.assertFalse(sbx.files.make_dir("/work/data/raw"))
        self.assertTrue(sbx.files.exists("data"))
        self.assertFalse(sbx.files.exists("nope.txt"))
        handle = sbx.files.watch_dir("data", recursive=True)
        sbx.files.write("data/raw/a.csv", "1,2\n")
        sbx.run_code("import os\nos.rename('data/raw/a.csv', 'data/a.csv')\nopen('data/b.txt', 'w').write('b')")
        time.sleep(0.15)
        events = handle.get_new_events()
        self.assertIn(FilesystemEvent("a.csv", FilesystemEventType.CREATE), events)
        self.assertIn(FilesystemEvent("b.txt", FilesystemEventType.WRITE), events)
        info = sbx.files.get_info("data/a.csv")
        self.assertEqual((info.size, info.is_dir), (4, False))
        # E2B's mode, permissions, owner and symlink_target; a link is
        # described, never followed.
        sbx.run_code("import os\nopen('f.txt', 'w').write('hi')\nos.chmod('f.txt', 0o640)\nos.symlink('f.txt', 'ln')")
        f = sbx.files.get_info("f.txt")
        self.assertEqual((f.type, f.mode, f.permissions, f.owner, f.group, f.symlink_target),
                         ("file", 0o640, "-rw-r-----", "root", "root", None))
        ln = sbx.files.get_info("ln")
        self.assertEqual((ln.type, ln.mode, ln.permissions, ln.is_dir, ln.symlink_target),
                         ("symlink", 0, "Lrwxrwxrwx", False, "/work/f.txt"))
        listed = {e.path: e for e in sbx.files.list()}
        self.assertEqual((listed["f.txt"].mode, listed["ln"].type, listed["ln"].symlink_target),
                         (0o640, "symlink", "/work/f.txt"))
        sbx.files.remove("data")
        self.assertFalse(sbx.files.exists("data/a.csv"))
        time.sleep(0.15)
        self.assertIn(FilesystemEventType.REMOVE, [e.type for e in handle.get_new_events()])
        handle.stop()
        with self.assertRaises(NotFoundError):
            sbx.files.remove("data")

    def test_files_rename(self) -> None:
        sbx = self.sandbox()
        meta = {"author": "ana"}
        sbx.files.write("r/a.txt", "moved", metadata=meta)
        # Into a directory the rename makes: the entry at the new path,
        # metadata and all; the old path is gone.
        e = sbx.files.rename("r/a.txt", "r/new/sub/b.txt")
        self.assertEqual((e.name, e.path, e.type, e.size, e.metadata), ("b.txt", "r/new/sub/b.txt", "file", 5, meta))
        self.assertFalse(sbx.files.exists("r/a.txt"))
        self.assertEqual(sbx.files.read("r/new/sub/b.txt"), "moved")
        # A directory with what it holds; absolute paths under either name
        # of the workspace.
        d = sbx.files.rename("/work/r/new", "/home/user/moved")
        self.assertEqual((d.name, d.path, d.type, d.is_dir), ("moved", "moved", "dir", True))
        self.assertEqual(sbx.files.get_info("moved/sub/b.txt").metadata, meta)
        self.assertFalse(sbx.files.exists("r/new"))
        # A directory never goes onto what exists, nor into itself.
        with self.assertRaisesRegex(BadRequestError, "exists"):
            sbx.files.rename("moved", "r")
        with self.assertRaises(BadRequestError):
            sbx.files.rename("moved", "moved/in")
        with self.assertRaisesRegex(NotFoundError, "nope"):
            sbx.files.rename("nope", "x")

    def test_file_metadata(self) -> None:
        sbx = self.sandbox()
        # E2B's metadata= on write, back on get_info and list; keys as
        # given (E2B's door lowercases them, this wire does not).
        meta = {"author": "ana", "Mixed Case": '"q" <&> \\ ~', "empty": ""}
        w = sbx.files.write("m.txt", "m", metadata=meta)
        self.assertEqual((w.path, w.size, w.metadata), ("m.txt", 1, meta))
        self.assertEqual(sbx.files.get_info("m.txt").metadata, meta)
        listed = {e.path: e.metadata for e in sbx.files.list()}
        self.assertEqual(listed["m.txt"], meta)
        # Each write replaces the whole map; one without clears it.
        self.assertEqual(sbx.files.write("m.txt", "mm", metadata={"author": "bo"}).metadata, {"author": "bo"})
        self.assertEqual(sbx.files.get_info("m.txt").metadata, {"author": "bo"})
        self.assertIsNone(sbx.files.write("m.txt", "plain").metadata)
        self.assertIsNone(sbx.files.get_info("m.txt").metadata)
        # What a program in the sandbox sets under user.e2b. is metadata too.
        sbx.run_code("import os\nos.setxattr('m.txt', 'user.e2b.by', b'cell')")
        self.assertEqual(sbx.files.get_info("m.txt").metadata, {"by": "cell"})
        # Refused by name, and nothing written.
        for bad in ({"a\nb": "v"}, {"": "v"}, {"k": "caf\u00e9"}, {"del\x7f": "v"}, {"\U0001F600": "v"},
                    {"k": "v" * 4096}):
            with self.assertRaises(BadRequestError, msg=repr(bad)) as cm:
                sbx.files.write("bad.txt", "x", metadata=bad)
            self.assertIn("metadata", cm.exception.message)
        self.assertFalse(sbx.files.exists("bad.txt"))

    def test_info_timeout_metrics_connect(self) -> None:
        sbx = self.sandbox(metadata={"user": "me"})
        sbx.run_code("x = 41\nblob = bytearray(32 << 20)")
        info = sbx.get_info()
        self.assertEqual((info.sandbox_id, info.state, info.metadata), (sbx.sandbox_id, "running", {"user": "me"}))
        assert info.started_at is not None and info.end_at is not None
        sbx.set_timeout(90)
        end = sbx.get_info().end_at
        assert end is not None
        left = end.timestamp() - time.time()
        self.assertTrue(80 < left <= 91, left)
        with self.assertRaises(BadRequestError) as cm:
            sbx.set_timeout(10 ** 7)
        self.assertIn("max_idle_ttl", cm.exception.message)
        m = sbx.get_metrics()
        self.assertEqual(len(m), 1)
        self.assertGreater(m[0].mem_used, 32 << 20)
        self.assertLessEqual(m[0].mem_used, m[0].mem_total)
        self.assertGreater(m[0].disk_total, 0)
        # Reattach by id: the same kernel, its variables.
        again = Sandbox.connect(sbx.sandbox_id, transport=self.transport(), timeout=30)
        self.assertEqual(again.run_code("x + 1").text, "42")
        # E2B's connect never shortens: the 90 s end stays (less the time since).
        kept = sbx.get_info().end_at
        assert kept is not None
        self.assertGreater(kept.timestamp() - time.time(), 60)
        with self.assertRaises(NotFoundError):
            Sandbox.connect("nope-0123", transport=self.transport())

    def test_lifecycle_pause(self) -> None:
        # E2B's lifecycle: the timeout pauses the sandbox with its memory,
        # and its next cell finds its variables.
        sbx = Sandbox.create(transport=self.transport(), timeout=1, lifecycle={"on_timeout": "pause"})
        self.addCleanup(sbx.kill)  # type: ignore[attr-defined]
        self.assertEqual(sbx.info.get("hibernate_on_idle"), True)
        sbx.run_code("x = 41")
        # get_info does not renew the timeout: polling it waits for the sweep.
        deadline = time.monotonic() + 30
        info = sbx.get_info()
        while info.state != "paused":
            self.assertLess(time.monotonic(), deadline, "not paused 30 s past its 1 s timeout: %r" % (info,))
            time.sleep(0.1)
            info = sbx.get_info()
        self.assertEqual((info.jailcell_state, info.hibernate_on_idle, info.lifecycle),
                         ("hibernated", True, {"on_timeout": "pause", "auto_resume": True}))
        self.assertEqual(sbx.run_code("x + 1").text, "42")
        # kill, E2B's default, and pause written as E2B's dict form.
        for lifecycle, pause in (({"on_timeout": "kill"}, False),
                                 ({"on_timeout": {"action": "pause", "keep_memory": True}, "auto_resume": True}, True)):
            other = Sandbox.create(transport=self.transport(), timeout=60, lifecycle=lifecycle)
            try:
                got = other.get_info()
                self.assertEqual((got.hibernate_on_idle, got.lifecycle["on_timeout"]),
                                 (pause, "pause" if pause else "kill"), lifecycle)
            finally:
                other.kill()

    def test_command_stdin(self) -> None:
        sbx = self.sandbox()
        cat = sbx.commands.run("cat", background=True, stdin=True)
        cat.send_stdin("Hello\n")
        cat.close_stdin()
        r = cat.wait()
        self.assertEqual((r.exit_code, r.stdout), (0, "Hello\n"))
        with self.assertRaises(BadRequestError):
            cat.send_stdin("late")  # it ended
        # Bytes, by pid through sandbox.commands; bytes that are not UTF-8
        # are refused here.
        raw = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(raw.pid, "é\n".encode())
        with self.assertRaisesRegex(BadRequestError, "UTF-8"):
            raw.send_stdin(b"\xff")
        sbx.commands.close_stdin(raw.pid)
        self.assertEqual(raw.wait().stdout, "é\n")
        no_stdin = sbx.commands.run("sleep 30", background=True)
        with self.assertRaisesRegex(BadRequestError, "stdin"):
            no_stdin.send_stdin("x")
        no_stdin.kill()

    def test_pty(self) -> None:
        sbx = self.sandbox()
        term = sbx.pty.create(PtySize(rows=24, cols=80))
        with self.assertRaises(BadRequestError):
            term.close_stdin()  # a terminal takes Ctrl-D, not an end of file
        sbx.pty.send_stdin(term.pid, b"stty size; exit\n")
        shown: List[bytes] = []
        r = term.wait(on_pty=shown.append)
        self.assertEqual(r.exit_code, 0)
        self.assertIn("24 80", r.stdout)
        self.assertEqual(b"".join(shown).decode(), r.stdout)
        resized = sbx.pty.create(PtySize(rows=24, cols=80))
        sbx.pty.resize(resized.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(resized.pid, b"stty size; exit\n")
        self.assertIn("30 100", resized.wait().stdout)

    def test_busy_while_command_waits(self) -> None:
        sbx = self.sandbox()
        done: List[Any] = []
        th = threading.Thread(target=lambda: done.append(sbx.commands.run("sleep 3; echo ok")))
        th.start()
        # Once the command holds the session (its info says busy), a cell
        # is refused at once rather than queued.
        deadline = time.monotonic() + 20
        while sbx.get_info().jailcell_state != "busy" and time.monotonic() < deadline:
            time.sleep(0.02)
        with self.assertRaises(BusyError):
            sbx.run_code("1")
        th.join()
        self.assertEqual(done[0].stdout, "ok\n")


async def _async_metadata(t: unittest.TestCase, sbx: AsyncSandbox) -> None:
    """File metadata through AsyncSandbox: written, shown, cleared, and a
    key the service refuses raises BadRequestError with no file written."""
    meta = {"author": "ana", "Mixed Case": "<&>"}
    t.assertEqual((await sbx.files.write("m.txt", "m", metadata=meta)).metadata, meta)
    t.assertEqual((await sbx.files.get_info("m.txt")).metadata, meta)
    t.assertEqual({e.path: e.metadata for e in await sbx.files.list()}["m.txt"], meta)
    t.assertIsNone((await sbx.files.write("m.txt", "plain")).metadata)
    t.assertIsNone((await sbx.files.get_info("m.txt")).metadata)
    for bad in ({"a\nb": "v"}, {"\U0001F600": "v"}):
        with t.assertRaises(BadRequestError, msg=repr(bad)):
            await sbx.files.write("bad.txt", "x", metadata=bad)
    t.assertFalse(await sbx.files.exists("bad.txt"))


async def _async_rename(t: unittest.TestCase, sbx: AsyncSandbox) -> None:
    """files.rename through AsyncSandbox: a file into a new directory with
    its metadata, a directory, one onto what exists refused, a missing
    source not found."""
    meta = {"author": "ana"}
    await sbx.files.write("r/a.txt", "moved", metadata=meta)
    e = await sbx.files.rename("r/a.txt", "r/new/b.txt")
    t.assertEqual((e.path, e.size, e.metadata), ("r/new/b.txt", 5, meta))
    t.assertFalse(await sbx.files.exists("r/a.txt"))
    t.assertEqual(await sbx.files.read("r/new/b.txt"), "moved")
    t.assertTrue((await sbx.files.rename("r/new", "moved")).is_dir)
    t.assertEqual(await sbx.files.read("moved/b.txt"), "moved")
    with t.assertRaises(BadRequestError):
        await sbx.files.rename("moved", "r")
    with t.assertRaises(NotFoundError):
        await sbx.files.rename("nope", "x")


class _OldServer(Transport):
    """A server older than hibernate_on_idle: it ignores the field."""

    def __init__(self) -> None:
        self.calls: List[Any] = []

    def call(self, op: str, fields: Dict[str, Any], on_event: Any = None) -> Dict[str, Any]:
        self.calls.append((op, fields.get("hibernate_on_idle"), fields.get("session")))
        return {"ok": True, "session": "n-0123", "state": "ready", "policy": "default"}


class LifecycleRefusedTest(unittest.TestCase):
    """What jailcell cannot do with a sandbox's timeout is refused by name,
    before anything is sent (the socket given does not exist)."""

    def test_refused(self) -> None:
        cases: List[Tuple[Dict[str, Any], str]] = [
            ({"lifecycle": {"on_timeout": "hibernate"}}, 'allowed "kill" .*"pause"'),
            ({"lifecycle": {}}, r'lifecycle\["on_timeout"\] = None: allowed "kill"'),
            ({"lifecycle": {"on_timeout": {"action": "pause", "keep_memory": False}}},
             "keep_memory.* = False: jailcell pauses a sandbox with its memory"),
            ({"lifecycle": {"on_timeout": {"action": "kill", "keep_memory": True}}}, 'goes with action "pause" only'),
            ({"lifecycle": {"on_timeout": "kill", "auto_resume": True}}, 'needs on_timeout "pause"'),
            ({"lifecycle": "pause"}, "must be a dict"),
            ({"lifecycle": {"on_timeout": "pause"}, "hibernate_on_idle": True}, "not both"),
            ({"hibernate_on_idle": "yes"}, "must be a bool"),
        ]
        for kw, message in cases:
            with self.assertRaisesRegex(BadRequestError, message, msg=repr(kw)):
                Sandbox.create("/nonexistent/jailcell.sock", **kw)
            with self.assertRaisesRegex(BadRequestError, message, msg=repr(kw)):
                asyncio.run(AsyncSandbox.create("/nonexistent/jailcell.sock", **kw))

    def test_ignored_by_an_old_server(self) -> None:
        # Its session would end at its TTL: it is closed, the create refused.
        old = _OldServer()
        with self.assertRaisesRegex(UnavailableError, "ignored hibernate_on_idle"):
            Sandbox.create(transport=old, hibernate_on_idle=True)
        self.assertEqual(old.calls, [("create", True, None), ("close", None, "n-0123")])
        old.calls.clear()
        with self.assertRaisesRegex(UnavailableError, "ignored hibernate_on_idle"):
            asyncio.run(AsyncSandbox.create(transport=old, lifecycle={"on_timeout": "pause"}))
        self.assertEqual(old.calls, [("create", True, None), ("close", None, "n-0123")])
        old.calls.clear()
        self.assertEqual(Sandbox.create(transport=old, lifecycle={"on_timeout": "kill"}).sandbox_id, "n-0123")
        self.assertEqual(old.calls, [("create", None, None)])


@unittest.skipUnless(SOCKET, "JAILCELL_SOCKET is not set: no jailcell serve to test against")
class SocketE2BTest(_Cases, unittest.TestCase):
    def transport(self) -> Transport:
        assert SOCKET is not None
        return SocketTransport(SOCKET, timeout=120)


@unittest.skipUnless(JSON_COMMAND, "JAILCELL_JSON_COMMAND is not set: no `jailcell json` to start")
class JsonLinesE2BTest(_Cases, unittest.TestCase):
    shared: JsonLinesTransport

    @classmethod
    def setUpClass(cls) -> None:
        assert JSON_COMMAND is not None
        cls.shared = JsonLinesTransport(JSON_COMMAND, timeout=120)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.shared.close()

    def transport(self) -> Transport:
        return self.shared


@unittest.skipUnless(SOCKET, "JAILCELL_SOCKET is not set: no jailcell serve to test against")
class AsyncSocketE2BTest(unittest.TestCase):
    """AsyncSandbox over asyncio streams on the socket: two sandboxes at
    once, without a single thread beyond the loop's."""

    def test_no_threads_two_sandboxes(self) -> None:
        asyncio.run(self._two())

    async def _two(self) -> None:
        # The threads alive before, by identity: one an earlier test left
        # may end meanwhile, which a count would take for a change.
        before = set(threading.enumerate())
        a = await AsyncSandbox.create(SOCKET, ttl=120, envs={"WHO": "a"})
        b = await AsyncSandbox.create(socket=SOCKET, ttl=120)
        self.assertIsInstance(a.transport, AsyncSocketTransport)
        try:
            ready = asyncio.Event()
            out_a: List[str] = []

            async def on_a(text: str) -> None:
                out_a.append(text)
                ready.set()
            a_task = asyncio.ensure_future(a.run_code(
                "import os, time\nprint(os.environ['WHO'], flush=True)\nwhile True:\n    time.sleep(0.1)", on_stdout=on_a))
            await asyncio.wait_for(ready.wait(), 60)
            # a's cell runs on; b works meanwhile, streamed, on the same loop.
            lines: List[str] = []
            r = await b.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done", on_stdout=lines.append)
            self.assertEqual((r.exit_code, "".join(lines)), (0, "1\n2\n3\n"))
            self.assertTrue(await b.files.make_dir("d"))
            seen: List[FilesystemEvent] = []
            w = await b.files.watch_dir("d", on_event=seen.append, interval=0.1)
            await b.files.write("d/x.txt", "x")
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.05)
            await w.stop()
            self.assertIn(FilesystemEvent("x.txt", FilesystemEventType.CREATE), seen)
            await _async_metadata(self, b)
            await _async_rename(self, b)
            h = await b.commands.run("sleep 0.2; echo bg", background=True)
            self.assertEqual((await h.wait()).stdout, "bg\n")
            with self.assertRaises(CommandExitException):
                await b.commands.run("exit 4")
            info = await b.get_info()
            self.assertEqual(info.state, "running")
            await b.set_timeout(60)
            self.assertGreater((await b.get_metrics())[0].mem_used, 0)
            again = await AsyncSandbox.connect(b.sandbox_id, SOCKET)
            self.assertEqual((await again.run_code("1 + 1")).text, "2")
            # stdin and a terminal, awaitable.
            cat = await b.commands.run("cat", background=True, stdin=True)
            await cat.send_stdin("Hello\n")
            await b.commands.close_stdin(cat.pid)
            self.assertEqual(((await cat.wait()).stdout), "Hello\n")
            shown: List[bytes] = []

            async def on_data(data: bytes) -> None:
                shown.append(data)
            term = await b.pty.create(PtySize(rows=24, cols=80), on_data)
            await b.pty.send_stdin(term.pid, b"stty size; exit\n")
            self.assertIn("24 80", (await term.wait()).stdout)
            self.assertIn(b"24 80", b"".join(shown))
            self.assertFalse(a_task.done(), "a's cell ended before it was killed")
            started = [t.name for t in threading.enumerate() if t not in before]
            self.assertEqual(started, [], "the asyncio transport started threads")
            self.assertTrue(await a.kill())
            ex = await asyncio.wait_for(a_task, 60)
            self.assertIn(ex.status, ("killed", "error"))
            self.assertEqual(out_a, ["a\n"])
        finally:
            await a.kill()
            await b.kill()


@unittest.skipUnless(TCP_URL and TCP_TOKEN, "JAILCELL_TCP_URL and JAILCELL_TCP_TOKEN are not set: no TCP listener")
class AsyncTCPE2BTest(unittest.TestCase):
    """AsyncSandbox over asyncio streams on a node's TCP listener, with
    its bearer token; a wrong token is refused before anything runs."""

    def test_tcp(self) -> None:
        asyncio.run(self._go())

    async def _go(self) -> None:
        sbx = await AsyncSandbox.create(url=TCP_URL, token=TCP_TOKEN, ttl=120)
        try:
            out: List[str] = []
            r = await sbx.commands.run("echo over tcp", on_stdout=out.append)
            self.assertEqual((r.stdout, "".join(out)), ("over tcp\n", "over tcp\n"))
            self.assertEqual((await sbx.run_code("6 * 7")).text, "42")
            await _async_metadata(self, sbx)
            await _async_rename(self, sbx)
            again = await AsyncSandbox.connect(sbx.sandbox_id, url=TCP_URL, token=TCP_TOKEN)
            self.assertEqual((await again.get_info()).sandbox_id, sbx.sandbox_id)
        finally:
            await sbx.kill()
        with self.assertRaises(ForbiddenOrAuth):
            await AsyncSandbox.create(url=TCP_URL, token="x" * 40)


@unittest.skipUnless(JSON_COMMAND, "JAILCELL_JSON_COMMAND is not set: no `jailcell json` to start")
class AsyncJsonLinesE2BTest(unittest.TestCase):
    def test_async_json_lines(self) -> None:
        asyncio.run(self._go())

    async def _go(self) -> None:
        assert JSON_COMMAND is not None
        sbx = await AsyncSandbox.create(command=JSON_COMMAND, ttl=120)
        self.assertIsInstance(sbx.transport, AsyncJsonLinesTransport)
        t = sbx.transport
        other = await AsyncSandbox.create(transport=t, ttl=120)
        try:
            # Two sessions' cells at once over one child's pipes.
            results = await asyncio.gather(sbx.run_code("import time; time.sleep(0.5); 6 * 7"),
                                           other.run_code("import time; time.sleep(0.5); 'other'"))
            self.assertEqual([r.text for r in results], ["42", "other"])
            await other.kill()
            await sbx.files.write("f.txt", "data")
            out: List[str] = []

            async def on_out(text: str) -> None:
                out.append(text)
            r = await sbx.commands.run("cat f.txt; echo", on_stdout=on_out)
            self.assertEqual((r.stdout, "".join(out)), ("data\n", "data\n"))
            self.assertEqual(await sbx.files.read("f.txt"), "data")
            await _async_metadata(self, sbx)
            await _async_rename(self, sbx)
        finally:
            await sbx.kill()
        assert isinstance(t, AsyncJsonLinesTransport)
        self.assertEqual(t.returncode, 0)


if __name__ == "__main__":
    unittest.main()
