"""SocketTransport's kept-alive connections against a real `jailcell serve`,
reached through a proxy that counts the connections it accepts.

Run by test/pyclient/python_test.go (TestPythonSocketReuse) with the proxy's
socket as argv[1]. It asks the test on stdout and reads the answer on
stdin: "@@count" (connections accepted so far) and "@@restart" (stop the
service and start it again, its sessions kept); "@@done" says every step
ran. Any failure is an exception and a non-zero exit.
"""

import asyncio
import sys
import threading
from typing import Any, Dict, List

from jailcell import AsyncSocketTransport, SocketTransport, UnavailableError
from jailcell import transport as transport_mod


def ask(what: str) -> str:
    print("@@" + what, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the test closed stdin while asked %r" % what)
    return line.strip()


def count() -> int:
    return int(ask("count"))


def run(t: SocketTransport, sid: str, code: str, **kw: Any) -> Dict[str, Any]:
    resp = t.call("exec", {"session": sid, "code": code}, **kw)
    res: Dict[str, Any] = resp["result"]
    if res.get("status") != "ok":
        raise AssertionError("%r: %r" % (code, res))
    return res


def check(what: str, got: Any, want: Any) -> None:
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))
    print("ok: %s = %r" % (what, got), flush=True)


def main() -> None:
    t = SocketTransport(sys.argv[1], timeout=120)

    # 1. Sequential calls of every kind share one connection.
    before = count()
    t.call("ping", {})
    sid = t.call("create", {"ttl_s": 600})["session"]
    run(t, sid, "x = 0")
    for _ in range(10):
        run(t, sid, "x += 1")
    check("x after 10 increments", run(t, sid, "print(x)")["stdout"].strip(), "10")
    t.call("upload", {"session": sid, "path": "a.txt", "data": b"hello"})
    check("download", t.call("download", {"session": sid, "path": "a.txt"})["data"], b"hello")
    t.call("files", {"session": sid})
    t.call("info", {"session": sid})
    check("connections for 18 sequential calls", count() - before, 1)

    # 4. A streamed exec streams, and its connection is reused after it.
    events: List[Dict[str, Any]] = []
    res = run(t, sid, "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.05)",
              on_event=events.append)
    check("streamed stdout events", "".join(e.get("text", "") for e in events if e.get("event") == "stdout"),
          "0\n1\n2\n")
    check("streamed result stdout", res["stdout"], "0\n1\n2\n")
    run(t, sid, "x += 1", on_event=events.append)
    t.call("ping", {})
    run(t, sid, "x += 1")
    check("connections after streamed execs", count() - before, 1)

    # 3. Threads sharing the transport, each with its own session (cells
    # never queue), get their own answers; no more connections than
    # threads are ever open at once, so at most 4 in all.
    sids = [t.call("create", {"ttl_s": 600})["session"] for _ in range(4)]
    errors: List[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(8):
                got = run(t, sids[n], "print(%d * 1000 + %d)" % (n, i))["stdout"].strip()
                if got != str(n * 1000 + i):
                    raise AssertionError("thread %d call %d: got %r" % (n, i, got))
                t.call("info", {"session": sids[n]})
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    before_threads = count()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    opened = count() - before_threads
    if opened > 3:  # the one already idle, plus at most three more
        raise AssertionError("4 threads x 16 calls opened %d connections, want at most 3 more" % opened)
    print("ok: 4 threads x 16 calls opened %d more connections" % opened, flush=True)

    # 2. The service restarts under pooled connections. The stale ones are
    # seen before anything is sent: the next GET and the next exec run on
    # a new connection, and the exec runs once.
    run(t, sid, "n = 0")
    check("restart", ask("restart"), "ok")
    before = count()
    t.call("ping", {})
    run(t, sid, "n += 1")
    check("n after one exec across a restart", run(t, sid, "print(n)")["stdout"].strip(), "1")
    check("connections after the restart", count() - before, 1)

    # 2b. Stale connections sent on before they are seen as closed (the
    # check skipped, as when the service closes one just as it is taken):
    # a POST is not sent again and says why; the cell ran at most once.
    real_stale = transport_mod._UnixConnection.stale
    transport_mod._UnixConnection.stale = lambda self: False  # type: ignore[assignment]
    try:
        check("restart", ask("restart"), "ok")
        try:
            run(t, sid, "n += 1")
            raise AssertionError("an exec on a connection the service closed succeeded: it was sent again")
        except UnavailableError as e:
            if "not sent again" not in str(e):
                raise AssertionError("the error does not say the POST was not re-sent: %s" % e)
            print("ok: exec on a closed connection: %s" % e, flush=True)
        check("n after an exec refused on a closed connection", run(t, sid, "print(n)")["stdout"].strip(), "1")

        # An idempotent request is sent again, once, on a new connection.
        check("restart", ask("restart"), "ok")
        before = count()
        check("ping retried", t.call("ping", {})["ok"], True)
        check("connections for a retried GET", count() - before, 1)
    finally:
        transport_mod._UnixConnection.stale = real_stale  # type: ignore[assignment]

    # close() closes the idle connections; the transport still works.
    t.close()
    before = count()
    t.call("ping", {})
    check("connections after close()", count() - before, 1)

    asyncio.run(async_main(sys.argv[1], sids))
    for s in [sid] + sids:
        t.call("close", {"session": s})
    print("@@done", flush=True)


async def arun(t: AsyncSocketTransport, sid: str, code: str, **kw: Any) -> Dict[str, Any]:
    resp = await t.call("exec", {"session": sid, "code": code}, **kw)
    res: Dict[str, Any] = resp["result"]
    if res.get("status") != "ok":
        raise AssertionError("%r: %r" % (code, res))
    return res


async def async_main(sock: str, sids: List[str]) -> None:
    """The same for AsyncSocketTransport (ask() blocks the loop on purpose:
    nothing else runs meanwhile, so a closed connection is still unseen
    by asyncio when the next call takes it)."""
    t = AsyncSocketTransport(sock, timeout=120)
    sid = sids[0]
    before = count()
    await t.call("ping", {})
    await arun(t, sid, "y = 0")
    for _ in range(5):
        await arun(t, sid, "y += 1")
    events: List[Dict[str, Any]] = []
    res = await arun(t, sid, "for i in range(3):\n    print(i, flush=True)", on_event=events.append)
    check("async streamed stdout events", "".join(e.get("text", "") for e in events if e.get("event") == "stdout"),
          "0\n1\n2\n")
    check("async y", (await arun(t, sid, "print(y)"))["stdout"].strip(), "5")
    await t.call("info", {"session": sid})
    check("async connections for 10 sequential calls", count() - before, 1)

    # Tasks at once, each with its own session: their own answers, and no
    # more connections than tasks.
    before = count()
    outs = await asyncio.gather(*[arun(t, s, "print(%d)" % n) for n, s in enumerate(sids)])
    check("async concurrent answers", [o["stdout"].strip() for o in outs], [str(n) for n in range(len(sids))])
    outs = await asyncio.gather(*[arun(t, s, "print(%d)" % (n + 10)) for n, s in enumerate(sids)])
    check("async concurrent answers again", [o["stdout"].strip() for o in outs],
          [str(n + 10) for n in range(len(sids))])
    opened = count() - before
    if opened > len(sids) - 1:
        raise AssertionError("%d tasks x 2 opened %d connections, want at most %d more" % (len(sids), opened, len(sids) - 1))
    print("ok: %d tasks x 2 calls opened %d more connections" % (len(sids), opened), flush=True)

    # A restart: the stale connections are seen by poll before sending.
    await arun(t, sid, "m = 0")
    check("restart", ask("restart"), "ok")
    before = count()
    await arun(t, sid, "m += 1")
    check("async m after one exec across a restart", (await arun(t, sid, "print(m)"))["stdout"].strip(), "1")
    check("async connections after the restart", count() - before, 1)

    # Stale connections sent on: a POST is not sent again, a GET is.
    real_stale = AsyncSocketTransport.__dict__["_stale"]  # the staticmethod itself
    AsyncSocketTransport._stale = staticmethod(lambda r, w: False)  # type: ignore[assignment]
    try:
        check("restart", ask("restart"), "ok")
        try:
            await arun(t, sid, "m += 1")
            raise AssertionError("an async exec on a connection the service closed succeeded: it was sent again")
        except UnavailableError as e:
            if "not sent again" not in str(e):
                raise AssertionError("the error does not say the POST was not re-sent: %s" % e)
            print("ok: async exec on a closed connection: %s" % e, flush=True)
        check("async m after an exec refused", (await arun(t, sid, "print(m)"))["stdout"].strip(), "1")
        check("restart", ask("restart"), "ok")
        before = count()
        check("async ping retried", (await t.call("ping", {}))["ok"], True)
        check("async connections for a retried GET", count() - before, 1)
    finally:
        setattr(AsyncSocketTransport, "_stale", real_stale)
    await t.close()


if __name__ == "__main__":
    main()
