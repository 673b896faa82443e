"""The seam for session persistence."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from botkit.sessions.jsonl import (
    CompactionEntry,
    FeedbackEntry,
    ResetEntry,
    SessionEntry,
    SessionFile,
)

__all__ = ["NumberedSessionFile", "NumberedSessionStore", "SessionStore", "is_conversation_key"]

_KEY = re.compile(r"-?[0-9]+|chat_-?[0-9]+(?:_[0-9]+)?")


def is_conversation_key(text: str) -> bool:
    """Whether ``text`` names a conversation: a user id, or a group's ``chat_<id>[_<topic>]``."""
    return _KEY.fullmatch(text) is not None


class SessionStore(Protocol):
    """Records every append to a conversation's context and reads it back."""

    async def append(
        self, entry: SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry
    ) -> None:
        """Persist one entry, after those before it."""
        ...

    async def load(self, key: int | str) -> SessionFile:
        """Everything recorded for a conversation (a user id or a group's key), oldest first."""
        ...

    async def close(self) -> None:
        """Release open files or connections."""
        ...


@dataclass(frozen=True, slots=True)
class NumberedSessionFile(SessionFile):
    """A :class:`SessionFile` whose entries are numbered in their conversation: 1, 2, …"""

    numbers: list[int] = field(default_factory=list)
    """The sequence number of each entry, in the same order."""
    last_seq: int = 0
    """The last number read (damaged rows included); the number read after when none was."""


class NumberedSessionStore(SessionStore, Protocol):
    """A session store that numbers each conversation's entries, so readers can catch up."""

    async def last_sequence(self, key: int | str) -> int:
        """The number of the conversation's last entry (0 when it has none)."""
        ...

    async def load_after(self, key: int | str, seq: int) -> NumberedSessionFile:
        """The conversation's entries numbered after ``seq``, oldest first."""
        ...
