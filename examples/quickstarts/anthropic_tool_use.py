#!/usr/bin/env python3
"""Quickstart: Anthropic-style tool use (the Messages API's tool_use and
tool_result blocks), with jailcell as the model's `run_python` tool.

Standard library plus the jailcell package only:

    pip install --no-build-isolation --no-index ./client/python
    export ANTHROPIC_BASE_URL=https://api.anthropic.com ANTHROPIC_API_KEY=... ANTHROPIC_MODEL=...
    export JAILCELL_SOCKET=/run/jailcell/jailcell.sock                     # a `jailcell serve`
    python3 anthropic_tool_use.py "Plot sin(x) and tell me where it peaks."

The tool's input schema is the parameters of run_python.json beside this
file. One sandbox lives as long as the conversation.
"""

import json
import os
import sys
import urllib.request
from typing import Any, Dict, List

from jailcell import Sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TURNS = 10  # bounds the loop


def load_tool() -> Dict[str, Any]:
    """run_python.json, in the Messages API's tool shape."""
    with open(os.path.join(HERE, "run_python.json")) as f:
        fn = json.load(f)["function"]
    return {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}


def messages_api(base_url: str, payload: Dict[str, Any]) -> Dict[str, Any]:
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/messages", data=json.dumps(payload).encode(), headers={
        "Content-Type": "application/json",
        "anthropic-version": "2023-06-01",
        "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
    })
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.load(resp)


def run(prompt: str, sbx: Sandbox, base_url: str, model: str) -> str:
    """Ask; while the model stops for tool use, run each tool_use block in
    the sandbox and answer it with a tool_result block."""
    tools = [load_tool()]
    messages: List[Dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(MAX_TURNS):
        resp = messages_api(base_url, {"model": model, "max_tokens": 1024, "tools": tools, "messages": messages})
        messages.append({"role": "assistant", "content": resp["content"]})
        uses = [b for b in resp["content"] if b.get("type") == "tool_use"]
        if resp.get("stop_reason") != "tool_use" or not uses:
            return "".join(b.get("text", "") for b in resp["content"] if b.get("type") == "text")
        results = []
        for use in uses:
            code = (use.get("input") or {}).get("code")
            if use.get("name") != "run_python" or not isinstance(code, str):
                results.append({"type": "tool_result", "tool_use_id": use["id"], "is_error": True,
                                "content": "the only tool is run_python, with input {\"code\": string}"})
                continue
            print("[run_python]\n" + code, file=sys.stderr)
            ex = sbx.run_code(code, on_stdout=lambda t: sys.stderr.write(t))
            results.append({"type": "tool_result", "tool_use_id": use["id"], "is_error": ex.error is not None,
                            "content": [{"type": "text", "text": ex.tool_text()}]})
        messages.append({"role": "user", "content": results})
    raise RuntimeError("no answer after %d turns" % MAX_TURNS)


def main() -> None:
    prompt = " ".join(sys.argv[1:]) or "Compute the mean of the squares of 1..10 with numpy."
    base_url = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    model = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")
    with Sandbox(ttl=600) as sbx:
        print(run(prompt, sbx, base_url, model))


if __name__ == "__main__":
    main()
