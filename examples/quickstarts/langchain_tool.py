#!/usr/bin/env python3
"""Quickstart: jailcell as a LangChain-style tool.

RunPythonTool has the shape of LangChain's BaseTool (name, description,
args_schema, _run, invoke, ainvoke) without depending on LangChain: an
agent framework that calls tools that way can use it as is, and with
langchain_core installed it wraps in one line:

    from langchain_core.tools import StructuredTool
    lc_tool = StructuredTool.from_function(func=tool._run, name=tool.name,
                                           description=tool.description)

Run as a script, it drives a small agent loop against an OpenAI-compatible
chat API (what `llm.bind_tools([tool])` does in LangChain):

    export OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=my-model
    export JAILCELL_SOCKET=/run/jailcell/jailcell.sock
    python3 langchain_tool.py "How many primes are below 1000?"
"""

import asyncio
import json
import os
import sys
import urllib.request
from typing import Any, Dict, List, Optional, Union

from jailcell import Sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TURNS = 10


def _spec() -> Dict[str, Any]:
    with open(os.path.join(HERE, "run_python.json")) as f:
        return json.load(f)["function"]


class RunPythonInput:
    """args_schema: the tool's input, {"code": str}. model_json_schema and
    model_validate are pydantic v2's names, which LangChain reads."""

    def __init__(self, code: str) -> None:
        self.code = code

    @classmethod
    def model_json_schema(cls) -> Dict[str, Any]:
        return _spec()["parameters"]

    @classmethod
    def model_validate(cls, obj: Any) -> "RunPythonInput":
        if not isinstance(obj, dict) or not isinstance(obj.get("code"), str):
            raise ValueError('run_python takes {"code": string}, got %r' % (obj,))
        return cls(obj["code"])


class RunPythonTool:
    """Run Python in one jailcell sandbox; state persists between calls."""

    name = "run_python"
    description: str = _spec()["description"]
    args_schema = RunPythonInput

    def __init__(self, sandbox: Optional[Sandbox] = None) -> None:
        self._sandbox = sandbox

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:  # made on first use, like an MCP session
            self._sandbox = Sandbox(ttl=600)
        return self._sandbox

    def _run(self, code: str) -> str:
        return self.sandbox.run_code(code).tool_text()

    def invoke(self, input: Union[str, Dict[str, Any]], config: Optional[Dict[str, Any]] = None) -> Any:
        """As BaseTool.invoke: a string is the code, a dict the arguments;
        a tool call ({"name", "args", "id", "type": "tool_call"}) gives back
        a tool message for it."""
        if isinstance(input, dict) and input.get("type") == "tool_call":
            content = self.invoke(input.get("args") or {})
            return {"role": "tool", "tool_call_id": input.get("id"), "name": self.name, "content": content}
        args = RunPythonInput.model_validate({"code": input} if isinstance(input, str) else input)
        return self._run(args.code)

    async def ainvoke(self, input: Union[str, Dict[str, Any]], config: Optional[Dict[str, Any]] = None) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, self.invoke, input, config)

    def to_openai_tool(self) -> Dict[str, Any]:
        """What langchain_core's convert_to_openai_tool makes of this tool."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.args_schema.model_json_schema()}}

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.kill()


def agent(prompt: str, tool: RunPythonTool, base_url: str, model: str) -> str:
    """A bind_tools-style loop: the model's tool calls become tool_call
    dicts, the tool's messages go back, until it answers in text."""
    messages: List[Dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(MAX_TURNS):
        req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps({
            "model": model, "messages": messages, "tools": [tool.to_openai_tool()]}).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "none")})
        with urllib.request.urlopen(req, timeout=300) as resp:
            msg = json.load(resp)["choices"][0]["message"]
        messages.append(msg)
        if not msg.get("tool_calls"):
            return msg.get("content") or ""
        for call in msg["tool_calls"]:
            try:
                args = json.loads(call["function"]["arguments"])
                out = tool.invoke({"type": "tool_call", "name": call["function"]["name"], "args": args, "id": call["id"]})
            except ValueError as e:
                out = {"role": "tool", "tool_call_id": call["id"], "content": "bad arguments: %s" % e}
            messages.append(out)
    raise RuntimeError("no answer after %d turns" % MAX_TURNS)


def main() -> None:
    prompt = " ".join(sys.argv[1:]) or "How many primes are below 1000?"
    tool = RunPythonTool()
    try:
        print(agent(prompt, tool, os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
                    os.environ.get("OPENAI_MODEL", "local-model")))
    finally:
        tool.close()


if __name__ == "__main__":
    main()
