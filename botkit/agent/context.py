"""``ContextManager``: one user's conversation, and the hook that records each append."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from botkit.agent.history import normalize, trim
from botkit.sessions import SessionEntry
from botkit.types import Message

__all__ = ["ContextManager", "ConvertToLLM", "OnAppend", "TransformContext"]

OnAppend = Callable[[SessionEntry], Awaitable[None]]
"""Called with the session entry of every append, before it enters the context."""
TransformContext = Callable[[list[Message]], list[Message]]
"""Rewrites the stored conversation before it is prepared for a call (e.g. to drop images)."""
ConvertToLLM = Callable[[list[Message]], list[Message]]
"""Last step before the call: turns the prepared messages into what the model gets."""


class ContextManager:
    """The conversation of one user: messages in memory, every append recorded."""

    def __init__(
        self,
        user_id: int,
        *,
        messages: Iterable[Message] = (),
        max_messages: int = 40,
        transform_context: TransformContext | None = None,
        convert_to_llm: ConvertToLLM | None = None,
        on_append: OnAppend | Sequence[OnAppend] = (),
    ) -> None:
        self.user_id = user_id
        self.max_messages = max_messages
        self.transform_context = transform_context
        self.convert_to_llm = convert_to_llm
        self.on_append: list[OnAppend] = [on_append] if callable(on_append) else list(on_append)
        self.lock = asyncio.Lock()
        """Held for the length of a turn, so one user's turns never overlap."""
        self._messages: list[Message] = list(messages)

    @property
    def messages(self) -> list[Message]:
        """A copy of the conversation so far, oldest first."""
        return list(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    async def append(self, message: Message, **meta: object) -> SessionEntry:
        """Record ``message`` through the ``on_append`` hooks, then add it to the context.

        ``meta`` (e.g. ``update_id``, ``model``, ``stop_reason``) goes into the record only.
        """
        entry = SessionEntry.of(self.user_id, message, **meta)
        for hook in self.on_append:
            await hook(entry)
        self._messages.append(message)
        return entry

    def prepare(self) -> list[Message]:
        """The messages to send to the model: transformed, made valid, trimmed, converted."""
        messages = self.messages
        if self.transform_context is not None:
            messages = self.transform_context(messages)
        messages = trim(normalize(messages), self.max_messages)
        if self.convert_to_llm is not None:
            messages = self.convert_to_llm(messages)
        return messages

    def clear(self) -> None:
        """Forget the conversation in memory (the session file is not touched)."""
        self._messages.clear()
