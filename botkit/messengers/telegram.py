"""The Telegram messenger on aiogram: long polling in, text out, with retries."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC
from functools import partial
from typing import TypeVar

import structlog
from aiogram import Bot as AiogramBot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import Message as TgMessage
from aiogram.types import Update

from botkit.errors import ConfigError, MessengerError
from botkit.messengers.base import Incoming

__all__ = ["TelegramMessenger", "split_text"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

MAX_MESSAGE_LENGTH = 4096
ALLOWED_UPDATES = ["message"]


class TelegramMessenger:
    """Receives updates by long polling and sends replies through the Bot API."""

    def __init__(
        self,
        token: str,
        *,
        api_base: str | None = None,
        poll_timeout: int = 30,
        max_send_attempts: int = 8,
    ) -> None:
        session = AiohttpSession(api=TelegramAPIServer.from_base(api_base)) if api_base else None
        self.api = AiogramBot(token, session=session)
        self.poll_timeout = poll_timeout
        self.max_send_attempts = max_send_attempts

    async def close(self) -> None:
        """Close the HTTP session."""
        await self.api.session.close()

    # ---- output -----------------------------------------------------------------------

    async def send_text(self, chat_id: int, text: str) -> None:
        """Send ``text``, split into parts Telegram accepts, each retried until delivered."""
        for part in split_text(text):
            await self._retrying(partial(self.api.send_message, chat_id, part))

    async def send_typing(self, chat_id: int) -> None:
        """Show "typing…" in the chat (best effort, never retried)."""
        await self.api.send_chat_action(chat_id, "typing")

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call``; wait out flood control and retry network failures with backoff."""
        delay = 0.5
        for attempt in range(1, self.max_send_attempts + 1):
            try:
                return await call()
            except TelegramRetryAfter as e:
                log.warning("telegram.flood_wait", retry_after=e.retry_after, attempt=attempt)
                await asyncio.sleep(e.retry_after)
            except (TelegramNetworkError, TelegramServerError) as e:
                if attempt == self.max_send_attempts:
                    raise MessengerError(f"Telegram unreachable: {e}") from e
                log.warning("telegram.send_retry", error=str(e), attempt=attempt, delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            except TelegramAPIError as e:
                raise MessengerError(f"Telegram refused the message: {e.message}") from e
        raise MessengerError(f"Telegram still rate limited after {self.max_send_attempts} tries")

    # ---- input ------------------------------------------------------------------------

    async def poll(self, on_message: Callable[[Incoming], None], stop: asyncio.Event) -> None:
        """Long-poll until ``stop`` is set, passing each usable message to ``on_message``."""
        await self._retrying(lambda: self.api.delete_webhook(drop_pending_updates=False))
        offset: int | None = None
        backoff = 1.0
        while not stop.is_set():
            try:
                updates = await self._get_updates(offset, stop)
            except TelegramUnauthorizedError as e:
                raise ConfigError(
                    "Telegram rejected TELEGRAM_BOT_TOKEN: check the token from @BotFather."
                ) from e
            except (TelegramNetworkError, TelegramServerError, TelegramRetryAfter) as e:
                log.warning("telegram.poll_failed", error=str(e), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            for update in updates:
                offset = update.update_id + 1
                message = await self._incoming(update)
                if message is not None:
                    on_message(message)
        if offset is not None:  # confirm what was taken, so a restart does not re-read it
            await self.api.get_updates(offset=offset, timeout=0, limit=1)

    async def _get_updates(self, offset: int | None, stop: asyncio.Event) -> list[Update]:
        """One long poll, abandoned as soon as ``stop`` is set."""
        poll = asyncio.ensure_future(
            self.api.get_updates(
                offset=offset,
                timeout=self.poll_timeout,
                allowed_updates=ALLOWED_UPDATES,
                request_timeout=self.poll_timeout + 10,
            )
        )
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not poll.done():
            poll.cancel()
            return []
        return poll.result()

    async def _incoming(self, update: Update) -> Incoming | None:
        """The update as an ``Incoming`` message, or ``None`` when it is not one we answer."""
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            log.debug("telegram.update_skipped", update_id=update.update_id)
            return None
        text = message.text or message.caption or ""
        images = await self._photos(message)
        if not text and not images:
            log.debug("telegram.message_skipped", update_id=update.update_id)
            return None
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
            raw=update,
        )

    async def _photos(self, message: TgMessage) -> tuple[bytes, ...]:
        if not message.photo:
            return ()
        largest = message.photo[-1]
        try:
            data = await self.api.download(largest.file_id)
        except TelegramAPIError as e:
            log.warning("telegram.photo_download_failed", error=str(e))
            return ()
        return (data.read(),) if data is not None else ()


def split_text(text: str, limit: int = MAX_MESSAGE_LENGTH) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at paragraph or line ends."""
    parts: list[str] = []
    rest = text.strip() or "…"
    while len(rest) > limit:
        cut = _cut_point(rest, limit)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n")
    parts.append(rest)
    return [p for p in parts if p]


def _cut_point(text: str, limit: int) -> int:
    for separator in ("\n\n", "\n", " "):
        cut = text.rfind(separator, 0, limit)
        if cut > limit // 2:
            return cut
    return limit
