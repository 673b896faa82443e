"""The scripted model of ``python -m botkit try``: it echoes, and calls a tool when asked.

Named in the message ("use roll_dice", or just "current time"), a tool is called with
arguments made up from its schema (required ones only, so the tool's defaults apply); the
next answer reads the tool's result back. Everything else is echoed. No key, no network.
"""

from __future__ import annotations

import re
from typing import Any

from botkit.llm.base import LLMRequest, LLMResponse, StopReason, TextSink
from botkit.types import Message, Usage

__all__ = ["ScriptedLLM", "sample_arguments", "scripted_answer"]

SCRIPTED_CALL_ID = "toolu_scripted_{n}"


class ScriptedLLM:
    """The scripted model as an ``LLM``: in this process, no HTTP, no SDK (``try`` starts in
    about a second). Its answers cost nothing and are labelled ``model``."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.calls = 0

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """The scripted answer to ``request``, streamed to ``on_text`` in one piece."""
        body = {
            "messages": [m.to_api() for m in request.messages],
            "tools": [t.to_api() for t in request.tools],
        }
        self.calls += 1
        content = scripted_answer(body, call_id=SCRIPTED_CALL_ID.format(n=self.calls))
        message = Message.model_validate(
            {"role": "assistant", "content": content, "usage": Usage(), "model": self.model}
        )
        if on_text is not None and message.text:
            await on_text(message.text)
        stop: StopReason = "tool_use" if message.tool_uses else "end_turn"
        return LLMResponse(message=message, stop_reason=stop, model=self.model)

    async def close(self) -> None:
        """Nothing to release."""


def scripted_answer(body: dict[str, Any], call_id: str = "toolu_scripted") -> list[dict[str, Any]]:
    """The answer's content blocks for a request ``body`` (the Messages API's shape): a
    tool's result read back, a tool call, or an echo."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    results = _tool_results(messages)
    if results:
        return [{"type": "text", "text": _read_back(messages, results)}]
    text = _last_user_text(messages)
    tool = _named_tool(text, body.get("tools") or [])
    if tool is None:
        return [{"type": "text", "text": f"echo: {text}"}]
    rest = _after_name(text, str(tool["name"]))
    arguments = sample_arguments(tool.get("input_schema") or {}, rest)
    return [{"type": "tool_use", "id": call_id, "name": str(tool["name"]), "input": arguments}]


def _last_user_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return [{"type": "text", "text": content}]
            return [b for b in content or [] if isinstance(b, dict)]
    return []


def _tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in _last_user_blocks(messages) if b.get("type") == "tool_result"]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    """What the user wrote, without botkit's notes (one bracketed line, e.g. the time)."""
    texts = [str(b.get("text", "")) for b in _last_user_blocks(messages) if b.get("type") == "text"]
    words = [t for t in texts if not (t.startswith("[") and t.endswith("]") and "\n" not in t)]
    return "\n".join(words if words else texts)


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


def _read_back(messages: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    """``<tool> answered: <result>`` for each result, naming the tool from its call."""
    names = _call_names(messages)
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
