"""Locks shared by the session stores: one asyncio lock per key, and file locks awaited politely.

A session file (or the media folder) is locked with ``flock`` while it is appended to and while
``python -m botkit prune`` rewrites it; a running bot waits for the lock without blocking its
event loop, so other conversations go on meanwhile.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

__all__ = ["KeyedLocks", "SharedFlock", "flock_async"]

_POLL = 0.005
"""Seconds between two tries of a file lock another process holds."""


class KeyedLocks:
    """One FIFO lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._locks

    @asynccontextmanager
    async def holding(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s lock: callers get it in the order they asked."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


async def flock_async(fd: int, operation: int) -> None:
    """``flock(fd, operation)``, awaiting (not blocking the loop) while another process holds it.

    Uncontended, it returns without suspending, so appends made in one go keep their order.
    """
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(_POLL)


class SharedFlock:
    """A shared ``flock`` on one open descriptor, held while any task of this process holds it.

    ``flock`` counts one lock per descriptor, not per holder: the first task in takes it, the
    last one out releases it.
    """

    def __init__(self, opener: Callable[[], int]) -> None:
        self._opener = opener
        self._fd: int | None = None
        self._holders = 0
        self._taking = asyncio.Lock()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold the shared lock for the block (awaiting an exclusive holder elsewhere)."""
        async with self._taking:
            if self._holders == 0:
                if self._fd is None:
                    self._fd = self._opener()
                await flock_async(self._fd, fcntl.LOCK_SH)
            self._holders += 1
        try:
            yield
        finally:
            self._holders -= 1
            if self._holders == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor (the lock goes with it); call when nobody holds it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
