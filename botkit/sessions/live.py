"""Which of a conversation's entries its live context is built from (rebuild and retention)."""

from __future__ import annotations

from collections.abc import Sequence

from botkit.sessions.jsonl import CompactionEntry, FeedbackEntry, ResetEntry, SessionEntry

__all__ = ["needed_from"]

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry


def needed_from(entries: Sequence[Entry]) -> int:
    """The index of the first entry a rebuild of the context reads (``len`` if none).

    It follows ``ContextManager.restore``: which entry each message of the context came from,
    through resets, compactions (their summary counts as the compaction's entry) and deferred
    messages that joined later.
    """
    live: list[int] = []
    pending: list[int] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, ResetEntry):
            live, pending = [], []
        elif isinstance(entry, CompactionEntry):
            live = [index, *(live[max(len(live) - entry.kept, 0) :] if entry.kept else [])]
        elif isinstance(entry, FeedbackEntry):
            continue  # a reaction shapes no context
        elif entry.deferred:
            pending.append(index)
        else:
            if _starts_turn(entry):
                live, pending = live + pending, []
            live.append(index)
    return min(live + pending, default=len(entries))


def _starts_turn(entry: SessionEntry) -> bool:
    return entry.role == "user" and any(block.type != "tool_result" for block in entry.content)
