"""What happens during a turn, as typed events, and the hooks that can watch or steer it.

A *turn* is one incoming message and everything done to answer it (``AgentStart`` …
``AgentEnd``); a *call* is one LLM call inside it (``CallStart`` … ``CallEnd``). Each fact is
one event: a tool call starts (``ToolStart``) and ends with the result the model will see
(``ToolEnd``). Every event carries ``context_id`` (whose conversation it is) and ``task_id``
(the turn).
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
    "ApprovalDecided",
    "ApprovalRequested",
    "CallEnd",
    "CallStart",
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
class CallStart(_Stamped):
    """One LLM call of the tool loop is about to be made."""

    iteration: int
    kind: Literal["call_start"] = "call_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(_Stamped):
    """A piece of the model's answer, as it streams in (after the first text, what arrived
    within a tenth of a second may come gathered in one piece)."""

    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart(_Stamped):
    """The model asked for a tool call, about to run; a ``tool_start`` hook may block it."""

    call: ToolUseBlock
    kind: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEnd(_Stamped):
    """A tool call finished (or was blocked): the result the model will see."""

    call: ToolUseBlock
    result: ToolResultBlock
    known: bool = True
    """Whether ``call.name`` is one of the turn's tools; ``False``: a name the model made up
    (its result is an error), which metrics never use as a label."""
    kind: Literal["tool_end"] = "tool_end"


ToolCall = ToolStart
"""Former name of ``ToolStart`` (kept so existing code keeps working)."""
ToolResult = ToolEnd
"""Former name of ``ToolEnd`` (kept so existing code keeps working)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent(_Stamped):
    """What one LLM call cost."""

    usage: Usage
    model: str
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True, kw_only=True)
class CallEnd(_Stamped):
    """One LLM call of the loop was handled."""

    iteration: int
    stop_reason: str
    kind: Literal["call_end"] = "call_end"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(_Stamped):
    """Calls of tools marked ``approval=True`` wait for a person's Allow; the turn ends here."""

    approval_id: str
    calls: tuple[ToolUseBlock, ...]
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided(_Stamped):
    """A waiting approval was decided: ``allowed``, ``denied`` or ``expired``."""

    approval_id: str
    decision: Literal["allowed", "denied", "expired"]
    decided_by: int | None = None
    """Who pressed (``None`` when it expired)."""
    kind: Literal["approval_decided"] = "approval_decided"


Event = (
    AgentStart
    | CallStart
    | TextDelta
    | ToolStart
    | ToolEnd
    | UsageEvent
    | CallEnd
    | AgentEnd
    | ErrorEvent
    | ApprovalRequested
    | ApprovalDecided
)
EventSink = Callable[[Event], Awaitable[None]]
"""Receives every event of a turn, in order."""

HookName = Literal[
    "agent_start",
    "call_start",
    "tool_start",
    "tool_end",
    "call_end",
    "agent_end",
    "turn_start",
    "turn_end",
    "approval_requested",
    "approval_decided",
]
FORMER_HOOK_NAMES = {"turn_start": "call_start", "turn_end": "call_end"}
"""Hook names from before "turn" meant only the user's turn; they still register."""
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

        point = FORMER_HOOK_NAMES.get(name, name)

        def register(fn: Hook) -> Hook:
            self._hooks.setdefault(point, []).append(fn)
            return fn

        return register if hook is None else register(hook)

    def handles(self, kind: str) -> bool:
        """Whether a hook is registered for events of ``kind``."""
        return bool(self._hooks.get(kind))

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
