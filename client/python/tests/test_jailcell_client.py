"""Tests of jailcell_client against a real `jailcell serve`.

Run by test/pyclient/python_test.go with JAILCELL_SOCKET set; by hand:

    JAILCELL_SOCKET=/run/jailcell/jailcell.sock python3 -m unittest -v test_jailcell_client
"""

import os
import threading
import unittest

from jailcell_client import Client, JailcellError  # the single-file name, kept

SOCKET = os.environ.get("JAILCELL_SOCKET")


@unittest.skipUnless(SOCKET, "JAILCELL_SOCKET is not set: no jailcell serve to test against")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.jc = Client(SOCKET, timeout=120)

    def test_health(self):
        h = self.jc.health()
        self.assertTrue(h["ok"])
        self.assertIn("isolation", h)

    def test_session_lifecycle(self):
        info = self.jc.create(ttl_s=120, limits={"pids": 32})
        sid = info["session"]
        self.assertRegex(sid, r"^[a-z0-9]{1,16}-[0-9a-f]{32}$")  # node.id, then 128 random bits
        self.assertIn(sid, [s["session"] for s in self.jc.sessions()])
        r = self.jc.exec("x = 41", session=sid)
        self.assertEqual(r["status"], "ok")
        r = self.jc.exec("print(x + 1)", session=sid)
        self.assertEqual(r["stdout"], "42\n")
        self.jc.close(sid)
        with self.assertRaises(JailcellError) as cm:
            self.jc.exec("1", session=sid)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

    @unittest.skipUnless(os.path.exists("/var/lib/jailcell/criu/bin/criu"), "requires criu (make criu) for hibernate and fork")
    def test_hibernate_and_fork(self):
        with self.jc.session(ttl_s=120) as s:
            s.exec("x = 41")
            self.assertEqual(s.hibernate()["state"], "hibernated")
            self.assertEqual(s.restore()["state"], "ready")
            with s.fork() as f:
                self.assertEqual(f.info["forked_from"], s.id)
                self.assertEqual(f.exec("x += 1; print(x)")["stdout"], "42\n")
                self.assertEqual(s.exec("print(x)")["stdout"], "41\n")
            s.exec("x = 0", snapshot=True)
            self.assertEqual(s.rollback()["state"], "ready")
            self.assertEqual(s.exec("print(x)")["stdout"], "41\n")

    def test_streaming(self):
        chunks = []
        lock = threading.Lock()

        def on_output(stream, text):
            with lock:
                chunks.append((stream, text))

        r = self.jc.exec(
            "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.05)\n"
            "print('warn', file=sys.stderr)",
            on_output=on_output)
        self.assertEqual(r["status"], "ok")
        self.assertEqual("".join(t for s, t in chunks if s == "stdout"), "0\n1\n2\n")
        self.assertIn("warn", "".join(t for s, t in chunks if s == "stderr"))

    def test_files(self):
        with self.jc.session() as s:
            s.upload("dir/in put.bin", bytes(range(256)))
            r = s.exec("open('out.bin','wb').write(open('dir/in put.bin','rb').read()[::-1])")
            self.assertEqual(r["status"], "ok")
            self.assertEqual(s.download("out.bin"), bytes(reversed(range(256))))
            paths = [f["path"] for f in s.files()]
            self.assertIn("dir/in put.bin", paths)
            self.assertIn("out.bin", paths)
            # Metadata rides in the Jailcell-Metadata header: answered by
            # the upload, shown by the listing, cleared by the next upload.
            self.assertEqual(s.upload("m.txt", "m", metadata={"author": "ana"})["metadata"], {"author": "ana"})
            self.assertEqual({f["path"]: f.get("metadata") for f in s.files()}["m.txt"], {"author": "ana"})
            self.assertNotIn("metadata", s.upload("m.txt", "plain"))
            self.assertNotIn("metadata", {f["path"]: f for f in s.files()}["m.txt"])
            with self.assertRaises(JailcellError) as cm:
                s.upload("bad.txt", "x", metadata={"a\nb": "v"})
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            self.assertNotIn("bad.txt", [f["path"] for f in s.files()])
            with self.assertRaises(JailcellError) as cm:
                s.download("../../etc/passwd")
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            with self.assertRaises(JailcellError) as cm:
                s.download("missing.txt")
            self.assertEqual(cm.exception.code, "not_found")

    def test_one_shot(self):
        r = self.jc.exec("open('o.txt','w').write(open('i.txt').read().upper())", files={"i.txt": b"abc"})
        self.assertEqual(r["status"], "ok")
        import base64
        got = {f["path"]: base64.b64decode(f.get("data", "")) for f in r["files"]}
        self.assertEqual(got.get("o.txt"), b"ABC")

    def test_errors(self):
        with self.assertRaises(JailcellError) as cm:
            self.jc.create(policy="no-such-policy")
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
        with self.assertRaises(JailcellError) as cm:
            self.jc.exec("")
        self.assertEqual(cm.exception.code, "bad_request")
        r = self.jc.exec("1/0")
        self.assertEqual(r["status"], "error")
        self.assertEqual(r["error"]["type"], "ZeroDivisionError")

    def test_metrics(self):
        self.jc.exec("pass")
        self.assertIn("jailcell_cells_total", self.jc.metrics())


if __name__ == "__main__":
    unittest.main()
