"""Turn scheduling: one user's messages in order, many users at once, within a bound.

Messages a user sends while their turn runs wait in their queue; when that turn ends, the
plain ones among them (text and photos in the same chat and topic, no commands) are gathered
into one message, so a burst gets one answer that has read all of it. Messages that arrive
together before any of them started are still answered one by one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import structlog

from botkit.messengers.base import Incoming

__all__ = ["TurnDispatcher", "gather"]

MAX_BURST = 20
"""Most queued messages gathered into one turn."""

log = structlog.get_logger(__name__)

Handler = Callable[[Incoming], Awaitable[None]]
OnFinished = Callable[[Incoming], None]


class TurnDispatcher:
    """Runs a handler per message: FIFO per user, concurrent across users, at most N at once."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_concurrent: int = 64,
        on_finished: OnFinished | None = None,
    ) -> None:
        self.handler = handler
        self.on_finished = on_finished
        self._slots = asyncio.Semaphore(max_concurrent)
        self._queues: dict[int, deque[Incoming]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._unfinished: set[int] = set()
        self._running: set[int] = set()
        self._during_turn: set[int] = set()
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
        """Queue ``message`` behind the same user's earlier ones."""
        if message.update_id in self._unfinished:
            return  # already queued or running: a re-delivery
        self._unfinished.add(message.update_id)
        self._idle.clear()
        queue = self._queues.get(message.user_id)
        if queue is not None:
            if message.user_id in self._running:
                self._during_turn.add(message.update_id)
            queue.append(message)
            return
        self._queues[message.user_id] = deque([message])
        worker = asyncio.create_task(self._work(message.user_id), name=f"user-{message.user_id}")
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    async def _work(self, user_id: int) -> None:
        queue = self._queues[user_id]
        try:
            while queue:
                burst = self._burst(queue)
                async with self._slots:
                    self._running.add(user_id)
                    try:
                        await self._run(gather(burst))
                    finally:
                        self._running.discard(user_id)
                for message in burst:
                    queue.popleft()
                    self._during_turn.discard(message.update_id)
                    self._finish(message)
        finally:
            self._queues.pop(user_id, None)

    def _burst(self, queue: deque[Incoming]) -> list[Incoming]:
        """The first queued message, and the plain ones behind it sent during the last turn."""
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
        return (
            message.update_id in self._during_turn
            and message.command is None
            and message.kind in ("text", "photo")
            and (message.chat_id, message.thread_id) == (first.chat_id, first.thread_id)
        )

    async def _run(self, message: Incoming) -> None:
        try:
            await self.handler(message)
        except Exception:
            log.exception("dispatch.handler_failed", update_id=message.update_id)

    def _finish(self, message: Incoming) -> None:
        if self.on_finished is not None:
            self.on_finished(message)
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


def gather(messages: Sequence[Incoming]) -> Incoming:
    """Several messages of one user as one: texts in order, all photos, replying to the last."""
    if len(messages) == 1:
        return messages[0]
    first, last = messages[0], messages[-1]
    return replace(
        first,
        text="\n\n".join(m.text for m in messages if m.text),
        images=tuple(image for m in messages for image in m.images),
        photo_ids=tuple(file_id for m in messages for file_id in m.photo_ids),
        kind="photo" if any(m.kind == "photo" for m in messages) else "text",
        message_id=last.message_id,
        reply_to=next((m.reply_to for m in messages if m.reply_to), None),
        quote=next((m.quote for m in messages if m.quote), None),
        update_ids=tuple(m.update_id for m in messages),
    )
