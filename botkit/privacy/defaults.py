"""The parts ``users forget``, ``users export`` and ``/forget_me`` go through, in order."""

from __future__ import annotations

from botkit.config import Settings
from botkit.memory.store import memory_store_for
from botkit.privacy.approvals import ApprovalsPart
from botkit.privacy.groups import GroupsPart, MediaPart
from botkit.privacy.parts import InboxPart, MemoryPart, Part, RecordsPart, SessionsPart
from botkit.privacy.queue import QueuePart

__all__ = ["default_parts"]


def default_parts(settings: Settings) -> list[Part]:
    """Sessions, group turns, memory, approvals, the user-store records, the inbox journal,
    the job queue's copies of their updates and the media left unreferenced, for ``settings``."""
    return [
        SessionsPart(settings),
        GroupsPart(settings),
        MemoryPart(memory_store_for(settings), settings),
        ApprovalsPart(settings),
        RecordsPart(settings),
        InboxPart(settings.sessions_dir / "inbox.jsonl"),
        QueuePart(settings),
        MediaPart(settings),
    ]
