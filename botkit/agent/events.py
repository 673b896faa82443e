"""What happens during a turn, as typed events, and the hooks that can watch or steer it.

Every event carries ``context_id`` (the user whose conversation it is) and ``task_id``
(the turn: one incoming message and everything done to answer it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from botkit.types import ToolResultBlock, ToolUseBlock, Usage

__all__ = [
    "HOOK_FAILED_REASON",
    "AgentEnd",
    "AgentStart",
    "ErrorEvent",
    "Event",
    "EventSink",
    "HookName",
    "Hooks",
    "TextDelta",
    "ToolCall",
    "ToolEnd",
    "ToolResult",
    "ToolStart",
    "TurnEnd",
    "TurnStart",
    "UsageEvent",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stamped:
    context_id: int
    """The user whose conversation this is."""
    task_id: str
    """The turn this belongs to."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStart(_Stamped):
    """A message is about to be answered."""

    kind: Literal["agent_start"] = "agent_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStart(_Stamped):
    """One LLM call of the tool loop is about to be made."""

    iteration: int
    kind: Literal["turn_start"] = "turn_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(_Stamped):
    """A piece of the model's answer, as it streams in."""

    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(_Stamped):
    """The model asked for a tool call."""

    call: ToolUseBlock
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart(_Stamped):
    """A tool call is about to run; a ``tool_start`` hook may block it."""

    call: ToolUseBlock
    kind: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEnd(_Stamped):
    """A tool call finished (or was blocked)."""

    call: ToolUseBlock
    result: ToolResultBlock
    kind: Literal["tool_end"] = "tool_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(_Stamped):
    """The result the model will see for a tool call."""

    call: ToolUseBlock
    result: ToolResultBlock
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent(_Stamped):
    """What one LLM call cost."""

    usage: Usage
    model: str
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd(_Stamped):
    """One LLM call of the loop was handled."""

    iteration: int
    stop_reason: str
    kind: Literal["turn_end"] = "turn_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEnd(_Stamped):
    """The message was answered: the final text and the whole turn's cost."""

    text: str
    usage: Usage
    stop_reason: str
    kind: Literal["agent_end"] = "agent_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(_Stamped):
    """The turn could not be completed normally; ``message`` is what the user is told."""

    error: str
    message: str
    kind: Literal["error"] = "error"


Event = (
    AgentStart
    | TurnStart
    | TextDelta
    | ToolCall
    | ToolStart
    | ToolEnd
    | ToolResult
    | UsageEvent
    | TurnEnd
    | AgentEnd
    | ErrorEvent
)
EventSink = Callable[[Event], Awaitable[None]]
"""Receives every event of a turn, in order."""

HookName = Literal["agent_start", "turn_start", "tool_start", "tool_end", "turn_end", "agent_end"]
Hook = Callable[[Any], Awaitable[Any]]
"""An async callable taking the event of its name; a ``tool_start`` hook may return a
reason (a non-empty string) to block the call, and blocks it by raising, too."""

HOOK_FAILED_REASON = "a tool_start check failed, so the call was not run"
"""Why a call was blocked when one of its ``tool_start`` hooks raised."""


@dataclass
class Hooks:
    """Async callbacks per lifecycle point.

    A failing hook is logged and skipped, except at ``tool_start``: there a hook that raises
    blocks the call, since a check that could not run must not let the call through.
    """

    _hooks: dict[str, list[Hook]] = field(default_factory=dict)

    def on(self, name: HookName, hook: Hook | None = None) -> Any:
        """Register ``hook`` for ``name``; without ``hook``, a decorator doing the same."""

        def register(fn: Hook) -> Hook:
            self._hooks.setdefault(name, []).append(fn)
            return fn

        return register if hook is None else register(hook)

    async def run(self, event: Event) -> None:
        """Call every hook registered for the event's kind."""
        for hook in self._hooks.get(event.kind, ()):
            await self._call(hook, event)

    async def block_reason(self, event: ToolStart) -> str | None:
        """The first reason a ``tool_start`` hook gives to block this call, if any.

        A hook that raises blocks the call with :data:`HOOK_FAILED_REASON`.
        """
        for hook in self._hooks.get("tool_start", ()):
            try:
                reason = await hook(event)
            except Exception:
                _log_failure(hook, event, blocked=True)
                return HOOK_FAILED_REASON
            if isinstance(reason, str) and reason:
                return reason
        return None

    @staticmethod
    async def _call(hook: Hook, event: Event) -> None:
        try:
            await hook(event)
        except Exception:
            _log_failure(hook, event, blocked=False)


def _log_failure(hook: Hook, event: Event, *, blocked: bool) -> None:
    """Log the exception a hook raised (call from its ``except`` block)."""
    name = getattr(hook, "__name__", repr(hook))
    log.exception("hook.failed", hook=name, at=event.kind, blocked=blocked)
