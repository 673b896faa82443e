"""The scripted model of ``python -m botkit try``: it echoes, and calls a tool when asked.

Named in the message ("use roll_dice", or just "current time"), a tool is called with
arguments made up from its schema (required ones only, so the tool's defaults apply); the
next answer reads the tool's result back. Everything else is echoed. No key, no network.
"""

from __future__ import annotations

import re
from typing import Any

from botkit.testing.anthropic import FakeReply, FakeRequest

__all__ = ["sample_arguments", "scripted_reply"]


def scripted_reply(request: FakeRequest) -> FakeReply:
    """The answer to ``request``: a tool's result read back, a tool call, or an echo."""
    results = request.tool_results()
    if results:
        return FakeReply.text(_read_back(request, results))
    text = request.last_user_text()
    tool = _named_tool(text, request.tools)
    if tool is None:
        return FakeReply.text(f"echo: {text}")
    rest = _after_name(text, str(tool["name"]))
    arguments = sample_arguments(tool.get("input_schema") or {}, rest)
    return FakeReply.tool_use(str(tool["name"]), arguments)


def sample_arguments(schema: dict[str, Any], text: str = "") -> dict[str, Any]:
    """Plausible values for the required properties of a JSON schema (``text`` for strings)."""
    properties: dict[str, Any] = schema.get("properties") or {}
    return {
        name: _sample(properties.get(name) or {}, text) for name in schema.get("required") or []
    }


def _sample(schema: dict[str, Any], text: str) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type")
    if kind == "string":
        return text or "example"
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return sample_arguments(schema, text)
    for option in schema.get("anyOf") or []:  # Optional[X]: the X
        if option.get("type") != "null":
            return _sample(option, text)
    return text or "example"


def _named_tool(text: str, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The offered tool whose name (or the name with spaces) the message mentions."""
    lowered = text.lower()
    for tool in tools:
        name = str(tool.get("name", "")).lower()
        if name and (name in lowered or name.replace("_", " ") in lowered):
            return tool
    return None


def _after_name(text: str, name: str) -> str:
    """What the user wrote after the tool's name: a string argument, if any."""
    pattern = re.escape(name).replace("_", "[_ ]")
    match = re.search(pattern, text, re.IGNORECASE)
    return text[match.end() :].strip(" :,.") if match else ""


def _read_back(request: FakeRequest, results: list[dict[str, Any]]) -> str:
    """``<tool> answered: <result>`` for each result, naming the tool from its call."""
    names = _call_names(request.messages)
    lines = []
    for result in results:
        name = names.get(str(result.get("tool_use_id")), "the tool")
        verb = "failed" if result.get("is_error") else "answered"
        lines.append(f"{name} {verb}: {_content_text(result.get('content'))}")
    return "\n".join(lines)


def _call_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    calls = [
        block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    return {str(call.get("id")): str(call.get("name")) for call in calls}


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content or "")
