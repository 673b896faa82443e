"""The seam between the agent loop and a language model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from botkit.types import Message, ToolDef, Usage

__all__ = ["LLM", "LLMRequest", "LLMResponse", "StopReason", "TextSink"]

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
