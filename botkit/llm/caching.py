"""Where a request's prompt-cache breakpoints go, and how long each entry is kept.

The Messages API caches a request's prefix (tools, then system, then messages) up to each
``cache_control`` breakpoint, at most four of them, for five minutes (written at 1.25x the
input price) or an hour (2x); a later request that repeats the prefix reads it at 0.1x, and
each read refreshes the entry. Entries kept an hour must come before those kept five minutes.

botkit keeps the tools and the system prompt an hour (the same for every user). The
conversation's own entries live as long as its pace asks: a user who paused longer than five
minutes lately is likely to pause again, and a 5-minute entry would expire before the next
turn, which must then write the whole conversation again; a 1-hour entry costs 0.75x more, but
only on what the call adds. With turns that follow each other quickly, five minutes is enough.

Across turns botkit leaves earlier thinking out (``botkit.agent.history``), so the next turn
repeats a call's prefix only up to the message that opened its turn: that is where the
conversation's long-lived entry goes; the tool cycle after it is read back within seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["CacheTTL", "Lifetime", "conversation_lifetime", "mark_cache_points"]

CacheTTL = Literal["auto", "5m", "1h"]
"""The ``BOTKIT_CACHE_TTL`` setting: ``auto`` picks per conversation, by its pace."""
Lifetime = Literal["5m", "1h"]
"""How long the API keeps a cache entry."""

FIVE_MINUTES = 300.0
PAUSES_CONSIDERED = 4
"""The conversation's latest pauses between turns that ``auto`` looks at."""

_THINKING = ("thinking", "redacted_thinking")


def conversation_lifetime(setting: CacheTTL, pauses: Sequence[float]) -> Lifetime:
    """How long to keep the conversation's entry: the setting, or with ``auto`` an hour when
    one of the latest pauses between its turns (seconds, oldest first) outlived five minutes."""
    if setting != "auto":
        return setting
    recent = pauses[-PAUSES_CONSIDERED:]
    return "1h" if any(pause > FIVE_MINUTES for pause in recent) else "5m"


def mark_cache_points(params: dict[str, Any], lifetime: Lifetime) -> None:
    """Put cache breakpoints into a request body (at most four, longest-lived first).

    The tools and the system prompt: an hour. The conversation: ``lifetime`` at the message
    that opened the current turn (and at the one that opened the turn before, so the next call
    finds it however long that turn's tool cycle was); within a tool cycle, the latest message
    too, for five minutes where the turn holds thinking (the next turn will not repeat it).
    """
    if params.get("tools"):
        params["tools"][-1] = {**params["tools"][-1], "cache_control": _control("1h")}
    system = params.get("system")
    if isinstance(system, str):
        params["system"] = [{"type": "text", "text": system, "cache_control": _control("1h")}]
    elif isinstance(system, list) and system:
        system[-1] = {**system[-1], "cache_control": _control("1h")}
    messages: list[dict[str, Any]] = params["messages"]
    openings = _last_openings(messages)
    last = len(messages) - 1
    if not openings or openings[-1] != last:
        if last >= 0:
            cycle = messages[openings[-1] + 1 :] if openings else messages
            thinks = any(b.get("type") in _THINKING for m in cycle for b in _blocks(m))
            if openings:
                _mark(messages[openings[-1]], lifetime)
            _mark(messages[last], "5m" if thinks else lifetime)
        return
    if len(openings) > 1:
        _mark(messages[openings[-2]], lifetime)
    _mark(messages[last], lifetime)


def _last_openings(messages: list[dict[str, Any]]) -> list[int]:
    """Where the last two turns opened (fewer if there are not two), oldest first: found
    from the end, since a long history goes out with every call."""
    found: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        if _opens_turn(messages[index]):
            found.insert(0, index)
            if len(found) == 2:
                break
    return found


def _opens_turn(message: dict[str, Any]) -> bool:
    """A user message that is not only tool results."""
    blocks = _blocks(message)
    return message.get("role") == "user" and any(b.get("type") != "tool_result" for b in blocks)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _mark(message: dict[str, Any], lifetime: Lifetime) -> None:
    """Put a breakpoint on the message's last block (thinking blocks cannot hold one)."""
    blocks = _blocks(message)
    if blocks and blocks[-1].get("type") not in _THINKING:
        blocks[-1] = {**blocks[-1], "cache_control": _control(lifetime)}


def _control(lifetime: Lifetime) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": "1h"} if lifetime == "1h" else {"type": "ephemeral"}
