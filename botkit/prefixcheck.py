"""``doctor --conversation KEY``: does this conversation's cached prefix stay put?

Two readings: the conversation's session record (each answer keeps its call's system-prompt
digest and tool names: how often they changed between turns), and the bot's own steps run
twice for that conversation a second apart (which part of the prompt, or which tool, came out
different: a clock, a counter, a random order).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from itertools import pairwise

from botkit.bot import Bot
from botkit.messengers.base import Incoming
from botkit.prefixwatch import part_changes
from botkit.sessions import SessionEntry
from botkit.sessions.configured import session_store_for
from botkit.turns import as_registry, tool_parts

__all__ = ["prefix_report"]

TURNS = 10
"""The latest turns of the record that are compared."""


async def prefix_report(bot: Bot, key: str, *, wait: float = 1.1) -> tuple[bool, str]:
    """Whether ``key``'s prefix stays put, and what was found, in one line."""
    recorded = await _recorded_changes(bot, key)
    changed = await _rebuilt_changes(bot, key, wait)
    steady = not changed and "changed" not in recorded
    built = (
        f"built twice {wait:g} s apart, these parts differ: {', '.join(changed)}"
        if changed
        else f"built twice {wait:g} s apart, the prompt and tools came out the same"
    )
    return steady, f"{recorded}; {built}"


async def _recorded_changes(bot: Bot, key: str) -> str:
    """How often the system prompt and the tools changed between the recorded turns."""
    store = session_store_for(bot.settings)
    try:
        entries = (await store.load(key)).entries
    finally:
        await store.close()
    firsts: list[SessionEntry] = []
    opened = False
    for entry in entries:
        if not isinstance(entry, SessionEntry):
            continue
        if entry.role == "user" and any(b.type != "tool_result" for b in entry.content):
            opened = True
        elif entry.role == "assistant" and opened and entry.system_sha256:
            firsts.append(entry)  # each turn's first call
            opened = False
    firsts = firsts[-TURNS:]
    if len(firsts) < 2:
        return f"the record holds {len(firsts)} turn(s) to compare"
    pairs = list(pairwise(firsts))
    system = sum(a.system_sha256 != b.system_sha256 for a, b in pairs)
    tools = sum(a.tools != b.tools for a, b in pairs)
    if not system and not tools:
        return f"over the last {len(firsts)} recorded turns the prompt and tools never changed"
    return (
        f"over the last {len(firsts)} recorded turns the system prompt changed {system} time(s), "
        f"the tools {tools}"
    )


async def _rebuilt_changes(bot: Bot, key: str, wait: float) -> list[str]:
    """The parts that differ between two builds of the conversation's prompt and tools."""
    first = await _parts(bot, key)
    await asyncio.sleep(wait)
    second = await _parts(bot, key)
    return part_changes(_digests(first), _digests(second))


async def _parts(bot: Bot, key: str) -> list[tuple[str, str]]:
    """The conversation's prompt parts and tools as its turns build them (choices aside)."""
    user = int(key) if key.lstrip("-").isdigit() else 0
    message = Incoming(update_id=0, user_id=user, chat_id=user, text="", date=datetime.now(UTC))
    tools = as_registry(await bot.build_tools(message))
    return [*await bot.turns.named_parts(message), *tool_parts(tools)]


def _digests(parts: list[tuple[str, str]]) -> dict[str, int]:
    return {name: hash(text) for name, text in parts}
