"""A recorded session cut into turns: what the user sent, and what the bot did with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from botkit.messengers.base import Incoming
from botkit.sessions import CompactionEntry, FeedbackEntry, ResetEntry, SessionEntry
from botkit.types import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage

__all__ = [
    "Entry",
    "RecordedTurn",
    "ToolCall",
    "feedback_by_turn",
    "incoming_for",
    "recorded_turns",
]

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry

_GROUP_KEY = re.compile(r"chat_(-?[0-9]+)(?:_([0-9]+))?")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a turn and what it returned."""

    name: str
    input: dict[str, object]
    result: str | None
    """The result's text; ``None`` when no result was recorded (an interrupted turn)."""
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One user turn of a session: where it starts, its message, and what followed it."""

    number: int
    """1, 2, … in the session."""
    start: int
    """The index of the user's message among the session's entries."""
    end: int
    """The index after the turn's last entry (where the next turn's inputs begin)."""
    user: SessionEntry
    outputs: list[Entry]
    """The entries the turn appended after the user's message, in order."""

    @property
    def responses(self) -> list[SessionEntry]:
        """The model's answers, in order."""
        return [e for e in self.outputs if isinstance(e, SessionEntry) and e.role == "assistant"]

    @property
    def summaries(self) -> list[CompactionEntry]:
        """The compactions made during the turn."""
        return [e for e in self.outputs if isinstance(e, CompactionEntry)]

    @property
    def usage(self) -> Usage:
        """What the turn's model calls (compactions included) cost."""
        return sum_usage(self.outputs)


def sum_usage(entries: list[Entry]) -> Usage:
    """The usage recorded on ``entries``, added up."""
    total = Usage()
    for entry in entries:
        usage = getattr(entry, "usage", None)
        if usage is not None:
            total += usage
    return total


def recorded_turns(entries: list[Entry]) -> list[RecordedTurn]:
    """The turns of a session, in order: each user message that is not only tool results."""
    starts = [i for i, entry in enumerate(entries) if _starts_turn(entry)]
    turns: list[RecordedTurn] = []
    for number, start in enumerate(starts, start=1):
        end = starts[number] if number < len(starts) else len(entries)
        user = entries[start]
        assert isinstance(user, SessionEntry)
        outputs = [e for e in entries[start + 1 : end] if not _is_input(e) and not _is_feedback(e)]
        while end > start + 1 and _is_input(entries[end - 1]):
            end -= 1  # notes and resets before the next turn are that turn's inputs
        turns.append(RecordedTurn(number, start, end, user, outputs))
    return turns


def _is_feedback(entry: Entry) -> bool:
    return isinstance(entry, FeedbackEntry)


def feedback_by_turn(entries: list[Entry]) -> dict[int, list[FeedbackEntry]]:
    """Each turn's feedback by its update id: each person's latest (a changed reaction
    replaces the earlier one; one taken back counts as ``removed``)."""
    latest: dict[tuple[int, int], FeedbackEntry] = {}
    for entry in entries:
        if isinstance(entry, FeedbackEntry):
            latest.pop((entry.update_id, entry.by), None)
            latest[(entry.update_id, entry.by)] = entry
    by_turn: dict[int, list[FeedbackEntry]] = {}
    for (update_id, _), entry in latest.items():
        by_turn.setdefault(update_id, []).append(entry)
    return by_turn


def _starts_turn(entry: Entry) -> bool:
    return (
        isinstance(entry, SessionEntry)
        and entry.role == "user"
        and not entry.deferred
        and any(not isinstance(block, ToolResultBlock) for block in entry.content)
    )


def _is_input(entry: Entry) -> bool:
    """A relayed note or a reset: recorded between turns, read by the next one."""
    return isinstance(entry, ResetEntry) or (
        isinstance(entry, SessionEntry) and bool(entry.deferred)
    )


def tool_calls(messages: list[Message]) -> list[ToolCall]:
    """The tool calls made in ``messages``, in order, each with its result."""
    results = {
        block.tool_use_id: block
        for message in messages
        for block in message.content
        if isinstance(block, ToolResultBlock)
    }
    calls: list[ToolCall] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                result = results.get(block.id)
                text = result.content if result is not None else None
                error = result.is_error if result is not None else False
                calls.append(ToolCall(block.name, dict(block.input), text, bool(error)))
    return calls


def answer_text(messages: list[Message]) -> str:
    """What the model wrote for the user in ``messages``: each answer's text, joined."""
    texts = [m.text.strip() for m in messages if m.role == "assistant"]
    return "\n\n".join(text for text in texts if text)


def incoming_for(turn: RecordedTurn) -> Incoming:
    """The incoming message the steps (build_extra, build_tools, build_prompt) see again."""
    entry = turn.user
    texts = [b.text for b in entry.content if isinstance(b, TextBlock)]
    chat_id, thread_id, chat_type = entry.user_id, None, "private"
    match = _GROUP_KEY.fullmatch(entry.conversation or "")
    if match is not None:
        chat_id, chat_type = int(match.group(1)), "supergroup"
        thread_id = int(match.group(2)) if match.group(2) else None
    return Incoming(
        update_id=entry.update_id or 0,
        user_id=entry.user_id,
        chat_id=chat_id,
        text=texts[-1] if texts else "",
        date=_aware(entry.timestamp),
        chat_type=chat_type,
        first_name=entry.speaker,
        thread_id=thread_id,
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
