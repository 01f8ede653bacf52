#!/usr/bin/python3
"""Test fixer for jailcell's command fixer: reads the FixInput JSON on stdin
and repairs one known mistake, the misspelt print (pritn -> print). With
nothing to repair it prints nothing, which ends the loop."""
import json
import sys

req = json.load(sys.stdin)
code = req["code"]
if "pritn(" in code and "NameError" in req["error"]:
    sys.stdout.write(code.replace("pritn(", "print("))
