"""Turn scheduling: one user's messages in order, many users at once, within a bound."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import structlog

from botkit.messengers.base import Incoming

__all__ = ["TurnDispatcher"]

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
        self._idle = asyncio.Event()
        self._idle.set()

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
                message = queue[0]
                async with self._slots:
                    await self._run(message)
                queue.popleft()
                self._finish(message)
        finally:
            self._queues.pop(user_id, None)

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
