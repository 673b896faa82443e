"""Reactions as feedback: a user's 👍 or 👎 (or any emoji) on one of the bot's replies,
recorded in that conversation's session as a ``FeedbackEntry`` tied to the turn it answers.

The turn is found by message ids, which Telegram numbers in order within a chat: the reply
reacted to answers the latest user message of the conversation sent before it (each user
message's id is recorded with it). That is exact while users wait for the answer; a message
sent while the bot was still answering has a smaller id than that answer, so a reaction on
the answer is then put on the later turn. A reaction carries no forum topic, so one in a
forum goes to the chat's General conversation; with ``BOTKIT_GROUP_CONTEXT=per_user`` group
reactions are not recorded (a reaction does not say whose conversation the reply is in); one
on a message older than any recorded turn is not feedback on a turn, and is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import structlog

from botkit.sessions import FeedbackEntry, SessionEntry

if TYPE_CHECKING:
    from botkit.agent.pool import ContextPool
    from botkit.messengers.base import Reaction
    from botkit.metrics import Metrics

__all__ = ["FeedbackKind", "FeedbackRecorder", "feedback_kind", "turn_answered_by"]

log = structlog.get_logger(__name__)

FeedbackKind = Literal["positive", "negative", "other", "removed"]
POSITIVE = frozenset({"👍", "❤", "❤️", "🔥", "👏", "🙏", "👌", "💯", "🏆"})
"""Reactions read as 👍."""
NEGATIVE = frozenset({"👎", "💩", "🤮", "😡", "🤬", "🖕", "🥱"})
"""Reactions read as 👎."""


def feedback_kind(emoji: Sequence[str]) -> FeedbackKind:
    """How a person's reactions now read: 👎 wins over 👍; none left is ``removed``."""
    if not emoji:
        return "removed"
    if any(e in NEGATIVE for e in emoji):
        return "negative"
    if any(e in POSITIVE for e in emoji):
        return "positive"
    return "other"


def turn_answered_by(entries: Sequence[object], message_id: int) -> int | None:
    """The update id of the turn a bot message ``message_id`` answers: the latest user
    message recorded with a smaller message id (``None`` when none is)."""
    found: tuple[int, int] | None = None
    for entry in entries:
        if not isinstance(entry, SessionEntry) or entry.role != "user":
            continue
        sent, update = entry.message_id, entry.update_id
        if sent is None or update is None or sent >= message_id:
            continue
        if found is None or sent > found[0]:
            found = (sent, update)
    return found[1] if found is not None else None


class FeedbackRecorder:
    """Records reactions on the bot's replies in their conversations' sessions."""

    def __init__(
        self, contexts: ContextPool, metrics: Metrics, group_context: str = "shared"
    ) -> None:
        self.contexts = contexts
        self.metrics = metrics
        self.group_context = group_context

    async def record(self, reaction: Reaction) -> FeedbackEntry | None:
        """Record ``reaction`` on the turn its message answers; the entry, or ``None`` when
        the message answers no recorded turn of the conversation."""
        owner, conversation = self._conversation(reaction)
        if owner is None:
            log.debug("feedback.conversation_unknown", chat_id=reaction.chat_id)
            return None
        context = await self.contexts.get(owner, conversation)
        async with context.lock:
            recorded = await self._load(conversation or owner)
            update_id = turn_answered_by(recorded, reaction.message_id)
            if update_id is None:
                log.debug("feedback.no_turn", chat_id=reaction.chat_id)
                return None
            entry = FeedbackEntry(
                user_id=reaction.user_id,
                conversation=conversation,
                update_id=update_id,
                message_id=reaction.message_id,
                emoji=list(reaction.emoji),
                kind=feedback_kind(reaction.emoji),
                by=reaction.user_id,
            )
            await context.record(entry)
        self.metrics.feedback_recorded(entry.kind)
        log.info("feedback.recorded", kind=entry.kind, update_id=update_id)
        return entry

    def _conversation(self, reaction: Reaction) -> tuple[int | None, str | None]:
        """The owner and group key of the conversation the reacted message is in."""
        if reaction.chat_type == "private":
            return reaction.user_id, None
        if self.group_context == "per_user":
            return None, None  # whose conversation a reply belongs to is not in a reaction
        return reaction.chat_id, f"chat_{reaction.chat_id}"

    async def _load(self, key: int | str) -> list[object]:
        sessions = self.contexts.sessions
        load = getattr(sessions, "load_stored", None) or sessions.load
        return list((await load(key)).entries)
