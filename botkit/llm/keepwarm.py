"""Keeping the tools-and-system cache entry alive while paused conversations use it.

botkit writes the tools and the system prompt to the one-hour cache; a conversation that
pauses keeps its own entries an hour too (``botkit.llm.caching``). Each call reads the longest
prefix it finds cached, and a read refreshes the entry it hits: the conversation's, not the
shorter tools-and-system entry inside it, which the API pages do not say is refreshed with it.
So an hour after a paused conversation began, its tools-and-system entry may be gone; when its
history window moves (the start of its prefix changes) or it comes back after more than an
hour, the call writes the tools and the system prompt again at twice the input price.

:class:`CacheKeeper` sends, for each tools-and-system prefix a paused conversation used in the
last hour, a one-token request with that prefix (no thinking, an empty-ish user message) once
its entry is :data:`REFRESH_AFTER` old: the read costs a tenth of the input price and keeps
the entry for another hour. Prefixes of quick conversations (five-minute lifetime) and those
no call used for an hour are left to expire. Each process keeps the prefixes it sent; a ping's
usage goes to ``on_usage`` (counted like any call, under user :data:`KEEPER_USER_ID`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from botkit.errors import BotkitError
from botkit.llm.caching import Lifetime
from botkit.types import Usage

__all__ = ["IDLE_AFTER", "KEEPER_USER_ID", "REFRESH_AFTER", "CacheKeeper", "Ping"]

log = structlog.get_logger(__name__)

REFRESH_AFTER = 55 * 60.0
"""Seconds after its last refresh that a kept prefix is read again (its entry lives 3,600)."""
IDLE_AFTER = 60 * 60.0
"""Seconds after a paused conversation last used a prefix that it is no longer kept."""
KEEPER_USER_ID = 0
"""The user id the keeper's reads are counted under in usage records (the bot's own calls)."""
MESSAGE = "."
"""The ping's user message (a request needs one; it is not cached)."""

Ping = Callable[[dict[str, Any]], Awaitable[Usage]]
"""Sends a request body and returns its usage."""
UsageSink = Callable[[str, Usage], Awaitable[None]]
"""Counts a ping's usage under its model."""


@dataclass(slots=True)
class _Kept:
    """One tools-and-system prefix: the body that reads it, and when it was last used."""

    body: dict[str, Any]
    used_at: float
    refreshed_at: float
    size: int | None = None
    """Tokens of the prefix, once a ping read them (a call reading as many refreshed it)."""


class CacheKeeper:
    """Reads the tools-and-system prefixes of paused conversations before their entry expires."""

    def __init__(
        self,
        ping: Ping,
        *,
        thinking_off: Callable[[str], dict[str, Any]],
        clock: Callable[[], float] = time.monotonic,
        on_usage: UsageSink | None = None,
    ) -> None:
        self.ping = ping
        self.thinking_off = thinking_off
        """The request fields that turn thinking off on a model (the ping needs no thinking)."""
        self.clock = clock
        self.on_usage = on_usage
        self._kept: dict[bytes, _Kept] = {}
        self._uncached: set[bytes] = set()
        """Prefixes a read found nothing cached of (shorter than the model caches): not kept."""
        self._task: asyncio.Task[None] | None = None

    def note(self, params: dict[str, Any], usage: Usage, lifetime: Lifetime) -> None:
        """Take note of a call (its body as sent, with its breakpoints, and its usage)."""
        if lifetime != "1h" and not self._kept:
            return  # quick conversations only: nothing to keep, nothing to look up
        tools, system = params.get("tools"), params.get("system")
        if not isinstance(system, list) and not tools:
            return
        key = orjson.dumps([params["model"], tools, system])
        now = self.clock()
        kept = self._kept.get(key)
        if kept is None:
            if lifetime != "1h" or key in self._uncached:
                return
            kept = self._kept[key] = _Kept(self._ping_body(params), now, now)
        if lifetime == "1h":
            kept.used_at = now
        if usage.cache_read_input_tokens == 0 or usage.cache_read_input_tokens == kept.size:
            kept.refreshed_at = now  # written whole, or read up to just the tools and system
        self._start()

    def next_due(self) -> float | None:
        """When the next prefix is to be read (the clock's time), or ``None``: none is kept."""
        self._forget_idle()
        if not self._kept:
            return None
        return min(kept.refreshed_at for kept in self._kept.values()) + REFRESH_AFTER

    async def ping_due(self) -> int:
        """Read every kept prefix whose entry is due; how many were read."""
        now = self.clock()
        due = [(key, k) for key, k in self._kept.items() if now - k.refreshed_at >= REFRESH_AFTER]
        for key, kept in due:
            try:
                usage = await self.ping(kept.body)
            except BotkitError as e:
                log.warning("llm.cache_keep_failed", model=kept.body["model"], error=str(e))
                kept.refreshed_at = now - REFRESH_AFTER + 60  # try again in a minute
                continue
            kept.refreshed_at = self.clock()
            kept.size = usage.cache_read_input_tokens + usage.cache_creation_input_tokens
            if not kept.size:  # too short for the model's cache: reading it again saves nothing
                log.info("llm.cache_keep_stopped", model=kept.body["model"], reason="not cached")
                del self._kept[key]
                self._uncached.add(key)
            log.info("llm.cache_kept", model=kept.body["model"], read=usage.cache_read_input_tokens)
            if self.on_usage is not None:
                await self.on_usage(kept.body["model"], usage)
        return len(due)

    async def close(self) -> None:
        """Stop reading prefixes."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while (due := self.next_due()) is not None:
            wait = due - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.ping_due()

    def _forget_idle(self) -> None:
        now = self.clock()
        for key in [k for k, kept in self._kept.items() if now - kept.used_at > IDLE_AFTER]:
            del self._kept[key]

    def _ping_body(self, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": params["model"],
            "max_tokens": 1,
            "messages": [{"role": "user", "content": MESSAGE}],
        }
        for field in ("tools", "system"):
            if params.get(field):
                body[field] = params[field]
        body.update(self.thinking_off(params["model"]))
        return body
