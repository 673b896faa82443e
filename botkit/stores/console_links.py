"""One-time sign-in links of the operators' console, kept (hashed) in the user store.

An admin's ``/console`` may be answered by a worker while the receiver serves the console
(the queued runtime): the link is kept where both see it, the user store. Only the SHA-256
of its token is kept, and taking it deletes it, so a link works once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["ConsoleLink", "ConsoleLinkStore"]


@dataclass(frozen=True, slots=True)
class ConsoleLink:
    """A sign-in link taken from the store: whose it was and until when it was good."""

    user_id: int
    """The admin who asked for it."""
    expires_at: datetime
    """After this moment (UTC) it signs nobody in."""


@runtime_checkable
class ConsoleLinkStore(Protocol):
    """The part of a user store that keeps console sign-in links."""

    async def add_console_link(self, token_hash: str, user_id: int, expires_at: datetime) -> None:
        """Keep a new link's hash (and drop links expired by now)."""
        ...

    async def take_console_link(self, token_hash: str) -> ConsoleLink | None:
        """Delete the link with this hash and return it; ``None`` if there is none (never
        made, or taken already)."""
        ...
