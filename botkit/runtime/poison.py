"""Updates whose turn kills the process (out of memory, a native crash) are given up.

A dead worker's job is handed to the next worker, and ``run`` replays its journal after a
restart: an update whose turn kills the process would kill every process that takes it, for
ever, and hold its conversation's later turns behind it. So both runtimes count an update's
starts durably before its turn runs (``botkit_updates.starts``; the inbox journal's
``started`` lines) and take back a start they see end short of done (a shutdown). An update
already started ``BOTKIT_MAX_JOB_ATTEMPTS`` times by processes that died is given up at its
next start: marked first, so it is given up once even if telling fails or two workers race,
then logged (``turn.given_up``), counted (``botkit_updates_given_up_total``) and its sender
told, once.

A turn that starts again after a second such death is a suspect: suspects run one at a time
in a process (the lane); any other turn runs at once, beside them. A turn that died once is
no suspect: most deaths are not a poison's (out of memory, a deploy's SIGKILL), and the turns a
dead process leaves then all run at once, not in a queue. With the default limit of 3, a
poison kills the process with everything in flight (death 1), again with the turns that died
once and ran beside it (death 2), then runs apart from the other suspects and dies a third
time (with only the turns in flight that were no suspects), and is given up once. A turn that
merely shared a process with it dies at most twice (``suspect_from``) and is answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import structlog

from botkit.errors import MessengerError, SessionError
from botkit.messengers.base import Incoming, Messenger, UpdateJournal
from botkit.runtime.base import ServedBot
from botkit.runtime.inbox import Inbox

__all__ = ["SUSPECT_FROM", "SuspectLane", "journaled_turns", "suspect_from", "tell_given_up"]

log = structlog.get_logger(__name__)

Handler = Callable[[Incoming], Awaitable[None]]


SUSPECT_FROM = 2
"""Deaths from which a turn is a suspect: with ``BOTKIT_MAX_JOB_ATTEMPTS`` 3 (the default)
or more, from its second death (not the limit less one: a higher limit would let a poison
kill everything in flight beside it more often). Lower when the limit is lower."""


def suspect_from(max_attempts: int) -> int:
    """The deaths from which a turn runs in the lane, under ``max_attempts`` deaths allowed.

    A turn that only shares processes with one poison dies at most this many times: beside
    the poison before the poison is a suspect (this many deaths), or while itself no suspect
    (a suspect runs apart from the suspect poison). So this stays below ``max_attempts`` for
    such a turn never to be given up: 1 when the limit is 2. With a limit of 1 nothing can
    spare it (the poison's first death is its only one)."""
    return max(1, min(SUSPECT_FROM, max_attempts - 1))


class SuspectLane:
    """Turns whose processes died under them ``suspect_from`` times run here one at a time."""

    def __init__(self, max_attempts: int) -> None:
        self._lock = asyncio.Lock()
        self.suspect_from = suspect_from(max_attempts)

    @asynccontextmanager
    async def entered(self, deaths: int) -> AsyncIterator[None]:
        """Wait for the lane if ``deaths`` make the turn a suspect; any other goes on at once."""
        if deaths < self.suspect_from:
            yield
            return
        async with self._lock:
            yield


async def tell_given_up(
    bot: ServedBot, messenger: Messenger, message: Incoming | None, update_id: int, starts: int
) -> None:
    """Log and count a given-up update, and tell its sender (``message``: ``None`` if it is
    not a message, e.g. a button press); a failed send is logged, not raised."""
    log.error(
        "turn.given_up",
        update_id=update_id,
        user_id=message.user_id if message else None,
        chat_id=message.chat_id if message else None,
        deaths=starts,
    )
    bot.metrics.update_given_up()
    if message is None:
        return
    try:
        await messenger.send_text(
            message.chat_id,
            bot.options.given_up_text,
            thread_id=message.thread_id,
            reply_to=message.message_id,
        )
    except MessengerError as e:
        log.warning("turn.given_up_not_told", update_id=update_id, error=str(e))


def journaled_turns(bot: ServedBot, messenger: Messenger, inbox: UpdateJournal | None) -> Handler:
    """``run``'s turn handler: with the inbox journal, each start is journaled first and an
    update started ``BOTKIT_MAX_JOB_ATTEMPTS`` times by processes that died is given up."""

    async def plain(message: Incoming) -> None:
        await bot.turns.handle_safely(message, messenger)

    if not isinstance(inbox, Inbox):
        return plain
    return _JournaledTurns(bot, messenger, inbox).run


class _JournaledTurns:
    """Turns whose starts are counted in the inbox journal."""

    def __init__(self, bot: ServedBot, messenger: Messenger, inbox: Inbox) -> None:
        self.bot = bot
        self.messenger = messenger
        self.inbox = inbox
        self.lane = SuspectLane(bot.settings.max_job_attempts)

    async def run(self, message: Incoming) -> None:
        """Run ``message``'s turn, its start journaled; or give it up."""
        update_ids = message.all_update_ids
        deaths = max(self.inbox.starts(update_id) for update_id in update_ids)
        async with self.lane.entered(deaths):
            if deaths >= self.bot.settings.max_job_attempts:
                await self._give_up(message, deaths)
                return
            self._journal_start(update_ids)
            try:
                await self.bot.turns.handle_safely(message, self.messenger)
            except asyncio.CancelledError:  # a shutdown: not a death
                self.inbox.interrupted(update_ids)
                raise

    def _journal_start(self, update_ids: tuple[int, ...]) -> None:
        """Journal the start; if the journal cannot be written the turn still runs (uncounted:
        answering beats guarding against a crash that may never come)."""
        try:
            self.inbox.started(update_ids)
        except SessionError as e:
            log.error("inbox.start_not_journaled", update_ids=update_ids, error=str(e))

    async def _give_up(self, message: Incoming, deaths: int) -> None:
        if self.inbox.give_up(message.all_update_ids):
            await tell_given_up(self.bot, self.messenger, message, message.update_id, deaths)
