"""The seam for session persistence."""

from __future__ import annotations

from typing import Protocol

from botkit.sessions.jsonl import CompactionEntry, ResetEntry, SessionEntry, SessionFile

__all__ = ["SessionStore"]


class SessionStore(Protocol):
    """Records every append to a conversation's context and reads it back."""

    async def append(self, entry: SessionEntry | ResetEntry | CompactionEntry) -> None:
        """Persist one entry, after those before it."""
        ...

    async def load(self, key: int | str) -> SessionFile:
        """Everything recorded for a conversation (a user id or a group's key), oldest first."""
        ...

    async def close(self) -> None:
        """Release open files or connections."""
        ...
