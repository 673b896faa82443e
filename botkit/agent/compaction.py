"""Compaction: when a context grows too long, older messages become an LLM-written summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import orjson
import structlog

from botkit import tracing
from botkit.agent.context import ContextManager
from botkit.errors import LLMError
from botkit.llm.base import LLM, LLMRequest
from botkit.types import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["Compactor", "message_chars"]

log = structlog.get_logger(__name__)

SUMMARY_PROMPT = (
    "You are summarising the earlier part of a chat between a user and an assistant, so the "
    "assistant can continue without it. Keep every fact about the user, their preferences, "
    "decisions made, numbers and names, results of tool calls that still matter, and open "
    "tasks. Write plain prose or short bullet points; no preamble."
)
TRUNCATED_NOTE = "(Earlier messages were removed to save space; no summary is available.)"
IMAGE_CHARS = 1_000
"""What an image counts for in the character budget."""


def message_chars(message: Message) -> int:
    """A message's size in characters, as the budget counts it."""
    total = 0
    for block in message.content:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ToolResultBlock):
            total += len(block.content) + IMAGE_CHARS * len(block.images or ())
        elif isinstance(block, ToolUseBlock):
            total += len(block.name) + len(orjson.dumps(block.input))
        elif isinstance(block, ImageBlock):
            total += IMAGE_CHARS
        elif isinstance(block, DocumentBlock):
            total += _document_chars(block)
    return total


def _document_chars(block: DocumentBlock) -> int:
    """A text file counts its characters; a PDF a share of its size (pages cost tokens)."""
    data = block.source.data or ""
    return len(data) if block.source.type == "text" else max(IMAGE_CHARS, len(data) // 20)


@dataclass
class _Counted:
    """What :meth:`Compactor.needed` counted of a context: its first ``messages``, the last of
    them ``last``, ``chars`` in all."""

    messages: int = 0
    chars: int = 0
    last: Message | None = None

    def still_heads(self, messages: Sequence[Message]) -> bool:
        """Whether ``messages`` still begin with what was counted."""
        if self.messages == 0:
            return True
        return len(messages) >= self.messages and messages[self.messages - 1] is self.last


@dataclass
class Compactor:
    """Keeps a context under ``max_context_chars`` by summarising what is old."""

    llm: LLM
    max_context_chars: int = 200_000
    keep_share: float = 0.4
    """About this share of the budget (80,000 of 200,000 chars) stays word for word."""
    min_keep_messages: int = 10
    trigger: float = 0.8
    """Compact once the context passes this share of ``max_context_chars``."""

    def __post_init__(self) -> None:
        self._counted: WeakKeyDictionary[ContextManager, _Counted] = WeakKeyDictionary()

    def needed(self, context: ContextManager) -> bool:
        """Whether ``context`` has grown past the trigger."""
        return self._size(context) > self.trigger * self.max_context_chars

    def _size(self, context: ContextManager) -> int:
        """The context's size, counting only what was appended since the last look (a
        conversation only grows between its compactions and resets, which are counted anew)."""
        messages = context.messages
        counted = self._counted.get(context)
        if counted is None or not counted.still_heads(messages):
            counted = self._counted[context] = _Counted()
        for message in messages[counted.messages :]:
            counted.chars += message_chars(message)
        counted.messages = len(messages)
        counted.last = messages[-1] if messages else None
        return counted.chars

    async def compact(self, context: ContextManager) -> bool:
        """Summarise all but the newest part of ``context``; ``False`` if nothing could go."""
        keep = int(self.keep_share * self.max_context_chars)
        return await self._summarise(context, self._keep_from(context.messages, keep))

    async def shrink(self, context: ContextManager) -> bool:
        """After "prompt is too long": summarise all but the newest quarter of it."""
        size = sum(message_chars(m) for m in context.messages)
        return await self._summarise(context, self._keep_from(context.messages, size // 4, 2))

    async def _summarise(self, context: ContextManager, start: int) -> bool:
        messages = context.messages
        if start == 0:
            return False
        old = messages[:start]
        with tracing.tracer.span("compaction", attributes={"botkit.compacted": start}) as span:
            try:
                response = await self.llm.complete(
                    LLMRequest(system=SUMMARY_PROMPT, messages=[_as_transcript(old)])
                )
                summary, usage, model = (
                    response.message.text.strip(),
                    response.usage,
                    response.model,
                )
            except LLMError as e:
                log.warning("compaction.summary_failed", user_id=context.user_id, error=str(e))
                span.fail(type(e).__qualname__)
                summary, usage, model = "", None, None
            await context.compact(summary or TRUNCATED_NOTE, len(messages) - start, usage, model)
        log.info(
            "compaction.done",
            user_id=context.user_id,
            removed=start,
            kept=len(messages) - start,
            summarised=bool(summary),
        )
        return True

    async def truncate(self, context: ContextManager) -> bool:
        """The last resort: keep only the newest exchange, no summary call."""
        messages = context.messages
        start = _opening_at_or_before(messages, len(messages) - 1)
        if start <= 0:
            return False
        await context.compact(TRUNCATED_NOTE, len(messages) - start)
        return True

    def _keep_from(
        self, messages: Sequence[Message], keep_chars: int, min_messages: int | None = None
    ) -> int:
        """Where the kept part starts: enough chars and messages, at a clean turn boundary."""
        least = self.min_keep_messages if min_messages is None else min_messages
        kept_chars, index = 0, len(messages)
        while index > 0 and (kept_chars < keep_chars or len(messages) - index < least):
            index -= 1
            kept_chars += message_chars(messages[index])
        return _opening_at_or_before(messages, index)


def _opening_at_or_before(messages: Sequence[Message], index: int) -> int:
    """The nearest user message at or before ``index`` that answers no tool call."""
    for i in range(min(index, len(messages) - 1), -1, -1):
        message = messages[i]
        if message.role == "user" and not any(
            isinstance(b, ToolResultBlock) for b in message.content
        ):
            return i
    return 0


def _as_transcript(messages: Sequence[Message]) -> Message:
    """Old messages as one user message of plain text, for the summarising call."""
    lines: list[str] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                lines.append(f"{message.role}: {block.text}")
            elif isinstance(block, ToolUseBlock):
                lines.append(f"assistant called {block.name}({orjson.dumps(block.input).decode()})")
            elif isinstance(block, ToolResultBlock):
                lines.append(f"tool result: {block.content[:2_000]}")
            elif isinstance(block, ImageBlock):
                lines.append(f"{message.role}: [an image]")
            elif isinstance(block, DocumentBlock):
                lines.append(f"{message.role}: [a document: {block.title or 'untitled'}]")
    text = "\n".join(lines) or "(empty)"
    return Message.user_text(f"Summarise this conversation:\n\n{text}")
