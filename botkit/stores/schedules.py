"""Reminders and scheduled tasks as a store keeps them, and each user's time zone.

A schedule is ``pending`` until it is due; the firing loop *claims* it (``firing``, with a
lease and a claim token) before delivering, and *finishes* it once Telegram confirmed the
delivery: ``done``, or ``pending`` again at its next occurrence when it repeats. A process that
dies mid-delivery leaves it ``firing``; once the lease has run out another claim takes it, so
at most the one in flight is delivered again, and only if its delivery was never recorded.
``cancelled`` and ``done`` schedules never fire.

A schedule whose owner may no longer use the bot when it falls due is *paused*: pending, but
not claimed again until a given time, when the firing loop looks whether they may again. A
task's runs are counted per user and UTC day, so a limit can put the next one off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal, Protocol

__all__ = [
    "ACTIVE_STATUSES",
    "NewSchedule",
    "Schedule",
    "ScheduleKind",
    "ScheduleStatus",
    "ScheduleStore",
]

ScheduleKind = Literal["reminder", "task"]
"""``reminder``: a text delivered verbatim; ``task``: an instruction run as a turn."""
ScheduleStatus = Literal["pending", "firing", "done", "cancelled", "failed"]
ACTIVE_STATUSES = ("pending", "firing")
"""Statuses of schedules that will still fire (and count against the per-user limit)."""


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """What a new schedule is made of: who, where, what, when and how often."""

    user_id: int
    """Who asked for it."""
    chat_id: int
    """The chat it was asked in, where it is delivered."""
    kind: ScheduleKind
    text: str
    """The reminder's text, or the task's instruction."""
    due_at: datetime
    """Its first occurrence (timezone-aware)."""
    timezone: str
    """The IANA zone its repeats are computed in (the user's, when it was made)."""
    repeat: str | None = None
    """``daily``, ``weekly``, ``every 2h``, a cron expression, or ``None`` for once."""
    thread_id: int | None = None
    """The forum topic it was asked in."""
    chat_type: str = "private"
    """``private``, ``group`` or ``supergroup``: the conversation a task's turn runs in."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of the span that made it (tracing on): a task's turns link to it."""
    urgent: bool = True
    """A task that must run on time; ``False``: it may wait for a batch at half price
    (``BOTKIT_TASK_BATCHES``)."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored reminder or scheduled task."""

    id: int
    user_id: int
    chat_id: int
    thread_id: int | None
    chat_type: str
    kind: ScheduleKind
    text: str
    due_at: datetime
    """Its next planned occurrence, in UTC."""
    repeat: str | None
    timezone: str
    status: ScheduleStatus
    created_at: datetime
    fired: int
    """How many occurrences were delivered so far."""
    claim: str | None
    """The token of the claim that is delivering it now (``firing``), else ``None``."""
    last_fired_at: datetime | None
    """When an occurrence was last delivered."""
    paused: bool = False
    """Waiting: its owner may not use the bot now (blocked, or refused when it fell due)."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of the span that made it, if traced then."""
    urgent: bool = True
    """``False``: a task that may wait for a batch at half price."""
    batch_id: str | None = None
    """The Message Batch answering this occurrence's first LLM call, while it is in flight."""
    batch_at: datetime | None = None
    """When the batched occurrence's message was built (its turn is built as of then)."""
    batch_digest: str | None = None
    """The digest of the request the batch holds (its answer stands in for the same one)."""


class ScheduleStore(Protocol):
    """The part of a user store that keeps schedules and time zones."""

    async def add_schedule(self, schedule: NewSchedule, *, max_pending: int) -> Schedule | None:
        """Store ``schedule`` as pending; ``None`` if the user already has ``max_pending``."""
        ...

    async def pending_schedules(
        self, user_id: int | None = None, *, chat_id: int | None = None
    ) -> list[Schedule]:
        """Schedules that will still fire (of one user, in one chat, or all), soonest first."""
        ...

    async def cancel_schedule(
        self, schedule_id: int, user_id: int | None = None, *, chat_id: int | None = None
    ) -> Schedule | None:
        """Cancel a schedule that would still fire (only of ``user_id`` and in ``chat_id``,
        when given); it, or ``None``."""
        ...

    async def claim_due_schedules(
        self, now: datetime, *, lease: timedelta, limit: int = 100
    ) -> list[Schedule]:
        """Atomically take due schedules for delivery, so no other process delivers them.

        Due means pending with ``due_at <= now`` (and not paused past ``now``), or firing with
        a lease that ran out (its claimer died). Schedules of blocked users are left alone.
        Each is returned ``firing`` with a fresh ``claim``, held until ``now + lease``.
        """
        ...

    async def finish_schedule(
        self, schedule: Schedule, *, next_due: datetime | None, fired_at: datetime, delivered: bool
    ) -> bool:
        """Record a claimed schedule's delivery (or failure, ``delivered=False``).

        ``next_due`` makes it pending again then (a repeat); ``None`` ends it (``done``, or
        ``failed`` when not delivered). ``False`` if the claim is no longer this one's (it was
        cancelled meanwhile, or its lease ran out and another process claimed it).
        """
        ...

    async def pause_schedule(self, schedule: Schedule, *, until: datetime) -> bool:
        """Leave a claimed schedule pending, at the same occurrence, but not claimed again
        before ``until`` (listed as paused meanwhile); ``False`` if no longer claimed."""
        ...

    async def take_task_run(self, schedule: Schedule, day: date, *, limit: int) -> bool:
        """Count this occurrence of a task (by its id and ``due_at``, at most once) as one of
        its user's task runs on ``day``; ``False``, counting nothing, if they already have
        ``limit`` that day."""
        ...

    async def take_schedule(
        self, schedule_id: int, fired: int, *, until: datetime
    ) -> Schedule | None:
        """Take over a ``firing`` schedule whose ``fired`` count is still ``fired`` (that
        occurrence not yet recorded), with a fresh claim held until ``until``; else ``None``.

        A queue job deferred for one occurrence calls this as it starts: a claimer whose lease
        ran out hands over to it, and a copy of the job for an occurrence already recorded (or
        a schedule cancelled meanwhile) gets ``None``.
        """
        ...

    async def hold_for_batch(
        self, schedule: Schedule, *, batch_id: str, digest: str, at: datetime, until: datetime
    ) -> bool:
        """Keep a claimed task's occurrence waiting for the Message Batch ``batch_id`` (the
        request of ``digest``, built as of ``at``), held from other claims until ``until``;
        ``False`` if no longer claimed. ``finish_schedule`` forgets the batch."""
        ...

    async def batched_schedules(self, limit: int = 100) -> list[Schedule]:
        """Claimed tasks whose occurrence waits for a Message Batch, oldest batch first."""
        ...

    async def next_schedule_due(self) -> datetime | None:
        """When the next claim could take something (of unblocked users), or ``None``."""
        ...

    async def get_timezone(self, user_id: int) -> str | None:
        """The IANA time zone the user chose, or ``None``."""
        ...

    async def set_timezone(self, user_id: int, timezone: str) -> None:
        """Remember ``timezone`` (an IANA name) as the user's."""
        ...
