"""``python -m botkit work``: turns from the job queue through the same pipeline as ``run``.

A worker is a procrastinate worker whose one task reads an update, claims it (a copy that
arrived twice runs once) and hands the message to ``bot.turns.handle_safely``: the same gates,
tool loop, recording and reply as the single-process runtime. Any worker puts back the jobs of
a worker whose process ended (SIGKILL, a crash: within a second, by its liveness lock) or that
stopped beating (a lost machine), so its turns finish elsewhere; a
turn whose answer was recorded before the crash is re-sent, not generated again (the
pipeline finds the answer in the session). SIGTERM stops taking jobs and lets running turns
finish for ``BOTKIT_GRACE_PERIOD`` seconds; the rest go back to the queue. A job whose turn
kills its worker at every start is given up after ``BOTKIT_MAX_JOB_ATTEMPTS`` such deaths
(``runtime.poison``): its sender is told once, the conversation's later turns go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from procrastinate.exceptions import ConnectorException

from botkit.agent.pool import known_head
from botkit.approvals.service import known_waiting
from botkit.choices.service import known_choice
from botkit.errors import StoreError
from botkit.messengers.base import ButtonPress, Checkout, Incoming, Reaction
from botkit.runtime.base import ServedBot
from botkit.runtime.poison import SuspectLane, tell_given_up
from botkit.runtime.queue import Claim, Outage, TurnQueue, lock_for
from botkit.runtime.scheduled import QueuedSchedules
from botkit.runtime.scheduler import ALBUM_WAIT, MAX_BURST, gather, joinable
from botkit.runtime.setup import check_llm
from botkit.runtime.telegram import tell_admins

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = ["Worker", "work"]

log = structlog.get_logger(__name__)

POLL_EVERY = 0.25
"""Seconds between a worker's looks for jobs when no notification woke it: procrastinate can
miss a wake-up that arrives while it fetches, and a conversation's next turn must not wait."""
PRUNE_EVERY = 3600.0
"""Seconds between two prunings of old update claims."""

T = TypeVar("T")


class Worker:
    """Runs queued updates as turns of ``bot``, sending replies through ``messenger``."""

    def __init__(self, bot: ServedBot, messenger: TelegramMessenger, queue: TurnQueue) -> None:
        self.bot = bot
        self.messenger = messenger
        self.queue = queue
        self.outage = Outage("worker")
        self.running = 0
        """Turns running in this process now (the ``botkit_turns_running`` gauge)."""
        self.lane = SuspectLane(bot.settings.max_job_attempts)
        self.heads_with_claims = getattr(bot.contexts.sessions, "dsn", None) == queue.dsn
        """Whether the sessions are in the queue's database: a claim then reads the
        conversation's last entry number too, and the turn's context need not read it."""
        self.users_with_claims = bot.access.reads_users_from(queue.dsn)
        """Whether the user records and zones are in the queue's database: the sender's, read
        with a claim, then stand in for the turn's own reads."""

    async def run(
        self, job_id: int, update: dict[str, Any], attempts: int = 0, during_turn: bool = False
    ) -> None:
        """The task of one job: claim the update (counting this start), read it, run its turn
        (with the messages its sender sent behind it, when it came ``during_turn`` of its
        conversation); or give it up when its turn killed a worker ``BOTKIT_MAX_JOB_ATTEMPTS``
        times.

        A job put back in the queue ``suspect_from`` times (``attempts``: by dead workers or
        shutdowns; twice by default) may be the one that killed its workers: it waits for the
        suspects' lane before it starts (and is counted). Put back fewer times, it runs at
        once beside the others."""
        update_id = int(update["update_id"])
        async with self.lane.entered(attempts):
            claim = await self._own_claim(update_id, job_id)
            if claim is None:
                log.info("worker.duplicate_update", update_id=update_id, job_id=job_id)
                return
            if claim.given_up or claim.starts > self.bot.settings.max_job_attempts:
                await self._give_up(update, job_id, claim)
                return
            rerun = attempts > 0 or claim.starts > 1
            try:
                await self._run_turn(update, job_id, during_turn=during_turn, rerun=rerun)
            except BaseException:  # the worker saw this start end: it is not a death
                await asyncio.shield(self._unstart(update_id, job_id))
                raise

    async def _run_turn(
        self, update: dict[str, Any], job_id: int, *, during_turn: bool = False, rerun: bool = False
    ) -> None:
        message = await self.messenger.read_update(update)
        if isinstance(message, Incoming):
            if message.media_group_id is not None:
                message = await self._whole_album(message, job_id)
            elif during_turn and joinable(message, message):
                message = await self._burst(message, job_id, rerun=rerun)
            self.running += 1
            try:
                await self.bot.turns.handle_safely(message, self.messenger)
            finally:
                self.running -= 1
        elif isinstance(message, ButtonPress):
            await self.bot.turns.handle_press(message, self.messenger)
        elif isinstance(message, Checkout):
            await self.bot.payments.answer_checkout(message, self.messenger)
        elif isinstance(message, Reaction):
            await self.bot.turns.handle_reaction(message)

    async def _give_up(self, update: dict[str, Any], job_id: int, claim: Claim) -> None:
        """Mark the update given up with the messages the job gathered, then (the one start
        that marked them) tell its sender once, replying to the last, as ``run`` does."""
        assert self.messenger.me is not None
        update_id = int(update["update_id"])
        if claim.given_up or not await self.queue.give_up(self.messenger.me.id, update_id, job_id):
            log.warning("worker.given_up_before", update_id=update_id, job_id=job_id)
            return
        message = await self.messenger.read_update(update)
        incoming = message if isinstance(message, Incoming) else None
        if incoming is not None:
            incoming = gather([incoming, *await self._gathered_before(incoming, job_id)])
        await tell_given_up(self.bot, self.messenger, incoming, update_id, claim.starts - 1)

    async def _gathered_before(self, first: Incoming, job_id: int) -> list[Incoming]:
        """The messages queued behind ``first`` that its job ``job_id`` claimed (gathered into
        its turn) in an earlier start, in order, each once."""
        assert self.messenger.me is not None
        bot_id, lock = self.messenger.me.id, lock_for(first, self.bot.settings.group_context)
        updates = await self._patiently(self.queue.claimed_behind, bot_id, lock, job_id)
        seen, gathered = {first.update_id}, []
        for update in updates:
            message = await self.messenger.read_update(update)
            if isinstance(message, Incoming) and message.update_id not in seen:
                seen.add(message.update_id)
                gathered.append(message)
        return gathered

    async def _unstart(self, update_id: int, job_id: int) -> None:
        assert self.messenger.me is not None
        try:
            await self.queue.unstart(self.messenger.me.id, update_id, job_id)
        except (ConnectorException, OSError) as e:  # it then counts as one death, no more
            log.warning("worker.start_not_taken_back", update_id=update_id, error=str(e))

    async def _whole_album(self, first: Incoming, job_id: int) -> Incoming:
        """An album's first part with the parts queued behind it, claimed for this job (their
        own jobs then find them claimed), so the album is one turn as with ``run``."""
        await asyncio.sleep(ALBUM_WAIT)  # Telegram sends the parts within about a second
        assert first.media_group_id is not None
        lock = lock_for(first, self.bot.settings.group_context)
        parts = [first]
        for update in await self.queue.album_parts(lock, first.media_group_id):
            update_id = int(update["update_id"])
            if update_id != first.update_id and await self._claim(update_id, job_id) is not None:
                part = await self.messenger.read_update(update)
                parts += [part] if isinstance(part, Incoming) else []
        return gather(parts)

    async def _burst(self, first: Incoming, job_id: int, *, rerun: bool) -> Incoming:
        """``first`` with the plain messages its sender sent while a turn of the conversation
        ran, queued right behind it, claimed for this job (their own jobs then find them
        claimed): one turn, as ``run`` gathers them.

        A job run again (its worker died, or stopped it) gathers the ones it claimed before
        and no others, wherever they sit in the queue (job ids can commit out of order): its
        turn may be recorded already, with just those."""
        if rerun:
            return gather([first, *await self._gathered_before(first, job_id)])
        assert self.messenger.me is not None
        bot_id, lock = self.messenger.me.id, lock_for(first, self.bot.settings.group_context)
        queued = await self._patiently(self.queue.behind, bot_id, lock, job_id, MAX_BURST - 1)
        burst: list[Incoming] = []
        seen = {first.update_id}
        for job in queued:
            if job.claimed_by is not None and job.claimed_by != job_id:
                continue  # a copy of an update another job ran: its own job skips it too
            if job.update is not None and int(job.update["update_id"]) in seen:
                continue  # a copy of one in this burst (claimed by this job)
            message = await self.messenger.read_update(job.update) if job.update else None
            if not isinstance(message, Incoming) or not (
                job.during_turn and joinable(message, first)
            ):
                break
            seen.add(message.update_id)
            burst.append(message)
        ids = [message.update_id for message in burst]
        claimed = await self._patiently(self.queue.claim_for, bot_id, ids, job_id)
        if burst:
            log.info("worker.burst", update_id=first.update_id, gathered=len(claimed))
        return gather([first, *(m for m in burst if m.update_id in claimed)])

    async def _patiently(self, query: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``query(*args)``, retried while PostgreSQL is away."""
        while True:
            try:
                result = await query(*args)
            except (ConnectorException, OSError) as e:
                await asyncio.sleep(self.outage.failed(e))
                continue
            self.outage.ok()
            return result

    async def _own_claim(self, update_id: int, job_id: int) -> Claim | None:
        """The job's hold on its own update: the one its fetch took, else claimed now."""
        fetched = self.queue.fetched(job_id)
        if fetched is None or fetched.update_id != update_id:
            return await self._claim(update_id, job_id)
        self.outage.ok()  # the fetch reached the database: an outage the worker saw is over
        return self._noted(fetched.claim)

    async def _claim(self, update_id: int, job_id: int) -> Claim | None:
        """This job's hold on the update (``None``: another job's); retried while PostgreSQL
        is away."""
        assert self.messenger.me is not None
        claimed = await self._patiently(self.queue.claim, self.messenger.me.id, update_id, job_id)
        return self._noted(claimed)

    def _noted(self, claimed: Claim | None) -> Claim | None:
        """``claimed``, its conversation's last entry number noted for the turn's context,
        its sender's record and zone for the turn's gates and prompt."""
        if claimed is not None and claimed.conversation and self.heads_with_claims:
            known_head(claimed.conversation, claimed.head)
        if claimed is not None and claimed.conversation and self.users_with_claims:
            known_waiting(claimed.conversation, claimed.waiting)  # approvals: the users' pool
            known_choice(claimed.conversation, claimed.choice)  # choices: the users' pool too
        sender = claimed.sender if claimed is not None else None
        if sender is not None and self.users_with_claims:
            self.bot.access.note_user(sender.user_id, sender.record)
            self.bot.reminders.note_zone(sender.user_id, sender.zone)
        return claimed

    async def serve(self, stop: asyncio.Event, *, concurrency: int, grace: float) -> None:
        """Take jobs until ``stop`` is set; a worker broken by a lost database starts again."""
        self.queue.register(self.run)
        assert self.messenger.me is not None
        self.queue.claim_at_fetch(self.messenger.me.id, self.lane.suspect_from)
        schedules = QueuedSchedules(self.bot, self.messenger, self.queue, turns=self)
        schedules.register()
        chores = [
            asyncio.create_task(self._retry_stalled(stop)),
            asyncio.create_task(self._hear_stops(stop)),
            asyncio.create_task(schedules.loop.run(stop)),  # reminders due, tasks into jobs
        ]
        try:
            while not stop.is_set():
                await self._one_run(stop, concurrency=concurrency, grace=grace)
            await schedules.loop.drain(grace)
        finally:
            for chore in chores:
                chore.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await schedules.loop.drain(0)

    async def _one_run(self, stop: asyncio.Event, *, concurrency: int, grace: float) -> None:
        timings = self.queue.timings
        running = asyncio.create_task(
            self.queue.work(
                concurrency=concurrency,
                install_signal_handlers=False,
                update_heartbeat_interval=timings.heartbeat,
                stalled_worker_timeout=timings.stalled_after,
                shutdown_graceful_timeout=grace,
                fetch_job_polling_interval=POLL_EVERY,
                delete_jobs="successful",
            )
        )
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not running.done():
            running.cancel()  # procrastinate stops taking jobs, waits for running ones
            with suppress(asyncio.CancelledError):
                await running
            return
        error = running.exception()
        if error is None:
            return
        await _sleep_unless(stop, self.outage.failed(error))

    async def _retry_stalled(self, stop: asyncio.Event) -> None:
        """Put dead workers' jobs back in the queue: those whose liveness lock is gone every
        ``lock_check`` seconds, the silent ones every ``heartbeat``; prune old claims now and
        then."""
        loop = asyncio.get_running_loop()
        timings = self.queue.timings
        pruned = beaten = -PRUNE_EVERY
        while not stop.is_set():
            try:
                by_heartbeat = loop.time() - beaten >= timings.heartbeat
                await self.queue.retry_stalled(by_heartbeat=by_heartbeat)
                beaten = loop.time() if by_heartbeat else beaten
                if loop.time() - pruned > PRUNE_EVERY:
                    await self.queue.prune()
                    pruned = loop.time()
            except (ConnectorException, OSError, StoreError) as e:
                log.debug("worker.stalled_check_failed", error=str(e))
            await _sleep_unless(stop, min(timings.lock_check, timings.heartbeat))

    async def _hear_stops(self, stop: asyncio.Event) -> None:
        """Stop buttons pressed anywhere: the turn showing that draft here is cancelled."""
        while not stop.is_set():
            try:
                async for chat_id, draft_id in self.queue.stop_presses():
                    self.bot.turns.stop_turn(chat_id, draft_id)
            except (ConnectorException, OSError, StoreError) as e:
                log.debug("worker.stop_listener_failed", error=str(e))
            await _sleep_unless(stop, self.queue.timings.heartbeat)


async def work(
    bot: ServedBot,
    messenger: TelegramMessenger,
    queue: TurnQueue,
    stop: asyncio.Event,
    *,
    concurrency: int,
    grace: float | None = None,
) -> None:
    """Run turns from ``queue`` until ``stop`` is set, then let running ones finish."""
    bot.messenger = messenger
    worker = Worker(bot, messenger, queue)
    bot.metrics.watch_load(running=lambda: worker.running)
    me = await messenger.start()
    messenger.known_commands = frozenset(bot.commands) | {"start"}
    await bot.on_start()
    await check_llm(bot, partial(tell_admins, bot, messenger))
    log.info("worker.started", username=me.username, concurrency=concurrency)
    grace_period = bot.settings.grace_period if grace is None else grace
    await worker.serve(stop, concurrency=concurrency, grace=grace_period)
    log.info("worker.stopped")


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
