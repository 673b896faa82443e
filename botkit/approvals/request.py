"""The approval request as the chat shows it: the tool, every argument in full, two buttons.

What a person approves is exactly what runs: no argument is cut or left out (a long request
takes several messages, the buttons under the last), and characters that would display text
other than it is (bidirectional overrides, control characters) are shown as their escapes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from botkit.approvals.texts import ApprovalTexts
from botkit.messengers.base import Button, Reply
from botkit.terminal import printable

__all__ = ["BUTTON_PREFIX", "decided_text", "request_reply"]

BUTTON_PREFIX = "approval"
"""Button data is ``approval:<id>:a`` (Allow) or ``approval:<id>:d`` (Deny)."""
LONG_REQUEST_CHARS = 3_000
"""A request longer than this spans messages: once decided, the last one (under which the
buttons were) says only the outcome."""


def request_reply(approval_id: str, calls: list[dict[str, Any]], texts: ApprovalTexts) -> Reply:
    """The request message with Allow and Deny under it."""
    buttons = (
        Button(texts.allow, f"{BUTTON_PREFIX}:{approval_id}:a"),
        Button(texts.deny, f"{BUTTON_PREFIX}:{approval_id}:d"),
    )
    return Reply(f"{texts.request}\n\n{describe(calls)}", (buttons,))


def decided_text(calls: list[dict[str, Any]], texts: ApprovalTexts, outcome: str) -> Reply:
    """The request message once decided: the calls and the outcome, no buttons (a long
    request's calls stay in the messages above it)."""
    described = describe(calls)
    if len(described) > LONG_REQUEST_CHARS:
        return Reply(f"{texts.request}\n\n{outcome}")
    return Reply(f"{texts.request}\n\n{described}\n\n{outcome}")


def describe(calls: list[dict[str, Any]]) -> str:
    """The calls as Markdown: each tool's name, then every argument in a code block (the
    renderer escapes them, so nothing in them becomes markup)."""
    parts = []
    for call in calls:
        arguments = call.get("input") or {}
        lines = [f"{printable(str(name))}: {_value(value)}" for name, value in arguments.items()]
        block = "\n".join(lines) or "(no arguments)"
        fence = "`" * max(3, _longest_backticks(block) + 1)  # nothing inside can close it
        parts.append(f"**{_plain(call['name'])}**\n{fence}\n{block}\n{fence}")
    return "\n\n".join(parts)


def _value(value: Any) -> str:
    """An argument's value in full, as it will run: strings as they are, the rest as JSON;
    control and bidirectional characters shown as escapes."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return printable(text)


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _plain(name: str) -> str:
    """A tool name with no Markdown in it (names are letters, digits, ``_`` and ``-``)."""
    return name.replace("_", "\\_")
