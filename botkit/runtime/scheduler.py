"""Turn scheduling: one conversation's messages in order, many at once, within a bound.

Messages queue by conversation (a private chat, a shared group or topic, or one member's part
of a group; the caller's ``key`` function says which), and a conversation takes one of the
``max_concurrent`` slots only when its next turn can start: a busy group holds one slot while
its members' messages wait their turn in its queue, so it never holds the slots other chats
need.

Messages a user sends while their conversation's turn runs wait in its queue; when that turn
ends, the plain ones among them (text and photos in the same chat and topic, from the same
sender, no commands) are gathered into one message, so a burst gets one answer that has read
all of it. Messages that arrive together before any of them started are still answered one by
one, except the parts of an album (one ``media_group_id``): Telegram sends them as separate
messages within about a second, so the turn waits until no part came for ``album_wait``
seconds and answers them all at once. A turn someone awaits (:meth:`TurnDispatcher.run`, a
scheduled task's) is never gathered with others.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import replace

import structlog

from botkit.messengers.base import Incoming

__all__ = ["TurnDispatcher", "gather", "joinable"]

MAX_BURST = 20
"""Most queued messages gathered into one turn."""
ALBUM_WAIT = 1.0
"""Seconds without a new part after which an album is taken as complete."""
GATHERED_KINDS = frozenset({"text", "photo", "document"})

log = structlog.get_logger(__name__)

Handler = Callable[[Incoming], Awaitable[None]]
OnFinished = Callable[[Incoming], None]
ConversationKey = Callable[[Incoming], Hashable]
"""Which conversation a message belongs to: messages with equal keys run one at a time."""


def by_sender(message: Incoming) -> Hashable:
    """Each sender's messages as one conversation (the key when none is given)."""
    return message.user_id


class TurnDispatcher:
    """Runs a handler per message: FIFO per conversation, concurrent across conversations, at
    most N at once."""

    def __init__(
        self,
        handler: Handler,
        *,
        key: ConversationKey = by_sender,
        max_concurrent: int = 64,
        on_finished: OnFinished | None = None,
        album_wait: float = ALBUM_WAIT,
    ) -> None:
        self.handler = handler
        self.key = key
        self.on_finished = on_finished
        self.album_wait = album_wait
        self._album_seen: dict[str, float] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        self._queues: dict[Hashable, deque[Incoming]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._unfinished: set[int] = set()
        self._running: set[Hashable] = set()
        self._during_turn: set[int] = set()
        self._awaited: dict[int, asyncio.Future[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def running(self) -> int:
        """How many turns run now."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """How many accepted messages wait for their turn to start."""
        return max(len(self._unfinished) - len(self._running), 0)

    @property
    def unfinished(self) -> frozenset[int]:
        """Update ids accepted whose turn has not finished yet."""
        return frozenset(self._unfinished)

    def submit(self, message: Incoming) -> None:
        """Queue ``message`` behind its conversation's earlier ones."""
        if message.update_id in self._unfinished:
            return  # already queued or running: a re-delivery
        self._unfinished.add(message.update_id)
        self._idle.clear()
        if message.media_group_id is not None:
            self._album_seen[message.media_group_id] = asyncio.get_running_loop().time()
        key = self.key(message)
        queue = self._queues.get(key)
        if queue is not None:
            if key in self._running:
                self._during_turn.add(message.update_id)
            queue.append(message)
            return
        self._queues[key] = deque([message])
        worker = asyncio.create_task(self._work(key), name=f"conversation-{key}")
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    async def run(self, message: Incoming) -> None:
        """Queue ``message`` as :meth:`submit` does and wait until its turn finished (alone,
        never gathered with others): a scheduled task's turn, in the same slots.

        Raises ``CancelledError`` if the turn was cancelled (:meth:`cancel_all`) first.
        """
        done = self._awaited.get(message.update_id)
        if done is None:
            done = self._awaited[message.update_id] = asyncio.get_running_loop().create_future()
            self.submit(message)
        await asyncio.shield(done)

    async def _work(self, key: Hashable) -> None:
        queue = self._queues[key]
        try:
            while queue:
                await self._album_complete(queue[0])
                burst = self._burst(queue)
                async with self._slots:
                    self._running.add(key)
                    try:
                        await self._run(gather(burst))
                    finally:
                        self._running.discard(key)
                for message in burst:
                    queue.popleft()
                    self._during_turn.discard(message.update_id)
                    self._finish(message)
        finally:
            self._queues.pop(key, None)
            for message in queue:  # cancelled: whoever awaits these turns learns they did not run
                awaited = self._awaited.pop(message.update_id, None)
                if awaited is not None and not awaited.done():
                    awaited.cancel()

    async def _album_complete(self, first: Incoming) -> None:
        """Wait until ``first``'s album (if it is a part of one) had no new part for a while."""
        group = first.media_group_id
        if group is None:
            return
        loop = asyncio.get_running_loop()
        # Polling a clock, not an event: each new part pushes the end of the wait further out.
        while (left := self._album_seen.get(group, 0.0) + self.album_wait - loop.time()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)
        self._album_seen.pop(group, None)

    def _burst(self, queue: deque[Incoming]) -> list[Incoming]:
        """The first queued message, and the plain ones behind it its sender sent during the
        last turn."""
        first = queue[0]
        burst = [first]
        if not self._joins(first, first):
            return burst
        for message in itertools.islice(queue, 1, MAX_BURST):
            if not self._joins(message, first):
                break
            burst.append(message)
        return burst

    def _joins(self, message: Incoming, first: Incoming) -> bool:
        same_album = first.media_group_id is not None and (
            message.media_group_id == first.media_group_id
        )
        return (
            (same_album or message.update_id in self._during_turn)
            and joinable(message, first)
            and message.update_id not in self._awaited
            and first.update_id not in self._awaited
        )

    async def _run(self, message: Incoming) -> None:
        try:
            await self.handler(message)
        except Exception:
            log.exception("dispatch.handler_failed", update_id=message.update_id)

    def _finish(self, message: Incoming) -> None:
        if self.on_finished is not None:
            self.on_finished(message)
        awaited = self._awaited.pop(message.update_id, None)
        if awaited is not None and not awaited.done():
            awaited.set_result(None)
        self._unfinished.discard(message.update_id)
        if not self._unfinished:
            self._idle.set()

    async def drain(self, grace_period: float | None = None) -> bool:
        """Wait until every accepted turn finished; ``False`` if ``grace_period`` ran out first."""
        try:
            async with asyncio.timeout(grace_period):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def cancel_all(self) -> None:
        """Stop every running turn now."""
        for worker in list(self._workers):
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)


def joinable(message: Incoming, first: Incoming) -> bool:
    """Whether ``message`` may be answered in ``first``'s turn, both having come while a turn
    ran: plain (no command; text, a photo, a file), from the same sender in the same chat and
    topic. The one rule of both runtimes (``run``'s dispatcher, the queue's worker)."""
    return (
        message.command is None
        and message.kind in GATHERED_KINDS
        and message.user_id == first.user_id  # in a shared group, one speaker per turn
        and (message.chat_id, message.thread_id) == (first.chat_id, first.thread_id)
    )


def gather(messages: Sequence[Incoming]) -> Incoming:
    """Several messages of one user as one: texts in order, all photos and files, replying to
    the last."""
    if len(messages) == 1:
        return messages[0]
    first, last = messages[0], messages[-1]
    return replace(
        first,
        text="\n\n".join(m.text for m in messages if m.text),
        images=tuple(image for m in messages for image in m.images),
        photo_ids=tuple(file_id for m in messages for file_id in m.photo_ids),
        attachments=tuple(a for m in messages for a in m.attachments),
        content=tuple(block for m in messages for block in m.content),
        kind=next((k for k in ("photo", "document") if any(m.kind == k for m in messages)), "text"),
        message_id=last.message_id,
        reply_to=next((m.reply_to for m in messages if m.reply_to), None),
        quote=next((m.quote for m in messages if m.quote), None),
        update_ids=tuple(m.update_id for m in messages),
    )
