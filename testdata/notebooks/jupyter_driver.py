"""Run a notebook's code cells one by one in a Jupyter kernel (ipykernel)
and print, as one JSON list, what each cell produced: status, exception type,
stdout, the value's text/plain, the number of images and the pager's text.

    python3 jupyter_driver.py NOTEBOOK.ipynb WORKDIR

The conformance test runs the same cells in a jailcell session and compares.
"""

import json
import queue
import sys

from jupyter_client.manager import KernelManager


def run(nb_path, workdir):
    with open(nb_path, encoding="utf-8") as f:
        nb = json.load(f)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=workdir)
    kc = km.client()
    kc.start_channels()
    out = []
    try:
        kc.wait_for_ready(timeout=60)
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = cell["source"]
            if isinstance(src, list):
                src = "".join(src)
            out.append(run_cell(kc, src))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    json.dump(out, sys.stdout)


def run_cell(kc, code):
    # stop_on_error=False: an error must not abort the next cells, which a
    # notebook run cell by cell does not do either (and which jailcell
    # never does). allow_stdin=False: a jailcell cell has no stdin either,
    # so input() and the debugger must fail, not wait for an answer.
    msg_id = kc.execute(code, store_history=True, stop_on_error=False, allow_stdin=False)
    res = {"status": "", "error": "", "shown_error": "", "stdout": "", "value": None, "images": 0, "pager": None}
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=120)
        except queue.Empty:
            res["status"] = "timeout"
            break
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = msg["msg_type"], msg["content"]
        if t == "stream" and c["name"] == "stdout":
            res["stdout"] += c["text"]
        elif t == "execute_result":
            res["value"] = c["data"].get("text/plain")
            res["images"] += "image/png" in c["data"]
        elif t == "display_data":
            res["images"] += "image/png" in c["data"]
        elif t == "error":
            res["shown_error"] = c["ename"]
        elif t == "status" and c["execution_state"] == "idle":
            break
    while True:
        try:
            reply = kc.get_shell_msg(timeout=120)
        except queue.Empty:
            # ipykernel sends no reply when its own handler fails (a cell
            # raising under %pdb on with no stdin, for one).
            res["status"] = "noreply"
            return res
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    res["status"] = reply["content"]["status"]
    # What a magic sent to the pager (%quickref, obj?, %prun): Jupyter's
    # `page` payload, which jailcell sends as a display item marked pager.
    for payload in reply["content"].get("payload") or ():
        if payload.get("source") == "page":
            text = payload.get("data", {}).get("text/plain")
            res["pager"] = (res["pager"] or "") + (text or "")
    if res["status"] == "error":
        res["error"] = reply["content"].get("ename", "")
    return res


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
