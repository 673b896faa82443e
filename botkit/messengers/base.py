"""What the bot needs from a messenger, in messenger-neutral terms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from botkit.types import ContentBlock

if TYPE_CHECKING:
    from botkit.stores.base import UserRecord

__all__ = [
    "Attachment",
    "Button",
    "ButtonPress",
    "Checkout",
    "Draft",
    "Incoming",
    "JournaledUpdate",
    "Messenger",
    "OutgoingFile",
    "Reaction",
    "Reply",
    "ReplyContext",
    "StarPayment",
    "StarSales",
    "UpdateJournal",
]


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """The message a user replied to, as the model is told about it."""

    text: str
    """Its text or caption (empty for media without one)."""
    author: str
    """Who wrote it, as a display name."""
    from_bot: bool
    """Whether it was this bot's own message."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file the user sent (document, voice, audio, video note), still to be fetched with
    ``download``."""

    file_id: str
    """The messenger's id for ``Messenger.download``."""
    kind: str
    """``document``, ``voice``, ``audio`` or ``video_note``."""
    file_name: str | None = None
    mime_type: str | None = None
    file_size: int | None = None
    """Bytes, as the messenger announced them (checked against the limits before downloading)."""
    duration: int | None = None
    """Seconds of a voice note, audio file or video note, as announced (checked before
    downloading)."""


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file or picture the bot sends to a chat (from a tool's ``ToolFile``/``ToolImage``)."""

    data: bytes
    filename: str
    mime_type: str
    caption: str = ""
    as_photo: bool = False
    """Shown as a picture in the chat (``sendPhoto``) rather than as a file (``sendDocument``)."""
    as_voice: bool = False
    """Played as a voice note (``sendVoice``; ``data`` must be OGG/Opus)."""
    duration: int | None = None
    """A voice note's length in seconds."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """One user message, as the turn cycle sees it."""

    update_id: int
    """The messenger's id of the update; used to confirm and to deduplicate."""
    user_id: int
    chat_id: int
    text: str
    date: datetime
    chat_type: str = "private"
    username: str | None = None
    first_name: str | None = None
    images: tuple[bytes, ...] = ()
    """Photos attached to the message, as downloaded bytes."""
    kind: str = "text"
    """``text`` or ``photo`` (answered), or what else it carried: ``voice``, ``sticker``, …"""
    raw: Any = field(default=None, compare=False, repr=False)
    """The messenger's own update object, for bots that need more."""
    user: UserRecord | None = field(default=None, compare=False)
    """Who sent it, as the user store knows them; filled in once ``authorize`` admitted it."""
    message_id: int | None = None
    """The message's id in its chat, for replying to it."""
    thread_id: int | None = None
    """The forum topic it was written in (``None`` in General and outside forums)."""
    chat_title: str | None = None
    """The group's title; ``None`` in private chats."""
    reply_to: ReplyContext | None = None
    """The message this one replies to, if any."""
    quote: str | None = None
    """The part of the replied-to message the user quoted, if any."""
    forwarded_from: str | None = None
    """Whose message the user forwarded (the origin's name), when it is a forward: its text is
    someone else's words, not the user's request."""
    photo_ids: tuple[str, ...] = ()
    """Photos still to be fetched with ``Messenger.download`` (only once the sender is admitted)."""
    update_ids: tuple[int, ...] = ()
    """Every update gathered into this message (a burst sent during a running turn)."""
    attachments: tuple[Attachment, ...] = ()
    """Documents, voice notes and audio still to be fetched (only once the sender is admitted)."""
    media_group_id: str | None = None
    """The album this message belongs to: its parts are answered as one message."""
    content: tuple[ContentBlock, ...] = ()
    """What the attachments became for the model (documents, file texts), before the text."""
    received_at: float | None = field(default=None, compare=False)
    """When this process read it (``time.monotonic()``): turn latency is measured from here."""
    schedule_id: int | None = None
    """The scheduled task this turn carries out (not written by the user now); else ``None``."""
    trace_link: str | None = None
    """A W3C ``traceparent`` this turn's span links to (a task's: the turn that scheduled it)."""
    payment: StarPayment | None = None
    """A payment the user made (``successful_payment``): no turn, a plan granted once."""
    listen_for: tuple[str, ...] = ()
    """A group voice note that neither replies to the bot nor mentions it in a caption: the
    names of the bot, one of which it must say to be addressed (heard after the gates, which
    turn it away silently); empty for every other message."""

    @property
    def in_group(self) -> bool:
        """Whether it was written in a group or supergroup (not a private chat)."""
        return self.chat_type in ("group", "supergroup")

    @property
    def all_update_ids(self) -> tuple[int, ...]:
        """The updates this message stands for: its own, or all of a gathered burst."""
        return self.update_ids or (self.update_id,)

    @property
    def command(self) -> str | None:
        """``start`` for ``/start payload``; ``None`` when the text is not a command."""
        if not self.text.startswith("/"):
            return None
        head = self.text.split(maxsplit=1)[0][1:]
        return head.split("@", 1)[0].lower() or None

    @property
    def command_args(self) -> str:
        """The text after the command word, e.g. the ``/start`` payload."""
        parts = self.text.split(maxsplit=1)
        return parts[1].strip() if len(parts) > 1 else ""


@dataclass(frozen=True, slots=True)
class Button:
    """An inline button under a message: its label, and the data a press sends back."""

    text: str
    data: str = ""
    """At most 64 bytes (Telegram's limit for ``callback_data``)."""
    web_app: str | None = None
    """Instead of data: the HTTPS address of a Mini App the button opens (private chats only)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A text with rows of inline buttons under it (a command may answer with one)."""

    text: str
    buttons: tuple[tuple[Button, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """A user pressed an inline button under one of the bot's messages."""

    press_id: str
    """Answer it with ``Messenger.answer_press`` (Telegram shows a spinner until then)."""
    user_id: int
    chat_id: int
    message_id: int
    """The message the button is under."""
    data: str
    thread_id: int | None = None
    chat_type: str = "private"
    first_name: str | None = None

    def as_incoming(self) -> Incoming:
        """The press as a message from the presser, for the gates that admit messages."""
        return Incoming(
            update_id=0,
            user_id=self.user_id,
            chat_id=self.chat_id,
            text="",
            date=datetime.now(UTC),
            chat_type=self.chat_type,
            first_name=self.first_name,
            thread_id=self.thread_id,
        )


@dataclass(frozen=True, slots=True)
class Reaction:
    """A user changed their reactions on a message (``message_reaction``)."""

    user_id: int
    chat_id: int
    message_id: int
    """The message reacted to (one of the bot's, when it is feedback)."""
    emoji: tuple[str, ...]
    """The reactions the user has on it now (custom emoji as ``custom:<id>``); empty: none."""
    chat_type: str = "private"


@dataclass(frozen=True, slots=True)
class Checkout:
    """A user is about to pay an invoice (``pre_checkout_query``): answer within 10 s."""

    query_id: str
    user_id: int
    currency: str
    total_amount: int
    payload: str
    """The invoice's payload, as the bot made it."""
    first_name: str | None = None

    def as_incoming(self) -> Incoming:
        """The checkout as a message from the payer, for the gates that admit messages."""
        return Incoming(
            update_id=0,
            user_id=self.user_id,
            chat_id=self.user_id,
            text="",
            date=datetime.now(UTC),
            first_name=self.first_name,
        )


@dataclass(frozen=True, slots=True)
class StarPayment:
    """A payment that went through (``successful_payment``), in Telegram Stars."""

    charge_id: str
    """``telegram_payment_charge_id``: names the payment, for exactly-once and refunds."""
    currency: str
    total_amount: int
    payload: str
    subscription_expires_at: datetime | None = None
    """When a subscription's paid period ends (Telegram's ``subscription_expiration_date``)."""
    is_recurring: bool = False
    is_first_recurring: bool = False


class Draft(Protocol):
    """A reply shown to the user while it is being written."""

    text: str
    """Everything streamed into the draft so far."""
    draft_id: int
    """Names this draft: a stop press carries it, so it stops this turn and no other."""

    async def start(self) -> None:
        """Show the draft (empty: a "thinking" placeholder with a stop button) right away."""
        ...

    async def update(self, delta: str) -> None:
        """Add ``delta`` to the draft (the messenger decides how often to show it)."""
        ...

    async def status(self, note: str | None) -> None:
        """Show ``note`` under the text (what the bot is doing while tools run); ``None``
        clears it, as the next streamed text does."""
        ...

    async def finish(self) -> None:
        """Stop showing updates; after this, the final message may be sent."""
        ...


class Messenger(Protocol):
    """Sends the bot's output to a chat."""

    async def send_text(
        self, chat_id: int, text: str, *, thread_id: int | None = None, reply_to: int | None = None
    ) -> None:
        """Deliver ``text`` to ``chat_id`` (in topic ``thread_id``, replying to ``reply_to``)."""
        ...

    async def send_typing(self, chat_id: int, *, thread_id: int | None = None) -> None:
        """Show that the bot is working on an answer."""
        ...

    async def send_file(
        self, chat_id: int, file: OutgoingFile, *, thread_id: int | None = None
    ) -> None:
        """Deliver a file or picture to ``chat_id`` (in topic ``thread_id``)."""
        ...

    async def download(self, file_id: str) -> bytes | None:
        """The bytes of an attachment; ``None`` when it cannot be fetched."""
        ...

    async def is_chat_admin(self, chat_id: int, user_id: int) -> bool:
        """Whether ``user_id`` administers the group ``chat_id``."""
        ...

    def draft(self, message: Incoming) -> Draft | None:
        """A live draft for the reply to ``message``, or ``None`` where drafts are unavailable."""
        ...

    async def send_reply(
        self,
        chat_id: int,
        reply: Reply,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> int | None:
        """Deliver ``reply``: its text (as ``send_text`` does) with its buttons under it; the id
        of the message the buttons are under, when the messenger has one."""
        ...

    async def edit_reply(self, chat_id: int, message_id: int, reply: Reply) -> None:
        """Replace the text and buttons of the bot's message ``message_id``."""
        ...

    async def answer_press(self, press_id: str, text: str | None = None) -> None:
        """Acknowledge a button press, with a short notice for the user if ``text``."""
        ...


class StarSales(Protocol):
    """What selling for Telegram Stars needs of a messenger (``TelegramMessenger.stars``)."""

    async def send_invoice(
        self, chat_id: int, title: str, description: str, payload: str, stars: int
    ) -> None:
        """Send a one-off invoice of ``stars`` Stars to ``chat_id``."""
        ...

    async def subscription_link(
        self, title: str, description: str, payload: str, stars: int, period: int
    ) -> str:
        """A link to subscribe for ``stars`` Stars every ``period`` seconds."""
        ...

    async def send_link(self, chat_id: int, text: str, label: str, url: str) -> None:
        """Send ``text`` with one button that opens ``url``."""
        ...

    async def answer_checkout(self, query_id: str, error: str | None) -> None:
        """Let the payment go on (``error`` ``None``), or stop it, telling the user ``error``."""
        ...

    async def refund(self, user_id: int, charge_id: str) -> None:
        """Give the Stars of payment ``charge_id`` back to ``user_id``."""
        ...

    async def cancel_subscription(self, user_id: int, charge_id: str) -> None:
        """Stop renewing the subscription paid with ``charge_id``."""
        ...


class JournaledUpdate(Protocol):
    """An update the journal accepted: its id and its raw payload."""

    @property
    def update_id(self) -> int:
        """The messenger's id of the update."""
        ...

    @property
    def payload(self) -> dict[str, Any]:
        """The update as the messenger received it."""
        ...


class UpdateJournal(Protocol):
    """Where a messenger writes down updates before confirming them (``runtime.inbox``)."""

    def seen(self, update_id: int) -> bool:
        """Whether ``update_id`` was accepted (or rejected) before."""
        ...

    def accept(self, update_id: int, payload: dict[str, Any]) -> bool:
        """Journal an update about to be handled; ``False`` if it was accepted before."""
        ...

    def reject(self, update_id: int, payload: dict[str, Any], error: str) -> None:
        """Journal an update that could not be read."""
        ...

    def done(self, update_id: int) -> None:
        """Mark the turn of ``update_id`` finished: its reply was sent."""
        ...

    def pending(self) -> Sequence[JournaledUpdate]:
        """Accepted updates whose turn has not finished, oldest first."""
        ...

    def close(self) -> None:
        """Close the journal."""
        ...
