"""Keep a conversation valid for the Messages API, whatever was cut or interrupted.

The API wants: the first message from the user, roles alternating, every ``tool_use``
answered by a ``tool_result`` in the very next message, and no ``tool_result`` without
its ``tool_use`` just before. On today's models it also wants a tool cycle's thinking blocks
back exactly as they came, after exactly the same prefix: so within a turn nothing before its
answers changes (the window's start is fixed when the turn begins), and the thinking of earlier
turns is left out the same way at every call (see :func:`without_earlier_thinking`).
"""

from __future__ import annotations

from collections.abc import Sequence

from botkit.types import (
    ContentBlock,
    Message,
    ToolResultBlock,
)

__all__ = [
    "INTERRUPTED_IDEMPOTENT_TEXT",
    "INTERRUPTED_TOOL_TEXT",
    "normalize",
    "trim",
    "turn_start",
    "without_earlier_thinking",
]

INTERRUPTED_TOOL_TEXT = (
    "This tool call was cut off: the bot stopped while it ran or before it started, so "
    "whether it took effect is unknown. Check before calling it again."
)
"""The result of a call whose turn was interrupted: it may have run (a SIGKILL mid-call)."""
INTERRUPTED_IDEMPOTENT_TEXT = (
    "This tool call was cut off before its result came back. The tool is idempotent: "
    "calling it again is safe."
)
"""The same, for a tool that declared itself idempotent."""


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
        if content is message.content or _same(content, message.content):
            out.append(message)  # as nearly always: the same message, what it dumped kept
        elif content:
            out.append(Message(role="user", content=content))
    if out and out[-1].tool_uses:
        out.append(Message(role="user", content=_answered(out[-1], [])))
    return _merge_same_role(out)


def _same(content: Sequence[ContentBlock], original: Sequence[ContentBlock]) -> bool:
    return len(content) == len(original) and all(
        new is old for new, old in zip(content, original, strict=True)
    )


def trim(messages: Sequence[Message], max_messages: int) -> list[Message]:
    """The newest part of a normalized conversation, still valid: at most ``max_messages`` as
    it stood when its current turn began, and everything of that turn since.

    The cut point moves in steps of half the limit, not one turn at a time, so consecutive
    calls start with the same messages and the prompt cache keeps hitting; within a turn it
    never moves (the turn's thinking blocks are bound to what came before them). It lands on
    a user message that answers no tool call; when the window holds none (one tool chain is
    longer than that), the nearest earlier one is taken, so a tool chain is never split.
    """
    limit = max(max_messages, 1)
    opening = turn_start(messages)
    settled = len(messages) if opening is None else opening + 1
    if settled <= limit:
        return list(messages)
    step = max(limit // 2, 1)
    start = -(-(settled - limit) // step) * step  # rounded up to a whole step
    later = range(start, len(messages))
    earlier = range(start - 1, -1, -1)
    for index in (*later, *earlier):
        if _opens_exchange(messages[index]):
            return list(messages[index:])
    return list(messages)  # not normalized: nothing is safe to cut


def turn_start(messages: Sequence[Message]) -> int | None:
    """The index of the message that began the current turn: the last user message that
    answers no tool call (``None`` when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        if _opens_exchange(messages[index]):
            return index
    return None


def without_earlier_thinking(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with the thinking blocks of every turn before the current one left out.

    Within a turn (a tool cycle) thinking must go back as it came. Across turns botkit leaves
    it out, the same way at every call, so no earlier block is ever sent after a changed
    prefix: the window may move, history may be compacted, the prompt, the tools or the model
    may change between turns, and nothing fails. The price is the model's earlier reasoning
    (its answers stay) and, once a turn, a cache write of the previous turn's answers.
    """
    opening = turn_start(messages)
    if opening is None:
        return list(messages)
    return [
        _thoughtless(message) if index < opening else message
        for index, message in enumerate(messages)
    ]


def _thoughtless(message: Message) -> Message:
    return message.without_thinking() if message.role == "assistant" else message


def _opens_exchange(message: Message) -> bool:
    return message.role == "user" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )


def _answered(previous: Message | None, content: list[ContentBlock]) -> list[ContentBlock]:
    """User content with exactly one result per tool call of ``previous``, results first
    (``content`` itself when it answers none and none was asked: nearly every message)."""
    wanted = [t.id for t in previous.tool_uses] if previous else []
    if not wanted and not any(isinstance(b, ToolResultBlock) for b in content):
        return content
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
            model = last.model or message.model
            out.append(Message(role=message.role, content=content, usage=usage, model=model))
        else:
            out.append(message)
    return out
