"""The seam between the agent loop and a language model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from botkit.types import Message, ToolDef, Usage

__all__ = [
    "LLM",
    "LLMRequest",
    "LLMResponse",
    "StopReason",
    "TextSink",
    "UsageMeter",
    "metered",
    "report_usage",
]

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]

TextSink = Callable[[str], Awaitable[None]]
"""Receives each text delta of a streamed answer as it arrives."""


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call to the model: system prompt, conversation and tools."""

    system: str | list[dict[str, Any]]
    messages: list[Message]
    tools: list[ToolDef] = field(default_factory=list)
    model: str | None = None
    """Overrides the client's default model for this call."""
    max_tokens: int | None = None
    """Overrides the client's default output limit for this call."""
    pauses: tuple[float, ...] = ()
    """Seconds between the conversation's latest turns, oldest first: its pace, by which
    the prompt cache's lifetime is chosen."""


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """The model's answer: an assistant message (with usage) and why it stopped."""

    message: Message
    stop_reason: StopReason
    model: str

    @property
    def usage(self) -> Usage:
        """Tokens billed for this call."""
        return self.message.usage or Usage()


class LLM(Protocol):
    """A language model the agent loop can call."""

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Answer ``request``; stream text deltas to ``on_text`` when given."""
        ...

    async def close(self) -> None:
        """Release the client's connections."""
        ...


@dataclass(slots=True)
class UsageMeter:
    """What the LLM call running in this task has used so far, as its answer streams in."""

    model: str = ""
    usage: Usage = field(default_factory=Usage)


_METER: ContextVar[UsageMeter | None] = ContextVar("botkit_usage_meter", default=None)


@contextmanager
def metered() -> Iterator[UsageMeter]:
    """Collect the usage reported by the LLM call made inside the block, even one that is
    cancelled or fails mid-stream (so what it cost can still be charged)."""
    meter = UsageMeter()
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def report_usage(model: str, usage: Usage) -> None:
    """Tell the caller's meter (if any) what the running call has used so far.

    An ``LLM`` implementation calls this whenever it learns more: at the start of a streamed
    answer (input and cache tokens) and as output tokens are counted. The counts are totals.
    """
    meter = _METER.get()
    if meter is not None:
        meter.model, meter.usage = model, usage
