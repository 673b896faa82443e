"""What a tool is: its definition, the context it runs in, and groups of tools."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from botkit.tools.files import ToolFile
from botkit.types import Message, ToolDef

if TYPE_CHECKING:
    from botkit.llm.base import LLM

__all__ = ["ContextInjector", "Tool", "ToolContext"]


class ContextInjector(Protocol):
    """Lets a tool put a message into another user's conversation."""

    async def inject(self, user_id: int, message: Message) -> None:
        """Append ``message`` to the context of ``user_id``."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Everything a tool may need to know about the turn that called it."""

    user_id: int
    """The Telegram user whose turn this is."""
    chat_id: int
    """The chat the turn replies to."""
    timestamp: datetime
    """When the user's message arrived."""
    extra: Any = None
    """Whatever ``build_extra`` returned for this turn, e.g. a database pool."""
    injector: ContextInjector | None = field(default=None, compare=False)
    """Writes into other users' contexts; ``None`` where the host offers none."""
    llm: LLM | None = field(default=None, compare=False)
    """The calling turn's model, charged to the user: a tool that asks the model uses this one,
    so its calls count against the user's budget. Set by the tool loop."""
    hooks: Any = field(default=None, compare=False)
    """The calling loop's ``botkit.Hooks``, for a tool that runs tools itself (a sub-agent),
    so a ``tool_start`` check applies there too. Set by the tool loop."""
    send_file: Callable[[ToolFile], Awaitable[None]] | None = field(default=None, compare=False)
    """Sends a tool's file or picture to the turn's chat; ``None`` where there is no chat."""
    thread_id: int | None = None
    """The forum topic the turn replies in (``None`` in General and outside forums)."""
    chat_type: str = "private"
    """``private``, ``group`` or ``supergroup``: the kind of chat the turn replies in."""
    rerun: bool = False
    """``True`` while ``replay --rerun`` runs a recorded turn again: nothing reaches a chat,
    and a tool with side effects (an order placed, a mail sent) should skip or fake them."""


class Tool(ABC):
    """A capability the model can call: a definition plus ``execute``."""

    timeout: float | None = 60.0
    """Seconds before a running call is abandoned and reported to the model as an error."""
    approval: bool = False
    """Whether a person must press Allow before a call runs (see ``botkit.approvals``)."""
    idempotent: bool = False
    """Whether running a call twice does what running it once does: a call cut off by a
    crash is then reported to the model as safe to make again (else: its outcome unknown)."""

    @property
    @abstractmethod
    def definition(self) -> ToolDef:
        """Name, description and input schema shown to the model."""

    @abstractmethod
    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Run the tool; the result is sent to the model as text (non-strings as JSON)."""

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return self.definition.name
