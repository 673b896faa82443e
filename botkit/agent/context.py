"""``ContextManager``: one user's conversation, and the hook that records each append."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from botkit.agent.history import normalize, trim, without_earlier_thinking
from botkit.sessions import CompactionEntry, FeedbackEntry, ResetEntry, SessionEntry
from botkit.sessions.live import needed_from
from botkit.sessions.media import references, resolve
from botkit.types import Message, TextBlock, Usage

__all__ = ["SUMMARY_PREFIX", "ContextManager", "ConvertToLLM", "OnAppend", "TransformContext"]

SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
PACE_TURNS = 5
"""The latest turns whose beginnings a context remembers, for its pace."""

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry
FetchMedia = Callable[[Iterable[str]], Awaitable[Mapping[str, bytes]]]
"""Reads stored media by name (``<sha256>.<ext>``); those that are gone are left out."""
OnAppend = Callable[[Entry], Awaitable[None]]
"""Called with the record of every change (append, reset, compaction) before it happens."""
TransformContext = Callable[[list[Message]], list[Message]]
"""Rewrites the stored conversation before it is prepared for a call (e.g. to drop images)."""
ConvertToLLM = Callable[[list[Message]], list[Message]]
"""Last step before the call: turns the prepared messages into what the model gets."""


class ContextManager:
    """One conversation, a user's or a group's: messages in memory, every append recorded."""

    def __init__(
        self,
        user_id: int,
        *,
        conversation: str | None = None,
        messages: Iterable[Message] = (),
        max_messages: int = 40,
        transform_context: TransformContext | None = None,
        convert_to_llm: ConvertToLLM | None = None,
        on_append: OnAppend | Sequence[OnAppend] = (),
    ) -> None:
        self.user_id = user_id
        """The user of a private conversation; for a group's, the chat (or the member)."""
        self.conversation = conversation
        """A group conversation's key (``chat_<id>[_<topic>]``); ``None`` for a private one."""
        self.max_messages = max_messages
        self.transform_context = transform_context
        self.convert_to_llm = convert_to_llm
        self.on_append: list[OnAppend] = [on_append] if callable(on_append) else list(on_append)
        self.lock = asyncio.Lock()
        """Held for the length of a turn, so one user's turns never overlap."""
        self._messages: list[Message] = list(messages)
        self.appended = 0
        """Messages appended since this context was built (compaction does not lower it)."""
        self._turn_starts: dict[int, int] = {}
        self.pending: list[Message] = []
        """Messages injected with ``defer`` (already recorded); they join at the next turn."""
        self.usage_by_model: dict[str, Usage] = {}
        """Everything this user's calls cost, per model, resets and compactions included."""
        self._provisional: tuple[SessionEntry, int] | None = None
        """A message added but not recorded yet, and its index."""
        self._turn_times: deque[float] = deque(maxlen=PACE_TURNS)
        """When the latest turns began (POSIX seconds, from their records)."""

    @classmethod
    def restore(cls, user_id: int, entries: Iterable[Entry], **options: Any) -> ContextManager:
        """A context rebuilt from recorded entries (``options`` as for the constructor)."""
        context = cls(user_id, **options)
        entries = list(entries)
        start = needed_from(entries)  # what came before no longer shapes the context
        for entry in entries[:start]:
            context._count(entry)
            context._clock(entry)
        for entry in entries[start:]:
            context._count(entry)
            context._clock(entry)
            if isinstance(entry, SessionEntry) and entry.deferred:
                context.pending.append(entry.to_message())
            elif isinstance(entry, SessionEntry):
                if _starts_turn(entry):
                    context._flush()  # where flush_pending put them before this turn
                context._add(entry.to_message(), entry.update_id)
            elif isinstance(entry, ResetEntry):
                context.clear()
            elif isinstance(entry, CompactionEntry):
                context._apply_compaction(entry.summary, entry.kept)
            # a FeedbackEntry (a user's reaction) is for people and re-runs, not the model
        return context

    async def fill_media(self, fetch: FetchMedia) -> None:
        """Put back the media of the messages the next call may send, read with ``fetch``.

        A context rebuilt from entries whose media are references (``restore`` from a store's
        ``load_stored``) needs the bytes only of the messages in the window ``prepare`` keeps
        (with a ``transform_context``, which may rebuild messages, of all it holds): older ones
        keep their references, as the window only moves forward.
        """
        start = self._window_start()
        wanted = [*self._messages[start:], *self.pending]
        names = {name for message in wanted for name in references(message.content)}
        if not names:
            return
        found = await fetch(names)
        self._messages[start:] = [_with_media(m, found) for m in self._messages[start:]]
        self.pending = [_with_media(m, found) for m in self.pending]

    def _window_start(self) -> int:
        """The first of the messages whose content ``prepare`` may send (by block identity)."""
        if self.transform_context is not None:
            return 0
        window = trim(normalize(self._messages), self.max_messages)  # alive: its ids stay unique
        sent = {id(block) for message in window for block in message.content}
        for index, message in enumerate(self._messages):
            if any(id(block) in sent for block in message.content):
                return index
        return len(self._messages)

    @property
    def key(self) -> str:
        """The conversation's name: its session file's, without ``.jsonl``."""
        return self.conversation or str(self.user_id)

    @property
    def messages(self) -> list[Message]:
        """A copy of the conversation so far, oldest first."""
        return list(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    async def append(
        self,
        message: Message,
        *,
        user_id: int | None = None,
        provisional: bool = False,
        **meta: object,
    ) -> SessionEntry:
        """Record ``message`` through the ``on_append`` hooks, then add it to the context.

        ``meta`` (e.g. ``update_id``, ``model``, ``stop_reason``; in a group, the ``speaker``'s
        name) goes into the record only, with ``user_id`` when someone else than the
        context's user wrote it (a group member). A ``provisional`` message (one with media
        the API may refuse) is recorded only with the next change (the answer), or by
        ``keep``; ``withdraw`` takes it back unrecorded.
        """
        author = self.user_id if user_id is None else user_id
        model = meta.get("model")
        if message.role == "assistant" and message.model is None and isinstance(model, str):
            message = message.model_copy(update={"model": model})  # as its record will read
        entry = SessionEntry.of(author, message, conversation=self.conversation, **meta)
        if provisional:
            await self.keep()  # one provisional message at a time
            self._provisional = (entry, len(self._messages))
        else:
            await self._record(entry)
        self._add(message, entry.update_id)
        self._clock(entry)
        return entry

    def preview(self, turn: Message) -> ContextManager:
        """A copy of this context as its next turn will see it: the deferred messages joined
        and ``turn`` appended, nothing recorded (a request built ahead of its turn)."""
        copy = ContextManager(
            self.user_id,
            conversation=self.conversation,
            messages=[*self._messages, *self.pending, turn],
            max_messages=self.max_messages,
            transform_context=self.transform_context,
            convert_to_llm=self.convert_to_llm,
        )
        copy._turn_times.extend(self._turn_times)
        return copy

    def pauses(self) -> tuple[float, ...]:
        """Seconds between the latest turns' beginnings, oldest first (the conversation's
        pace: how long its prompt cache should live)."""
        times = list(self._turn_times)
        return tuple(max(later - earlier, 0.0) for earlier, later in pairwise(times))

    def _clock(self, entry: Entry) -> None:
        if isinstance(entry, SessionEntry) and _starts_turn(entry) and not entry.deferred:
            self._turn_times.append((entry.sent_at or entry.timestamp).timestamp())

    async def keep(self) -> None:
        """Record the provisional message, if any (its call was accepted, or failed otherwise)."""
        if self._provisional is not None:
            entry, _ = self._provisional
            self._provisional = None
            await self._record(entry)

    def withdraw(self) -> bool:
        """Take the provisional message back out of the context, never recorded (the API
        refused its media); whether there was one."""
        if self._provisional is None:
            return False
        entry, index = self._provisional
        self._provisional = None
        del self._messages[index:]
        self.appended -= 1
        if entry.update_id is not None:
            self._turn_starts.pop(entry.update_id, None)
        return True

    def _add(self, message: Message, update_id: int | None) -> None:
        if update_id is not None:
            self._turn_starts[update_id] = len(self._messages)
        self._messages.append(message)
        self.appended += 1

    async def defer(self, message: Message) -> None:
        """Record ``message`` now; it joins the context when the next turn starts.

        For messages from outside the conversation (a relayed note): recorded at once, so a
        restart keeps them, and never inside a running turn, where they would split a tool call
        from its result (in this process or in another one sharing the session store).
        """
        entry = SessionEntry.of(
            self.user_id, message, conversation=self.conversation, deferred=True
        )
        await self._record(entry)
        self.pending.append(message)

    async def flush_pending(self) -> None:
        """Add the deferred messages to the context, in order (hold ``lock``, at a turn's start)."""
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            self._add(self.pending.pop(0), None)

    def since(self, appended: int) -> list[Message]:
        """The messages appended after ``appended`` was read (those still in the context)."""
        count = min(self.appended - appended, len(self._messages))
        return self._messages[len(self._messages) - count :] if count > 0 else []

    def has_turn(self, update_id: int) -> bool:
        """Whether the message of ``update_id`` is already in this context."""
        return update_id in self._turn_starts

    def answer_to(self, update_id: int) -> str | None:
        """The final text answer the turn of ``update_id`` recorded, if it got that far."""
        start = self._turn_starts.get(update_id)
        if start is None:
            return None
        later_starts = [i for i in self._turn_starts.values() if i > start]
        end = min(later_starts, default=len(self._messages))
        turn = self._messages[start + 1 : end]
        if turn and turn[-1].role == "assistant" and not turn[-1].tool_uses and turn[-1].text:
            return turn[-1].text
        return None

    def prepare(self) -> list[Message]:
        """The messages to send to the model: transformed, made valid, trimmed, converted."""
        messages = self.messages
        if self.transform_context is not None:
            messages = self.transform_context(messages)
        messages = without_earlier_thinking(trim(normalize(messages), self.max_messages))
        if self.convert_to_llm is not None:
            messages = self.convert_to_llm(messages)
        return messages

    async def reset(self, reason: str | None = None) -> None:
        """Start a fresh conversation; the session file records the reset."""
        reset = ResetEntry(user_id=self.user_id, conversation=self.conversation, reason=reason)
        await self._record(reset)
        self.clear()

    async def compact(
        self, summary: str, kept: int, usage: Usage | None = None, model: str | None = None
    ) -> None:
        """Replace all but the last ``kept`` messages by ``summary``, and record it."""
        entry = CompactionEntry(
            user_id=self.user_id,
            conversation=self.conversation,
            summary=summary,
            kept=kept,
            usage=usage,
            model=model,
        )
        await self._record(entry)
        self._apply_compaction(summary, kept)

    def clear(self) -> None:
        """Forget the conversation in memory (the session file is not touched)."""
        self._messages.clear()
        self.pending.clear()
        self._turn_starts.clear()
        self._provisional = None

    async def record(self, entry: FeedbackEntry) -> None:
        """Record a reaction's feedback through the ``on_append`` hooks (it shapes no
        context: the model never sees it)."""
        for hook in self.on_append:
            await hook(entry)

    async def _record(self, entry: Entry) -> None:
        if self._provisional is not None and not getattr(entry, "deferred", False):
            await self.keep()  # anything recorded after it confirms it, in order
        for hook in self.on_append:
            await hook(entry)
        self._count(entry)

    def _count(self, entry: Entry) -> None:
        usage = getattr(entry, "usage", None)
        if usage is not None:
            model = getattr(entry, "model", None) or "unknown"
            self.usage_by_model[model] = self.usage_by_model.get(model, Usage()) + usage

    def _apply_compaction(self, summary: str, kept: int) -> None:
        kept_messages = self._messages[max(len(self._messages) - kept, 0) :] if kept else []
        shift = len(self._messages) - len(kept_messages)
        self._turn_starts = {u: i - shift + 1 for u, i in self._turn_starts.items() if i >= shift}
        note = Message(role="user", content=[TextBlock(text=SUMMARY_PREFIX + summary)])
        self._messages = [note, *kept_messages]


def _with_media(message: Message, found: Mapping[str, bytes]) -> Message:
    """``message`` with its stored media filled in from ``found`` (a note for those gone)."""
    if not references(message.content):
        return message
    return message.model_copy(update={"content": resolve(message.content, found.get)})


def _starts_turn(entry: SessionEntry) -> bool:
    """Whether a recorded message began a turn: a user message that is not only tool results."""
    return entry.role == "user" and any(block.type != "tool_result" for block in entry.content)
