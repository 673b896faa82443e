"""What a queued job's claim read for its turn, handed to the step that would otherwise ask.

The statement that claims a job on PostgreSQL also reads a little of its conversation (its last
entry number, whether it waits for an approval, its choices). The worker notes each here for the
turn about to run in this task; the step that needs it takes it once, within :data:`KNOWN_FOR`
seconds, instead of a query. Later looks, or a turn that starts later (an album's), ask again.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

__all__ = ["KNOWN_FOR", "ClaimNote"]

KNOWN_FOR = 0.5
"""Seconds a value read with the claim stands in for reading it."""

T = TypeVar("T")


class ClaimNote(Generic[T]):
    """One kind of value a claim read, for the turn running in this task (taken once)."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[list[Any] | None] = ContextVar(name, default=None)

    def note(self, conversation: str, value: T) -> None:
        """Note ``value`` of ``conversation`` (its session key), as the claim just read it."""
        self._var.set([conversation, value, time.monotonic()])

    def take(self, conversation: str) -> tuple[bool, T | None]:
        """Whether a claim just read ``conversation``'s value, and the value; taken once (it is
        stale after)."""
        known = self._var.get()
        if not known or known[0] != conversation:
            return False, None
        fresh = time.monotonic() - known[2] < KNOWN_FOR
        value: T = known[1]
        known.clear()  # a list, so a child task taking it clears it for its parent too
        return fresh, value if fresh else None
