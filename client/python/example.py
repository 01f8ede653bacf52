#!/usr/bin/env python3
"""Example: an agent's tool calls against `jailcell serve`.

    JAILCELL_SOCKET=/run/jailcell/jailcell.sock python3 example.py
"""

import os
import sys

from jailcell_client import Client, JailcellError

jc = Client(os.environ.get("JAILCELL_SOCKET", "/run/jailcell/jailcell.sock"))
print("jailcell", jc.health()["version"])

# A session keeps its variables and files between cells.
with jc.session(ttl_s=300) as s:
    s.upload("sales.csv", b"month,total\njan,10\nfeb,32\n")
    s.exec("import csv\nrows = list(csv.DictReader(open('sales.csv')))")
    # Output streams while the cell runs.
    r = s.exec(
        "total = sum(int(r['total']) for r in rows)\n"
        "for r in rows:\n    print(r['month'], r['total'])\n"
        "open('total.txt', 'w').write(str(total))\n"
        "total",
        on_output=lambda stream, text: sys.stdout.write("  [%s] %s" % (stream, text)),
    )
    print("status:", r["status"], "value:", r["value"]["text/plain"])
    print("total.txt:", s.download("total.txt").decode())

    # An exception is a result, not a failure of the call.
    r = s.exec("rows[99]")
    print("status:", r["status"], r["error"]["type"])

# A one-shot cell runs in a fresh sandbox; its new files come back.
r = jc.exec("open('hello.txt', 'w').write('hi')")
print("one-shot files:", [(f["path"], f["change"]) for f in r["files"]])

try:
    jc.exec("1", session="no-such-session")
except JailcellError as e:
    print("error:", e.status, e.code)
