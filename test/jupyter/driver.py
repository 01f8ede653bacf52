"""Drive the jailcell Jupyter kernel with Debian's jupyter_client, as a
frontend does, and assert what each request must produce.

    python3 driver.py KERNEL_NAME SERVICE_SOCKET

Run by jupyter_test.go as a user who is not root, with the kernelspec on
JUPYTER_PATH. Prints one "ok <step>" line per step; any failed assertion
ends it with a traceback and a non-zero status.
"""

import base64
import hashlib
import hmac
import json
import os
import socket
import sys
import time
import uuid
from datetime import datetime

import zmq
from jupyter_client.manager import KernelManager

TIMEOUT = 300  # generous: a shared 2-core machine under load


def ok(step):
    print("ok", step, flush=True)


def http(sock_path, method, path):
    """One request to the service over its socket, as this user."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock_path)
    s.sendall(("%s %s HTTP/1.0\r\nHost: jailcell\r\n\r\n" % (method, path)).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def sessions(sock_path):
    """This user's jailcell sessions."""
    return sorted(x["session"] for x in http(sock_path, "GET", "/v1/sessions")["sessions"])


def run(kc, code, **kw):
    """Execute code; return the reply and the iopub messages of the request."""
    msgs = []
    reply = kc.execute_interactive(
        code, output_hook=msgs.append, stop_on_error=False, allow_stdin=False, timeout=TIMEOUT, **kw
    )
    return reply, [(m["msg_type"], m["content"]) for m in msgs]


def of(msgs, kind):
    return [c for t, c in msgs if t == kind]


def main(kernel_name, sock_path):
    km = KernelManager(kernel_name=kernel_name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    ok("start")
    first = sessions(sock_path)
    assert len(first) == 1, first
    # The kernelspec's --ttl 7200 reached the session (the default is 30 min).
    [info] = http(sock_path, "GET", "/v1/sessions")["sessions"]
    life = datetime.fromisoformat(info["expires_at"].replace("Z", "+00:00")) - datetime.fromisoformat(info["created_at"].replace("Z", "+00:00"))
    assert life.total_seconds() > 3600, info

    kc.kernel_info()
    info = kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert info["status"] == "ok", info
    assert info["protocol_version"] == "5.3", info
    assert info["implementation"] == "jailcell", info
    assert info["language_info"]["name"] == "python", info
    ok("kernel_info")

    reply, msgs = run(kc, "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\n6 * 7")
    c = reply["content"]
    assert c["status"] == "ok" and c["execution_count"] == 1, c
    assert of(msgs, "execute_input")[0]["code"].startswith("import sys"), msgs
    assert of(msgs, "execute_input")[0]["execution_count"] == 1, msgs
    out = "".join(x["text"] for x in of(msgs, "stream") if x["name"] == "stdout")
    err = "".join(x["text"] for x in of(msgs, "stream") if x["name"] == "stderr")
    assert out == "hello\n" and err == "oops\n", (out, err)
    res = of(msgs, "execute_result")
    assert len(res) == 1 and res[0]["data"]["text/plain"] == "42" and res[0]["execution_count"] == 1, res
    states = [x["execution_state"] for x in of(msgs, "status")]
    assert states[0] == "busy" and states[-1] == "idle", states
    ok("execute")

    # Streams arrive as the cell writes them, not all at its end.
    reply, msgs = run(kc, "import time\nprint('a', flush=True)\ntime.sleep(2)\nprint('b', flush=True)")
    texts = [x["text"] for x in of(msgs, "stream")]
    assert reply["content"]["status"] == "ok" and "".join(texts) == "a\nb\n" and len(texts) >= 2, texts
    ok("stream")

    reply, msgs = run(kc, "1/0")
    c = reply["content"]
    assert c["status"] == "error" and c["ename"] == "ZeroDivisionError", c
    e = of(msgs, "error")
    assert e and e[0]["ename"] == "ZeroDivisionError" and any("1/0" in line for line in e[0]["traceback"]), e
    ok("error")

    reply, msgs = run(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    shown = of(msgs, "display_data")
    assert reply["content"]["status"] == "ok", reply["content"]
    assert len(shown) == 1 and base64.b64decode(shown[0]["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n", shown
    ok("display")

    # Pager text (obj?, %quickref) is the reply's "page" payload, as
    # ipykernel sends it: never a stream, never a display.
    reply, msgs = run(kc, "len?")
    c = reply["content"]
    pages = [p for p in c["payload"] if p.get("source") == "page"]
    assert c["status"] == "ok" and len(pages) == 1, c
    assert "Return the number of items" in pages[0]["data"]["text/plain"], pages
    assert not of(msgs, "stream") and not of(msgs, "display_data"), msgs
    ok("pager")

    # silent: runs, but no execute_input, no result, no count.
    reply, msgs = run(kc, "my_value = 41\nmy_value + 1", silent=True)
    assert reply["content"]["status"] == "ok" and not of(msgs, "execute_input") and not of(msgs, "execute_result"), msgs
    reply, msgs = run(kc, "my_value")
    assert of(msgs, "execute_result")[0]["data"]["text/plain"] == "41", msgs
    assert reply["content"]["execution_count"] == 6, reply["content"]
    ok("silent")

    kc.complete("x = my_val", 10)
    c = kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert c["status"] == "ok" and "my_value" in c["matches"] and (c["cursor_start"], c["cursor_end"]) == (4, 10), c
    ok("complete")

    kc.inspect("len(my_value)", 1)
    c = kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert c["status"] == "ok" and c["found"] and "Return the number of items" in c["data"]["text/plain"], c
    kc.inspect("no_such_name", 3)
    c = kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert c["status"] == "ok" and not c["found"], c
    ok("inspect")

    for code, want in (("x = 1", "complete"), ("for i in range(3):", "incomplete"), ("1 +* 2", "invalid")):
        kc.is_complete(code)
        c = kc.get_shell_msg(timeout=TIMEOUT)["content"]
        assert c["status"] == want, (code, c)
        if want == "incomplete":
            assert c["indent"] == "    ", c
    ok("is_complete")

    # Interrupt (interrupt_mode "message": an interrupt_request on control)
    # once the cell says it runs.
    msg_id = kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nmy_value = 0")
    deadline = time.monotonic() + TIMEOUT
    while True:
        m = kc.get_iopub_msg(timeout=TIMEOUT)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
            break
        assert time.monotonic() < deadline, "the sleeping cell did not start"
    km.interrupt_kernel()
    c = kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert c["status"] == "error" and c["ename"] == "KeyboardInterrupt", c
    reply, msgs = run(kc, "my_value")
    assert of(msgs, "execute_result")[0]["data"]["text/plain"] == "41", msgs
    ok("interrupt")

    forged(km, kc)

    # The session ends under the kernel (its idle TTL, an operator): the
    # next cell runs in a new one and says so on stderr.
    [gone] = sessions(sock_path)
    http(sock_path, "DELETE", "/v1/sessions/" + gone)
    reply, msgs = run(kc, "'my_value' in globals(), 1 + 1")
    err = "".join(x["text"] for x in of(msgs, "stream") if x["name"] == "stderr")
    assert reply["content"]["status"] == "ok", reply["content"]
    assert of(msgs, "execute_result")[0]["data"]["text/plain"] == "(False, 2)", msgs
    assert "runs in a new session" in err, err
    first = sessions(sock_path)
    assert len(first) == 1 and first != [gone], (gone, first)
    ok("renew")

    km.restart_kernel(now=False)
    kc.wait_for_ready(timeout=TIMEOUT)
    reply, msgs = run(kc, "my_value")
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "NameError", reply["content"]
    assert reply["content"]["execution_count"] == 1, reply["content"]
    second = sessions(sock_path)
    assert len(second) == 1 and second != first, (first, second)
    ok("restart")

    kc.stop_channels()
    km.shutdown_kernel(now=False)
    assert not km.is_alive()
    left = sessions(sock_path)
    assert left == [], left
    ok("shutdown")


def forged(km, kc):
    """Messages with a bad or missing signature get no answer and run
    nothing; the same message correctly signed is answered (so the raw
    socket itself works)."""
    info = km.get_connection_info()
    key = info["key"]
    if isinstance(key, str):
        key = key.encode()
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.connect("tcp://%s:%d" % (info["ip"], info["shell_port"]))

    def send(msg_type, content, sign):
        header = json.dumps({"msg_id": uuid.uuid4().hex, "session": "forger", "username": "x",
                             "date": "2026-01-01T00:00:00Z", "msg_type": msg_type, "version": "5.3"}).encode()
        parts = [header, b"{}", b"{}", json.dumps(content).encode()]
        sig = sign(parts)
        s.send_multipart([b"<IDS|MSG>", sig] + parts)

    good = lambda parts: hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()
    bad = lambda parts: hmac.new(b"not the key", b"".join(parts), hashlib.sha256).hexdigest().encode()
    code = {"code": "forged = 1", "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    send("execute_request", code, bad)
    send("execute_request", code, lambda parts: b"")
    # One hex digit changed: always a different digit (replacing the last
    # with "0" left a signature ending in "0" valid, 1 time in 16, and the
    # "forged" cell ran: a flaky test, not a hole).
    send("execute_request", code, lambda parts: good(parts)[:-1] + (b"1" if good(parts)[-1:] == b"0" else b"0"))
    send("kernel_info_request", {}, good)
    # The signed request is answered; nothing came before it for the others.
    assert s.poll(TIMEOUT * 1000), "no reply to a correctly signed request on a raw socket"
    frames = s.recv_multipart()
    header = json.loads(frames[frames.index(b"<IDS|MSG>") + 2])
    assert header["msg_type"] == "kernel_info_reply", header
    assert not s.poll(2000), "a forged message was answered"
    s.close()
    reply, msgs = run(kc, "'forged' in globals()")
    assert of(msgs, "execute_result")[0]["data"]["text/plain"] == "False", msgs
    ok("forged")

    # A peer whose first frame claims 2**60 bytes: the connection is
    # dropped before anything is allocated, and the kernel lives on.
    raw = socket.create_connection((info["ip"], info["shell_port"]), timeout=60)
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
    raw.sendall(greeting + b"\x06" + (1 << 60).to_bytes(8, "big"))
    got = b""
    while True:
        chunk = raw.recv(65536)
        if not chunk:
            break
        got += chunk
    raw.close()
    reply, msgs = run(kc, "'alive'")
    assert of(msgs, "execute_result")[0]["data"]["text/plain"] == "'alive'", msgs
    ok("oversized")


def orphan(kernel_name, sock_path):
    """Start a kernel, see its session, and die without shutting it down,
    as a crashed or killed frontend does. Prints the kernel's pid."""
    km = KernelManager(kernel_name=kernel_name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    assert len(sessions(sock_path)) == 1
    print("kernel", km.provisioner.process.pid, flush=True)
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[3:] == ["orphan"]:
        orphan(sys.argv[1], sys.argv[2])
    main(sys.argv[1], sys.argv[2])
