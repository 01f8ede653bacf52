"""Attacks on the jailcell kernel's iopub channel, driven with Debian's
jupyter_client and pyzmq. Run by jupyter_test.go.

    python3 iopub.py slow KERNEL_NAME TRANSPORT CELLS BYTES
        As the kernel's user: a real client runs CELLS cells that print
        BYTES each while a second SUB socket subscribed to everything never
        reads. The client must get every byte and every idle status.
        Prints "ok slow", then "kernel PID", "vmhwm KIB" (the kernel's peak
        resident memory).

    python3 iopub.py secret KERNEL_NAME TRANSPORT
        As the kernel's user: start the kernel, print "connection JSON",
        wait for a line on stdin, run a cell that prints a secret, check
        the client got it ("ok secret"), wait for another line, shut down.

    python3 iopub.py listen URL [UNIX_PATH]
        As another user, without the key: connect to the iopub URL (and,
        with UNIX_PATH, try the socket file itself), print "subscribed",
        then count every message seen until a line comes on stdin (at most
        120 s); prints "got N secret S".
"""

import json
import os
import socket
import sys
import time
import uuid

import zmq
from jupyter_core.paths import jupyter_runtime_dir
from jupyter_client.manager import KernelManager

TIMEOUT = 120  # a cell's output and idle status; a blocked iopub never sends them


def start(kernel_name, transport):
    # As a Jupyter server does: the connection file, and so the ipc
    # sockets, in Jupyter's runtime directory (0700).
    runtime = jupyter_runtime_dir()
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    km = KernelManager(kernel_name=kernel_name, transport=transport,
                       connection_file=os.path.join(runtime, "kernel-%s.json" % uuid.uuid4()))
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=300)
    return km, kc


def run(kc, code):
    msgs = []
    reply = kc.execute_interactive(code, output_hook=msgs.append, stop_on_error=False, allow_stdin=False, timeout=TIMEOUT)
    return reply["content"], msgs


def vmhwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


def slow(kernel_name, transport, cells, size):
    km, kc = start(kernel_name, transport)
    pid = km.provisioner.process.pid
    # The subscriber that never reads: its queue to the application holds
    # one message, so libzmq stops taking bytes from the kernel at once.
    zctx = zmq.Context()
    stuck = zctx.socket(zmq.SUB)
    stuck.setsockopt(zmq.RCVHWM, 1)
    stuck.setsockopt(zmq.RCVBUF, 4096)
    stuck.setsockopt(zmq.SUBSCRIBE, b"")
    stuck.connect(km._make_url("iopub"))
    time.sleep(2)  # connected and subscribed before the flood
    line = "x" * 1023 + "\n"
    code = "import sys\nfor _ in range(%d):\n    sys.stdout.write(%r)\nsys.stdout.flush()\n'done'" % (size // len(line), line)
    for i in range(cells):
        c, msgs = run(kc, code)
        assert c["status"] == "ok", c
        out = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
        assert out == line * (size // len(line)), "cell %d: %d bytes of stdout, want %d" % (i, len(out), size // len(line) * len(line))
        states = [m["content"]["execution_state"] for m in msgs if m["msg_type"] == "status"]
        assert states and states[-1] == "idle", states
    print("ok slow", flush=True)
    print("kernel", pid, flush=True)
    print("vmhwm", vmhwm(pid), flush=True)
    kc.stop_channels()
    km.shutdown_kernel(now=False)
    stuck.close(linger=0)


def secret(kernel_name, transport):
    km, kc = start(kernel_name, transport)
    print("connection", json.dumps(km.get_connection_info(session=False) | {"iopub_url": km._make_url("iopub")}, default=str), flush=True)
    sys.stdin.readline()
    c, msgs = run(kc, "print('SECRET-' + 'cell-output')")
    out = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
    assert c["status"] == "ok" and out == "SECRET-cell-output\n", (c, out)
    print("ok secret", flush=True)
    sys.stdin.readline()
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def listen(url, path=None):
    if path:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            print("unix connect: connected", flush=True)
        except OSError as e:
            print("unix connect: %s" % type(e).__name__, flush=True)
        s.close()
    zctx = zmq.Context()
    sub = zctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(url)
    time.sleep(2)
    print("subscribed", flush=True)
    got, seen = 0, False
    # The test says when the secret cell has run and a while has passed
    # (a line on stdin): a fixed window spent most of the test asleep.
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    end = time.time() + 120
    while time.time() < end:
        ready = dict(poller.poll(500))
        if sub in ready:
            frames = sub.recv_multipart()
            got += 1
            seen = seen or any(b"SECRET-" in f for f in frames)
        elif sys.stdin.fileno() in ready or sys.stdin in ready:
            break
    print("got", got, "secret", seen, flush=True)
    sub.close(linger=0)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "slow":
        slow(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "secret":
        secret(sys.argv[2], sys.argv[3])
    elif mode == "listen":
        listen(*sys.argv[2:4])
    else:
        sys.exit("unknown mode " + mode)
