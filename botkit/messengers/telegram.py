"""The Telegram messenger on aiogram: long polling in; formatted, paced replies out."""

from __future__ import annotations

import asyncio
import html
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import structlog
from aiogram import Bot as AiogramBot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.methods import TelegramMethod
from aiogram.methods.base import Response, TelegramType
from aiogram.types import (
    BotCommand,
    BotCommandScopeChat,
    BufferedInputFile,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputRichMessage,
    MessageReactionUpdated,
    ReactionTypeEmoji,
    Update,
    User,
    WebAppInfo,
)
from aiogram.types import Message as TgMessage

from botkit import tracing
from botkit.errors import ConfigError, MessengerError
from botkit.messengers._send import JsonSender, request_outcome, without_token
from botkit.messengers.base import (
    Attachment,
    Button,
    ButtonPress,
    Checkout,
    Incoming,
    OutgoingFile,
    Reaction,
    Reply,
    ReplyContext,
    UpdateJournal,
)
from botkit.messengers.flood import FloodControl
from botkit.messengers.markdown import html_to_plain, markdown_to_html, render_chunks
from botkit.messengers.rich import RichState, draft_markdown, split_rich
from botkit.messengers.stars import TelegramStars, checkout_of, payment_of
from botkit.messengers.updates import RawGetUpdates, parse_update

if TYPE_CHECKING:
    from botkit.metrics import Metrics

__all__ = ["TelegramDraft", "TelegramMessenger"]

log = structlog.get_logger(__name__)

MAX_MESSAGE_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024
MAX_PRESS_NOTICE = 200  # answerCallbackQuery text
GENERAL_TOPIC = 1
MAX_TOPIC_NAME = 128
"""A forum's General topic: messages for it are sent without a ``message_thread_id``."""
DRAFT_REFRESH = 20.0
"""Seconds after which a draft is re-sent: Telegram drops one after about 30 s."""
DRAFT_TAIL = 3_000
"""Characters of a long answer's end a draft shows once the whole would not fit."""
DRAFTS_IN_FLIGHT = 16
"""``sendMessageDraft`` requests one messenger has open at once; further drafts wait their
turn (each then shows the newest text), so drafts never crowd out LLM calls and replies."""
FIRST_DRAFTS_IN_FLIGHT = 64
"""The same for a turn's first drafts ("Thinking…", then its first words): hundreds of turns
whose first words arrive in the same moment show them within a round trip or two, not one
after the other in the lane of the refreshes (p95 390 ms with 500 turns at once), which
still coalesce in theirs. Both lanes together stay under the Bot API session's 100
connections, so replies always find one."""
POLL_FIRST_BACKOFF = 1.0
POLL_MAX_BACKOFF = 30.0
ALLOWED_UPDATES = [
    "message",
    "stopped_message_generation",
    "callback_query",
    "pre_checkout_query",
    "message_reaction",
]
GROUP_CHATS = frozenset({"group", "supergroup"})
MAX_ALBUMS = 256
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
TakeRaw = Callable[[list[tuple[int, dict[str, Any]]]], Awaitable[int]]
"""Takes a batch of raw updates with their ids, in order; how many were taken (those after
them are left unconfirmed)."""
OnStop = Callable[[int, int], object]
"""Called with the chat id and the draft id when the user presses a draft's stop button."""
OnPress = Callable[[ButtonPress], object]
"""Called when a user presses an inline button under one of the bot's messages."""
OnCheckout = Callable[[Checkout], object]
"""Called when a user is about to pay one of the bot's invoices (answer within 10 s)."""
OnReaction = Callable[[Reaction], object]
"""Called when a user changes their reactions on a message."""

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
        inbox: UpdateJournal | None = None,
        answer_groups: str = "mention",
        draft_interval: float = 0.3,
        drafts_in_flight: int = DRAFTS_IN_FLIGHT,
        conflict_timeout: float = 60.0,
        paid_broadcast: bool = False,
        known_commands: frozenset[str] = frozenset(),
        download_timeout: int = 30,
        operators_chat: int | None = None,
        listen_in_groups: bool = False,
        rich_messages: str = "auto",
    ) -> None:
        server = TelegramAPIServer.from_base(api_base) if api_base else PRODUCTION
        session = _Session(api=server)
        self.api = AiogramBot(token, session=session)
        if tracing.tracer.enabled:
            session.middleware(_TracedRequests())
        self.sender = JsonSender(self.api, session)
        """The hot sends (messages, drafts, typing), posted as JSON past aiogram's models."""
        self.flood = flood or FloodControl()
        self.stars = TelegramStars(self.api, self.flood)
        """Invoices, checkouts and refunds in Telegram Stars."""
        self.poll_timeout = poll_timeout
        self.inbox = inbox
        self.answer_groups = answer_groups
        """``mention``: in groups, answer only when mentioned or replied to; ``all``: always."""
        self.draft_interval = draft_interval
        self._draft_lane = asyncio.Semaphore(drafts_in_flight)
        self._first_draft_lane = asyncio.Semaphore(FIRST_DRAFTS_IN_FLIGHT)
        self.conflict_timeout = conflict_timeout
        """How long another instance may hold the poll (409) before this one gives up."""
        self.paid_broadcast = paid_broadcast
        """Send ``allow_paid_broadcast`` (Telegram charges Stars for messages over 30/s)."""
        self.listen_in_groups = listen_in_groups
        """Pass on group voice notes that do not address the bot otherwise, to be heard (they
        are answered only if they say its name)."""
        self.known_commands = known_commands
        """Commands a bare ``/cmd`` in a group may mean (``/cmd@thisbot`` always counts)."""
        self.download_timeout = download_timeout
        """Seconds a file the user sent may take to download before the turn goes on without."""
        self.operators_chat = operators_chat
        """The operators' forum (BOTKIT_OPERATORS_CHAT): all its messages are read, unaddressed."""
        self.rich = RichState(rich_messages)
        """Whether texts go out as rich messages (BOTKIT_RICH_MESSAGES; off after a 404)."""
        self.me: User | None = None
        self._albums: dict[str, None] = {}
        """Recent albums (``media_group_id``) addressed to the bot in groups, oldest first."""
        self.polled_at: float | None = None
        """When (``time.monotonic()``) a ``getUpdates`` last answered; ``None`` before."""
        self.poll_failure: str | None = None
        """Why the last ``getUpdates`` failed, until one answers again."""

    def observe(self, metrics: Metrics) -> None:
        """Count every Bot API request, retry and flood wait in ``metrics``."""
        self.flood.metrics = metrics
        self.sender.metrics = metrics
        self.api.session.middleware(_RequestCounter(metrics))

    async def start(self) -> User:
        """Check the token and learn the bot's own name (network failures are retried)."""
        try:
            async with _errors_mapped("getMe"):
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

    async def send_text(
        self, chat_id: int, text: str, *, thread_id: int | None = None, reply_to: int | None = None
    ) -> None:
        """Send Markdown ``text`` as formatted messages, split where Telegram needs it.

        The first message replies to ``reply_to`` (if that message is gone, it is sent anyway);
        all of them go to the forum topic ``thread_id``.
        """
        await self._send_markdown(chat_id, text, thread_id, reply_to, None)

    async def _send_markdown(
        self,
        chat_id: int,
        text: str,
        thread_id: int | None,
        reply_to: int | None,
        keyboard: dict[str, Any] | None,
    ) -> int | None:
        """Send Markdown ``text``: as rich messages where the server takes them, each part
        that is refused going through the HTML path instead (once); ``keyboard`` under the
        last message, whose id is returned."""
        if not self.rich.active:
            return await self._send_html(chat_id, text, thread_id, reply_to, keyboard)
        parts = split_rich(text) or ["…"]
        sent: int | None = None
        for index, part in enumerate(parts):
            markup = keyboard if index == len(parts) - 1 else None
            delivered, sent = await self._send_rich(chat_id, part, thread_id, reply_to, markup)
            if not delivered:
                sent = await self._send_html(chat_id, part, thread_id, reply_to, markup)
            reply_to = None
        return sent

    async def _send_rich(
        self,
        chat_id: int,
        markdown: str,
        thread_id: int | None,
        reply_to: int | None,
        keyboard: dict[str, Any] | None,
    ) -> tuple[bool, int | None]:
        """One ``sendRichMessage``: whether it went, and the message's id. Not sent when the
        server or the chat will not take it (the caller sends it as HTML)."""
        if not self.rich.active:
            return False, None
        placement = self._placement(thread_id, reply_to)
        if keyboard is not None:
            placement["reply_markup"] = keyboard
        call = partial(
            self.sender.send_rich_message,
            chat_id=chat_id,
            rich_message={"markdown": markdown},
            **placement,
        )
        try:
            sent = await self.flood.send(chat_id, call)
        except MessengerError as e:
            if not self._rich_refused(e, "sendRichMessage", chat_id):
                raise
            return False, None
        return True, _message_id(sent)

    def _rich_refused(self, error: MessengerError, method: str, chat_id: int) -> bool:
        """Whether ``error`` means this rich message cannot go (404: no rich messages on
        this server until restart; 400: not this one), logged once; else it is raised."""
        cause = error.__cause__
        if isinstance(cause, TelegramNotFound):
            self.rich.server_lacks_rich(method, cause.message)
            return True
        if isinstance(cause, TelegramBadRequest) and not _is_chat_error(cause):
            error_text = cause.message
            log.warning("telegram.rich_refused", method=method, chat_id=chat_id, error=error_text)
            return True
        return False

    async def _send_html(
        self,
        chat_id: int,
        text: str,
        thread_id: int | None,
        reply_to: int | None,
        keyboard: dict[str, Any] | None,
    ) -> int | None:
        """Send Markdown ``text`` as HTML messages of Telegram's length; the last one's id."""
        chunks = render_chunks(text, MAX_MESSAGE_LENGTH) or [text.strip() or "…"]
        for chunk in chunks[:-1]:
            await self._send_chunk(chat_id, chunk, self._placement(thread_id, reply_to))
            reply_to = None
        placement = self._placement(thread_id, reply_to)
        if keyboard is not None:
            placement["reply_markup"] = keyboard
        return await self._send_chunk(chat_id, chunks[-1], placement)

    def _placement(self, thread_id: int | None, reply_to: int | None) -> dict[str, Any]:
        """The keyword arguments that put a message in its topic, as a reply, paid or not."""
        placement: dict[str, Any] = {}
        if thread_id is not None and thread_id != GENERAL_TOPIC:
            placement["message_thread_id"] = thread_id
        if reply_to is not None:
            placement["reply_parameters"] = {
                "message_id": reply_to,
                "allow_sending_without_reply": True,
            }
        if self.paid_broadcast:
            placement["allow_paid_broadcast"] = True
        return placement

    async def _send_chunk(self, chat_id: int, chunk: str, placement: dict[str, Any]) -> int | None:
        """Send one message's HTML; as plain text if Telegram cannot parse the HTML. Its id."""
        send = partial(self.sender.send_message, chat_id=chat_id, **placement)
        try:
            sent = await self.flood.send(chat_id, partial(send, text=chunk, parse_mode="HTML"))
        except MessengerError as e:
            if not _is_entity_error(e):
                raise
            log.warning("telegram.html_rejected", chat_id=chat_id, error=str(e.__cause__))
            sent = await self.flood.send(chat_id, partial(send, text=html_to_plain(chunk)))
        return _message_id(sent)

    async def send_reply(
        self,
        chat_id: int,
        reply: Reply,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> int | None:
        """Send ``reply``'s text as ``send_text`` does, its buttons under the last message
        (whose id is returned)."""
        keyboard = None
        if reply.buttons:
            keyboard = _keyboard(reply.buttons).model_dump(mode="json", exclude_none=True)
        return await self._send_markdown(chat_id, reply.text, thread_id, reply_to, keyboard)

    async def edit_reply(self, chat_id: int, message_id: int, reply: Reply) -> None:
        """Replace the text and buttons of the bot's message (the text cut to one message);
        as a rich message where the server takes them."""
        if self.rich.active and await self._edit_rich(chat_id, message_id, reply):
            return
        chunk = (render_chunks(reply.text, MAX_MESSAGE_LENGTH) or [reply.text.strip() or "…"])[0]
        call = partial(
            self.api.edit_message_text,
            chunk,
            chat_id=chat_id,
            message_id=message_id,
            parse_mode="HTML",
            reply_markup=_keyboard(reply.buttons) if reply.buttons else None,
        )
        async with _errors_mapped("editMessageText"):
            await self.flood.send(chat_id, call)

    async def _edit_rich(self, chat_id: int, message_id: int, reply: Reply) -> bool:
        """Edit the message to ``reply`` as rich content; ``False`` if that was refused."""
        part = (split_rich(reply.text) or ["…"])[0]
        call = partial(
            self.api.edit_message_text,
            chat_id=chat_id,
            message_id=message_id,
            rich_message=InputRichMessage(markdown=part),
            reply_markup=_keyboard(reply.buttons) if reply.buttons else None,
        )
        try:
            async with _errors_mapped("editMessageText"):
                await self.flood.send(chat_id, call)
        except MessengerError as e:
            if not self._rich_refused(e, "editMessageText", chat_id):
                raise
            return False
        return True

    async def set_reaction(self, chat_id: int, message_id: int, emoji: str | None) -> None:
        """Put the bot's ``emoji`` on a message (``None`` takes it away), paced with the
        chat's other sends; best effort: a refusal is logged, never raised."""
        reaction = [{"type": "emoji", "emoji": emoji}] if emoji else []
        call = partial(
            self.sender.set_message_reaction,
            chat_id=chat_id,
            message_id=message_id,
            reaction=reaction,
        )
        try:
            await self.flood.send(chat_id, call)
        except MessengerError as e:
            log.info("telegram.reaction_failed", chat_id=chat_id, error=str(e))

    async def answer_press(self, press_id: str, text: str | None = None) -> None:
        """Stop the button's spinner, showing ``text`` briefly if given (best effort)."""
        try:
            notice = text[:MAX_PRESS_NOTICE] if text else text
            await self.api.answer_callback_query(press_id, text=notice)
        except AiogramError as e:  # too old to answer, say: the press itself was handled
            log.debug("telegram.press_not_answered", error=_describe_error(e))

    async def send_typing(self, chat_id: int, *, thread_id: int | None = None) -> None:
        """Show "typing…" in the chat (best effort, never retried)."""
        topic = thread_id if thread_id != GENERAL_TOPIC else None
        async with _errors_mapped("sendChatAction"):
            await self.sender.send_chat_action(
                chat_id=chat_id, action="typing", message_thread_id=topic
            )

    async def send_file(
        self, chat_id: int, file: OutgoingFile, *, thread_id: int | None = None
    ) -> None:
        """Send a picture (``sendPhoto``), a voice note (``sendVoice``) or a file
        (``sendDocument``) with its caption.

        A picture Telegram refuses as a photo (too large, odd proportions) goes as a file.
        """
        placement = self._placement(thread_id, None)
        caption = file.caption[:MAX_CAPTION_LENGTH] or None
        upload = BufferedInputFile(file.data, filename=file.filename)
        if file.as_voice:  # OGG/Opus, played as a voice note
            voice = partial(
                self.api.send_voice,
                chat_id,
                upload,
                caption=caption,
                duration=file.duration,
                **placement,
            )
            await self.flood.send(chat_id, voice)
            return
        if file.as_photo:
            photo = partial(self.api.send_photo, chat_id, upload, caption=caption, **placement)
            try:
                await self.flood.send(chat_id, photo)
                return
            except MessengerError as e:
                if not isinstance(e.__cause__, TelegramBadRequest):
                    raise
                log.warning("telegram.photo_refused", chat_id=chat_id, error=str(e.__cause__))
        document = partial(self.api.send_document, chat_id, upload, caption=caption, **placement)
        await self.flood.send(chat_id, document)

    async def download(self, file_id: str) -> bytes | None:
        """The bytes of a file the user sent; ``None`` (and a log line) when that fails."""
        try:
            with tracing.tracer.span("download file", "client"):
                data = await self.api.download(file_id, timeout=self.download_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # aiohttp errors and timeouts too: the turn goes on without it
            log.warning("telegram.download_failed", error=_describe_error(e))
            return None
        return data.read() if data is not None else None

    async def is_chat_admin(self, chat_id: int, user_id: int) -> bool:
        """Whether ``user_id`` is an owner or administrator of ``chat_id`` (``False`` on errors)."""
        try:
            member = await self.flood.send(0, partial(self.api.get_chat_member, chat_id, user_id))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # unknown to aiogram or unreachable: not an admin, for now
            log.warning("telegram.chat_member_failed", chat_id=chat_id, error=_describe_error(e))
            return False
        return member.status in ("creator", "administrator")

    async def create_topic(self, chat_id: int, name: str) -> int:
        """Create a forum topic named ``name`` in ``chat_id``; its ``message_thread_id``."""
        call = partial(self.api.create_forum_topic, chat_id, name[:MAX_TOPIC_NAME])
        async with _errors_mapped("createForumTopic"):
            topic = await self.flood.send(chat_id, call)
        return topic.message_thread_id

    async def close_topic(self, chat_id: int, thread_id: int) -> None:
        """Close the forum topic ``thread_id`` of ``chat_id``."""
        async with _errors_mapped("closeForumTopic"):
            await self.flood.send(chat_id, partial(self.api.close_forum_topic, chat_id, thread_id))

    async def reopen_topic(self, chat_id: int, thread_id: int) -> None:
        """Reopen the closed forum topic ``thread_id`` of ``chat_id``."""
        call = partial(self.api.reopen_forum_topic, chat_id, thread_id)
        async with _errors_mapped("reopenForumTopic"):
            await self.flood.send(chat_id, call)

    async def copy_message(
        self, chat_id: int, from_chat_id: int, message_id: int, *, thread_id: int | None = None
    ) -> None:
        """Send a copy of message ``message_id`` of ``from_chat_id`` (text or media) to
        ``chat_id`` (in topic ``thread_id``), as the bot's own."""
        placement = self._placement(thread_id, None)
        call = partial(self.api.copy_message, chat_id, from_chat_id, message_id, **placement)
        async with _errors_mapped("copyMessage"):
            await self.flood.send(chat_id, call)

    def draft(self, message: Incoming) -> TelegramDraft | None:
        """A streamed draft for private chats; groups get the final message only."""
        if message.chat_type != "private":
            return None
        return TelegramDraft(
            self.sender,
            message.chat_id,
            interval=self.draft_interval,
            thread_id=message.thread_id,
            lane=self._draft_lane,
            first_lane=self._first_draft_lane,
            rich=self.rich,
        )

    async def sync_commands(
        self, commands: Sequence[tuple[str, str]], *, chat_id: int | None = None
    ) -> bool:
        """Set the bot's command menu (in one private chat only, with ``chat_id``), only if it
        differs (setMyCommands is rate limited)."""
        wanted = [(name, description) for name, description in commands]
        scope = BotCommandScopeChat(chat_id=chat_id) if chat_id is not None else None
        async with _errors_mapped("getMyCommands"):
            current = await self.flood.send(0, partial(self.api.get_my_commands, scope=scope))
        if [(c.command, c.description) for c in current] == wanted:
            return False
        menu = [BotCommand(command=n, description=d) for n, d in wanted]
        async with _errors_mapped("setMyCommands"):
            await self.flood.send(0, partial(self.api.set_my_commands, menu, scope=scope))
        return True

    # ---- input ------------------------------------------------------------------------

    async def poll(
        self,
        on_message: OnMessage,
        on_stop: OnStop,
        stop: asyncio.Event,
        *,
        on_press: OnPress | None = None,
        on_checkout: OnCheckout | None = None,
        on_reaction: OnReaction | None = None,
    ) -> None:
        """Long-poll until ``stop`` is set; accepted messages are journaled, then handed on.

        Nothing Telegram or the network answers ends polling but a rejected token (401) or
        another instance polling with the same token for ``conflict_timeout`` seconds (409):
        any other failure is logged and retried with backoff, and each update is read on its
        own, so one that cannot be parsed is journaled, confirmed and skipped.
        """
        if self.me is None:
            await self.start()
        await self.delete_webhook()
        await self._replay_inbox(on_message)
        offset: int | None = None
        failures = _PollFailures(self.conflict_timeout)
        while not stop.is_set():
            for update_id, raw in await self._poll_once(offset, stop, failures):
                offset = max(offset or 0, update_id + 1)
                handlers = _Handlers(on_message, on_stop, on_press, on_checkout, on_reaction)
                await self._take_safely(update_id, raw, handlers)
        await self._confirm(offset)  # what was journaled, so a restart does not re-read it

    async def poll_raw(self, take: TakeRaw, stop: asyncio.Event) -> None:
        """Long-poll until ``stop`` is set, handing each batch of raw updates to ``take``.

        Telegram is told an update was received only after ``take`` counted it taken; the
        rest of the batch waits, and comes back with the next poll. Failures are retried as
        in :meth:`poll`.
        """
        if self.me is None:
            await self.start()
        await self.delete_webhook()
        offset: int | None = None
        failures = _PollFailures(self.conflict_timeout)
        while not stop.is_set():
            updates = await self._poll_once(offset, stop, failures)
            taken = await take(updates) if updates else 0
            for update_id, _ in updates[:taken]:
                offset = max(offset or 0, update_id + 1)
        await self._confirm(offset)

    async def _confirm(self, offset: int | None) -> None:
        """Tell Telegram every update before ``offset`` was received (best effort, at exit)."""
        if offset is not None:
            with suppress(Exception):
                await self.api(RawGetUpdates(offset=offset, timeout=0, limit=1))

    async def _poll_once(
        self, offset: int | None, stop: asyncio.Event, failures: _PollFailures
    ) -> list[tuple[int, dict[str, Any]]]:
        """One ``getUpdates`` call's updates with their ids; a failure is recorded and waited
        out with backoff (it reads as no updates), an update without an id logged and left."""
        try:
            batch = await self._get_updates(offset, stop)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.poll_failure = _describe_error(e)
            await _sleep_unless(stop, failures.wait_after(e))
            return []
        failures.reset()
        self.polled_at, self.poll_failure = time.monotonic(), None
        updates = []
        for raw in batch:
            update_id = _update_id(raw)
            if update_id is None:
                log.warning("telegram.update_without_id", update=_preview(raw))
            else:
                updates.append((update_id, raw))
        return updates

    async def delete_webhook(self) -> None:
        """Switch Telegram back to ``getUpdates`` (pending updates are kept)."""
        await self.flood.send(0, partial(self.api.delete_webhook, drop_pending_updates=False))

    async def set_webhook(self, url: str, secret: str) -> None:
        """Have Telegram POST updates to ``url`` with ``secret`` in each request's header."""
        call = partial(
            self.api.set_webhook, url, secret_token=secret, allowed_updates=ALLOWED_UPDATES
        )
        async with _errors_mapped("setWebhook"):
            await self.flood.send(0, call)

    async def read_update(
        self, raw: dict[str, Any]
    ) -> Incoming | ButtonPress | Checkout | Reaction | Update | str | None:
        """One raw update read: the message for a turn; a button press; a checkout; a
        reaction; the ``Update`` when it is something else (a stop press); why it could not be
        read; ``None`` when it is not for this bot."""
        parsed = parse_update(raw, self.api)
        if parsed.update is None:
            return parsed.error or "unparseable"
        if parsed.dropped:
            update_id = raw.get("update_id")
            log.info("telegram.update_degraded", update_id=update_id, dropped=parsed.dropped)
        if parsed.update.stopped_message_generation is not None:
            return parsed.update
        if parsed.update.callback_query is not None:
            return _press(parsed.update.callback_query)
        if parsed.update.pre_checkout_query is not None:
            return checkout_of(parsed.update.pre_checkout_query)
        if parsed.update.message_reaction is not None:
            return _reaction(parsed.update.message_reaction)
        return await self._incoming(parsed.update)

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

    async def _take_safely(self, update_id: int, raw: dict[str, Any], handlers: _Handlers) -> None:
        """Take one raw update; whatever goes wrong with it, the others are still taken."""
        try:
            await self._take(update_id, raw, handlers)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("telegram.update_failed", update_id=update_id)
            self._reject(update_id, raw, f"{type(e).__name__}: {e}")

    async def _take(self, update_id: int, raw: dict[str, Any], handlers: _Handlers) -> None:
        on_message, on_stop, on_press, on_checkout = handlers[:4]
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
            stopped = update.stopped_message_generation
            on_stop(stopped.chat.id, stopped.draft_id)
            return
        if update.callback_query is not None:
            press = _press(update.callback_query)
            if press is not None and on_press is not None:
                on_press(press)
            return
        if update.pre_checkout_query is not None:
            if on_checkout is not None:
                on_checkout(checkout_of(update.pre_checkout_query))
            return
        if update.message_reaction is not None:
            reaction = _reaction(update.message_reaction)
            if reaction is not None and handlers.on_reaction is not None:
                handlers.on_reaction(reaction)
            return
        message = await self._incoming(update)
        if message is None:
            return
        if self.inbox is not None:
            self.inbox.accept(update_id, raw)
        on_message(message)

    def _reject(self, update_id: int, raw: dict[str, Any], error: str) -> None:
        if self.inbox is None:
            return
        try:
            self.inbox.reject(update_id, raw, error)
        except Exception:  # the journal is for the operator: polling goes on without it
            log.exception("telegram.reject_not_journaled", update_id=update_id)

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
        listen_for: tuple[str, ...] = ()
        if (
            message.chat.type in GROUP_CHATS
            and message.chat.id != self.operators_chat
            and message.successful_payment is None
        ):
            addressed = self._addressed_text(message, text)
            if addressed is None:
                listen_for = self._names_to_hear(message)
                if not listen_for:
                    return None
            text = addressed if addressed is not None else text
            self._remember_album(message)
        return Incoming(
            received_at=time.monotonic(),
            update_id=update.update_id,
            user_id=message.from_user.id,
            chat_id=message.chat.id,
            text=text,
            date=message.date if message.date.tzinfo else message.date.replace(tzinfo=UTC),
            chat_type=message.chat.type,
            username=message.from_user.username,
            first_name=message.from_user.first_name,
            kind=_kind(message),
            raw=update,
            message_id=message.message_id,
            thread_id=message.message_thread_id if message.is_topic_message else None,
            chat_title=message.chat.title,
            reply_to=self._reply_context(message),
            quote=message.quote.text if message.quote else None,
            forwarded_from=_origin(message.forward_origin) if message.forward_origin else None,
            photo_ids=(message.photo[-1].file_id,) if message.photo else (),
            attachments=_attachments(message),
            media_group_id=message.media_group_id,
            payment=payment_of(paid) if (paid := message.successful_payment) else None,
            listen_for=listen_for,
        )

    def _names_to_hear(self, message: TgMessage) -> tuple[str, ...]:
        """For a group voice or video note that did not address the bot: the names it must say
        (its username, spelt or spoken, and its name); else nothing."""
        if not self.listen_in_groups or self.me is None:
            return ()
        if message.voice is None and message.video_note is None:
            return ()
        username = self.me.username or ""
        names = (username, username.replace("_", " "), self.me.first_name)
        return tuple(dict.fromkeys(name for name in names if name))

    def _addressed_text(self, message: TgMessage, text: str) -> str | None:
        """In a group: the text without the mention if the bot was addressed, else ``None``.

        Addressed means: an entity mentions the bot's username exactly or ``text_mention``s
        its id, the message replies to the bot, or it is a command for this bot
        (``/cmd@thisbot``, or a bare ``/cmd`` this bot knows).
        """
        if self.me is None:
            return text
        if message.media_group_id is not None and message.media_group_id in self._albums:
            return text  # a later part of an album whose first part addressed the bot
        username = (self.me.username or "").lower()
        for entity in message.entities or message.caption_entities or []:
            word = entity.extract_from(text)
            if entity.type == "mention" and word[1:].lower() == username:
                return _without(text, word)
            if entity.type == "text_mention" and entity.user and entity.user.id == self.me.id:
                return text
            if entity.type == "bot_command" and entity.offset == 0:
                return self._command_text(text, word, username)
        replied = message.reply_to_message
        if replied and replied.from_user and replied.from_user.id == self.me.id:
            return text
        return text if self.answer_groups == "all" else None

    def _remember_album(self, message: TgMessage) -> None:
        """An album that addressed the bot: its other parts (without a caption) count too."""
        if message.media_group_id is None:
            return
        self._albums[message.media_group_id] = None
        while len(self._albums) > MAX_ALBUMS:
            del self._albums[next(iter(self._albums))]

    def _command_text(self, text: str, command: str, username: str) -> str | None:
        """A group command: kept if it names this bot, or names none and this bot knows it."""
        name, _, target = command[1:].partition("@")
        if target:
            return text.replace(command, f"/{name}", 1) if target.lower() == username else None
        return text if name.lower() in self.known_commands else None

    def _reply_context(self, message: TgMessage) -> ReplyContext | None:
        """What the model is told about the message this one replies to."""
        replied = message.reply_to_message
        if replied is None or (message.is_topic_message and replied.forum_topic_created):
            return None  # in a topic, every message "replies" to the topic's first message
        author = replied.from_user
        from_bot = author is not None and self.me is not None and author.id == self.me.id
        name = (author.first_name or author.username or str(author.id)) if author else "someone"
        return ReplyContext(replied.text or replied.caption or "", name, from_bot)


def _keyboard(rows: Sequence[Sequence[Button]]) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(inline_keyboard=[[_button(b) for b in row] for row in rows])


def _button(button: Button) -> InlineKeyboardButton:
    if button.web_app is not None:
        return InlineKeyboardButton(text=button.text, web_app=WebAppInfo(url=button.web_app))
    return InlineKeyboardButton(text=button.text, callback_data=button.data)


class _Handlers(NamedTuple):
    """Where ``poll`` hands each kind of update."""

    on_message: OnMessage
    on_stop: OnStop
    on_press: OnPress | None
    on_checkout: OnCheckout | None
    on_reaction: OnReaction | None


def _reaction(update: MessageReactionUpdated) -> Reaction | None:
    """A user's reactions on a message now; ``None`` for an anonymous admin's."""
    if update.user is None or update.user.is_bot:
        return None
    emoji = tuple(
        item.emoji if isinstance(item, ReactionTypeEmoji) else f"custom:{_custom_id(item)}"
        for item in update.new_reaction
    )
    return Reaction(
        user_id=update.user.id,
        chat_id=update.chat.id,
        message_id=update.message_id,
        emoji=emoji,
        chat_type=update.chat.type,
    )


def _custom_id(item: Any) -> str:
    return str(getattr(item, "custom_emoji_id", None) or getattr(item, "type", "other"))


def _press(query: CallbackQuery) -> ButtonPress | None:
    """A button press under one of the bot's messages; ``None`` for other callbacks."""
    message = query.message
    if message is None or query.data is None:
        return None
    thread = getattr(message, "message_thread_id", None)
    return ButtonPress(
        press_id=query.id,
        user_id=query.from_user.id,
        chat_id=message.chat.id,
        message_id=message.message_id,
        data=query.data,
        thread_id=thread if isinstance(thread, int) else None,
        chat_type=message.chat.type,
        first_name=query.from_user.first_name,
    )


def _without(text: str, word: str) -> str:
    """``text`` with the first ``word`` taken out, spaces tidied."""
    start = text.find(word)
    return " ".join((text[:start] + text[start + len(word) :]).split()) if start >= 0 else text


class _Session(AiohttpSession):
    """aiogram's aiohttp session, keeping each ``Response[T]`` model it parses answers with.

    aiogram builds ``Response[method.__returning__]`` for every answer; pydantic caches such
    generic models only weakly, so under load the garbage collector drops them and each is
    rebuilt (milliseconds of schema work) again and again. Holding them costs a few models.
    """

    _kept: ClassVar[dict[Any, Any]] = {}

    def check_response(
        self,
        bot: AiogramBot,
        method: TelegramMethod[TelegramType],
        status_code: int,
        content: str,
    ) -> Response[TelegramType]:
        """aiogram's check, with the response model of ``method`` kept alive."""
        returning = method.__returning__
        if returning not in self._kept:
            self._kept[returning] = Response[returning]  # type: ignore[valid-type]
        return super().check_response(bot, method, status_code, content)

    async def make_request(
        self,
        bot: AiogramBot,
        method: TelegramMethod[TelegramType],
        timeout: int | None = None,  # noqa: ASYNC109 (aiogram's signature)
    ) -> TelegramType:
        """aiogram's request; a network error never quotes the bot token."""
        try:
            return await super().make_request(bot, method, timeout)
        except TelegramNetworkError as e:
            if (masked := without_token(e, bot.token)) is not None:
                raise masked from None  # the cause quotes the token too
            raise


class _RequestCounter(BaseRequestMiddleware):
    """Counts each Bot API request by method and outcome (an aiogram request middleware)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: AiogramBot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        name = method.__api_method__
        try:
            response = await make_request(bot, method)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.metrics.telegram_request(name, request_outcome(e))
            raise
        self.metrics.telegram_request(name, "ok")
        return response


class _TracedRequests(BaseRequestMiddleware):
    """Each Bot API request as a client span named by its method (an aiogram middleware)."""

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: AiogramBot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        with tracing.tracer.telegram(method.__api_method__):
            return await make_request(bot, method)


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


@asynccontextmanager
async def _errors_mapped(method: str) -> AsyncIterator[None]:
    """aiogram errors FloodControl leaves raw (direct calls, garbled answers) as MessengerError."""
    try:
        yield
    except AiogramError as e:
        raise MessengerError(f"Telegram {method} failed: {_describe_error(e)}") from e


def _origin(origin: Any) -> str:
    """Who a forwarded message came from, as Telegram tells it (a user, a hidden user's name,
    a chat or a channel)."""
    user = getattr(origin, "sender_user", None)
    if user is not None:
        return " ".join(p for p in (user.first_name, user.last_name) if p) or "a user"
    chat = getattr(origin, "sender_chat", None) or getattr(origin, "chat", None)
    if chat is not None:
        return str(chat.title or "a chat")
    return str(getattr(origin, "sender_user_name", None) or "someone")


def _describe_error(error: Exception) -> str:
    """A one-line description that never holds a URL (Telegram's carry the bot token)."""
    if isinstance(error, TelegramAPIError):
        return f"{type(error).__name__}: {error.message}"
    return type(error).__name__


class TelegramDraft:
    """A reply streamed into Telegram's drafts, at most one update per interval.

    ``start`` shows a "Thinking…" draft with a stop button at once, so a turn that only calls
    tools can be stopped too; the draft is re-sent before Telegram lets it expire (~30 s).
    Drafts of one messenger share a ``lane`` of a few requests at once: under load a draft
    waits its turn and then shows the newest text, so updates coalesce instead of queueing.
    A draft's first sends (its placeholder, its first text) go by a wider ``first_lane``.

    With ``rich`` active the text goes as ``sendRichMessageDraft`` Markdown (Bot API 10.1)
    and what runs meanwhile as a thinking block (``<tg-thinking>``, drafts only) with how long
    it has run; a server or a draft refusing that gets today's HTML draft instead.
    """

    def __init__(
        self,
        api: JsonSender,
        chat_id: int,
        *,
        interval: float = 0.3,
        thread_id: int | None = None,
        refresh: float = DRAFT_REFRESH,
        lane: asyncio.Semaphore | None = None,
        rich: RichState | None = None,
        first_lane: asyncio.Semaphore | None = None,
    ) -> None:
        self.api = api
        self.lane = lane or asyncio.Semaphore(1)
        self.first_lane = first_lane or self.lane
        """The lane of the draft's first sends: the placeholder, and the first with text."""
        self.chat_id = chat_id
        self.draft_id = next(_draft_ids)
        self.interval = interval
        self.thread_id = thread_id if thread_id != GENERAL_TOPIC else None
        self.refresh = refresh
        self.rich = rich
        self.text = ""
        self.note: str | None = None
        """What the bot is doing while tools run, shown in italics (a thinking block in a
        rich draft) under the text."""
        self._note_since = 0.0
        self._shown = ""
        self._last_sent = 0.0
        """When a draft last went out (the placeholder and re-sends included)."""
        self._text_sent_at = 0.0
        """When a draft showing text last went out: the interval counts from here, so the
        first text follows "Thinking…" at once."""
        self._sender: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._sending = False
        self._finished = False

    async def start(self) -> None:
        """Show the empty draft ("Thinking…", with the stop button) and keep it alive.

        It is sent alongside the LLM call, not before it: waiting for its round trip held
        back every answer (by seconds when hundreds of users write at once). Text streamed in
        meanwhile is shown once it has landed.
        """
        self._last_sent = time.monotonic()
        self._sender = asyncio.create_task(self._placeholder())
        self._keeper = asyncio.create_task(self._keep_alive())

    async def _placeholder(self) -> None:
        async with self.first_lane:
            if self._finished:
                return
            await self._send(self._view())  # "" (Thinking…) unless text came meanwhile
        if (self.text or self.note) and not self._finished:
            await self._show_soon()

    async def update(self, delta: str) -> None:
        """Add ``delta``; the draft is refreshed now or at the end of the interval."""
        self.text += delta
        self.note = None
        self._refresh()

    async def status(self, note: str | None) -> None:
        """Show ``note`` under the text until more text streams in (refreshed as text is)."""
        if note != self.note:
            self._note_since = time.monotonic()
        self.note = note
        self._refresh()

    def _refresh(self) -> None:
        if self._finished or (self._sender is not None and not self._sender.done()):
            return
        self._sender = asyncio.create_task(self._show_soon())

    @property
    def _rich_active(self) -> bool:
        return self.rich is not None and self.rich.active

    def _view(self) -> str:
        """The draft as shown: a rich draft's field and content (``markdown\0…``,
        ``html\0…``), or HTML; "" for the placeholder."""
        if not self._rich_active or not (self.text.strip() or self.note):
            return self._html()
        if not self.note:
            return f"markdown{_FIELD}{draft_markdown(self.text)}"
        shown = markdown_to_html(draft_markdown(self.text)) if self.text.strip() else ""
        thinking = f"<tg-thinking>{html.escape(self._timed_note())}</tg-thinking>"
        return f"html{_FIELD}{shown}\n{thinking}" if shown else f"html{_FIELD}{thinking}"

    def _timed_note(self) -> str:
        """The note with how long it has been showing (what runs, and for how long)."""
        seconds = int(time.monotonic() - self._note_since)
        note = self.note or ""
        return f"{note} · {seconds} s" if seconds >= NOTE_SECONDS_FROM else note

    def _html(self) -> str:
        """The draft as HTML: the text, then the status note."""
        text = draft_html(self.text)
        if not self.note:
            return text
        note = f"<i>{html.escape(self.note)}</i>"
        return f"{text}\n\n{note}" if text else note

    async def finish(self) -> None:
        """Send no more updates; wait for one in flight, so none can land after the reply."""
        self._finished = True
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        if self._sender is None or self._sender.done():
            return
        if not self._sending:
            self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)

    async def _show_soon(self) -> None:
        delay = self._text_sent_at + self.interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        async with self.lane if self._shown else self.first_lane:  # nothing shown yet: first
            if self._finished:
                return
            shown = self._view()  # rendered once it can go: the newest text
            if shown and shown != self._shown:
                await self._send(shown)

    async def _keep_alive(self) -> None:
        """Re-send what is shown before it expires, however long a tool call takes; in a rich
        draft, a running tool's time every few seconds."""
        while not self._finished:
            wake = self._last_sent + self.refresh - time.monotonic()
            if self._rich_active:  # a note set meanwhile shows its time within a tick
                wake = min(wake, NOTE_TICK)
            await asyncio.sleep(max(wake, 0.05))
            if self._sending or self._finished:
                continue
            stale = time.monotonic() - self._last_sent >= self.refresh
            ticking = bool(self.note) and self._rich_active and self._view() != self._shown
            if stale or ticking:
                async with self.lane:
                    if not self._finished:
                        await self._send(self._view() if ticking else self._shown)

    async def _send(self, view: str) -> None:
        self._sending = True
        self._last_sent = time.monotonic()
        if view:
            self._text_sent_at = self._last_sent
        try:
            if _FIELD in view and not await self._send_rich(view):
                view = self._html()  # refused: this update as today's HTML draft
            if _FIELD not in view:
                await self._send_html(view)
            self._shown = view
        except AiogramError as e:  # a draft is a courtesy (garbled answers too): the final
            # message still comes
            log.debug("telegram.draft_failed", chat_id=self.chat_id, error=_describe_error(e))
        finally:
            self._sending = False

    async def _send_html(self, shown: str) -> None:
        await self.api.send_message_draft(
            chat_id=self.chat_id,
            draft_id=self.draft_id,
            text=shown,
            parse_mode="HTML",
            message_thread_id=self.thread_id,
            can_stop=True,
            keep_on_stop=True,
        )

    async def _send_rich(self, view: str) -> bool:
        """One ``sendRichMessageDraft``; ``False`` when the server or the draft refused it."""
        field, _, content = view.partition(_FIELD)
        try:
            await self.api.send_rich_message_draft(
                chat_id=self.chat_id,
                draft_id=self.draft_id,
                rich_message={field: content},
                message_thread_id=self.thread_id,
                can_stop=True,
                keep_on_stop=True,
            )
        except TelegramNotFound as e:
            if self.rich is not None:
                self.rich.server_lacks_rich("sendRichMessageDraft", e.message)
            return False
        except TelegramBadRequest as e:
            log.info("telegram.rich_draft_refused", chat_id=self.chat_id, error=e.message)
            return False
        return True


_FIELD = "\0"
"""Between a rich draft's field name and its content in a draft's view."""
NOTE_TICK = 3.0
"""Seconds between refreshes of a rich draft's thinking block while a tool runs."""
NOTE_SECONDS_FROM = 2
"""A thinking block says how long it has run from this many seconds on."""


def draft_html(text: str) -> str:
    """A growing answer as draft HTML: finished lines formatted, the last line plain.

    Formatting only the finished lines keeps half-typed markup (an unclosed ``**``) from
    showing up and then vanishing, the flicker users of other bots complain about. An answer
    longer than a message shows its tail.
    """
    rendered = _draft_html(text)
    while _too_long(rendered) and len(text) > DRAFT_TAIL:
        text = "…\n" + text[-DRAFT_TAIL:].split("\n", 1)[-1]
        rendered = _draft_html(text)
    return "" if _too_long(rendered) else rendered


def _too_long(rendered: str) -> bool:
    """Whether the visible text of ``rendered`` is over a message's length (tags and entities
    only shorten it, so short HTML needs no parsing)."""
    return len(rendered) > MAX_MESSAGE_LENGTH and len(html_to_plain(rendered)) > MAX_MESSAGE_LENGTH


def _draft_html(text: str) -> str:
    cut = text.rfind("\n")
    head, tail = (text[:cut], text[cut + 1 :]) if cut >= 0 else ("", text)
    parts = [markdown_to_html(head) if head.strip() else ""]
    parts.append(html.escape(tail.translate(_MARKUP)).strip())
    return "\n".join(p for p in parts if p)


_MARKUP = str.maketrans("", "", "*_`~#>")


def _kind(message: TgMessage) -> str:
    if message.photo:
        return "photo"
    for kind in OTHER_KINDS:
        if getattr(message, kind, None) is not None:
            return kind
    return "text" if message.text else "other"


def _attachments(message: TgMessage) -> tuple[Attachment, ...]:
    """The document, voice note, audio file or video note a message carries, as still to be
    fetched (a video note has no MIME type: Telegram records them as MPEG-4)."""
    for kind in ("document", "voice", "audio", "video_note"):
        item = getattr(message, kind, None)
        if item is not None:
            name = getattr(item, "file_name", None)
            mime = getattr(item, "mime_type", None) or (
                "video/mp4" if kind == "video_note" else None
            )
            duration = getattr(item, "duration", None)
            return (Attachment(item.file_id, kind, name, mime, item.file_size, duration),)
    return ()


def _message_id(sent: Any) -> int | None:
    """The id of a message sent: from the raw JSON answer, or from aiogram's model."""
    found = sent.get("message_id") if isinstance(sent, dict) else None
    return found if isinstance(found, int) else getattr(sent, "message_id", None)


def _is_chat_error(error: TelegramBadRequest) -> bool:
    """A 400 about the chat or topic, not the content: HTML would be refused as well."""
    text = error.message.lower()
    return "chat not found" in text or "thread not found" in text or "topic_closed" in text


def _is_entity_error(error: MessengerError) -> bool:
    cause = error.__cause__
    return isinstance(cause, TelegramBadRequest) and "can't parse entities" in cause.message
