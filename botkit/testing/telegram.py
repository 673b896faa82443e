"""A local fake of the Telegram Bot API that the real aiogram client can talk to.

Start it, point ``aiogram.Bot`` at it and drive your bot like a user would::

    async with FakeTelegramServer() as tg:
        session = AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url))
        bot = Bot(tg.token, session=session)
        tg.send_text(42, "/start")
        ...  # run your dispatcher
        [reply] = await tg.wait_for_messages(42)

It speaks the wire protocol aiogram uses (``POST {base}/bot{token}/{method}`` with
multipart form data, non-string values JSON-encoded; answers ``{"ok": true, "result": ...}``
or ``{"ok": false, "error_code": ..., "description": ...}``) so errors surface as aiogram's
real exceptions (``TelegramRetryAfter``, ``TelegramBadRequest``, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import random
import re
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from html.parser import HTMLParser
from typing import Any, ClassVar

from aiohttp import web

from botkit.testing._loopback import LoopbackServer, serve_on_loopback
from botkit.testing._rich import RichRefusal, rich_text

__all__ = [
    "MAX_MESSAGE_LENGTH",
    "TINY_PNG",
    "FakeTelegramServer",
    "ForumTopic",
    "RecordedRequest",
    "SentFile",
    "SentMessage",
    "UploadedFile",
    "parse_html",
]

MAX_MESSAGE_LENGTH = 4096
_RICH_METHODS = frozenset({"sendrichmessage", "sendrichmessagedraft"})
_REACTION_EMOJI = frozenset(
    "👍👎❤🔥🥰👏😁🤔🤯😱🤬😢🎉🤩🤮💩🙏👌🕊🤡🥱🥴😍🐳🌚🌭💯🤣⚡🍌🏆💔🤨😐🍓🍾💋🖕😈"
    "😴😭🤓👻👀🎃🙈😇😨🤝✍🤗🫡🎅🎄☃💅🤪🗿🆒💘🙉🦄😘💊🙊😎👾🤷😡"
) | {"❤️", "👨‍💻", "🤷‍♂️", "🤷‍♀️"}
"""Emoji a bot may react with (Telegram's standard reactions; ``ReactionTypeEmoji``)."""
_STALL = 0
"""A download fault: no answer at all."""
"""Longest text (after entity parsing) ``sendMessage`` accepts, like the real API."""

# Parameters whose values are plain strings on the wire and must never be JSON-decoded
# (a user may well send the text "123" or "true").
_STRING_PARAMS = frozenset(
    {
        "action",
        "business_connection_id",
        "callback_query_id",
        "caption",
        "description",
        "emoji",
        "file_id",
        "inline_message_id",
        "language_code",
        "message_effect_id",
        "name",
        "parse_mode",
        "query",
        "secret_token",
        "short_description",
        "text",
        "title",
        "url",
    }
)

_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
}

_ADMIN_RIGHTS = {
    "can_be_edited": False,
    "is_anonymous": False,
    "can_manage_chat": True,
    "can_delete_messages": True,
    "can_manage_video_chats": True,
    "can_restrict_members": True,
    "can_promote_members": False,
    "can_change_info": True,
    "can_invite_users": True,
    "can_post_stories": False,
    "can_edit_stories": False,
    "can_delete_stories": False,
    "can_send_welcome_messages": False,
}

_COMMAND_RE = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]+)?")
_BOT_COMMAND_NAME_RE = re.compile(r"^[a-z0-9_]{1,32}$")


_MENTION_RE = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{4,32}\b")


def _text_entities(text: str) -> list[dict[str, Any]]:
    """The ``bot_command`` and ``mention`` entities Telegram would attach to ``text``."""
    entities: list[dict[str, Any]] = []
    command = _COMMAND_RE.match(text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": _utf16_len(command[0])})
    for mention in _MENTION_RE.finditer(text):
        if command and mention.start() < command.end():
            continue
        offset = _utf16_len(text[: mention.start()])
        entities.append({"type": "mention", "offset": offset, "length": _utf16_len(mention[0])})
    return entities


def _make_png() -> bytes:
    """Build a valid 1x1 red RGB PNG."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


TINY_PNG = _make_png()
"""Bytes of a valid 1x1 PNG, served for photos injected with ``send_photo``."""


@dataclass(frozen=True)
class RecordedRequest:
    """One Bot API call the fake received (``error_code`` is set if it was answered an error)."""

    method: str
    params: dict[str, Any]
    at: float
    error_code: int | None = None
    description: str | None = None


@dataclass(frozen=True)
class SentMessage:
    """One message the bot sent (a ``sendMessage`` or ``editMessageText`` result).

    ``text`` is the text exactly as the bot passed it (HTML tags included); ``plain_text``
    is what the user sees after entity parsing.
    """

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    params: dict[str, Any]
    plain_text: str = ""
    entities: tuple[dict[str, Any], ...] = ()
    thread_id: int | None = None
    """The forum topic it went to (``message_thread_id``), if any."""
    rich: dict[str, Any] | None = None
    """The ``rich_message`` it was sent with (``sendRichMessage``); ``None`` for plain text."""


@dataclass(frozen=True)
class UploadedFile:
    """A file part of a multipart request (``sendPhoto``, ``sendDocument``…)."""

    data: bytes
    filename: str | None
    content_type: str | None


@dataclass(frozen=True)
class SentFile:
    """A picture or file the bot sent (``sendPhoto`` or ``sendDocument``)."""

    chat_id: int
    message_id: int
    method: str
    """``sendPhoto``, ``sendDocument`` or ``copyMessage`` (a copied picture or file)."""
    data: bytes
    filename: str | None
    caption: str | None
    params: dict[str, Any]
    thread_id: int | None = None
    """The forum topic it went to (``message_thread_id``), if any."""


@dataclass
class ForumTopic:
    """A topic of a forum supergroup, made by the bot with ``createForumTopic``."""

    chat_id: int
    thread_id: int
    """Its ``message_thread_id``."""
    name: str
    closed: bool = False


class _ApiError(Exception):
    """An error answer of the Bot API."""

    def __init__(
        self,
        error_code: int,
        description: str,
        retry_after: int | None = None,
        raw_body: str | None = None,
    ) -> None:
        super().__init__(description)
        self.error_code = error_code
        self.description = description
        self.retry_after = retry_after
        self.raw_body = raw_body


@dataclass
class _Fault:
    error_code: int
    description: str
    retry_after: int | None
    times: int
    raw_body: str | None = None


@dataclass
class _StoredMessage:
    message: dict[str, Any]
    from_bot: bool
    sent: SentMessage | None = None


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class _TelegramHTMLParser(HTMLParser):
    """Parse Telegram-flavoured HTML into plain text and message entities."""

    _SIMPLE: ClassVar[dict[str, str]] = {
        "b": "bold",
        "strong": "bold",
        "i": "italic",
        "em": "italic",
        "u": "underline",
        "ins": "underline",
        "s": "strikethrough",
        "strike": "strikethrough",
        "del": "strikethrough",
        "tg-spoiler": "spoiler",
        "code": "code",
        "pre": "pre",
    }
    _ALLOWED = frozenset({*_SIMPLE, "span", "a", "tg-emoji", "blockquote"})

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=False)
        self._source = source
        self._line_starts = [0]
        for match in re.finditer("\n", source):
            self._line_starts.append(match.end())
        self._parts: list[str] = []
        self._offset = 0  # in UTF-16 code units
        self._stack: list[tuple[str, dict[str, Any], int]] = []
        self.entities: list[dict[str, Any]] = []

    @property
    def plain_text(self) -> str:
        """The text with tags removed and HTML entities resolved."""
        return "".join(self._parts)

    def _byte_offset(self) -> int:
        line, column = self.getpos()
        index = self._line_starts[line - 1] + column
        return len(self._source[:index].encode("utf-8"))

    def _fail(self, reason: str) -> None:
        raise _ApiError(400, f"Bad Request: can't parse entities: {reason}")

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._offset += _utf16_len(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open an entity for a supported tag; reject anything else."""
        attributes = {name: value for name, value in attrs}
        if tag not in self._ALLOWED or (tag == "span" and attributes.get("class") != "tg-spoiler"):
            self._fail(f'Unsupported start tag "{tag}" at byte offset {self._byte_offset()}')
        entity: dict[str, Any]
        if tag == "span":
            entity = {"type": "spoiler"}
        elif tag == "a":
            href = attributes.get("href")
            entity = {"type": "text_link", "url": href} if href else {}
        elif tag == "tg-emoji":
            emoji_id = attributes.get("emoji-id")
            if not emoji_id:
                self._fail(f'Unsupported start tag "{tag}" at byte offset {self._byte_offset()}')
            entity = {"type": "custom_emoji", "custom_emoji_id": emoji_id}
        elif tag == "blockquote":
            expandable = "expandable" in attributes
            entity = {"type": "expandable_blockquote" if expandable else "blockquote"}
        else:
            entity = {"type": self._SIMPLE[tag]}
        if tag == "code" and self._stack and self._stack[-1][0] == "pre":
            language = (attributes.get("class") or "").removeprefix("language-")
            if language:
                self._stack[-1][1]["language"] = language
            entity = {}  # <pre><code> is a single pre entity
        self._stack.append((tag, entity, self._offset))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Self-closing tags such as ``<br/>`` are not supported by Telegram."""
        self._fail(f'Unsupported start tag "{tag}" at byte offset {self._byte_offset()}')

    def handle_endtag(self, tag: str) -> None:
        """Close the innermost open tag, which must be ``tag``."""
        if not self._stack:
            self._fail(f"Unexpected end tag at byte offset {self._byte_offset()}")
        open_tag, entity, start = self._stack.pop()
        if open_tag != tag:
            self._fail(
                f"Unmatched end tag at byte offset {self._byte_offset()}, "
                f'expected "</{open_tag}>", found "</{tag}>"'
            )
        length = self._offset - start
        if entity and length > 0:
            self.entities.append({**entity, "offset": start, "length": length})

    def handle_data(self, data: str) -> None:
        """Keep text; a bare ``<`` is an error like on the real API."""
        if "<" in data:
            position = self._byte_offset() + len(data[: data.index("<")].encode("utf-8"))
            self._fail(f'Unsupported start tag "" at byte offset {position}')
        self._append(data)

    def handle_entityref(self, name: str) -> None:
        """Resolve ``&amp;`` and friends."""
        self._append(html.unescape(f"&{name};"))

    def handle_charref(self, name: str) -> None:
        """Resolve ``&#39;`` / ``&#x27;``."""
        self._append(html.unescape(f"&#{name};"))

    def handle_comment(self, data: str) -> None:
        """Comments are not Telegram HTML."""
        self._fail(f'Unsupported start tag "!--" at byte offset {self._byte_offset()}')

    def handle_decl(self, decl: str) -> None:
        """Declarations are not Telegram HTML."""
        self._fail(f'Unsupported start tag "!" at byte offset {self._byte_offset()}')

    def finish(self) -> None:
        """Flush the parser and check that every tag was closed."""
        self.close()
        if self._stack:
            self._fail(f'Can\'t find end tag corresponding to start tag "{self._stack[-1][0]}"')
        self.entities.sort(key=lambda item: (item["offset"], -item["length"]))


def parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Parse Telegram HTML into (plain text, entities) or raise a 400 like the real API."""
    parser = _TelegramHTMLParser(text)
    parser.feed(text)
    parser.finish()
    return parser.plain_text, parser.entities


def _decode_value(key: str, value: str) -> Any:
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class FakeTelegramServer(LoopbackServer):
    """A fake Telegram Bot API on 127.0.0.1 for tests and benchmarks of aiogram bots.

    Public attributes: ``base_url`` (set by :meth:`start`), ``token``, ``bot_username``,
    ``bot_id``; ``requests`` (every API call, in order), ``pending_updates`` (not yet
    confirmed), ``confirmed_offset`` (highest offset confirmed via getUpdates, 0 before any);
    switches ``flood_ratio`` (share of ``send*`` calls answered 429 at random, seeded),
    ``flood_retry_after`` and ``latency`` (seconds added to every call but getUpdates).
    """

    def __init__(
        self,
        *,
        token: str = "123456:TEST-TOKEN",
        bot_username: str = "botkit_test_bot",
        bot_id: int = 123456,
        bot_first_name: str = "Botkit Test Bot",
        seed: int = 0,
    ) -> None:
        """Configure the fake; nothing listens until :meth:`start`."""
        self.token = token
        self.bot_username = bot_username
        self.bot_id = bot_id
        self.bot_first_name = bot_first_name
        self.base_url = ""
        self.requests: list[RecordedRequest] = []
        self.pending_updates: list[dict[str, Any]] = []
        self.injected: dict[int, dict[str, Any]] = {}
        """Every update injected, by update_id (confirmed or not)."""
        self.confirmed_offset = 0
        self.webhook: dict[str, Any] | None = None
        """What ``setWebhook`` set (``url``, ``secret_token``); ``None`` once deleted."""
        self.flood_ratio = 0.0
        self.flood_retry_after = 1
        self.latency = 0.0
        self.skew = 0.0
        """Seconds :meth:`advance` moved the fake's clock (message dates) ahead of real time."""
        self._random = random.Random(seed)
        self._next_update_id = 1
        self._faults: dict[str, list[_Fault]] = {}
        self._sent: list[SentMessage] = []
        self._sent_by_chat: dict[int, list[SentMessage]] = {}
        self._edits: list[SentMessage] = []
        self._messages: dict[tuple[int, int], _StoredMessage] = {}
        self._last_message_id: dict[int, int] = {}
        self._chats: dict[int, dict[str, Any]] = {}
        self._commands: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._files: dict[str, tuple[str, bytes]] = {}
        self._sent_files: list[SentFile] = []
        self._user_reactions: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
        self.max_download_bytes = 20 * 1024 * 1024
        """getFile refuses larger files ("file is too big"), as the cloud Bot API does."""
        self._blocked: set[int] = set()
        self._download_faults: list[int] = []
        self._chat_admins: set[tuple[int, int]] = set()
        self.topics: dict[tuple[int, int], ForumTopic] = {}
        """Forum topics made with ``createForumTopic``, by (chat id, message_thread_id)."""
        self._poll_generation = 0
        self._callback_ids = 0
        self._stopping = False
        self._activity = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "getme": self._get_me,
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "sendchataction": self._send_chat_action,
            "sendmessagedraft": self._send_message_draft,
            "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands,
            "deletemycommands": self._delete_my_commands,
            "getfile": self._get_file,
            "sendphoto": self._send_photo,
            "senddocument": self._send_document,
            "sendvoice": self._send_voice,
            "getchatmember": self._get_chat_member,
            "answercallbackquery": self._return_true,
            **self._forum_handlers(),
            "close": self._return_true,
            "logout": self._return_true,
        }
        self._handlers.update(self._stars_handlers())
        self._handlers.update(self._rich_handlers())
        self.rich_unsupported = False
        """Answer ``sendRichMessage`` and ``sendRichMessageDraft`` 404, like a self-hosted Bot
        API server older than 10.1."""
        self.reactions: dict[tuple[int, int], list[dict[str, Any]]] = {}
        """The bot's own reactions (``setMessageReaction``) by (chat id, message id)."""
        self.checkout_answers: dict[str, dict[str, Any]] = {}
        """``answerPreCheckoutQuery`` calls by query id (``ok``, ``error_message``)."""
        self.charges: dict[str, int] = {}
        """Every payment made with :meth:`complete_payment`: its charge id and payer."""
        self.refunded: list[str] = []
        """Charge ids refunded with ``refundStarPayment``, in order."""
        self.subscriptions: dict[str, bool] = {}
        """Subscription payments (made with a ``subscription_expiration_date``) by charge id:
        whether ``editUserStarSubscription`` cancelled the subscription."""
        self.invoice_links: dict[str, dict[str, Any]] = {}
        """Links made with ``createInvoiceLink``, with their parameters."""

    # ------------------------------------------------------------------ lifecycle

    def now(self) -> float:
        """The fake's clock (POSIX seconds), which dates messages: real time plus ``skew``."""
        return time.time() + self.skew

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the dates of the messages from now on (a user who pauses;
        move ``FakeAnthropicServer``'s cache clock by as much with its own ``advance``)."""
        self.skew += seconds

    async def start(self) -> None:
        """Start listening on a random free port of 127.0.0.1 and set :attr:`base_url`."""
        if self._runner is not None:
            raise RuntimeError("FakeTelegramServer is already running")
        self._stopping = False
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._handle_file)
        self._runner, self.base_url = await serve_on_loopback(app)

    async def stop(self) -> None:
        """Answer pending long polls, stop listening and free the port."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping = True
        self._notify()
        await runner.cleanup()

    # ------------------------------------------------------------------ injecting updates

    def inject_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update for ``getUpdates``; assigns ``update_id`` if missing, returns it."""
        update = dict(update)
        update_id = update.get("update_id")
        if not isinstance(update_id, int):
            update_id = self._next_update_id
            update["update_id"] = update_id
        self._next_update_id = max(self._next_update_id, update_id + 1)
        for key in ("message", "edited_message", "channel_post", "business_message"):
            message = update.get(key)
            if isinstance(message, dict):
                self._track_incoming(message)
        self.pending_updates.append(update)
        self.injected[update_id] = update
        self._notify()
        return update_id

    def send_text(
        self,
        user_id: int,
        text: str,
        *,
        chat_id: int | None = None,
        chat_type: str = "private",
        first_name: str = "User",
        username: str | None = None,
        reply_to_message_id: int | None = None,
        chat_title: str = "Test Group",
        thread_id: int | None = None,
        quote: str | None = None,
    ) -> int:
        """Inject a text message from ``user_id`` and return its update_id.

        ``chat_id`` defaults to ``user_id`` for private chats and to a negative id derived
        from ``user_id`` for groups (``-user_id``) and supergroups/channels
        (``-100…user_id``). ``thread_id`` puts it in that topic of a forum supergroup;
        ``quote`` quotes part of the message it replies to. Commands and ``@mentions`` carry
        their entities, as Telegram sends them.
        """
        message = self._incoming_message(
            user_id,
            chat_id=chat_id,
            chat_type=chat_type,
            first_name=first_name,
            username=username,
            reply_to_message_id=reply_to_message_id,
            chat_title=chat_title,
        )
        message["text"] = text
        entities = _text_entities(text)
        if entities:
            message["entities"] = entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
            message["chat"] = {**message["chat"], "is_forum": True}
        if quote is not None:
            message["quote"] = {"text": quote, "position": 0}
        return self.inject_update({self._update_key(chat_type): message})

    def press_button(
        self, user_id: int, message: SentMessage, text: str, *, first_name: str = "User"
    ) -> int:
        """Press the inline button labelled ``text`` under the bot's ``message`` (as it reads
        now, after any edits) as ``user_id``: a ``callback_query`` update; returns its id."""
        stored = self._messages[(message.chat_id, message.message_id)].message
        rows = stored.get("reply_markup", {}).get("inline_keyboard", [])
        buttons = {button["text"]: button for row in rows for button in row}
        if text not in buttons:
            raise AssertionError(f"no button {text!r} under that message; it has {list(buttons)}")
        self._callback_ids += 1
        query = {
            "id": str(self._callback_ids),
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
            "message": stored,
            "chat_instance": str(message.chat_id),
            "data": buttons[text].get("callback_data", ""),
        }
        return self.inject_update({"callback_query": query})

    def make_chat_admin(self, chat_id: int, user_id: int) -> None:
        """Make ``getChatMember`` report ``user_id`` as an administrator of ``chat_id``."""
        self._chat_admins.add((chat_id, user_id))

    def send_photo(
        self,
        user_id: int,
        *,
        caption: str | None = None,
        chat_id: int | None = None,
        chat_type: str = "private",
        first_name: str = "User",
        username: str | None = None,
        data: bytes = TINY_PNG,
        thread_id: int | None = None,
    ) -> int:
        """Inject a photo message (downloadable via getFile) and return its update_id;
        ``thread_id`` puts it in that topic of a forum supergroup."""
        message = self._incoming_message(
            user_id,
            chat_id=chat_id,
            chat_type=chat_type,
            first_name=first_name,
            username=username,
            reply_to_message_id=None,
            chat_title="Test Group",
        )
        if thread_id is not None:
            message.update(message_thread_id=thread_id, is_topic_message=True)
            message["chat"] = {**message["chat"], "is_forum": True}
        number = len(self._files)
        sizes = []
        for index, side in enumerate((90, 320)):
            file_id = f"AgACAgFake{number}x{index}"
            path = f"photos/file_{number}_{index}.png"
            self._files[file_id] = (path, data)
            sizes.append(
                {
                    "file_id": file_id,
                    "file_unique_id": f"AQADFake{number}x{index}",
                    "file_size": len(data),
                    "width": side,
                    "height": side,
                }
            )
        message["photo"] = sizes
        if caption is not None:
            message["caption"] = caption
            if entities := _text_entities(caption):
                message["caption_entities"] = entities
        return self.inject_update({self._update_key(chat_type): message})

    def send_album(
        self,
        user_id: int,
        photos: list[bytes],
        *,
        caption: str | None = None,
        media_group_id: str | None = None,
        chat_id: int | None = None,
        chat_type: str = "private",
    ) -> list[int]:
        """Inject an album: one photo message per picture sharing a ``media_group_id`` (the
        caption on the first), as Telegram sends them; returns their update_ids."""
        group = media_group_id or f"1{len(self._files):08d}{user_id}"
        update_ids = []
        for index, data in enumerate(photos):
            first = caption if index == 0 else None
            update_id = self.send_photo(
                user_id, caption=first, chat_id=chat_id, chat_type=chat_type, data=data
            )
            self.injected[update_id]["message"]["media_group_id"] = group
            update_ids.append(update_id)
        return update_ids

    def send_document(
        self,
        user_id: int,
        data: bytes,
        *,
        file_name: str | None,
        mime_type: str | None = None,
        caption: str | None = None,
        chat_id: int | None = None,
        file_size: int | None = None,
        media_group_id: str | None = None,
    ) -> int:
        """Inject a document message (downloadable via getFile) and return its update_id.

        ``file_size`` overrides the announced size (to test limits without sending megabytes).
        """
        file: dict[str, Any] = {"file_name": file_name} if file_name is not None else {}
        if mime_type is not None:
            file["mime_type"] = mime_type
        extra = {"media_group_id": media_group_id} if media_group_id else {}
        return self._send_file_message(
            user_id, "document", data, file, caption, chat_id, file_size, extra
        )

    def send_voice(
        self,
        user_id: int,
        data: bytes,
        *,
        mime_type: str = "audio/ogg",
        duration: int = 3,
        chat_id: int | None = None,
        caption: str | None = None,
        file_size: int | None = None,
        reply_to_bot: bool = False,
    ) -> int:
        """Inject a voice note (downloadable via getFile) and return its update_id;
        ``reply_to_bot`` makes it a reply to the bot's last message in the chat (how a voice
        note addresses the bot in a group)."""
        file = {"mime_type": mime_type, "duration": duration}
        extra = self._reply_to_bot_extra(chat_id or user_id) if reply_to_bot else {}
        return self._send_file_message(
            user_id, "voice", data, file, caption, chat_id, file_size, extra
        )

    def send_audio(
        self,
        user_id: int,
        data: bytes,
        *,
        file_name: str = "memo.mp3",
        mime_type: str = "audio/mpeg",
        duration: int = 3,
        chat_id: int | None = None,
    ) -> int:
        """Inject an audio file (downloadable via getFile) and return its update_id."""
        file = {"file_name": file_name, "mime_type": mime_type, "duration": duration}
        return self._send_file_message(user_id, "audio", data, file, None, chat_id, None, {})

    def send_video_note(
        self, user_id: int, data: bytes, *, duration: int = 3, chat_id: int | None = None
    ) -> int:
        """Inject a round video note (MPEG-4, no MIME type, as Telegram sends them)."""
        file = {"duration": duration, "length": 240}
        return self._send_file_message(user_id, "video_note", data, file, None, chat_id, None, {})

    def _reply_to_bot_extra(self, chat_id: int) -> dict[str, Any]:
        mine = [m for m in self._sent if m.chat_id == chat_id]
        if not mine:
            raise AssertionError(f"the bot sent nothing to chat {chat_id} to reply to")
        return {"reply_to_message": self._reply_target(chat_id, mine[-1].message_id)}

    def _send_file_message(
        self,
        user_id: int,
        kind: str,
        data: bytes,
        file: dict[str, Any],
        caption: str | None,
        chat_id: int | None,
        file_size: int | None,
        extra: dict[str, Any],
    ) -> int:
        message = self._incoming_message(
            user_id,
            chat_id=chat_id,
            chat_type="private" if chat_id is None or chat_id > 0 else "group",
            first_name="User",
            username=None,
            reply_to_message_id=None,
            chat_title="Test Group",
        )
        number = len(self._files)
        file_id = f"BQACAgFake{kind}{number}"
        self._files[file_id] = (f"{kind}s/file_{number}", data)
        message[kind] = {
            "file_id": file_id,
            "file_unique_id": f"AgADFake{number}",
            "file_size": len(data) if file_size is None else file_size,
            **file,
        }
        if caption is not None:
            message["caption"] = caption
            if entities := _text_entities(caption):  # a mention addresses the bot in a group
                message["caption_entities"] = entities
        message.update(extra)
        return self.inject_update({"message": message})

    def block_user(self, chat_id: int) -> None:
        """Make later sends to ``chat_id`` fail with 403 "bot was blocked by the user"."""
        self._blocked.add(chat_id)

    # ------------------------------------------------------------------ inspecting

    def requests_for(self, method: str) -> list[RecordedRequest]:
        """Every call of ``method`` (case-insensitive), in order."""
        wanted = method.lower()
        return [request for request in self.requests if request.method.lower() == wanted]

    def sent_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        """Messages delivered by ``sendMessage`` (as sent, edits not applied), in order."""
        if chat_id is None:
            return list(self._sent)
        return list(self._sent_by_chat.get(chat_id, []))

    def sent_voices(self, chat_id: int | None = None) -> list[SentFile]:
        """Voice notes the bot sent with ``sendVoice`` that Telegram plays as voice notes (not
        those of another format, which arrive as files), in order."""
        return [
            f
            for f in self.sent_files(chat_id)
            if f.method == "sendVoice"
            and "voice" in self._messages[(f.chat_id, f.message_id)].message
        ]

    def sent_files(self, chat_id: int | None = None) -> list[SentFile]:
        """Pictures and files delivered by ``sendPhoto``/``sendDocument``, in order."""
        return [f for f in self._sent_files if chat_id is None or f.chat_id == chat_id]

    def edited_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        """Successful ``editMessageText`` results, in order."""
        return [m for m in self._edits if chat_id is None or m.chat_id == chat_id]

    def bot_messages(self, chat_id: int) -> list[SentMessage]:
        """The bot's messages in ``chat_id`` as the user sees them now (edits applied)."""
        found = [
            stored.sent
            for (chat, _), stored in self._messages.items()
            if chat == chat_id and stored.sent is not None
        ]
        return sorted(found, key=lambda message: message.message_id)

    def drafts(self, chat_id: int) -> list[RecordedRequest]:
        """Successful ``sendMessageDraft`` calls for ``chat_id``, in order."""
        return [
            request
            for request in self.requests_for("sendMessageDraft")
            if request.error_code is None and request.params.get("chat_id") == chat_id
        ]

    def commands(
        self, scope: dict[str, Any] | None = None, language_code: str = ""
    ) -> list[dict[str, Any]]:
        """Bot commands stored by ``setMyCommands`` for a scope (default scope if None)."""
        return list(self._commands.get(self._commands_key(scope, language_code), []))

    async def wait_for_messages(
        self,
        chat_id: int,
        count: int = 1,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> list[SentMessage]:
        """Wait until at least ``count`` messages were sent to ``chat_id``; return them all."""
        try:
            await self._wait_until(
                lambda: len(self._sent_by_chat.get(chat_id, [])) >= count, timeout
            )
        except TimeoutError:
            raise AssertionError(self._describe_timeout(chat_id, count, timeout)) from None
        return self.sent_messages(chat_id)

    async def wait_for_requests(
        self,
        method: str,
        count: int = 1,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> list[RecordedRequest]:
        """Wait until ``method`` was called at least ``count`` times; return those calls."""
        try:
            await self._wait_until(lambda: len(self.requests_for(method)) >= count, timeout)
        except TimeoutError:
            seen = len(self.requests_for(method))
            raise AssertionError(
                f"expected {count} {method} call(s) within {timeout}s, got {seen}; "
                f"calls so far: {[r.method for r in self.requests[-20:]]}"
            ) from None
        return self.requests_for(method)

    # ------------------------------------------------------------------ fault injection

    def fail_next(
        self,
        method: str,
        *,
        error_code: int = 429,
        description: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with this error instead of handling them.

        A 429 without ``retry_after`` uses :attr:`flood_retry_after`.
        """
        if error_code == 429 and retry_after is None:
            retry_after = self.flood_retry_after
        if description is None:
            if error_code == 429:
                description = f"Too Many Requests: retry after {retry_after}"
            else:
                description = _DEFAULT_DESCRIPTIONS.get(error_code, "Error")
        fault = _Fault(error_code, description, retry_after, times)
        self._faults.setdefault(method.lower(), []).append(fault)

    def garble_next(
        self,
        method: str,
        *,
        body: str = "<html>502 Bad Gateway</html>",
        status: int = 502,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with ``body`` as is (not the API's JSON).

        Like a proxy or load balancer in front of the Bot API answering with its own page.
        """
        fault = _Fault(status, "garbled", None, times, raw_body=body)
        self._faults.setdefault(method.lower(), []).append(fault)

    def clear_faults(self) -> None:
        """Forget every fault still queued by ``fail_next`` and ``garble_next``."""
        self._faults.clear()

    def fail_downloads(self, *, error_code: int = 404, times: int = 1) -> None:
        """Answer the next ``times`` file downloads with ``error_code`` instead of the file."""
        self._download_faults += [error_code] * times

    def stall_downloads(self, *, times: int = 1) -> None:
        """Never answer the next ``times`` file downloads (the client's timeout ends them)."""
        self._download_faults += [_STALL] * times

    # ------------------------------------------------------------------ HTTP plumbing

    async def _handle_api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error_response(_ApiError(401, "Unauthorized"))
        method = request.match_info["method"]
        try:
            params = await self._read_params(request)
        except _ApiError as error:
            return self._error_response(error)
        index = len(self.requests)
        self.requests.append(RecordedRequest(method, params, time.monotonic()))
        try:
            result = await self._dispatch(method, params)
        except _ApiError as error:
            self.requests[index] = replace(
                self.requests[index], error_code=error.error_code, description=error.description
            )
            self._notify()
            if error.raw_body is not None:
                return web.Response(text=error.raw_body, status=error.error_code)
            return self._error_response(error)
        self._notify()
        return web.json_response({"ok": True, "result": result})

    async def _dispatch(self, method: str, params: dict[str, Any]) -> Any:
        key = method.lower()
        handler = self._handlers.get(key)
        if self.rich_unsupported and key in _RICH_METHODS:
            handler = None
        if handler is None:
            raise _ApiError(404, "Not Found: method not found")
        if key != "getupdates" and self.latency > 0:
            await asyncio.sleep(self.latency)
        faults = self._faults.get(key)
        if faults:
            fault = faults[0]
            fault.times -= 1
            if fault.times <= 0:
                faults.pop(0)
            raise _ApiError(fault.error_code, fault.description, fault.retry_after, fault.raw_body)
        flood = self.flood_ratio > 0 and key.startswith("send")
        if flood and self._random.random() < self.flood_ratio:
            retry_after = self.flood_retry_after
            raise _ApiError(429, f"Too Many Requests: retry after {retry_after}", retry_after)
        return await handler(params)

    async def _read_params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {
            key: _decode_value(key, value) for key, value in request.query.items()
        }
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                raise _ApiError(400, "Bad Request: can't parse JSON request body") from None
            if isinstance(body, dict):
                params.update(body)
        elif request.can_read_body:
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, str):
                    params[key] = _decode_value(key, value)
                elif isinstance(value, bytes | bytearray):
                    params[key] = bytes(value)
                else:
                    params[key] = UploadedFile(
                        value.file.read(), value.filename, value.content_type
                    )
        return params

    @staticmethod
    def _error_response(error: _ApiError) -> web.Response:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": error.error_code,
            "description": error.description,
        }
        if error.retry_after is not None:
            body["parameters"] = {"retry_after": error.retry_after}
        return web.json_response(body, status=error.error_code)

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return self._error_response(_ApiError(401, "Unauthorized"))
        path = request.match_info["file_path"]
        if self._download_faults:
            fault = self._download_faults.pop(0)
            if fault == _STALL:
                await asyncio.Event().wait()  # cancelled when the client gives up
            return self._error_response(_ApiError(fault, "Not Found"))
        for file_path, data in self._files.values():
            if file_path == path:
                return web.Response(body=data, content_type=_content_type(file_path))
        return self._error_response(_ApiError(404, "Not Found"))

    # ------------------------------------------------------------------ waiting

    def _notify(self) -> None:
        self._activity.set()
        self._activity = asyncio.Event()

    async def _wait_until(self, condition: Callable[[], bool], seconds: float) -> None:
        async with asyncio.timeout(seconds):
            while not condition():
                await self._activity.wait()

    def _describe_timeout(self, chat_id: int, count: int, timeout: float) -> str:
        got = self.sent_messages(chat_id)
        lines = [
            f"expected at least {count} message(s) to chat {chat_id} within {timeout}s, "
            f"got {len(got)}:"
        ]
        lines += [f"  #{m.message_id}: {m.text!r}" for m in got]
        others = sorted({m.chat_id for m in self._sent if m.chat_id != chat_id})
        if others:
            lines.append(f"messages were sent to other chats: {others}")
        if self.pending_updates:
            lines.append(f"{len(self.pending_updates)} update(s) never confirmed by the bot")
        errors = [r for r in self.requests if r.error_code is not None]
        if errors:
            lines.append("API errors:")
            lines += [f"  {r.method} -> {r.error_code} {r.description}" for r in errors[-10:]]
        if not self.requests:
            lines.append("the bot never called the API (is it polling this server?)")
        else:
            recent = ", ".join(r.method for r in self.requests[-10:])
            lines.append(f"last API calls: {recent}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ helpers

    def _bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_first_name,
            "username": self.bot_username,
        }

    @staticmethod
    def _update_key(chat_type: str) -> str:
        return "channel_post" if chat_type == "channel" else "message"

    def _next_message_id(self, chat_id: int) -> int:
        message_id = self._last_message_id.get(chat_id, 0) + 1
        self._last_message_id[chat_id] = message_id
        return message_id

    def _incoming_message(
        self,
        user_id: int,
        *,
        chat_id: int | None,
        chat_type: str,
        first_name: str,
        username: str | None,
        reply_to_message_id: int | None,
        chat_title: str,
    ) -> dict[str, Any]:
        if chat_id is None:
            if chat_type == "private":
                chat_id = user_id
            elif chat_type == "group":
                chat_id = -abs(user_id)
            else:
                chat_id = -(1_000_000_000_000 + abs(user_id))
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            user["username"] = username
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = first_name
            if username is not None:
                chat["username"] = username
        else:
            chat["title"] = chat_title
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat_id),
            "date": int(self.now()),
            "chat": chat,
        }
        if chat_type == "channel":
            message["sender_chat"] = chat
        else:
            message["from"] = user
        if reply_to_message_id is not None:
            message["reply_to_message"] = self._reply_target(chat_id, reply_to_message_id)
        return message

    def _reply_target(self, chat_id: int, message_id: int) -> dict[str, Any]:
        stored = self._messages.get((chat_id, message_id))
        if stored is not None:
            target = dict(stored.message)
            target.pop("reply_to_message", None)
            return target
        return {
            "message_id": message_id,
            "date": int(self.now()),
            "chat": self._chat(chat_id),
        }

    def _track_incoming(self, message: dict[str, Any]) -> None:
        chat = message.get("chat")
        message_id = message.get("message_id")
        if not isinstance(chat, dict) or not isinstance(message_id, int):
            return
        chat_id = chat.get("id")
        if not isinstance(chat_id, int):
            return
        self._chats[chat_id] = dict(chat)
        self._last_message_id[chat_id] = max(self._last_message_id.get(chat_id, 0), message_id)
        self._messages[(chat_id, message_id)] = _StoredMessage(message, from_bot=False)

    def _chat(self, chat_id: int) -> dict[str, Any]:
        chat = self._chats.get(chat_id)
        if chat is not None:
            return dict(chat)
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": "User"}
        kind = "supergroup" if chat_id < -1_000_000_000_000 else "group"
        return {"id": chat_id, "type": kind, "title": "Test Group"}

    @staticmethod
    def _chat_id(params: dict[str, Any]) -> int:
        chat_id = params.get("chat_id")
        if isinstance(chat_id, bool) or not isinstance(chat_id, int):
            if isinstance(chat_id, str) and chat_id.startswith("@"):
                raise _ApiError(400, "Bad Request: chat not found")
            raise _ApiError(400, "Bad Request: chat_id is empty")
        return chat_id

    @staticmethod
    def _int_param(params: dict[str, Any], name: str) -> int | None:
        value = params.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value

    def _check_blocked(self, chat_id: int) -> None:
        if chat_id in self._blocked:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")

    @staticmethod
    def _render_text(params: dict[str, Any]) -> tuple[str, str, str | None, list[dict[str, Any]]]:
        """Validate ``text``/``parse_mode``/``entities``; return (raw, plain, mode, entities)."""
        raw = params.get("text", "")
        if not isinstance(raw, str):
            raw = str(raw)
        parse_mode = params.get("parse_mode")
        mode = parse_mode if isinstance(parse_mode, str) and parse_mode else None
        entities: list[dict[str, Any]] = []
        plain = raw
        given = params.get("entities")
        if isinstance(given, list):
            entities = [dict(e) for e in given if isinstance(e, dict)]
        elif mode is not None and mode.lower() == "html":
            plain, entities = parse_html(raw)
        if not plain.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(plain) > MAX_MESSAGE_LENGTH:
            raise _ApiError(400, "Bad Request: message is too long")
        return raw, plain, mode, entities

    @staticmethod
    def _inline_markup(params: dict[str, Any]) -> dict[str, Any] | None:
        markup = params.get("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            return markup
        return None

    @staticmethod
    def _check_web_apps(markup: dict[str, Any], chat_id: int) -> None:
        """A ``web_app`` button opens an HTTPS page, in a private chat only (Bot API:
        InlineKeyboardButton.web_app, WebAppInfo)."""
        for row in markup.get("inline_keyboard", []):
            for button in row:
                web_app = button.get("web_app")
                if web_app is None:
                    continue
                if chat_id < 0:
                    raise _ApiError(400, "Bad Request: BUTTON_TYPE_INVALID")
                url = str(web_app.get("url", ""))
                if not url.startswith("https://"):
                    raise _ApiError(
                        400,
                        f"Bad Request: inline keyboard button Web App URL '{url}' is invalid: "
                        "Only HTTPS links are allowed",
                    )

    def _reply_to_id(self, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            message_id = reply.get("message_id")
            if isinstance(message_id, int):
                return message_id
        return self._int_param(params, "reply_to_message_id")

    # ------------------------------------------------------------------ API methods

    async def _return_true(self, params: dict[str, Any]) -> bool:
        return True

    async def _get_me(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            **self._bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = self._int_param(params, "offset")
        limit = self._int_param(params, "limit") or 100
        limit = max(1, min(limit, 100))
        timeout = self._int_param(params, "timeout") or 0
        if offset is not None and offset > 0:
            self.pending_updates = [u for u in self.pending_updates if u["update_id"] >= offset]
            self.confirmed_offset = max(self.confirmed_offset, offset)
        elif offset is not None and offset < 0:
            dropped = self.pending_updates[:offset]
            self.pending_updates = self.pending_updates[offset:]
            if dropped:
                last = dropped[-1]["update_id"] + 1
                self.confirmed_offset = max(self.confirmed_offset, last)
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()  # wake an older long poll so it can answer 409
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self.pending_updates or self._stopping:
                return self.pending_updates[:limit]
            if generation != self._poll_generation:
                raise _ApiError(
                    409,
                    "Conflict: terminated by other getUpdates request; "
                    "make sure that only one bot instance is running",
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._activity.wait()

    async def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        raw, plain, mode, entities = self._render_text(params)
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat_id),
            "from": self._bot_user(),
            "date": int(self.now()),
            "chat": self._chat(chat_id),
            "text": plain,
        }
        if entities:
            message["entities"] = entities
        reply_to = self._reply_to_id(params)
        if reply_to is not None:
            message["reply_to_message"] = self._reply_target(chat_id, reply_to)
        markup = self._inline_markup(params)
        if markup is not None:
            self._check_web_apps(markup, chat_id)
            message["reply_markup"] = markup
        sent = SentMessage(
            chat_id=chat_id,
            message_id=message["message_id"],
            text=raw,
            parse_mode=mode,
            params=params,
            plain_text=plain,
            entities=tuple(entities),
            thread_id=self._place_in_topic(chat_id, message, params),
        )
        self._sent.append(sent)
        self._sent_by_chat.setdefault(chat_id, []).append(sent)
        self._messages[(chat_id, sent.message_id)] = _StoredMessage(message, True, sent)
        return message

    async def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any] | bool:
        if params.get("inline_message_id"):
            self._render_text(params)
            return True
        chat_id = self._chat_id(params)
        message_id = self._int_param(params, "message_id")
        if message_id is None:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        stored = self._messages.get((chat_id, message_id))
        if stored is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if not stored.from_bot:
            raise _ApiError(400, "Bad Request: message can't be edited")
        rich = params.get("rich_message")
        if rich is not None:
            plain = self._rich_plain(rich, draft=False)
            raw, mode = json.dumps(rich, ensure_ascii=False), None
            entities: list[dict[str, Any]] = []
        else:
            raw, plain, mode, entities = self._render_text(params)
        markup = self._inline_markup(params)
        old = stored.message
        if (
            old.get("text") == plain
            and old.get("entities", []) == entities
            and old.get("reply_markup") == markup
        ):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message",
            )
        message = {key: value for key, value in old.items() if key not in ("entities",)}
        message["text"] = plain
        message["edit_date"] = int(self.now())
        if entities:
            message["entities"] = entities
        message.pop("reply_markup", None)
        if markup is not None:
            message["reply_markup"] = markup
        sent = SentMessage(
            chat_id=chat_id,
            message_id=message_id,
            text=raw,
            parse_mode=mode,
            params=params,
            plain_text=plain,
            entities=tuple(entities),
            rich=dict(rich) if isinstance(rich, dict) else None,
        )
        self._edits.append(sent)
        self._messages[(chat_id, message_id)] = _StoredMessage(message, True, sent)
        return message

    async def _delete_message(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        message_id = self._int_param(params, "message_id")
        if message_id is None or self._messages.pop((chat_id, message_id), None) is None:
            raise _ApiError(400, "Bad Request: message to delete not found")
        return True

    async def _send_chat_action(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        if not isinstance(params.get("action"), str):
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _send_message_draft(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        if not self._int_param(params, "draft_id"):
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        if "text" in params:
            mode = params.get("parse_mode")
            text = str(params["text"])
            plain = text
            if isinstance(mode, str) and mode.lower() == "html" and "entities" not in params:
                plain, _ = parse_html(text)
            if len(plain) > MAX_MESSAGE_LENGTH:
                raise _ApiError(400, "Bad Request: message is too long")
        return True

    async def _set_webhook(self, params: dict[str, Any]) -> bool:
        if not str(params.get("url") or "").startswith("https://"):
            raise _ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided")
        self.webhook = dict(params)
        return True

    async def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates") is True:
            if self.pending_updates:
                last = self.pending_updates[-1]["update_id"] + 1
                self.confirmed_offset = max(self.confirmed_offset, last)
            self.pending_updates = []
        return True

    async def _get_webhook_info(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self.pending_updates),
        }

    @staticmethod
    def _commands_key(scope: Any, language_code: Any) -> tuple[str, str]:
        if not isinstance(scope, dict):
            scope = {"type": "default"}
        language = language_code if isinstance(language_code, str) else ""
        return json.dumps(scope, sort_keys=True), language

    async def _set_my_commands(self, params: dict[str, Any]) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _ApiError(400, "Bad Request: can't parse commands JSON object")
        stored: list[dict[str, Any]] = []
        for command in commands:
            if not isinstance(command, dict):
                raise _ApiError(400, "Bad Request: can't parse BotCommand JSON object")
            name = command.get("command")
            description = command.get("description")
            if not isinstance(name, str) or not _BOT_COMMAND_NAME_RE.match(name):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
            stored.append(dict(command))
        key = self._commands_key(params.get("scope"), params.get("language_code"))
        self._commands[key] = stored
        return True

    async def _get_my_commands(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        key = self._commands_key(params.get("scope"), params.get("language_code"))
        return list(self._commands.get(key, []))

    async def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        key = self._commands_key(params.get("scope"), params.get("language_code"))
        self._commands.pop(key, None)
        return True

    async def _get_chat_member(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        user_id = self._int_param(params, "user_id")
        if user_id is None:
            raise _ApiError(400, "Bad Request: invalid user_id specified")
        user = {"id": user_id, "is_bot": False, "first_name": "User"}
        if (chat_id, user_id) in self._chat_admins:
            return {"status": "administrator", "user": user, **_ADMIN_RIGHTS}
        return {"status": "member", "user": user}

    async def _get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = params.get("file_id")
        if not isinstance(file_id, str) or file_id not in self._files:
            raise _ApiError(400, "Bad Request: invalid file_id")
        path, data = self._files[file_id]
        if len(data) > self.max_download_bytes:
            raise _ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": f"AQAD{file_id[-6:]}",
            "file_size": len(data),
            "file_path": path,
        }

    async def _send_photo(self, params: dict[str, Any]) -> dict[str, Any]:
        upload, message = self._sent_upload("photo", params)
        sizes = [{"file_id": "", "file_unique_id": "", "width": 1, "height": 1}]
        number = len(self._files)
        file_id = f"AgACAgSent{number}"
        self._files[file_id] = (f"photos/sent_{number}", upload.data)
        sizes[0].update(file_id=file_id, file_unique_id=f"AQADSent{number}")
        message["photo"] = sizes
        self._record_file("sendPhoto", message, upload, params)
        return message

    async def _send_document(self, params: dict[str, Any]) -> dict[str, Any]:
        upload, message = self._sent_upload("document", params)
        number = len(self._files)
        file_id = f"BQACAgSent{number}"
        self._files[file_id] = (f"documents/sent_{number}", upload.data)
        message["document"] = {
            "file_id": file_id,
            "file_unique_id": f"AgADSent{number}",
            "file_name": upload.filename or "file",
            "file_size": len(upload.data),
        }
        self._record_file("sendDocument", message, upload, params)
        return message

    async def _send_voice(self, params: dict[str, Any]) -> dict[str, Any]:
        """``sendVoice``, as the Bot API page says (read 2026-11-28): OGG/Opus, MP3 and M4A
        arrive as a playable voice note, any other format as a file (a ``document``: a test
        asserting on :meth:`sent_voices` catches it); ``duration`` is an integer. Stricter
        than Telegram, which shows any ``duration`` it is given: an OGG/Opus file's must be its
        own length (within a second), so a wrong one fails the test."""
        upload, message = self._sent_upload("voice", params)
        from botkit.voice.audio import ogg_opus_seconds

        seconds = ogg_opus_seconds(upload.data)
        duration = params.get("duration")
        if duration is not None and (not isinstance(duration, int) or duration < 0):
            raise _ApiError(400, "Bad Request: invalid duration specified")
        if duration is not None and seconds is not None and abs(duration - seconds) > 1:
            raise _ApiError(400, f"Bad Request: duration {duration} is not {seconds:.1f} s")
        number = len(self._files)
        file_id = f"AwACAgSent{number}"
        playable = seconds is not None or _is_mp3_or_m4a(upload.data)
        self._files[file_id] = (f"voice/sent_{number}.oga", upload.data)
        item = {"file_id": file_id, "file_unique_id": f"AgADSentVoice{number}"}
        if playable:
            length = duration if duration is not None else round(seconds or 0)
            message["voice"] = {**item, "duration": length, "file_size": len(upload.data)}
        else:
            message["document"] = {**item, "file_name": upload.filename or "file"}
        self._record_file("sendVoice", message, upload, params)
        return message

    def _sent_upload(
        self, field: str, params: dict[str, Any]
    ) -> tuple[UploadedFile, dict[str, Any]]:
        """The uploaded file of a send call (``attach://<part>`` or the field itself)."""
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        value = params.get(field)
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value.removeprefix("attach://"))
        if not isinstance(value, UploadedFile):
            raise _ApiError(400, f"Bad Request: there is no {field} in the request")
        if not value.data:
            raise _ApiError(400, "Bad Request: file must be non-empty")
        caption = params.get("caption")
        if isinstance(caption, str) and len(caption) > 1024:
            raise _ApiError(400, "Bad Request: message caption is too long")
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat_id),
            "from": self._bot_user(),
            "date": int(self.now()),
            "chat": self._chat(chat_id),
        }
        if isinstance(caption, str) and caption:
            message["caption"] = caption
        self._place_in_topic(chat_id, message, params)
        return value, message

    def _record_file(
        self, method: str, message: dict[str, Any], upload: UploadedFile, params: dict[str, Any]
    ) -> None:
        chat_id = message["chat"]["id"]
        caption = message.get("caption")
        thread = message.get("message_thread_id")
        sent = SentFile(
            chat_id,
            message["message_id"],
            method,
            upload.data,
            upload.filename,
            caption,
            params,
            thread,
        )
        self._sent_files.append(sent)
        self._messages[(chat_id, sent.message_id)] = _StoredMessage(message, True)

    # ------------------------------------------------------------------ forum topics, copies

    def make_forum(self, chat_id: int, *, title: str = "Operators") -> None:
        """Make ``chat_id`` a forum supergroup, where the bot may create topics."""
        self._chats[chat_id] = {"id": chat_id, "type": "supergroup", "title": title}
        self._chats[chat_id]["is_forum"] = True
        self._last_message_id[chat_id] = max(self._last_message_id.get(chat_id, 0), 1)  # General

    def topic_messages(self, chat_id: int, thread_id: int) -> list[SentMessage]:
        """The texts the bot sent (or copied) into topic ``thread_id`` of ``chat_id``."""
        return [m for m in self.sent_messages(chat_id) if m.thread_id == thread_id]

    def _forum_handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "createforumtopic": self._create_forum_topic,
            "editforumtopic": self._edit_forum_topic,
            "closeforumtopic": partial(self._set_topic_closed, closed=True),
            "reopenforumtopic": partial(self._set_topic_closed, closed=False),
            "copymessage": self._copy_message,
        }

    def _place_in_topic(
        self, chat_id: int, message: dict[str, Any], params: dict[str, Any]
    ) -> int | None:
        """Put a sent message in the topic its ``message_thread_id`` names (if any)."""
        thread_id = self._int_param(params, "message_thread_id")
        if thread_id is None:
            return None
        message.update(message_thread_id=thread_id, is_topic_message=True)
        return thread_id

    def _topic(self, params: dict[str, Any]) -> ForumTopic:
        chat_id = self._chat_id(params)
        topic = self.topics.get((chat_id, self._int_param(params, "message_thread_id") or 0))
        if topic is None:
            raise _ApiError(400, "Bad Request: TOPIC_ID_INVALID")
        return topic

    async def _create_forum_topic(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        name = params.get("name")
        if not self._chat(chat_id).get("is_forum"):
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise _ApiError(400, "Bad Request: TOPIC_NAME_INVALID")
        thread_id = self._next_message_id(chat_id)  # a topic's id is its first message's
        created = {"name": name, "icon_color": 7322096}
        service = {"message_id": thread_id, "from": self._bot_user(), "date": int(self.now())}
        service.update(chat=self._chat(chat_id), forum_topic_created=created)
        service.update(message_thread_id=thread_id, is_topic_message=True)
        self._messages[(chat_id, thread_id)] = _StoredMessage(service, from_bot=True)
        self.topics[(chat_id, thread_id)] = ForumTopic(chat_id, thread_id, name)
        return {"message_thread_id": thread_id, **created}

    async def _edit_forum_topic(self, params: dict[str, Any]) -> bool:
        topic = self._topic(params)
        name = params.get("name")
        if isinstance(name, str):
            if not 1 <= len(name) <= 128:
                raise _ApiError(400, "Bad Request: TOPIC_NAME_INVALID")
            topic.name = name
        return True

    async def _set_topic_closed(self, params: dict[str, Any], *, closed: bool) -> bool:
        topic = self._topic(params)
        if topic.closed == closed:
            raise _ApiError(400, "Bad Request: TOPIC_NOT_MODIFIED")
        topic.closed = closed
        return True

    async def _copy_message(self, params: dict[str, Any]) -> dict[str, Any]:
        """``copyMessage``: the text or media of a known message, sent anew by the bot."""
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        source_chat = self._int_param(params, "from_chat_id")
        message_id = self._int_param(params, "message_id")
        stored = self._messages.get((source_chat or 0, message_id or 0))
        if stored is None:
            raise _ApiError(400, "Bad Request: message to copy not found")
        source = stored.message
        kind = next((k for k in _COPIED_KINDS if k in source), None)
        if kind is None:
            raise _ApiError(400, "Bad Request: message can't be copied")
        message: dict[str, Any] = {"message_id": self._next_message_id(chat_id)}
        message.update(_bot_copy(source, params), chat=self._chat(chat_id))
        message.update({"from": self._bot_user(), "date": int(self.now())})
        thread_id = self._place_in_topic(chat_id, message, params)
        self._record_copy(chat_id, message, kind, params, thread_id)
        return {"message_id": message["message_id"]}

    def _record_copy(
        self,
        chat_id: int,
        message: dict[str, Any],
        kind: str,
        params: dict[str, Any],
        thread_id: int | None,
    ) -> None:
        """Record a copy as a sent text, or as a sent file with the bytes it shows."""
        message_id = message["message_id"]
        if kind == "text":
            text = message["text"]
            entities = tuple(message.get("entities", ()))
            sent = SentMessage(chat_id, message_id, text, None, params, text, entities, thread_id)
            self._sent.append(sent)
            self._sent_by_chat.setdefault(chat_id, []).append(sent)
            self._messages[(chat_id, message_id)] = _StoredMessage(message, True, sent)
            return
        media = message[kind][-1] if kind == "photo" else message[kind]
        _, data = self._files.get(media.get("file_id", ""), ("", b""))
        name = media.get("file_name")
        caption = message.get("caption")
        copy = SentFile(chat_id, message_id, "copyMessage", data, name, caption, params, thread_id)
        self._sent_files.append(copy)
        self._messages[(chat_id, message_id)] = _StoredMessage(message, True)

    # ------------------------------------------------------------------ Telegram Stars

    # ------------------------------------------------------------------ rich messages, reactions

    def _rich_handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "sendrichmessage": self._send_rich_message,
            "sendrichmessagedraft": self._send_rich_message_draft,
            "setmessagereaction": self._set_message_reaction,
        }

    def rich_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        """Messages delivered by ``sendRichMessage``, in order (``rich`` holds what was sent)."""
        return [m for m in self.sent_messages(chat_id) if m.rich is not None]

    def rich_drafts(self, chat_id: int) -> list[RecordedRequest]:
        """Successful ``sendRichMessageDraft`` calls for ``chat_id``, in order."""
        return [
            request
            for request in self.requests_for("sendRichMessageDraft")
            if request.error_code is None and request.params.get("chat_id") == chat_id
        ]

    def react(
        self, user_id: int, message: SentMessage, *emoji: str, first_name: str = "User"
    ) -> int:
        """Set ``user_id``'s reactions on the bot's ``message`` to ``emoji`` (none: taken
        back): a ``message_reaction`` update with the old and new lists; returns its id."""
        key = (message.chat_id, message.message_id, user_id)
        old = self._user_reactions.get(key, [])
        new = [{"type": "emoji", "emoji": e} for e in emoji]
        self._user_reactions[key] = new
        update = {
            "message_reaction": {
                "chat": self._chat(message.chat_id),
                "message_id": message.message_id,
                "user": {"id": user_id, "is_bot": False, "first_name": first_name},
                "date": int(self.now()),
                "old_reaction": old,
                "new_reaction": new,
            }
        }
        return self.inject_update(update)

    async def _send_rich_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        rich = params.get("rich_message")
        plain = self._rich_plain(rich, draft=False)
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat_id),
            "from": self._bot_user(),
            "date": int(self.now()),
            "chat": self._chat(chat_id),
            "rich_message": {"blocks": [{"type": "paragraph", "text": plain}]},
        }
        reply_to = self._reply_to_id(params)
        if reply_to is not None:
            message["reply_to_message"] = self._reply_target(chat_id, reply_to)
        markup = self._inline_markup(params)
        if markup is not None:
            message["reply_markup"] = markup
        assert isinstance(rich, dict)  # checked by _rich_plain
        source = rich.get("markdown") or rich.get("html") or json.dumps(rich.get("blocks"))
        sent = SentMessage(
            chat_id=chat_id,
            message_id=message["message_id"],
            text=source,
            parse_mode=None,
            params=params,
            plain_text=plain,
            thread_id=self._place_in_topic(chat_id, message, params),
            rich=dict(rich),
        )
        self._sent.append(sent)
        self._sent_by_chat.setdefault(chat_id, []).append(sent)
        self._messages[(chat_id, sent.message_id)] = _StoredMessage(message, True, sent)
        return message

    async def _send_rich_message_draft(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        if self._chat(chat_id).get("type") != "private":
            raise _ApiError(400, "Bad Request: drafts can be sent only to private chats")
        if not self._int_param(params, "draft_id"):
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        self._rich_plain(params.get("rich_message"), draft=True)
        return True

    @staticmethod
    def _rich_plain(rich: Any, *, draft: bool) -> str:
        try:
            plain, _ = rich_text(rich, draft=draft)
        except RichRefusal as refusal:
            raise _ApiError(400, str(refusal)) from None
        return plain

    async def _set_message_reaction(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        message_id = self._int_param(params, "message_id")
        if message_id is None or (chat_id, message_id) not in self._messages:
            raise _ApiError(400, "Bad Request: message to react not found")
        reaction = params.get("reaction") or []
        if not isinstance(reaction, list) or len(reaction) > 1:
            raise _ApiError(400, "Bad Request: REACTIONS_TOO_MANY")
        for item in reaction:
            if not isinstance(item, dict) or item.get("type") != "emoji":
                raise _ApiError(400, "Bad Request: REACTION_INVALID")
            if item.get("emoji") not in _REACTION_EMOJI:
                raise _ApiError(400, "Bad Request: REACTION_INVALID")
        self.reactions[(chat_id, message_id)] = [dict(item) for item in reaction]
        return True

    def _stars_handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "sendinvoice": self._send_invoice,
            "createinvoicelink": self._create_invoice_link,
            "answerprecheckoutquery": self._answer_pre_checkout_query,
            "refundstarpayment": self._refund_star_payment,
            "edituserstarsubscription": self._edit_user_star_subscription,
        }

    def invoices(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """The parameters of every invoice sent with ``sendInvoice`` (to ``chat_id``)."""
        return [
            r.params
            for r in self.requests_for("sendInvoice")
            if r.error_code is None and chat_id in (None, r.params.get("chat_id"))
        ]

    def start_checkout(
        self,
        user_id: int,
        payload: str,
        total_amount: int,
        *,
        currency: str = "XTR",
        first_name: str = "User",
    ) -> str:
        """The user confirms paying an invoice: a ``pre_checkout_query``; returns its id."""
        self._callback_ids += 1
        query_id = f"checkout-{self._callback_ids}"
        query = {
            "id": query_id,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
            "currency": currency,
            "total_amount": total_amount,
            "invoice_payload": payload,
        }
        self.inject_update({"pre_checkout_query": query})
        return query_id

    async def wait_for_checkout(
        self,
        query_id: str,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """The bot's answer to checkout ``query_id`` (``ok``, ``error_message``), once given."""
        try:
            await self._wait_until(lambda: query_id in self.checkout_answers, timeout)
        except TimeoutError:
            raise AssertionError(f"checkout {query_id} not answered within {timeout}s") from None
        return self.checkout_answers[query_id]

    def complete_payment(
        self,
        user_id: int,
        payload: str,
        total_amount: int,
        *,
        charge_id: str | None = None,
        currency: str = "XTR",
        subscription_expiration_date: int | None = None,
        is_recurring: bool = False,
        is_first_recurring: bool = False,
        chat_type: str = "private",
    ) -> str:
        """The payment went through: a ``successful_payment`` message from ``user_id`` (in
        their private chat, or a group's for ``chat_type``); returns its
        ``telegram_payment_charge_id`` (``charge_id``, or a new one)."""
        charge_id = charge_id or f"stxCharge{len(self.charges) + 1:04d}"
        self.charges[charge_id] = user_id
        paid: dict[str, Any] = {
            "currency": currency,
            "total_amount": total_amount,
            "invoice_payload": payload,
            "telegram_payment_charge_id": charge_id,
            "provider_payment_charge_id": "",
        }
        if subscription_expiration_date is not None:
            paid["subscription_expiration_date"] = subscription_expiration_date
            self.subscriptions.setdefault(charge_id, False)
        if is_recurring:
            paid.update(is_recurring=True, is_first_recurring=is_first_recurring)
        message = self._incoming_message(
            user_id,
            chat_id=None,
            chat_type=chat_type,
            first_name="User",
            username=None,
            reply_to_message_id=None,
            chat_title="Test Group",
        )
        message["successful_payment"] = paid
        self.inject_update({"message": message})
        return charge_id

    async def pay(
        self,
        user_id: int,
        invoice: dict[str, Any],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> str | None:
        """Pay ``invoice`` (the parameters of a ``sendInvoice`` or ``createInvoiceLink``) as
        ``user_id``, as Telegram does: the checkout, then, if the bot said ok, the payment.
        Returns the charge id, or ``None`` when the bot refused the checkout."""
        total = sum(int(price["amount"]) for price in invoice["prices"])
        payload = str(invoice["payload"])
        query_id = self.start_checkout(user_id, payload, total, currency=invoice["currency"])
        answer = await self.wait_for_checkout(query_id, timeout)
        if not answer.get("ok"):
            return None
        period = invoice.get("subscription_period")
        expires = int(self.now()) + int(period) if period else None
        return self.complete_payment(
            user_id,
            payload,
            total,
            subscription_expiration_date=expires,
            is_recurring=bool(period),
            is_first_recurring=bool(period),
        )

    def _check_invoice(self, params: dict[str, Any]) -> None:
        prices = params.get("prices")
        if params.get("currency") != "XTR" or not isinstance(prices, list) or len(prices) != 1:
            raise _ApiError(400, "Bad Request: XTR invoices must have exactly one price")
        if params.get("provider_token") not in (None, ""):
            raise _ApiError(400, "Bad Request: provider_token must be empty for XTR")
        if not params.get("payload") or len(str(params["payload"]).encode()) > 128:
            raise _ApiError(400, "Bad Request: INVOICE_PAYLOAD_INVALID")

    async def _send_invoice(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        self._check_blocked(chat_id)
        self._check_invoice(params)
        message_id = self._next_message_id(chat_id)
        message: dict[str, Any] = {
            "message_id": message_id,
            "from": self._bot_user(),
            "date": int(self.now()),
            "chat": self._chat(chat_id),
            "invoice": {
                "title": params.get("title", ""),
                "description": params.get("description", ""),
                "start_parameter": "",
                "currency": params["currency"],
                "total_amount": params["prices"][0]["amount"],
            },
        }
        self._messages[(chat_id, message_id)] = _StoredMessage(message, True)
        return message

    async def _create_invoice_link(self, params: dict[str, Any]) -> str:
        self._check_invoice(params)
        period = params.get("subscription_period")
        if period is not None and period != 2592000:
            raise _ApiError(400, "Bad Request: SUBSCRIPTION_PERIOD_INVALID")
        link = f"https://t.me/$fakeinvoice{len(self.invoice_links) + 1}"
        self.invoice_links[link] = params
        return link

    async def _answer_pre_checkout_query(self, params: dict[str, Any]) -> bool:
        query_id = str(params.get("pre_checkout_query_id", ""))
        if query_id in self.checkout_answers:
            raise _ApiError(400, "Bad Request: query is too old or query ID is invalid")
        ok = params.get("ok") is True
        if not ok and not params.get("error_message"):
            raise _ApiError(400, "Bad Request: error_message is required when ok is false")
        self.checkout_answers[query_id] = {"ok": ok, "error_message": params.get("error_message")}
        return True

    async def _refund_star_payment(self, params: dict[str, Any]) -> bool:
        charge_id = str(params.get("telegram_payment_charge_id", ""))
        if self.charges.get(charge_id) != params.get("user_id"):
            raise _ApiError(400, "Bad Request: CHARGE_NOT_FOUND")
        if charge_id in self.refunded:
            raise _ApiError(400, "Bad Request: CHARGE_ALREADY_REFUNDED")
        self.refunded.append(charge_id)
        return True

    async def _edit_user_star_subscription(self, params: dict[str, Any]) -> bool:
        charge_id = str(params.get("telegram_payment_charge_id", ""))
        if charge_id not in self.subscriptions or self.charges[charge_id] != params.get("user_id"):
            raise _ApiError(400, "Bad Request: SUBSCRIPTION_NOT_FOUND")
        self.subscriptions[charge_id] = params.get("is_canceled") is True
        return True


_COPIED_KINDS = ("text", "photo", "document", "voice", "audio", "video", "animation", "sticker")
"""What ``copyMessage`` copies; service messages (a topic's creation, say) cannot be copied."""


def _is_mp3_or_m4a(data: bytes) -> bool:
    """An MP3 (ID3 tag, or an MPEG audio frame's sync bits) or an M4A (MPEG-4 ``ftyp`` box)."""
    mp3 = data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)
    return mp3 or data[4:11] == b"ftypM4A"


def _content_type(path: str) -> str:
    """What the file server says a stored file is, by its path."""
    if path.startswith("photos/"):
        return "image/png"
    if path.endswith((".oga", ".ogg")) or path.startswith(("voices/", "voice/")):
        return "audio/ogg"
    return "application/octet-stream"


def _bot_copy(source: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The content of ``source`` as a copy carries it: its caption replaced if one is given."""
    kept = ("text", "entities", "caption", "caption_entities", *_COPIED_KINDS[1:])
    copy = {key: source[key] for key in kept if key in source}
    caption = params.get("caption")
    if isinstance(caption, str) and "text" not in copy:
        copy.pop("caption_entities", None)
        copy["caption"] = caption
    return copy
