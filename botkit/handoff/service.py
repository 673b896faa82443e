"""Handing a user's conversation to people in the operators' forum, and back.

With BOTKIT_OPERATORS_CHAT (a forum supergroup where the bot is an admin), ``/human`` or the
model's ``handoff`` tool gives each user a topic there, named after them and reused the next
time. While the handoff is open the bot is only a relay: what the user sends is copied into the
topic, what the operators write there is copied to the user, and the model is not called. Both
sides are recorded in the user's conversation (deferred, as relayed notes are), so once an
operator ends it with ``/done`` the assistant answers knowing what was said. Which handoffs are
open lives in the user store, so it holds across restarts and across queue workers.

Traced (#32): ``handoff open``, ``handoff relay`` (``botkit.handoff.direction``: to_operators,
to_user) and ``handoff done`` spans, with the topic's id; never what was said.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, suppress
from datetime import UTC, datetime
from typing import Protocol, cast, runtime_checkable

import structlog

from botkit import tracing
from botkit.access import Access
from botkit.agent.pool import ContextPool
from botkit.commands import Command
from botkit.config import Settings
from botkit.errors import ConfigError, LLMError, MessengerError, ToolError
from botkit.llm.base import LLM, LLMRequest
from botkit.messengers.base import Button, ButtonPress, Incoming, Messenger, Reply
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.plugins import Plugin
from botkit.stores.changes import KeptRows
from botkit.stores.handoffs import Handoff, HandoffStore
from botkit.tools import Tool, ToolContext, tool
from botkit.types import Message, TextBlock

__all__ = ["LAST_MESSAGES", "Forum", "HandoffHost", "Handoffs", "attach_handoffs"]

log = structlog.get_logger(__name__)

LAST_MESSAGES = 10
"""Messages the operators are shown when the model's summary cannot be had."""
SUMMARY_PROMPT = (
    "A customer's conversation with an AI assistant is being handed to a human operator. "
    "Summarize it for the operator in at most five short lines: who the user is, what they "
    "want, what was already said or tried, and what is still open. Plain text, no greeting."
)
DONE_DATA = "handoff:done"
"""The data of the "Done" button under a topic's first post."""
_QUOTED_CHARS = 500
"""A message is cut to this many characters in the transcript the summary is made from."""


class HandoffHost(Protocol):
    """What handoffs need of a bot."""

    settings: Settings
    options: BotOptions
    metrics: Metrics
    access: Access
    contexts: ContextPool
    messenger: Messenger | None
    commands: dict[str, Command]
    plugins: list[Plugin]

    @property
    def llm(self) -> LLM:
        """The model the bot talks to (it writes the summary)."""
        ...


@runtime_checkable
class Forum(Protocol):
    """What handoffs need of a messenger beyond sending: topics, and copies of messages."""

    async def create_topic(self, chat_id: int, name: str) -> int:
        """Create a topic; its id."""
        ...

    async def close_topic(self, chat_id: int, thread_id: int) -> None:
        """Close a topic."""
        ...

    async def reopen_topic(self, chat_id: int, thread_id: int) -> None:
        """Reopen a closed topic."""
        ...

    async def copy_message(
        self, chat_id: int, from_chat_id: int, message_id: int, *, thread_id: int | None = None
    ) -> None:
        """Send a copy of a message (text or media) as the bot's own."""
        ...


def attach_handoffs(bot: HandoffHost) -> Handoffs | None:
    """Handoffs for ``bot`` when BOTKIT_OPERATORS_CHAT is set (``/human`` and the ``handoff``
    tool registered); ``None`` otherwise."""
    if bot.settings.operators_chat is None:
        return None
    handoffs = Handoffs(bot, bot.settings.operators_chat)
    bot.commands["human"] = Command("human", "Talk to a person", handoffs.human_command)
    bot.plugins.append(_HandoffPlugin(handoffs))
    bot.metrics.refresh_on_scrape(handoffs.count_open)
    return handoffs


class Handoffs:
    """Opens, relays and ends the handoffs of one bot's users to its operators' chat."""

    def __init__(self, host: HandoffHost, operators_chat: int) -> None:
        self.host = host
        self.operators_chat = operators_chat
        """The forum supergroup where each handed-over user has a topic."""
        self._closed: KeptRows | None = None
        self._checked: object = None
        """The user store last found to keep handoffs."""
        self._names: dict[int, str] = {}
        """Each user's name as their latest message gave it, for the topic a handoff opens."""
        self._tool = self._handoff_tool()

    # ---- the pipeline's two points ----------------------------------------------------

    async def take_operator_message(self, message: Incoming, messenger: Messenger) -> bool:
        """Whether ``message`` came from the operators' chat (then it is handled here: copied
        to its topic's user, or ``/done``; outside an open handoff's topic, ignored)."""
        if message.chat_id != self.operators_chat:
            return False
        handoff = None
        if message.thread_id is not None:
            handoff = await (await self._store()).handoff_in_topic(message.thread_id)
        if handoff is None or not handoff.is_open or message.kind == "other":
            log.debug("handoff.operator_message_ignored", thread_id=message.thread_id)
        elif message.command == "done":
            await self._done(message, handoff, messenger)
        else:
            await self._to_user(message, handoff, messenger)
        return True

    async def take_operator_press(self, press: ButtonPress, messenger: Messenger) -> bool:
        """Whether ``press`` came from the operators' chat (then it is handled here: "Done"
        ends the topic's handoff, for an admin; no gate applies)."""
        if press.chat_id != self.operators_chat:
            return False
        handoff = None
        if press.data == DONE_DATA and press.thread_id is not None:
            handoff = await (await self._store()).handoff_in_topic(press.thread_id)
        refusal = None
        if handoff is not None and handoff.is_open:
            refusal = await self._end(press.user_id, handoff, messenger)
        await messenger.answer_press(press.press_id, refusal)
        return True

    async def relay_if_handed_off(self, message: Incoming, messenger: Messenger) -> bool:
        """Whether the sender's conversation is handed over (then ``message`` was copied to
        their topic and recorded, and the assistant stays silent)."""
        handoff = await self.open_for(message)
        if handoff is None:
            return False
        with _relay_span("to_operators", handoff):
            await self._to_operators(message, handoff, messenger)
        return True

    async def open_for(self, message: Incoming) -> Handoff | None:
        """The open handoff of ``message``'s private conversation, if any (a user found with
        none is not asked about again until their handoff is written)."""
        if message.chat_type != "private":
            return None
        store = await self._store()
        closed = self._closed_users(store)
        user = str(message.user_id)
        if await closed.usable() and closed.get(user)[0]:
            return None
        read_at = closed.changes
        handoff = await store.handoff_of(message.user_id)
        if handoff is not None and handoff.is_open:
            return handoff
        closed.keep(user, None, read_at)
        return None

    def _closed_users(self, store: object) -> KeptRows:
        """Users known to have no open handoff: kept while the PostgreSQL store's change feed
        is live, or for good with SQLite (the serving process opens every handoff)."""
        if self._closed is None:
            feed = getattr(store, "changes", None)
            self._closed = KeptRows(feed, "botkit_handoffs", alone=feed is None)
        return self._closed

    async def tell_operators(self, handoff: Handoff, text: str, messenger: Messenger) -> None:
        """A line in ``handoff``'s topic (logged, not raised, when it cannot be sent)."""
        try:
            await messenger.send_text(self.operators_chat, text, thread_id=handoff.topic_id)
        except MessengerError as e:
            log.error("handoff.note_not_sent", user_id=handoff.user_id, error=str(e))

    async def _to_operators(
        self, message: Incoming, handoff: Handoff, messenger: Messenger
    ) -> None:
        """A handed-over user's message: copied to their topic, recorded as theirs."""
        try:
            if len(message.all_update_ids) > 1:  # a gathered burst: one copy would show one
                await messenger.send_text(
                    self.operators_chat, _burst_text(message), thread_id=handoff.topic_id
                )
            elif message.message_id is not None:
                await _forum(messenger).copy_message(
                    self.operators_chat,
                    message.chat_id,
                    message.message_id,
                    thread_id=handoff.topic_id,
                )
        except MessengerError as e:  # the topic deleted, the bot no longer an admin: end it
            log.error("handoff.not_copied", user_id=message.user_id, error=str(e))
            await self._close(handoff)
            await messenger.send_text(message.chat_id, self.host.options.handoff_unavailable_text)
            return
        await self.host.contexts.inject(message.user_id, _said_by_user(message))

    # ---- opening ----------------------------------------------------------------------

    async def human_command(self, message: Incoming, args: str) -> str:
        """``/human [reason]``: hand the sender's conversation to the operators."""
        if message.chat_type != "private":
            return self.host.options.handoff_private_only_text
        reason = args or "the user asked for a person"
        return await self.open(message.user_id, message.chat_id, _name_of(message), reason)

    async def open(self, user_id: int, chat_id: int, name: str, reason: str) -> str:
        """Hand ``user_id``'s conversation over: their topic opened (or reopened) with a
        summary; what the user is to be told."""
        with tracing.tracer.span("handoff open"):
            return await self._open(user_id, chat_id, name, reason)

    async def _open(self, user_id: int, chat_id: int, name: str, reason: str) -> str:
        options = self.host.options
        store = await self._store()
        known = await store.handoff_of(user_id)
        if known is not None and known.is_open:
            return options.handoff_already_text
        try:
            topic_id = await self._topic_for(known, f"{name} ({user_id})")
        except MessengerError as e:
            log.error("handoff.topic_failed", user_id=user_id, error=str(e))
            return options.handoff_unavailable_text
        if self._closed is not None:
            self._closed.forget(str(user_id))
        handoff = await store.open_handoff(user_id, chat_id, topic_id, name)
        tracing.tracer.event("botkit.handoff.opened", **{"botkit.handoff.topic_id": topic_id})
        # the reason is the user's words: its length only, never the text, in the log
        log.info("handoff.opened", user_id=user_id, topic_id=topic_id, reason_chars=len(reason))
        summary = await self._summary(user_id)
        text = options.handoff_topic_text.format(
            name=name, user_id=user_id, reason=reason, summary=summary
        )
        done = Button(options.handoff_done_button, DONE_DATA)
        await self._messenger().send_reply(
            self.operators_chat, Reply(text, ((done,),)), thread_id=handoff.topic_id
        )
        await self.count_open()
        return options.handoff_opened_text

    async def _topic_for(self, known: Handoff | None, name: str) -> int:
        """The user's topic: their earlier one reopened, or a new one."""
        forum = _forum(self._messenger())
        if known is not None:
            try:
                await forum.reopen_topic(self.operators_chat, known.topic_id)
                return known.topic_id
            except MessengerError as e:  # deleted by the operators since, say
                log.info("handoff.topic_not_reopened", topic_id=known.topic_id, error=str(e))
        return await forum.create_topic(self.operators_chat, name)

    async def _summary(self, user_id: int) -> str:
        """The conversation so far for the operators: the model's summary, or (when that
        fails) its last messages."""
        lines = _transcript((await self.host.contexts.get(user_id)).messages)
        if not lines:
            return "(No conversation yet.)"
        transcript = Message(role="user", content=[TextBlock(text="\n".join(lines))])
        request = LLMRequest(system=SUMMARY_PROMPT, messages=[transcript], max_tokens=500)
        try:
            response = await self.host.llm.complete(request)
            await self.host.access.charge(user_id, response.usage, response.model)
        except LLMError as e:
            log.warning("handoff.summary_failed", user_id=user_id, error=str(e))
        else:
            if response.message.text.strip():
                return response.message.text.strip()
        return "\n".join(lines[-LAST_MESSAGES:])

    # ---- relaying and ending ----------------------------------------------------------

    async def _to_user(self, message: Incoming, handoff: Handoff, messenger: Messenger) -> None:
        """An operator's message: copied to the user, recorded as the assistant's side."""
        with _relay_span("to_user", handoff):
            await self._relay_to_user(message, handoff, messenger)

    async def _relay_to_user(
        self, message: Incoming, handoff: Handoff, messenger: Messenger
    ) -> None:
        assert message.message_id is not None
        try:
            await _forum(messenger).copy_message(
                handoff.chat_id, self.operators_chat, message.message_id
            )
        except MessengerError as e:  # the user blocked the bot, say: the operators are told
            log.warning("handoff.not_delivered", user_id=handoff.user_id, error=str(e))
            text = self.host.options.handoff_undelivered_text.format(error=e)
            await messenger.send_text(
                self.operators_chat, text, thread_id=handoff.topic_id, reply_to=message.message_id
            )
            return
        await self.host.contexts.inject(handoff.user_id, _said_by_operator(message))
        answered = await (await self._store()).first_reply(handoff.user_id, datetime.now(UTC))
        if answered is not None and answered.first_reply_at is not None:
            waited = (answered.first_reply_at - answered.opened_at).total_seconds()
            self.host.metrics.handoff_first_reply_seconds.observe(max(waited, 0.0))

    async def _done(self, message: Incoming, handoff: Handoff, messenger: Messenger) -> None:
        """``/done`` in a topic: by an admin, the user is handed back to the assistant."""
        refusal = await self._end(message.user_id, handoff, messenger)
        if refusal is not None:
            await messenger.send_text(
                self.operators_chat,
                refusal,
                thread_id=handoff.topic_id,
                reply_to=message.message_id,
            )

    async def _end(self, by: int, handoff: Handoff, messenger: Messenger) -> str | None:
        """End ``handoff`` at ``by``'s request: the user is told, the topic closed; the text
        refusing ``by`` if they may not end it."""
        attributes = {"botkit.handoff.topic_id": handoff.topic_id}
        with tracing.tracer.span("handoff done", attributes=attributes) as span:
            refusal = await self._try_end(by, handoff, messenger)
            span.set("botkit.handoff.refused", refusal is not None)
            return refusal

    async def _try_end(self, by: int, handoff: Handoff, messenger: Messenger) -> str | None:
        options = self.host.options
        if not await self._may_end(by, messenger):
            log.info("handoff.done_refused", user_id=by, topic_id=handoff.topic_id)
            return options.handoff_done_refused_text
        if not await self._close(handoff):
            return None  # another /done ended it meanwhile
        log.info("handoff.closed", user_id=handoff.user_id, by=by)
        with suppress(MessengerError):  # the user blocked the bot: the handoff ends all the same
            await messenger.send_text(handoff.chat_id, options.handoff_closed_text)
        await messenger.send_text(
            self.operators_chat, options.handoff_done_text, thread_id=handoff.topic_id
        )
        with suppress(MessengerError):  # closed by hand already
            await _forum(messenger).close_topic(self.operators_chat, handoff.topic_id)
        return None

    async def _may_end(self, user_id: int, messenger: Messenger) -> bool:
        """Whether ``user_id`` is one of the bot's admins or an admin of the operators' chat."""
        if self.host.access.is_admin(user_id):
            return True
        record = await self.host.access.known_user(user_id)
        if record is not None and record.role == "admin" and not record.blocked:
            return True
        return await messenger.is_chat_admin(self.operators_chat, user_id)

    async def _close(self, handoff: Handoff) -> bool:
        """Mark ``handoff`` ended; whether this call ended it."""
        closed = await (await self._store()).close_handoff(handoff.user_id)
        await self.count_open()
        return closed is not None

    # ---- the store, the messenger, the gauge ------------------------------------------

    async def open_handoffs(self) -> list[Handoff]:
        """Every open handoff, oldest first."""
        return await (await self._store()).open_handoffs()

    async def count_open(self) -> None:
        """Set the ``botkit_handoffs_open`` gauge from the store (every process sees all)."""
        self.host.metrics.handoffs_open.set(len(await self.open_handoffs()))

    async def _store(self) -> HandoffStore:
        store = await self.host.access.user_store()
        if store is self._checked:  # a Protocol's isinstance costs tens of µs: once per store
            return cast(HandoffStore, store)
        if not isinstance(store, HandoffStore):
            raise ConfigError(
                f"BOTKIT_OPERATORS_CHAT needs a user store that keeps handoffs; "
                f"{type(store).__name__} does not (use SqliteUserStore or PostgresUserStore)"
            )
        self._checked = store
        return store

    def _messenger(self) -> Messenger:
        if self.host.messenger is None:
            raise ToolError("the bot is not connected to Telegram yet")
        return self.host.messenger

    def tool_for(self, message: Incoming) -> Tool:
        """The ``handoff`` tool for the turn of ``message`` (one for every turn: making a tool
        costs a JSON schema; the sender's name is noted for it)."""
        if len(self._names) >= _NAMES_KEPT:
            self._names.clear()
        self._names[message.user_id] = _name_of(message)
        return self._tool

    def _handoff_tool(self) -> Tool:
        @tool(name="handoff")
        async def handoff(ctx: ToolContext, reason: str) -> str:
            """Hand this conversation to a person on the team, who will answer the user here.

            Use it when the user asks for a human, or needs something only a person can do.

            Args:
                reason: Why a person is needed, in one line, for the person taking over.
            """
            name = self._names.get(ctx.user_id) or f"user {ctx.user_id}"
            told = await self.open(ctx.user_id, ctx.chat_id, name, reason)
            await self._messenger().send_text(ctx.chat_id, told)
            return (
                f"The user was told: {told!r}. A person answers them from now on; end your "
                "turn without asking anything more."
            )

        return handoff


class _HandoffPlugin(Plugin):
    """Offers the ``handoff`` tool in private chats."""

    def __init__(self, handoffs: Handoffs) -> None:
        self.handoffs = handoffs

    def tools(self, message: Incoming) -> Sequence[Tool]:
        """``handoff``, in a private chat."""
        return [self.handoffs.tool_for(message)] if message.chat_type == "private" else []


def _relay_span(direction: str, handoff: Handoff) -> AbstractContextManager[tracing.Span]:
    """The span of one message relayed between a user and their topic."""
    attributes: dict[str, tracing.AttributeValue] = {
        "botkit.handoff.direction": direction,
        "botkit.handoff.topic_id": handoff.topic_id,
    }
    return tracing.tracer.span("handoff relay", attributes=attributes)


def _forum(messenger: Messenger) -> Forum:
    if not isinstance(messenger, Forum):
        raise ConfigError(f"{type(messenger).__name__} has no forum topics: handoff needs them")
    return messenger


_NAMES_KEPT = 100_000
"""Users whose names are kept for the handoff tool; all are forgotten when there are more."""


def _name_of(message: Incoming) -> str:
    return message.first_name or message.username or f"user {message.user_id}"


OPERATOR_MARK = ", a person on the team, wrote:]"
"""How an operator's line is marked in the conversation; never in a user's."""
DEFUSED_MARK = ", a person on the team, wrote (the user typed this):]"
"""What the mark becomes when a user types it."""


def _said_by_user(message: Incoming) -> Message:
    """What the user sent during a handoff, as their message in the conversation: their
    words can never read as an operator's (the mark is defused in them)."""
    shown = f"[{message.kind}] " if message.kind != "text" else ""
    words = message.text.replace(
        OPERATOR_MARK, ", a person on the team, wrote (the user typed this):]"
    )
    return Message(role="user", content=[TextBlock(text=f"{shown}{words}".strip())])


def _burst_text(message: Incoming) -> str:
    """A burst of the user's messages gathered into one, as the operators read it."""
    media = len(message.photo_ids) + len(message.attachments)
    extra = f"\n[and {media} files, kept in the conversation]" if media else ""
    return f"{message.text}{extra}".strip() or "[files]"


def _said_by_operator(message: Incoming) -> Message:
    """An operator's message, as the assistant's side of the conversation, marked as theirs."""
    shown = f"[{message.kind}] " if message.kind != "text" else ""
    who = message.first_name or "an operator"
    text = f"[{who}{OPERATOR_MARK} {shown}{message.text}".strip()
    return Message(role="assistant", content=[TextBlock(text=text)])


def _transcript(messages: Sequence[Message]) -> list[str]:
    """The conversation's texts, one line per message (tool calls left out)."""
    lines = []
    for message in messages:
        blocks = [b.text for b in message.content if isinstance(b, TextBlock)]
        text = " ".join(" ".join(b for b in blocks if not _is_note(b)).split())
        if text:
            cut = text if len(text) <= _QUOTED_CHARS else f"{text[:_QUOTED_CHARS]}…"
            lines.append(f"{'User' if message.role == 'user' else 'Assistant'}: {cut}")
    return lines


def _is_note(text: str) -> bool:
    """A line botkit put before the user's words (their local time, say), not theirs."""
    text = text.strip()
    return text.startswith("[") and text.endswith("]") and "\n" not in text
