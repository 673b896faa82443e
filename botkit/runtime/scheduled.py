"""Reminders and scheduled tasks in the scale-out runtimes: every worker fires, none twice.

Each worker runs the same firing loop as ``python -m botkit run`` (``botkit.reminders.firing``)
over the PostgreSQL user store, whose claim locks due rows ``FOR UPDATE SKIP LOCKED``: any
number of workers look, and each due schedule is taken by exactly one. A reminder is sent by
the worker that took it. A task is not run there: it is deferred as a job on its
conversation's lock (``user:<id>``, as the user's own messages), so it takes its turn in order
with what the user writes, on whichever worker is free.

The job names its occurrence (the schedule and how many times it fired before). Starting, it
takes the schedule over from the claim (:meth:`~botkit.stores.schedules.ScheduleStore.
take_schedule`) and holds it for :data:`HELD_BY_JOB`, since procrastinate, not a lease, now
answers for it: a job whose worker dies is run again by another (and the pipeline re-sends an
answer it finds recorded instead of asking the model twice). A copy of the job for an
occurrence already recorded, or for a schedule cancelled meanwhile, does nothing.

A task that waits for a Message Batch (``botkit.reminders.batching``) takes two jobs: the
first sends the batch and ends, leaving the occurrence held for it; every worker's firing loop
looks at the batches in flight, and once one ended defers the second job (the same queueing
lock: one waits at a time), which runs the turn with the batch's answer. A worker restarted
meanwhile changes nothing: the batch is in the store, not in the worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

import structlog
from procrastinate import RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued, ConnectorException

from botkit.errors import StoreError
from botkit.reminders.firing import FiringLoop, fire, scheduled_message
from botkit.runtime.base import ServedBot
from botkit.runtime.queue import QUEUE, TurnQueue, describe, lock_for
from botkit.stores.schedules import Schedule

if TYPE_CHECKING:
    from botkit.messengers.base import Messenger

__all__ = ["HELD_BY_JOB", "SCHEDULED_TASK", "QueuedSchedules", "RunningTurns"]

log = structlog.get_logger(__name__)

SCHEDULED_TASK = "botkit.scheduled_task"
"""The name of the task that runs one occurrence of a scheduled task as a turn."""
HELD_BY_JOB = timedelta(days=7)
"""How long a running job holds its schedule: no firing loop takes it back meanwhile."""


class RunningTurns(Protocol):
    """Counts the turns running in this process (a worker, for ``botkit_turns_running``)."""

    running: int


class QueuedSchedules:
    """A worker's share of firing: the firing loop, and the job that runs a task's turn."""

    def __init__(
        self,
        bot: ServedBot,
        messenger: Messenger,
        queue: TurnQueue,
        *,
        turns: RunningTurns | None = None,
    ) -> None:
        self.bot = bot
        self.messenger = messenger
        self.queue = queue
        self.turns = turns
        self.loop = FiringLoop(bot, messenger, hand_off=self.defer)

    def register(self) -> None:
        """Make this process run scheduled tasks' jobs."""

        async def scheduled_task(context: Any, schedule_id: int, fired: int) -> None:
            await self.run(int(context.job.id), schedule_id, fired)

        # Like a turn's job: one cut short by a shutdown is retried.
        retry = RetryStrategy(max_attempts=100, wait=1)
        task = self.queue.app.task(name=SCHEDULED_TASK, queue=QUEUE, pass_context=True, retry=retry)
        task(scheduled_task)

    async def defer(self, schedule: Schedule) -> None:
        """Queue a claimed task's occurrence behind its conversation's earlier jobs."""
        message = scheduled_message(schedule, ZoneInfo("UTC"), self.bot.reminders.clock())
        lock = lock_for(message, self.bot.settings.group_context)
        deferrer = self.queue.app.configure_task(
            SCHEDULED_TASK,
            queue=QUEUE,
            lock=lock,
            queueing_lock=f"schedule:{schedule.id}:{schedule.fired}",
        )
        try:
            await deferrer.defer_async(schedule_id=schedule.id, fired=schedule.fired)
        except AlreadyEnqueued:  # claimed again after a lease ran out; the job still waits
            log.info("reminders.task_already_queued", id=schedule.id, fired=schedule.fired)
            return
        except (ConnectorException, OSError) as e:
            raise StoreError(f"cannot queue scheduled task {schedule.id}: {describe(e)}") from e
        log.info("reminders.task_queued", id=schedule.id, user_id=schedule.user_id, lock=lock)

    async def run(self, job_id: int, schedule_id: int, fired: int) -> None:
        """The job of one occurrence: take the schedule over, run its turn, record it."""
        store = await self.bot.reminders.store()
        until = self.bot.reminders.clock() + HELD_BY_JOB
        taken = await store.take_schedule(schedule_id, fired, until=until)
        if taken is None:
            log.info("reminders.task_job_stale", id=schedule_id, fired=fired, job_id=job_id)
            return
        if self.turns is not None:
            self.turns.running += 1
        try:
            await fire(self.bot, self.messenger, taken)
        finally:
            if self.turns is not None:
                self.turns.running -= 1
