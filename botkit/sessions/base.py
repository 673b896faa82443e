"""The seam for session persistence."""

from __future__ import annotations

from typing import Protocol

from botkit.sessions.jsonl import CompactionEntry, ResetEntry, SessionEntry, SessionFile

__all__ = ["SessionStore"]


class SessionStore(Protocol):
    """Records every append to a user's context and reads it back."""

    async def append(self, entry: SessionEntry | ResetEntry | CompactionEntry) -> None:
        """Persist one entry, after those before it."""
        ...

    async def load(self, user_id: int) -> SessionFile:
        """Everything recorded for ``user_id``, oldest first."""
        ...
