#!/usr/bin/python3
"""Test fixer that never fixes: it returns the failing code with a comment
naming the attempt, so each proposal is new code that fails the same way."""
import json
import sys

req = json.load(sys.stdin)
code = req["code"].split("\n# fixer attempt")[0]
sys.stdout.write(code + "\n# fixer attempt %d (earlier: %d)\n" % (req["attempt"], len(req["attempts"])))
