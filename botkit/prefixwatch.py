"""Watch the part of each conversation's prompt the cache holds, and say, once, which part
changes on most turns.

The prompt cache reads a conversation back only while its prefix (the tools, then the system
prompt) is byte for byte the one sent before. A ``build_prompt`` that prints the time, a
plugin part that lists today's notes or a ``build_tools`` that words a description anew each
turn makes every turn write the whole conversation to the cache again (1.25x or 2x the input
price instead of 0.1x). botkit keeps its own per-turn material (the time, notes) in the
user's message; this watch names a part that does not.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

__all__ = ["PrefixWatch", "part_changes"]

log = structlog.get_logger(__name__)

TURNS = 6
"""The latest turns of a conversation the watch compares."""
MOST = 4
"""A part that changed between this many of them is reported."""
CONVERSATIONS = 10_000
"""Conversations remembered at once (the least recently seen are forgotten)."""


@dataclass
class _Seen:
    parts: dict[str, int]
    changes: deque[frozenset[str]] = field(default_factory=lambda: deque(maxlen=TURNS - 1))


class PrefixWatch:
    """Per conversation, the digests of its prompt's parts at its latest turns."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._reported: set[str] = set()

    def observe(self, conversation: str, parts: Iterable[tuple[str, str]]) -> list[str]:
        """Note one turn's parts (name, text); the parts reported now (logged once each)."""
        digests = {name: hash(text) for name, text in parts}
        seen = self._seen.pop(conversation, None)
        self._seen[conversation] = seen or _Seen(digests)
        if len(self._seen) > CONVERSATIONS:
            self._seen.popitem(last=False)
        if seen is None:
            return []
        seen.changes.append(frozenset(part_changes(seen.parts, digests)))
        seen.parts = digests
        unstable = [
            name
            for name in sorted(set().union(*seen.changes) - self._reported)
            if sum(name in changed for changed in seen.changes) >= MOST
        ]
        for name in unstable:
            self._reported.add(name)
            log.warning(
                "cache.prefix_unstable",
                part=name,
                conversation=conversation,
                changed=f"{sum(name in c for c in seen.changes)} of the last {TURNS} turns",
                hint="per-turn material belongs in a plugin's turn_note (the user's message), "
                "not in the system prompt or the tools: each change writes the conversation "
                "to the prompt cache again",
            )
        return unstable


def part_changes(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The parts whose digest differs, or that came or went."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
