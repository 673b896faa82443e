"""Keep a conversation valid for the Messages API, whatever was cut or interrupted.

The API wants: the first message from the user, roles alternating, every ``tool_use``
answered by a ``tool_result`` in the very next message, and no ``tool_result`` without
its ``tool_use`` just before.
"""

from __future__ import annotations

from collections.abc import Sequence

from botkit.types import ContentBlock, Message, ToolResultBlock

__all__ = ["INTERRUPTED_TOOL_TEXT", "normalize", "trim"]

INTERRUPTED_TOOL_TEXT = "This tool call was not run: the turn was interrupted."


def normalize(messages: Sequence[Message]) -> list[Message]:
    """A valid conversation holding everything of ``messages`` that can stay."""
    merged = _merge_same_role([m for m in messages if m.content])
    out: list[Message] = []
    for message in merged:
        if message.role == "assistant":
            if out:  # a conversation cannot start with the assistant
                out.append(message)
            continue
        previous = out[-1] if out and out[-1].role == "assistant" else None
        content = _answered(previous, message.content)
        if content:
            out.append(Message(role="user", content=content))
    if out and out[-1].tool_uses:
        out.append(Message(role="user", content=_answered(out[-1], [])))
    return _merge_same_role(out)


def trim(messages: Sequence[Message], max_messages: int) -> list[Message]:
    """The newest part of a normalized conversation, at most ``max_messages`` long, still valid.

    The cut point moves in steps of half the limit, not one turn at a time, so consecutive
    calls start with the same messages and the prompt cache keeps hitting. It lands on a
    user message that answers no tool call; when the window holds none (one tool chain is
    longer than that), the nearest earlier one is taken, so a tool chain is never split.
    """
    limit = max(max_messages, 1)
    if len(messages) <= limit:
        return list(messages)
    step = max(limit // 2, 1)
    start = -(-(len(messages) - limit) // step) * step  # rounded up to a whole step
    later = range(start, len(messages))
    earlier = range(start - 1, -1, -1)
    for index in (*later, *earlier):
        if _opens_exchange(messages[index]):
            return list(messages[index:])
    return list(messages)  # not normalized: nothing is safe to cut


def _opens_exchange(message: Message) -> bool:
    return message.role == "user" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )


def _answered(previous: Message | None, content: Sequence[ContentBlock]) -> list[ContentBlock]:
    """User content with exactly one result per tool call of ``previous``, results first."""
    wanted = [t.id for t in previous.tool_uses] if previous else []
    results = {
        b.tool_use_id: b
        for b in content
        if isinstance(b, ToolResultBlock) and b.tool_use_id in wanted
    }
    answers: list[ContentBlock] = [
        results.get(i)
        or ToolResultBlock(tool_use_id=i, content=INTERRUPTED_TOOL_TEXT, is_error=True)
        for i in wanted
    ]
    others = [b for b in content if not isinstance(b, ToolResultBlock)]
    return answers + others


def _merge_same_role(messages: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        if out and out[-1].role == message.role:
            last = out.pop()
            content = [*last.content, *message.content]
            if message.role == "user":  # tool results must lead a user message
                content.sort(key=lambda b: not isinstance(b, ToolResultBlock))
            usage = message.usage if last.usage is None else last.usage
            out.append(Message(role=message.role, content=content, usage=usage))
        else:
            out.append(message)
    return out
