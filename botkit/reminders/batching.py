"""Scheduled tasks at half price: a task's first LLM call through the Message Batches API.

A task that may wait (``schedule_task(..., urgent=False)`` with BOTKIT_TASK_BATCHES=marked, or
every task with ``all``) fires in two steps, so its conversation is never held while the batch
runs (minutes, at most 24 hours) and its user may go on writing meanwhile:

1. When it falls due, the request its turn would send first is built by the turn pipeline
   (``first_request``: the same prompt, tools, context and scheduled message, nothing
   recorded) and sent as a batch of one. The batch's id, the request's digest and the time the
   message was built as of are recorded with the claimed occurrence, held from other claims
   for :data:`BATCH_HOLD`.
2. Every BOTKIT_BATCH_POLL seconds the firing loops look at the batches in flight. Once one
   ended, the occurrence's turn runs as any task's (in the runtime's turn slots, or as a job on
   its conversation's lock), its message built as of step 1, and the batch's answer stands in
   for the turn's first call when that call's request is the one sent (same digest): tools it
   calls then run, later calls go at once. If the user wrote meanwhile the request differs and
   the turn asks the model at once (correct, at full price; the batch's cost is still
   counted). A batch that errored, expired or was canceled falls back to a turn at once.

Exactly once as before: the occurrence is recorded only after its answer was sent; a restart
finds the recorded batch and reads it, never sends it again. A process that dies between
sending the batch and recording it leaves the claim to run out: the occurrence is batched
again (two batches billed, one answer delivered).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

import structlog

from botkit.config import Settings
from botkit.errors import LLMError
from botkit.llm.base import LLM, LLMRequest
from botkit.llm.prepared import PreparedAnswer, PreparedAnswers, request_digest
from botkit.messengers.base import Incoming
from botkit.reminders.service import Reminders
from botkit.stores.schedules import Schedule
from botkit.types import Usage

__all__ = ["BATCH_HOLD", "BatchHost", "BatchedTurn", "ended_batches", "prepare", "wants_batch"]

log = structlog.get_logger(__name__)

BATCH_HOLD = timedelta(hours=25)
"""How long a batched occurrence is held from other claims: a batch ends within 24 hours
(expired at the latest); a claim after that reads its outcome."""


class BatchTurns(Protocol):
    """What batching needs of the turn pipeline."""

    prepared: PreparedAnswers

    async def first_request(self, message: Incoming) -> LLMRequest | None:
        """The request a turn for ``message`` would send first (``None``: it would not)."""
        ...

    async def charge_call(self, user_id: int, model: str, usage: Usage) -> None:
        """Count an LLM call made outside a turn."""
        ...


class BatchHost(Protocol):
    """What batching needs of a bot: its settings, schedules, model and turn pipeline."""

    settings: Settings
    reminders: Reminders

    @property
    def llm(self) -> LLM:
        """The model the bot talks to."""
        ...

    @property
    def turns(self) -> BatchTurns:
        """The bot's turn pipeline."""
        ...


@dataclass(frozen=True, slots=True)
class BatchedTurn:
    """An occurrence whose batch ended: its message, and the answer for its first call."""

    message: Incoming
    digest: str | None
    answer: PreparedAnswer | None
    """``None``: the batch brought no answer (errored, expired, canceled); ask at once."""


Waiting = Literal["waiting"]
WAITING: Waiting = "waiting"
"""The occurrence waits for its batch (just sent, or still running): nothing to deliver."""


def wants_batch(settings: Settings, schedule: Schedule) -> bool:
    """Whether ``schedule`` goes through a batch: a task, per BOTKIT_TASK_BATCHES (or one
    already sent to a batch, whatever the setting says now)."""
    if schedule.kind != "task":
        return False
    if schedule.batch_id is not None:
        return True
    mode = settings.task_batches
    return mode == "all" or (mode == "marked" and not schedule.urgent)


def custom_id(schedule: Schedule) -> str:
    """The batch request's name: the schedule and its occurrence."""
    return f"schedule-{schedule.id}-{schedule.fired}"


MessageAt = Callable[[datetime], Incoming]
"""The occurrence's message as built at a given time."""


async def prepare(
    host: BatchHost, schedule: Schedule, message_at: MessageAt, now: datetime
) -> BatchedTurn | Waiting | None:
    """Send a due occurrence to a batch (``WAITING``), or, once its batch ended, what its turn
    needs (:class:`BatchedTurn`); ``None``: run it at once, as an urgent task."""
    from botkit.llm.batches import batches_for  # the anthropic SDK: only when batching

    batches = batches_for(host.llm)
    if batches is None:
        return None
    if schedule.batch_id is None:
        return await _submit(host, schedule, message_at(now), now)
    try:
        outcome = await batches.outcome(schedule.batch_id, custom_id(schedule))
    except LLMError as e:  # the firing loops look again at their next look at the batches
        log.warning("reminders.batch_unread", id=schedule.id, batch=schedule.batch_id, error=str(e))
        await _hold(host, schedule, schedule.batch_id, schedule.batch_digest or "", now, BATCH_HOLD)
        return WAITING
    if outcome.status == "in_progress":
        await _hold(host, schedule, schedule.batch_id, schedule.batch_digest or "", now, BATCH_HOLD)
        return WAITING
    built = message_at(schedule.batch_at or now)
    if outcome.status != "succeeded" or outcome.message is None:
        log.warning(
            "reminders.batch_failed",
            id=schedule.id,
            user_id=schedule.user_id,
            batch=schedule.batch_id,
            result=outcome.status,
            error=outcome.error,
            fallback="realtime",
        )
        return BatchedTurn(built, None, None)
    raw = outcome.message
    model, usage = batches.billed(raw)
    answer = PreparedAnswer(lambda request: batches.response(request, raw), model, usage)
    return BatchedTurn(built, schedule.batch_digest, answer)


async def _submit(
    host: BatchHost, schedule: Schedule, message: Incoming, now: datetime
) -> Waiting | None:
    from botkit.llm.batches import batches_for

    batches = batches_for(host.llm)
    request = await host.turns.first_request(message)
    if batches is None or request is None:
        return None  # over budget: the turn at once tells the user
    digest = request_digest(request)
    try:
        batch_id = await batches.submit(custom_id(schedule), request)
    except LLMError as e:
        log.warning("reminders.batch_not_sent", id=schedule.id, error=str(e), fallback="realtime")
        return None
    if not await _hold(host, schedule, batch_id, digest, now, BATCH_HOLD):
        log.info("reminders.batch_orphaned", id=schedule.id, batch=batch_id)  # cancelled meanwhile
        try:
            await batches.cancel(batch_id)
        except LLMError as e:
            log.warning("reminders.batch_not_cancelled", batch=batch_id, error=str(e))
        return WAITING
    log.info("reminders.task_batched", id=schedule.id, user_id=schedule.user_id, batch=batch_id)
    return WAITING


async def _hold(
    host: BatchHost,
    schedule: Schedule,
    batch_id: str,
    digest: str,
    now: datetime,
    hold: timedelta,
) -> bool:
    store = await host.reminders.store()
    at = schedule.batch_at or now
    return await store.hold_for_batch(
        schedule, batch_id=batch_id, digest=digest, at=at, until=now + hold
    )


@asynccontextmanager
async def answering(host: BatchHost, turn: BatchedTurn | None) -> AsyncIterator[None]:
    """Hold the batch's answer for the occurrence's turn while the block runs it; a batch's
    answer the turn did not take (the user wrote meanwhile) is still charged."""
    if turn is None or turn.answer is None or turn.digest is None:
        yield
        return
    prepared = host.turns.prepared
    prepared.put(turn.digest, turn.answer)
    try:
        yield
    finally:
        if not prepared.forget(turn.digest):
            await _charge_unused(host, turn)


async def _charge_unused(host: BatchHost, turn: BatchedTurn) -> None:
    """A batch's answer its turn did not use cost all the same: count it."""
    answer = turn.answer
    assert answer is not None
    log.info(
        "reminders.batch_answer_unused",
        user_id=turn.message.user_id,
        reason="the conversation moved meanwhile: asked at once",
        output_tokens=answer.usage.output_tokens,
    )
    await host.turns.charge_call(turn.message.user_id, answer.model, answer.usage)


async def ended_batches(host: BatchHost, limit: int = 100) -> list[Schedule]:
    """The batched occurrences whose batch has ended (or can no longer be read as running)."""
    from botkit.llm.batches import batches_for

    batches = batches_for(host.llm)
    if batches is None:
        return []
    store = await host.reminders.store()
    ended: list[Schedule] = []
    for schedule in await store.batched_schedules(limit):
        assert schedule.batch_id is not None
        try:
            if await batches.ended(schedule.batch_id):
                ended.append(schedule)
        except LLMError as e:
            log.warning("reminders.batch_unread", id=schedule.id, error=str(e))
    return ended
