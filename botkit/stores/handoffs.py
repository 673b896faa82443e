"""Handoffs in the user store: which user an operator has taken over, in which topic."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["Handoff", "HandoffStore"]


@dataclass(frozen=True, slots=True)
class Handoff:
    """One user's conversation handed to people, in a topic of the operators' chat."""

    user_id: int
    chat_id: int
    """The user's chat, where the operators' messages go."""
    topic_id: int
    """The topic's ``message_thread_id``, kept and reused when the user is handed over again."""
    name: str
    """How the user is named to the operators."""
    opened_at: datetime
    is_open: bool
    first_reply_at: datetime | None = None
    """When an operator first answered since it opened; ``None`` before."""


@runtime_checkable
class HandoffStore(Protocol):
    """Where handoffs are kept (the SQLite and PostgreSQL user stores are such stores)."""

    async def handoff_of(self, user_id: int) -> Handoff | None:
        """The user's handoff, open or closed (its topic is reused), or ``None``."""
        ...

    async def handoff_in_topic(self, topic_id: int) -> Handoff | None:
        """The handoff whose topic is ``topic_id``, open or closed, or ``None``."""
        ...

    async def open_handoff(self, user_id: int, chat_id: int, topic_id: int, name: str) -> Handoff:
        """Mark the user's conversation handed over (again) in topic ``topic_id`` from now."""
        ...

    async def close_handoff(self, user_id: int) -> Handoff | None:
        """End the user's open handoff; ``None`` if none was open (so one caller ends it)."""
        ...

    async def first_reply(self, user_id: int, at: datetime) -> Handoff | None:
        """Note the operators' first answer at ``at``; ``None`` if it was noted before."""
        ...

    async def open_handoffs(self) -> list[Handoff]:
        """Every open handoff, oldest first."""
        ...
