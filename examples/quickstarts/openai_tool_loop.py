#!/usr/bin/env python3
"""Quickstart: a tool-use loop for an OpenAI-compatible chat API, with
jailcell as the model's `run_python` tool.

Works with any server that speaks /v1/chat/completions with function
calling (OpenAI, vLLM, llama.cpp's server, Ollama, ...). Standard library
plus the jailcell package only:

    pip install --no-build-isolation --no-index ./client/python
    export OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=my-model   # OPENAI_API_KEY if it needs one
    export JAILCELL_SOCKET=/run/jailcell/jailcell.sock                      # a `jailcell serve`
    python3 openai_tool_loop.py "What is the 20th Fibonacci number?"

The tool's schema is run_python.json beside this file. One sandbox lives
as long as the conversation, so the model's variables persist between
its calls.
"""

import json
import os
import sys
import urllib.request
from typing import Any, Dict, List

from jailcell import Sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TURNS = 10  # bounds the loop: a model that never stops asking is cut off


def load_tool() -> Dict[str, Any]:
    with open(os.path.join(HERE, "run_python.json")) as f:
        return json.load(f)


def chat(base_url: str, payload: Dict[str, Any]) -> Dict[str, Any]:
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.load(resp)


def run(prompt: str, sbx: Sandbox, base_url: str, model: str) -> str:
    """The loop: ask, run every tool call in the sandbox, send the results
    back, until the model answers in text."""
    tools = [load_tool()]
    messages: List[Dict[str, Any]] = [
        {"role": "system", "content": "You can run Python with the run_python tool."},
        {"role": "user", "content": prompt},
    ]
    for _ in range(MAX_TURNS):
        msg = chat(base_url, {"model": model, "messages": messages, "tools": tools})["choices"][0]["message"]
        messages.append(msg)
        calls = msg.get("tool_calls") or []
        if not calls:
            return msg.get("content") or ""
        for call in calls:
            fn = call["function"]
            if fn["name"] != "run_python":
                content = "unknown tool %r; the only tool is run_python" % fn["name"]
            else:
                try:
                    code = json.loads(fn["arguments"])["code"]
                except (ValueError, KeyError, TypeError) as e:
                    content = "arguments must be a JSON object {\"code\": string}: %s" % e
                else:
                    print("[run_python]\n" + code, file=sys.stderr)
                    content = sbx.run_code(code, on_stdout=lambda t: sys.stderr.write(t)).tool_text()
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise RuntimeError("no answer after %d turns" % MAX_TURNS)


def main() -> None:
    prompt = " ".join(sys.argv[1:]) or "Compute the mean of the squares of 1..10 with numpy."
    base_url = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    model = os.environ.get("OPENAI_MODEL", "local-model")
    with Sandbox(ttl=600) as sbx:
        print(run(prompt, sbx, base_url, model))


if __name__ == "__main__":
    main()
