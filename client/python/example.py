#!/usr/bin/env python3
"""Example: an agent's tool calls against `jailcell serve`.

    pip install --no-build-isolation --no-index ./client/python
    JAILCELL_SOCKET=/run/jailcell/jailcell.sock python3 example.py
"""

import os
import sys

from jailcell import DEFAULT_SOCKET, Client, NotFoundError, Sandbox

# A sandbox keeps its variables and files between cells.
with Sandbox(ttl=300) as sbx:                      # the socket: $JAILCELL_SOCKET or the default
    sbx.files.write("sales.csv", "month,total\njan,10\nfeb,32\n")
    sbx.run_code("import csv\nrows = list(csv.DictReader(open('sales.csv')))")
    # Output streams while the cell runs; figures arrive as results.
    ex = sbx.run_code(
        "total = sum(int(r['total']) for r in rows)\n"
        "for r in rows:\n    print(r['month'], r['total'])\n"
        "import matplotlib.pyplot as plt\nplt.bar([r['month'] for r in rows], [int(r['total']) for r in rows])\n"
        "plt.show()\n"
        "open('total.txt', 'w').write(str(total))\n"
        "total",
        on_stdout=lambda text: sys.stdout.write("  [stdout] " + text),
        on_result=lambda r: print("  [result]", r.formats()),
    )
    print("status:", ex.status, "value:", ex.text, "figure bytes:", len(ex.results[0].png_bytes() or b""))
    print("total.txt:", sbx.files.read("total.txt"))

    # An exception is part of the execution, not a failure of the call.
    ex = sbx.run_code("rows[99]")
    print("error:", ex.error.name if ex.error else None, "-", ex.error.value if ex.error else None)

# A one-shot cell runs in a fresh sandbox; its new files come back.
ex = Sandbox.run_once("open('hello.txt', 'w').write('hi')")
print("one-shot files:", [(f.path, f.change, f.data) for f in ex.files])

# Client is the service's routes one to one, returning the wire's dicts.
jc = Client(os.environ.get("JAILCELL_SOCKET", DEFAULT_SOCKET))
print("jailcell", jc.health()["version"])
try:
    jc.exec("1", session="no-such-session")
except NotFoundError as e:
    print("error:", e.status, e.code)
