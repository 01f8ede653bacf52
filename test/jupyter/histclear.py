"""history_request and clear_output on the jailcell kernel, beyond what
jupyter_kernel_test asks, with Debian's jupyter_client.

    python3 histclear.py KERNEL_NAME KERNELS_DIR

Run by jupyter_test.go (TestJupyterHistoryClearOutput) as a user who is
not root; the kernel is looked up in KERNELS_DIR only. Prints one
"ok <step>" line per step; any failed assertion ends it with a traceback
and a non-zero status.
"""

import sys

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

TIMEOUT = 300  # generous: a shared 2-core machine under load


def ok(step):
    print("ok", step, flush=True)


def run(kc, code, **kw):
    """Execute code; return the reply's content and the iopub messages."""
    msgs = []
    reply = kc.execute_interactive(
        code, output_hook=msgs.append, stop_on_error=False, allow_stdin=False, timeout=TIMEOUT, **kw
    )
    return reply["content"], [(m["msg_type"], m["content"]) for m in msgs]


def history(kc, **kw):
    kw.setdefault("raw", True)
    kw.setdefault("output", False)
    msg_id = kc.history(**kw)
    while True:
        reply = kc.get_shell_msg(timeout=TIMEOUT)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"]


def main(kernel_name, kernels_dir):
    ksm = KernelSpecManager(kernel_dirs=[kernels_dir])
    km = KernelManager(kernel_name=kernel_name, kernel_spec_manager=ksm)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)
        ok("start")
        steps(kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def steps(kc):
    # clear_output: ipykernel's iopub message, after what the cell wrote
    # before it, before what it writes after, with its wait flag.
    c, msgs = run(kc, "from IPython.display import clear_output\nprint('a')\nclear_output()\nprint('b')\nclear_output(wait=True)\nprint('c')")
    assert c["status"] == "ok", c
    seq = [(t, x.get("text", x.get("wait"))) for t, x in msgs if t in ("stream", "clear_output")]
    assert seq == [("stream", "a\n"), ("clear_output", False), ("stream", "b\n"), ("clear_output", True), ("stream", "c\n")], seq
    ok("clear_output")

    # A silent cell, an error, a value, a store_history=False cell and a
    # blank one: history keeps the three stored cells with their
    # execution counts, the value's text/plain as their output.
    first = c["execution_count"]
    c, msgs = run(kc, "x = 40", silent=True)
    assert c["status"] == "ok", c
    c, _ = run(kc, "1/0")
    assert c["status"] == "error" and c["execution_count"] == first + 1, c
    c, _ = run(kc, "x + 2")
    assert c["execution_count"] == first + 2, c
    c, _ = run(kc, "x + 3", store_history=False)
    assert c["status"] == "ok", c
    c, _ = run(kc, "   ")
    h = history(kc, hist_access_type="tail", n=3, output=True)
    assert h["status"] == "ok", h
    assert h["history"] == [
        [1, first, ["from IPython.display import clear_output\nprint('a')\nclear_output()\nprint('b')\nclear_output(wait=True)\nprint('c')", None]],
        [1, first + 1, ["1/0", None]],
        [1, first + 2, ["x + 2", "42"]],
    ], h
    ok("history tail")

    h = history(kc, hist_access_type="range", session=0, start=first + 1, stop=first + 3)
    assert h["history"] == [[0, first + 1, "1/0"], [0, first + 2, "x + 2"]], h
    h = history(kc, hist_access_type="range", session=1, start=-1)
    assert h["history"] == [[1, first + 2, "x + 2"]], h
    ok("history range")

    counts = [run(kc, code)[0]["execution_count"] for code in ("y = 1", "x + 2", "y = 1")]
    h = history(kc, hist_access_type="search", pattern="[xy] *")
    assert [e[2] for e in h["history"]] == ["x + 2", "y = 1", "x + 2", "y = 1"], h
    h = history(kc, hist_access_type="search", pattern="[xy] *", unique=True)
    assert [e[2] for e in h["history"]] == ["x + 2", "y = 1"] and [e[1] for e in h["history"]] == counts[1:], h
    h = history(kc, hist_access_type="search", pattern="*", n=1, output=True)
    assert h["history"] == [[1, counts[2], ["y = 1", None]]], h
    ok("history search")

    h = history(kc, hist_access_type="search", pattern="[oops")
    assert h["status"] == "error" and "has a [ without its ]" in h["evalue"], h
    h = history(kc, hist_access_type="latest")
    assert h["status"] == "error" and "not one of tail, range, search" in h["evalue"], h
    ok("history errors")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
