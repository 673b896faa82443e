"""The approval request as the chat shows it: the tool, its arguments (cut), two buttons."""

from __future__ import annotations

import json
from typing import Any

from botkit.approvals.texts import ApprovalTexts
from botkit.messengers.base import Button, Reply

__all__ = ["BUTTON_PREFIX", "decided_text", "request_reply"]

BUTTON_PREFIX = "approval"
"""Button data is ``approval:<id>:a`` (Allow) or ``approval:<id>:d`` (Deny)."""
MAX_VALUE_CHARS = 200
"""An argument's value is cut to this many characters."""
MAX_ARGUMENTS = 12
"""Arguments shown per call; the rest are counted."""


def request_reply(approval_id: str, calls: list[dict[str, Any]], texts: ApprovalTexts) -> Reply:
    """The request message with Allow and Deny under it."""
    buttons = (
        Button(texts.allow, f"{BUTTON_PREFIX}:{approval_id}:a"),
        Button(texts.deny, f"{BUTTON_PREFIX}:{approval_id}:d"),
    )
    return Reply(f"{texts.request}\n\n{describe(calls)}", (buttons,))


def decided_text(calls: list[dict[str, Any]], texts: ApprovalTexts, outcome: str) -> Reply:
    """The request message once decided: the calls and the outcome, no buttons."""
    return Reply(f"{texts.request}\n\n{describe(calls)}\n\n{outcome}")


def describe(calls: list[dict[str, Any]]) -> str:
    """The calls as Markdown: each tool's name, then its arguments in a code block (the
    renderer escapes them, so nothing in them becomes markup)."""
    parts = []
    for call in calls:
        arguments = call.get("input") or {}
        lines = [f"{name}: {_value(value)}" for name, value in list(arguments.items())[:12]]
        if len(arguments) > MAX_ARGUMENTS:
            lines.append(f"… and {len(arguments) - MAX_ARGUMENTS} more")
        block = "\n".join(lines).replace("```", "'''") or "(no arguments)"
        parts.append(f"**{_plain(call['name'])}**\n```\n{block}\n```")
    return "\n\n".join(parts)


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    if len(text) > MAX_VALUE_CHARS:
        return f"{text[:MAX_VALUE_CHARS]}… ({len(text)} characters)"
    return text


def _plain(name: str) -> str:
    """A tool name with no Markdown in it (names are letters, digits, ``_`` and ``-``)."""
    return name.replace("_", "\\_")
