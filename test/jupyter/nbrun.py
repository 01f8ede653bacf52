"""Execute a notebook end to end with nbclient on a kernel and print, as one
JSON list, what each code cell produced: the fields test/conformance
compares (status and exception type from the execute reply, stdout, the
value's text/plain, the number of PNG images, the pager's text from the
reply's page payloads).

    python3 nbrun.py KERNEL_NAME NOTEBOOK.ipynb DATA_DIR WORKDIR [TRANSPORT]

TRANSPORT "ipc" runs the kernel on ZMQ's ipc transport, its sockets in
Jupyter's runtime directory as a Jupyter server puts them.

The files of DATA_DIR are written into the kernel's working directory by a
first cell added for the run, the same code for every kernel (a jailcell
kernel's working directory is its sandbox's); its outcome is left out.
"""

import base64
import json
import os
import sys
import uuid

import nbformat
from jupyter_client.manager import KernelManager
from jupyter_core.paths import jupyter_runtime_dir
from nbclient import NotebookClient


def text(v):
    return "".join(v) if isinstance(v, list) else v


def main(kernel_name, nb_path, data_dir, workdir, transport="tcp"):
    nb = nbformat.read(nb_path, as_version=4)
    files = {}
    for name in sorted(os.listdir(data_dir)):
        with open(os.path.join(data_dir, name), "rb") as f:
            files[name] = base64.b64encode(f.read()).decode()
    setup = "import base64 as _b\nfor _n, _d in %r.items():\n    open(_n, 'wb').write(_b.b64decode(_d))\ndel _b, _n, _d" % files
    replies = {}

    def on_cell_executed(cell, cell_index, execute_reply):
        replies[cell_index] = execute_reply["content"]

    km = None
    if transport != "tcp":
        runtime = jupyter_runtime_dir()
        os.makedirs(runtime, mode=0o700, exist_ok=True)
        km = KernelManager(kernel_name=kernel_name, transport=transport,
                           connection_file=os.path.join(runtime, "kernel-%s.json" % uuid.uuid4()))
    client = NotebookClient(nb, km=km, kernel_name=kernel_name, timeout=300, startup_timeout=300, allow_errors=True,
                            resources={"metadata": {"path": workdir}}, on_cell_executed=on_cell_executed)
    nb.cells.insert(0, nbformat.v4.new_code_cell(setup))
    client.execute()
    if km is not None:
        # nbclient shuts down only the kernels it made itself.
        km.shutdown_kernel(now=False)
    assert replies[0]["status"] == "ok", replies[0]
    out = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index == 0:
            continue
        r = replies.get(index, {})
        res = {"status": r.get("status", ""), "error": r.get("ename", "") if r.get("status") == "error" else "",
               "stdout": "", "value": None, "images": 0, "pager": None}
        pages = [p["data"].get("text/plain", "") for p in r.get("payload", []) if p.get("source") == "page"]
        if pages:
            res["pager"] = "".join(pages)
        for o in cell.outputs:
            if o.output_type == "stream" and o.name == "stdout":
                res["stdout"] += text(o.text)
            elif o.output_type == "execute_result":
                res["value"] = text(o.data.get("text/plain"))
                res["images"] += "image/png" in o.data
            elif o.output_type == "display_data":
                res["images"] += "image/png" in o.data
        out.append(res)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:6])
