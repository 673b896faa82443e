"""``ContextPool``: the contexts in memory, built lazily from the session store, LRU-evicted.

A context is rebuilt from the entries with their media left as references (when the store can:
``load_stored``), and only the messages in the window the model is sent get their bytes back, so
a rebuild after ``/clear`` or a compaction reads none of the media that came before.

With a store that numbers entries (PostgreSQL), several processes may append to one
conversation (queue workers taking its turns in turn, a relay from another user's turn). Before
a cached context is handed out, the conversation's last number is read: if it is not the one
this process last wrote or read, the context is rebuilt from the store, so a turn never runs on
a context that misses another worker's appends. A queue worker reads that number with its job's
claim (one statement for both) and notes it with :func:`known_head` for the turn's first look.
With a store of files (``generation``), a file replaced or deleted since it was read (``users
forget``, ``prune``) has its context rebuilt too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from typing import Any

from botkit.agent.context import ContextManager
from botkit.claimnotes import ClaimNote
from botkit.sessions import CompactionEntry, FeedbackEntry, ResetEntry, SessionEntry, SessionStore
from botkit.types import Message

__all__ = ["ContextPool", "known_head"]

_HEADS: ClaimNote[int] = ClaimNote("botkit_known_head")
"""The conversation's last entry number, as the running turn's job claim read it."""


def known_head(conversation: str, last_seq: int) -> None:
    """Note, for the turn running in this task, a conversation's last entry number just read:
    the pool's next look at that conversation's cached context takes it instead of a query."""
    _HEADS.note(conversation, last_seq)


def _take_known(key: int | str) -> int | None:
    """The last entry number noted for ``key`` in this task, once (it is stale after)."""
    return _HEADS.take(str(key))[1]


class ContextPool:
    """Contexts by conversation: created on first use from what the session store recorded."""

    def __init__(
        self, sessions: SessionStore, *, max_contexts: int = 1_000, max_messages: int = 40
    ) -> None:
        self.sessions = sessions
        self.max_contexts = max_contexts
        """Contexts kept in memory; the least recently used idle ones are dropped beyond it."""
        self.max_messages = max_messages
        self._contexts: OrderedDict[int | str, asyncio.Task[ContextManager]] = OrderedDict()
        self._numbered = callable(getattr(sessions, "last_sequence", None))
        self._last_seq: dict[int | str, int] = {}
        """Per cached conversation, the last entry number this process read or wrote."""
        self._generation: Any = getattr(sessions, "generation", None)
        self._written: Any = getattr(sessions, "written_generation", None) or self._generation
        """The version of the file an append just wrote to (no ``stat`` when the store knows)."""
        self._generations: dict[int | str, object] = {}
        """Per cached conversation, which version of its file this process read or wrote."""

    def __len__(self) -> int:
        return len(self._contexts)

    async def get(self, owner_id: int, conversation: str | None = None) -> ContextManager:
        """The context of ``owner_id``'s private conversation, or of a group's ``conversation``."""
        key: int | str = conversation or owner_id
        task = self._contexts.get(key)
        known = _take_known(key) if self._numbered else None
        if task is not None and task.done() and not await self._up_to_date(key, task, known):
            del self._contexts[key]
            task = None
        if task is None:
            task = asyncio.ensure_future(self._load(owner_id, conversation))
            self._contexts[key] = task
            self._evict_idle()
        else:
            self._contexts.move_to_end(key)
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._contexts.get(key) is task:
                del self._contexts[key]
            raise

    async def _up_to_date(
        self, key: int | str, task: asyncio.Task[ContextManager], known: int | None = None
    ) -> bool:
        """Whether a cached context holds everything recorded (another process may append);
        ``known``: the conversation's last entry number, read just before by the caller."""
        if task.exception() is not None or task.result().lock.locked():
            return True
        if not self._numbered:
            return self._generation is None or self._generation(key) == self._generations.get(key)
        last = known
        if last is None:
            last = await self.sessions.last_sequence(key)  # type: ignore[attr-defined]
        return last == self._last_seq.get(key)

    def drop(self, key: int | str) -> None:
        """Forget the cached context of a conversation (its data was erased)."""
        self._contexts.pop(key, None)
        self._last_seq.pop(key, None)
        self._generations.pop(key, None)

    async def inject(self, user_id: int, message: Message) -> None:
        """Record ``message`` in a user's conversation now; it joins their next turn."""
        await (await self.get(user_id)).defer(message)

    def _evict_idle(self) -> None:
        """Drop the least recently used contexts beyond ``max_contexts`` that are not in use."""
        excess = len(self._contexts) - self.max_contexts
        if excess <= 0:
            return
        # The oldest entries come first; busy ones are skipped, so look a little further.
        for key in list(itertools.islice(self._contexts, excess + 16)):
            task = self._contexts[key]
            if task.done() and not task.exception() and not task.result().lock.locked():
                self.drop(key)
                excess -= 1
                if excess <= 0:
                    return

    async def _load(self, owner_id: int, conversation: str | None) -> ContextManager:
        key: int | str = conversation or owner_id
        stored = getattr(self.sessions, "load_stored", None)
        recorded = await (stored or self.sessions.load)(key)
        on_append: Any = self.sessions.append
        if self._numbered:
            self._last_seq[key] = getattr(recorded, "last_seq", 0)
            on_append = self._counted(key)
        elif self._generation is not None:
            self._generations[key] = self._generation(key)
            on_append = self._stamped(key)
        context = ContextManager.restore(
            owner_id,
            recorded.entries,
            conversation=conversation,
            max_messages=self.max_messages,
            on_append=on_append,
        )
        if stored is not None:  # media of the messages the model may still be sent, only
            await context.fill_media(self.sessions.media)  # type: ignore[attr-defined]
        return context

    def _counted(self, key: int | str) -> Any:
        """``sessions.append`` that also counts the conversation's numbers this process wrote."""

        async def append(
            entry: SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry,
        ) -> None:
            await self.sessions.append(entry)
            self._last_seq[key] = self._last_seq.get(key, 0) + 1

        return append

    def _stamped(self, key: int | str) -> Any:
        """``sessions.append`` that also notes the version of the file this process wrote."""

        async def append(
            entry: SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry,
        ) -> None:
            await self.sessions.append(entry)
            self._generations[key] = self._written(key)

        return append
