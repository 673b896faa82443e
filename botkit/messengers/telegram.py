"""The Telegram messenger on aiogram: long polling in; formatted, paced replies out."""

from __future__ import annotations

import asyncio
import html
import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from datetime import UTC
from functools import partial
from typing import Any

import structlog
from aiogram import Bot as AiogramBot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, Update, User
from aiogram.types import Message as TgMessage

from botkit.errors import ConfigError, MessengerError
from botkit.inbox import Inbox
from botkit.messengers.base import Incoming
from botkit.messengers.flood import FloodControl
from botkit.messengers.markdown import html_to_plain, markdown_to_html, render_chunks
from botkit.messengers.updates import RawGetUpdates, parse_update

__all__ = ["TelegramDraft", "TelegramMessenger"]

log = structlog.get_logger(__name__)

MAX_MESSAGE_LENGTH = 4096
POLL_FIRST_BACKOFF = 1.0
POLL_MAX_BACKOFF = 30.0
ALLOWED_UPDATES = ["message", "stopped_message_generation"]
GROUP_CHATS = frozenset({"group", "supergroup"})
OTHER_KINDS = (
    "voice",
    "audio",
    "video",
    "video_note",
    "sticker",
    "animation",
    "document",
    "contact",
    "location",
    "venue",
    "poll",
    "dice",
)

OnMessage = Callable[[Incoming], None]
OnStop = Callable[[int], object]
"""Called with the chat id when the user presses a draft's stop button."""

_draft_ids = itertools.count(1)


class TelegramMessenger:
    """Receives updates by long polling and sends replies through the Bot API."""

    def __init__(
        self,
        token: str,
        *,
        api_base: str | None = None,
        poll_timeout: int = 30,
        flood: FloodControl | None = None,
        inbox: Inbox | None = None,
        answer_groups: str = "mention",
        draft_interval: float = 0.3,
        conflict_timeout: float = 60.0,
    ) -> None:
        session = AiohttpSession(api=TelegramAPIServer.from_base(api_base)) if api_base else None
        self.api = AiogramBot(token, session=session)
        self.poll_timeout = poll_timeout
        self.flood = flood or FloodControl()
        self.inbox = inbox
        self.answer_groups = answer_groups
        """``mention``: in groups, answer only when mentioned or replied to; ``all``: always."""
        self.draft_interval = draft_interval
        self.conflict_timeout = conflict_timeout
        """How long another instance may hold the poll (409) before this one gives up."""
        self.me: User | None = None

    async def start(self) -> User:
        """Check the token and learn the bot's own name (network failures are retried)."""
        try:
            self.me = await self.flood.send(0, self.api.get_me)  # retried while unreachable
        except MessengerError as e:
            if isinstance(e.__cause__, TelegramUnauthorizedError):
                raise ConfigError(
                    "Telegram rejected TELEGRAM_BOT_TOKEN: check the token from @BotFather."
                ) from e
            raise
        return self.me

    async def close(self) -> None:
        """Close the HTTP session."""
        await self.api.session.close()

    # ---- output -----------------------------------------------------------------------

    async def send_text(self, chat_id: int, text: str) -> None:
        """Send Markdown ``text`` as formatted messages, split where Telegram needs it."""
        for chunk in render_chunks(text, MAX_MESSAGE_LENGTH) or [text.strip() or "…"]:
            await self._send_chunk(chat_id, chunk)

    async def _send_chunk(self, chat_id: int, chunk: str) -> None:
        try:
            await self.flood.send(
                chat_id, partial(self.api.send_message, chat_id, chunk, parse_mode="HTML")
            )
        except MessengerError as e:
            if not _is_entity_error(e):
                raise
            log.warning("telegram.html_rejected", chat_id=chat_id, error=str(e.__cause__))
            plain = html_to_plain(chunk)
            await self.flood.send(chat_id, partial(self.api.send_message, chat_id, plain))

    async def send_typing(self, chat_id: int) -> None:
        """Show "typing…" in the chat (best effort, never retried)."""
        await self.api.send_chat_action(chat_id, "typing")

    def draft(self, message: Incoming) -> TelegramDraft | None:
        """A streamed draft for private chats; groups get the final message only."""
        if message.chat_type != "private":
            return None
        return TelegramDraft(self.api, message.chat_id, interval=self.draft_interval)

    async def sync_commands(self, commands: Sequence[tuple[str, str]]) -> bool:
        """Set the bot's command menu, only if it differs (setMyCommands is rate limited)."""
        wanted = [(name, description) for name, description in commands]
        current = await self.flood.send(0, self.api.get_my_commands)
        if [(c.command, c.description) for c in current] == wanted:
            return False
        menu = [BotCommand(command=n, description=d) for n, d in wanted]
        await self.flood.send(0, partial(self.api.set_my_commands, menu))
        return True

    # ---- input ------------------------------------------------------------------------

    async def poll(self, on_message: OnMessage, on_stop: OnStop, stop: asyncio.Event) -> None:
        """Long-poll until ``stop`` is set; accepted messages are journaled, then handed on.

        Nothing Telegram or the network answers ends polling but a rejected token (401) or
        another instance polling with the same token for ``conflict_timeout`` seconds (409):
        any other failure is logged and retried with backoff, and each update is read on its
        own, so one that cannot be parsed is journaled, confirmed and skipped.
        """
        if self.me is None:
            await self.start()
        await self.flood.send(0, partial(self.api.delete_webhook, drop_pending_updates=False))
        await self._replay_inbox(on_message)
        offset: int | None = None
        failures = _PollFailures(self.conflict_timeout)
        while not stop.is_set():
            try:
                batch = await self._get_updates(offset, stop)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                await _sleep_unless(stop, failures.wait_after(e))
                continue
            failures.reset()
            for raw in batch:
                update_id = _update_id(raw)
                if update_id is None:
                    log.warning("telegram.update_without_id", update=_preview(raw))
                    continue
                offset = max(offset or 0, update_id + 1)
                await self._take_safely(update_id, raw, on_message, on_stop)
        if offset is not None:  # confirm what was journaled, so a restart does not re-read it
            with suppress(Exception):
                await self.api(RawGetUpdates(offset=offset, timeout=0, limit=1))

    async def _replay_inbox(self, on_message: OnMessage) -> None:
        """Hand on the updates accepted before a crash whose turns never finished."""
        if self.inbox is None:
            return
        for item in self.inbox.pending():
            update = parse_update(item.payload, self.api).update
            message = await self._incoming(update) if update is not None else None
            if message is not None:
                log.info("telegram.replayed", update_id=item.update_id)
                on_message(message)

    async def _take_safely(
        self, update_id: int, raw: dict[str, Any], on_message: OnMessage, on_stop: OnStop
    ) -> None:
        """Take one raw update; whatever goes wrong with it, the others are still taken."""
        try:
            await self._take(update_id, raw, on_message, on_stop)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("telegram.update_failed", update_id=update_id)
            self._reject(update_id, raw, f"{type(e).__name__}: {e}")

    async def _take(
        self, update_id: int, raw: dict[str, Any], on_message: OnMessage, on_stop: OnStop
    ) -> None:
        if self.inbox is not None and self.inbox.seen(update_id):
            return  # delivered again after a restart: already accepted
        parsed = parse_update(raw, self.api)
        if parsed.update is None:
            log.warning("telegram.update_unparseable", update_id=update_id, error=parsed.error)
            self._reject(update_id, raw, parsed.error or "unparseable")
            return
        if parsed.dropped:
            log.info("telegram.update_degraded", update_id=update_id, dropped=parsed.dropped)
        update = parsed.update
        if update.stopped_message_generation is not None:
            on_stop(update.stopped_message_generation.chat.id)
            return
        message = await self._incoming(update)
        if message is None:
            return
        if self.inbox is not None:
            self.inbox.accept(update_id, raw)
        on_message(message)

    def _reject(self, update_id: int, raw: dict[str, Any], error: str) -> None:
        if self.inbox is not None:
            self.inbox.reject(update_id, raw, error)

    async def _get_updates(self, offset: int | None, stop: asyncio.Event) -> list[Any]:
        """One long poll, as raw JSON objects, abandoned as soon as ``stop`` is set."""
        method = RawGetUpdates(
            offset=offset, timeout=self.poll_timeout, allowed_updates=ALLOWED_UPDATES
        )
        poll = asyncio.ensure_future(self.api(method, request_timeout=self.poll_timeout + 10))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not poll.done():
            poll.cancel()
            return []
        batch = poll.result()
        if not isinstance(batch, list):  # {"ok": true} without a result, from a proxy say
            raise MessengerError(f"getUpdates answered {type(batch).__name__}, not a list")
        return batch

    async def _incoming(self, update: Update) -> Incoming | None:
        """The update as an ``Incoming`` message, or ``None`` when it is not for us."""
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            log.debug("telegram.update_skipped", update_id=update.update_id)
            return None
        text = message.text or message.caption or ""
        if message.chat.type in GROUP_CHATS:
            addressed = self._addressed_text(message, text)
            if addressed is None:
                return None
            text = addressed
        images = await self._photos(message)
        return Incoming(
            update_id=update.update_id,
            user_id=message.from_user.id,
            chat_id=message.chat.id,
            text=text,
            date=message.date if message.date.tzinfo else message.date.replace(tzinfo=UTC),
            chat_type=message.chat.type,
            username=message.from_user.username,
            first_name=message.from_user.first_name,
            images=images,
            kind=_kind(message),
            raw=update,
        )

    def _addressed_text(self, message: TgMessage, text: str) -> str | None:
        """In a group: the text without the mention if the bot was addressed, else ``None``."""
        if self.answer_groups == "all" or self.me is None:
            return text
        mention = f"@{self.me.username}".lower()
        replied = message.reply_to_message
        if replied and replied.from_user and replied.from_user.id == self.me.id:
            return text
        if mention in text.lower():
            start = text.lower().index(mention)
            return (text[:start] + text[start + len(mention) :]).strip()
        return None

    async def _photos(self, message: TgMessage) -> tuple[bytes, ...]:
        if not message.photo:
            return ()
        largest = message.photo[-1]
        try:
            data = await self.api.download(largest.file_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # aiohttp errors and timeouts too: the turn goes on without it
            log.warning("telegram.photo_download_failed", error=_describe_error(e))
            return ()
        return (data.read(),) if data is not None else ()


class _PollFailures:
    """Backoff between failed polls, and which failures end polling."""

    def __init__(self, conflict_timeout: float) -> None:
        self.conflict_timeout = conflict_timeout
        self.backoff = POLL_FIRST_BACKOFF
        self.conflict_since: float | None = None

    def wait_after(self, error: Exception) -> float:
        """Seconds to wait before the next poll; raises ``ConfigError`` when polling must end."""
        if isinstance(error, TelegramUnauthorizedError):
            raise ConfigError(
                "Telegram rejected TELEGRAM_BOT_TOKEN: check the token from @BotFather."
            ) from error
        if isinstance(error, TelegramConflictError):
            self._check_conflict(error)
        else:
            self.conflict_since = None
        if isinstance(error, TelegramRetryAfter):
            wait = float(error.retry_after)
        else:
            wait, self.backoff = self.backoff, min(self.backoff * 2, POLL_MAX_BACKOFF)
        log.warning("telegram.poll_failed", error=_describe_error(error), retry_in=wait)
        return wait

    def _check_conflict(self, error: TelegramConflictError) -> None:
        now = time.monotonic()
        if self.conflict_since is None:
            self.conflict_since = now
        elif now - self.conflict_since >= self.conflict_timeout:
            raise ConfigError(
                "Another instance is polling Telegram with this TELEGRAM_BOT_TOKEN "
                f"(409 for {self.conflict_timeout:g} s): stop it, then start this one again."
            ) from error

    def reset(self) -> None:
        """A poll succeeded: start over."""
        self.backoff = POLL_FIRST_BACKOFF
        self.conflict_since = None


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _update_id(raw: Any) -> int | None:
    update_id = raw.get("update_id") if isinstance(raw, dict) else None
    return update_id if isinstance(update_id, int) and not isinstance(update_id, bool) else None


def _preview(raw: Any) -> str:
    return repr(raw)[:200]


def _describe_error(error: Exception) -> str:
    """A one-line description that never holds a URL (Telegram's carry the bot token)."""
    if isinstance(error, TelegramAPIError):
        return f"{type(error).__name__}: {error.message}"
    return type(error).__name__


class TelegramDraft:
    """A reply streamed into Telegram's ``sendMessageDraft``, at most one update per interval."""

    def __init__(self, api: AiogramBot, chat_id: int, *, interval: float = 0.3) -> None:
        self.api = api
        self.chat_id = chat_id
        self.draft_id = next(_draft_ids)
        self.interval = interval
        self.text = ""
        self._shown = ""
        self._last_sent = 0.0
        self._sender: asyncio.Task[None] | None = None
        self._sending = False
        self._finished = False

    async def update(self, delta: str) -> None:
        """Add ``delta``; the draft is refreshed now or at the end of the interval."""
        self.text += delta
        if self._finished or (self._sender is not None and not self._sender.done()):
            return
        self._sender = asyncio.create_task(self._show_soon())

    async def finish(self) -> None:
        """Send no more updates; wait for one in flight, so none can land after the reply."""
        self._finished = True
        if self._sender is None or self._sender.done():
            return
        if not self._sending:
            self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)

    async def _show_soon(self) -> None:
        delay = self._last_sent + self.interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        html = draft_html(self.text)
        if self._finished or not html or html == self._shown:
            return
        self._sending = True
        self._last_sent = time.monotonic()
        try:
            await self.api.send_message_draft(
                self.chat_id, self.draft_id, text=html, parse_mode="HTML", can_stop=True
            )
            self._shown = html
        except TelegramAPIError as e:  # a draft is a courtesy: the final message still comes
            log.debug("telegram.draft_failed", chat_id=self.chat_id, error=str(e))
        finally:
            self._sending = False


def draft_html(text: str) -> str:
    """A growing answer as draft HTML: finished lines formatted, the last line plain.

    Formatting only the finished lines keeps half-typed markup (an unclosed ``**``) from
    showing up and then vanishing, the flicker users of other bots complain about.
    """
    cut = text.rfind("\n")
    head, tail = (text[:cut], text[cut + 1 :]) if cut >= 0 else ("", text)
    parts = [markdown_to_html(head) if head.strip() else ""]
    parts.append(html.escape(tail.translate(_MARKUP)).strip())
    rendered = "\n".join(p for p in parts if p)
    return rendered if len(html_to_plain(rendered)) <= MAX_MESSAGE_LENGTH else ""


_MARKUP = str.maketrans("", "", "*_`~#>")


def _kind(message: TgMessage) -> str:
    if message.photo:
        return "photo"
    for kind in OTHER_KINDS:
        if getattr(message, kind, None) is not None:
            return kind
    return "text" if message.text else "other"


def _is_entity_error(error: MessengerError) -> bool:
    cause = error.__cause__
    return isinstance(cause, TelegramBadRequest) and "can't parse entities" in cause.message
