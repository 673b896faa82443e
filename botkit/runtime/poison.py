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

A turn that starts again after such a death is a suspect: suspects run one at a time in a
process (the lane), so a turn that only shared a process with the poisonous one dies with it
once, not at every start.
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

__all__ = ["SuspectLane", "journaled_turns", "tell_given_up"]

log = structlog.get_logger(__name__)

Handler = Callable[[Incoming], Awaitable[None]]


class SuspectLane:
    """Turns that started before in a process that died run here one at a time."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def entered(self, suspect: bool) -> AsyncIterator[None]:
        """Wait for the lane if ``suspect``; any other turn goes on at once."""
        if not suspect:
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
        self.lane = SuspectLane()

    async def run(self, message: Incoming) -> None:
        """Run ``message``'s turn, its start journaled; or give it up."""
        update_ids = message.all_update_ids
        deaths = max(self.inbox.starts(update_id) for update_id in update_ids)
        async with self.lane.entered(deaths > 0):
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
