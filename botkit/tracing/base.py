"""botkit's tracing interface, and the default that records nothing (tracing off)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from botkit.llm.base import LLMRequest, LLMResponse
    from botkit.messengers.base import Incoming
    from botkit.types import ToolResultBlock, ToolUseBlock

__all__ = ["NO_SPAN", "AttributeValue", "Span", "SpanKind", "Tracer"]

SpanKind = Literal["internal", "client", "server", "producer", "consumer"]
AttributeValue = str | bool | int | float | list[str]


class Span(Protocol):
    """The span a block runs in: what botkit records on it."""

    recording: bool
    """Whether anything set here is kept (``False`` for the no-op span)."""

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""
        ...

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Add a timestamped event."""
        ...

    def fail(self, error_type: str) -> None:
        """Mark the span failed (status error, ``error.type``)."""
        ...


class _NoSpan:
    """A span that keeps nothing."""

    recording = False

    def set(self, key: str, value: AttributeValue) -> None:
        """Keep nothing."""

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Keep nothing."""

    def fail(self, error_type: str) -> None:
        """Keep nothing."""


NO_SPAN: Span = _NoSpan()
"""The span of every block while tracing is off."""
_NOTHING: AbstractContextManager[Span] = nullcontext(NO_SPAN)


class Tracer:
    """botkit's tracing interface; this base records nothing (tracing off)."""

    enabled = False

    def turn(
        self, message: Incoming, agent: object, group_context: str
    ) -> AbstractContextManager[Span]:
        """The ``invoke_agent`` span of one incoming message's turn (``agent``: the messenger
        it came through, which knows the bot's name)."""
        return _NOTHING

    def turn_ended(self, span: Span, outcome: str) -> None:
        """Record how the turn ended (``botkit.turn.outcome``)."""

    def gate(self, name: str, passed: bool) -> None:
        """A gate of the turn (handle_start, authorize, budget): a passed one is listed on its
        span (``botkit.gates.passed``), the one that stops the turn is an event."""

    def event(self, name: str, **attributes: AttributeValue) -> None:
        """A timestamped event on botkit's current span (the turn's, in its own code), e.g.
        ``tracer.event("botkit.approval.asked", tool="refund")``."""

    def chat(self, request: LLMRequest, model: str) -> AbstractContextManager[Span]:
        """The ``chat {model}`` span of one LLM call."""
        return _NOTHING

    def chat_answered(self, span: Span, response: LLMResponse) -> None:
        """Record the answer of an LLM call: models, tokens, finish reasons (and content)."""

    def retried(self, attempt: int, status: int | None) -> None:
        """The running LLM call is sent again (``attempt`` retries so far)."""

    def tool(self, call: ToolUseBlock) -> AbstractContextManager[Span]:
        """The ``execute_tool {name}`` span of one tool call."""
        return _NOTHING

    def tool_done(self, span: Span, result: ToolResultBlock) -> None:
        """Record a tool call's result (its content only when content is traced)."""

    def failed(self, error: BaseException) -> None:
        """Mark the current span failed with the type of ``error`` (caught, not raised)."""

    def telegram(self, method: str) -> AbstractContextManager[Span]:
        """A client span of one Bot API request, named by its method."""
        return _NOTHING

    def span(
        self,
        name: str,
        kind: SpanKind = "internal",
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> AbstractContextManager[Span]:
        """A span of botkit's own work (a Telegram request, a download, a compaction)."""
        return _NOTHING

    def carrier(self) -> dict[str, str]:
        """The current span context as W3C headers (``traceparent``), to send with a job."""
        return {}

    def resumed(self, carrier: Mapping[str, str] | None) -> AbstractContextManager[None]:
        """Run the block as a child of the span context in ``carrier`` (from another process)."""
        return nullcontext()

    def log_ids(self) -> dict[str, str]:
        """``trace_id`` and ``span_id`` of the current span, for log lines."""
        return {}
