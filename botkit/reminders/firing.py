"""Firing due schedules: claim, deliver, record. Every runtime calls the same functions.

:func:`fire_due_schedules` is the whole job in one call: a queue worker's periodic task can
run it as it is. :class:`FiringLoop` runs it inside the single-process runtime: right after
start (what fell due while the bot was down), whenever a schedule is added in this process,
when the next one falls due, and every ``BOTKIT_SCHEDULE_POLL`` seconds for those other
processes added.

A task that may wait (not urgent, BOTKIT_TASK_BATCHES) has its first LLM call answered by a
Message Batch at half price (``botkit.reminders.batching``): sent when it falls due, its turn
run once the batch ended; the loop looks at the batches in flight every BOTKIT_BATCH_POLL.

Exactly once: a schedule is claimed in the store before delivery (no other process can take
it), and its delivery is recorded as soon as Telegram confirmed it. A crash in between
leaves it claimed; when the lease (``BOTKIT_SCHEDULE_LEASE``) runs out it is delivered again:
only that one, and only because its delivery was never recorded. A reminder is sent as it was
written, without an LLM call; a task runs a turn through the bot's turn pipeline, as a
message marked scheduled, and its answer is sent like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from botkit.config import Settings
from botkit.errors import BotkitError, MessengerError
from botkit.llm.base import LLM
from botkit.messengers.base import Incoming, Messenger
from botkit.metrics import Metrics
from botkit.reminders.batching import (
    WAITING,
    BatchedTurn,
    BatchTurns,
    answering,
    ended_batches,
    prepare,
    wants_batch,
)
from botkit.reminders.limits import LimitsHost, held_back
from botkit.reminders.service import Reminders
from botkit.reminders.times import format_local, parse_repeat, zone_named
from botkit.stores.schedules import Schedule

__all__ = [
    "LATE_AFTER",
    "FiringHost",
    "FiringLoop",
    "HandOff",
    "TurnRunner",
    "claim_due",
    "fire",
    "fire_due_schedules",
    "scheduled_message",
]

log = structlog.get_logger(__name__)

LATE_AFTER = timedelta(minutes=5)
"""A schedule delivered later than this after its time says it is late."""
MIN_WAIT = 0.2
"""Seconds the loop waits at least between two looks (nothing spins on a stuck schedule)."""
CLAIM_LIMIT = 100

TurnRunner = Callable[[Incoming], Awaitable[None]]
"""Runs one message's turn to its end (e.g. ``TurnDispatcher.run``: in the runtime's slots)."""


class SafeTurns(BatchTurns, Protocol):
    """A bot's turn pipeline, as firing uses it."""

    async def handle_safely(self, message: Incoming, messenger: Messenger) -> None:
        """Run one message through the turn pipeline; failures become a polite reply."""
        ...


class FiringHost(LimitsHost, Protocol):
    """What firing needs of a bot: its settings, its schedules, its gate and its turn pipeline."""

    settings: Settings
    reminders: Reminders
    metrics: Metrics

    @property
    def turns(self) -> SafeTurns:
        """The bot's turn pipeline."""
        ...

    @property
    def llm(self) -> LLM:
        """The model the bot talks to (batches go through its client)."""
        ...


async def fire_due_schedules(host: FiringHost, messenger: Messenger) -> int:
    """Deliver every schedule due now (claimed first, recorded after), and the batched tasks
    whose batch ended; how many were taken."""
    claimed = await claim_due(host)
    claimed += await ended_batches(host)  # batched tasks whose batch ended
    await asyncio.gather(*(fire(host, messenger, schedule) for schedule in claimed))
    return len(claimed)


async def claim_due(host: FiringHost, limit: int = CLAIM_LIMIT) -> list[Schedule]:
    """Take the schedules due now for this process to deliver (no other process will)."""
    store = await host.reminders.store()
    lease = timedelta(seconds=host.settings.schedule_lease)
    return await store.claim_due_schedules(host.reminders.clock(), lease=lease, limit=limit)


async def fire(
    host: FiringHost, messenger: Messenger, schedule: Schedule, run_turn: TurnRunner | None = None
) -> bool:
    """Deliver one claimed schedule and record it (its next time, if it repeats).

    A task's turn runs through ``run_turn`` if given (the runtime's turn slots), else straight
    through ``host.turns.handle_safely``.
    """
    reminders = host.reminders
    now = reminders.clock()
    zone = _zone(schedule)
    if await held_back(host, messenger, schedule, zone, now):  # paused, or a task put off
        return False
    late = (schedule.batch_at or now) - schedule.due_at > LATE_AFTER  # a batch's: when sent
    batched = None
    if wants_batch(host.settings, schedule):  # not urgent: sent to a batch, answered once ended
        batched = await prepare(host, schedule, partial(scheduled_message, schedule, zone), now)
        if batched == WAITING:
            return False
    try:
        if schedule.kind == "reminder":
            text = schedule.text + (_late_note(schedule, zone) if late else "")
            await messenger.send_text(schedule.chat_id, text, thread_id=schedule.thread_id)
        else:
            turn = batched if isinstance(batched, BatchedTurn) else None
            message = turn.message if turn else scheduled_message(schedule, zone, now)
            async with answering(host, turn):
                if run_turn is None:
                    await host.turns.handle_safely(message, messenger)
                else:
                    await run_turn(message)
        delivered = True
    except MessengerError as e:
        log.warning(
            "reminders.not_delivered", id=schedule.id, user_id=schedule.user_id, error=str(e)
        )
        delivered = False
    host.metrics.schedule_fired(
        schedule.kind, ("late" if late else "delivered") if delivered else "failed"
    )
    next_due = _next_due(schedule, zone, now)
    recorded = await (await reminders.store()).finish_schedule(
        schedule, next_due=next_due, fired_at=reminders.clock(), delivered=delivered
    )
    log.info(
        "reminders.fired" if delivered else "reminders.failed",
        id=schedule.id,
        user_id=schedule.user_id,
        kind=schedule.kind,
        late_seconds=round((now - schedule.due_at).total_seconds()),
        next_due=next_due.isoformat() if next_due else None,
        recorded=recorded,
    )
    return delivered


def scheduled_message(schedule: Schedule, zone: ZoneInfo, now: datetime) -> Incoming:
    """A task as the turn pipeline takes it: marked scheduled, in the chat it was asked in.

    Its update id is negative (Telegram's are positive) and names the occurrence, so a task
    re-run after a crash finds its answer in the session and re-sends it instead of asking
    the model again.
    """
    repeat = f", repeating {schedule.repeat}" if schedule.repeat else ""
    late = (
        f"; it is late, now {format_local(now, zone)}" if now - schedule.due_at > LATE_AFTER else ""
    )
    header = (
        f"[Scheduled task #{schedule.id}, set earlier by the user{repeat}; due "
        f"{format_local(schedule.due_at, zone)}{late}. This is not a new message from the user: "
        "carry out the instruction now and write your answer to them.]"
    )
    return Incoming(
        update_id=-(schedule.id * 1_000_000 + schedule.fired + 1),
        user_id=schedule.user_id,
        chat_id=schedule.chat_id,
        text=f"{header}\n{schedule.text}",
        date=now,
        chat_type=schedule.chat_type,
        thread_id=schedule.thread_id,
        schedule_id=schedule.id,
        trace_link=schedule.traceparent,
    )


def _late_note(schedule: Schedule, zone: ZoneInfo) -> str:
    return f"\n\n(Late: this reminder was due {format_local(schedule.due_at, zone)}.)"


def _next_due(schedule: Schedule, zone: ZoneInfo, now: datetime) -> datetime | None:
    """The next occurrence; ``None`` ends the schedule: it was once, or its next time would
    be past the calendar's end (a huge ``every`` stored before repeats were bounded)."""
    try:
        rule = parse_repeat(schedule.repeat)
        return None if rule is None else rule.next_after(schedule.due_at, zone, now)
    except (OverflowError, BotkitError) as e:
        log.warning("reminders.no_next_time", id=schedule.id, repeat=schedule.repeat, error=str(e))
        return None


def _zone(schedule: Schedule) -> ZoneInfo:
    try:
        return zone_named(schedule.timezone)
    except BotkitError:
        return ZoneInfo("UTC")


HandOff = Callable[[Schedule], Awaitable[None]]
"""Takes over a claimed task instead of running its turn here (a queue job does)."""


class FiringLoop:
    """Fires due schedules in the background until stopped; see the module docstring.

    With ``hand_off``, claimed tasks are passed to it instead of run here: the queue's workers
    defer them as jobs on the user's lock, so they take turns with the user's own messages.
    With ``run_turn``, a task's turn runs through it (the single-process runtime's turn slots
    and conversation queues) instead of straight through the bot.
    """

    def __init__(
        self,
        host: FiringHost,
        messenger: Messenger,
        *,
        hand_off: HandOff | None = None,
        run_turn: TurnRunner | None = None,
    ) -> None:
        self.host = host
        self.messenger = messenger
        self.hand_off = hand_off
        self.run_turn = run_turn
        self._wake = asyncio.Event()
        self._firing: set[asyncio.Task[bool]] = set()
        self._batch_look = 0.0  # when the batches in flight are looked at next (monotonic)
        self._delivering: set[tuple[int, int]] = set()  # occurrences under way here

    def wake(self) -> None:
        """Look again now (a schedule was added)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and fire until ``stop`` is set; a failing store is logged and retried."""
        self.host.reminders.wake = self.wake
        try:
            while not stop.is_set():
                self._wake.clear()
                wait = await self._round()
                await _first_of(stop, self._wake, wait)
        finally:
            self.host.reminders.wake = None

    async def _round(self) -> float:
        """Fire what is due now; the seconds until the next look."""
        poll = self.host.settings.schedule_poll
        try:
            for schedule in await claim_due(self.host):
                self._start(schedule)
            await self._look_at_batches()
            soonest = await (await self.host.reminders.store()).next_schedule_due()
        except BotkitError as e:
            log.warning("reminders.firing_failed", error=str(e))
            return poll
        if self.host.settings.task_batches != "off":
            poll = min(poll, self.host.settings.batch_poll)
        if soonest is None:
            return poll
        until = (soonest - self.host.reminders.clock()).total_seconds()
        return min(max(until, MIN_WAIT), poll)

    def _start(self, schedule: Schedule) -> None:
        """Fire ``schedule`` in a task of its own, unless its occurrence is under way here (a
        batched task is found both by a claim and by its ended batch)."""
        occurrence = (schedule.id, schedule.fired)
        if occurrence in self._delivering:
            return
        self._delivering.add(occurrence)
        task = asyncio.create_task(self._fire(schedule))
        self._firing.add(task)
        task.add_done_callback(self._firing.discard)
        task.add_done_callback(partial(self._delivered, occurrence))

    async def _look_at_batches(self) -> None:
        """Every BOTKIT_BATCH_POLL seconds, deliver the batched tasks whose batch ended."""
        started = asyncio.get_running_loop().time()
        if started < self._batch_look:
            return
        self._batch_look = started + self.host.settings.batch_poll
        for schedule in await ended_batches(self.host):
            self._start(schedule)

    def _delivered(self, occurrence: tuple[int, int], _: asyncio.Task[bool]) -> None:
        self._delivering.discard(occurrence)

    async def _fire(self, schedule: Schedule) -> bool:
        try:
            if schedule.kind == "task" and self.hand_off is not None:
                await self.hand_off(schedule)
                return True
            return await fire(self.host, self.messenger, schedule, self.run_turn)
        except Exception:
            log.exception("reminders.fire_crashed", id=schedule.id, user_id=schedule.user_id)
            return False

    async def drain(self, grace: float | None) -> bool:
        """Wait for deliveries under way; ``False`` if ``grace`` seconds were not enough."""
        if not self._firing:
            return True
        _, pending = await asyncio.wait(set(self._firing), timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return not pending


async def _first_of(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` or ``wake`` is set meanwhile."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        with suppress(asyncio.CancelledError):
            await asyncio.gather(*waiters, return_exceptions=True)
