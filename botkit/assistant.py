"""The default assistant that ``python -m botkit`` runs: a helpful bot with two small tools."""

from __future__ import annotations

import random
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botkit.bot import Bot
from botkit.config import Settings
from botkit.errors import ToolError
from botkit.tools import tool

__all__ = ["current_time", "default_bot", "roll_dice"]

SYSTEM_PROMPT = (
    "You are a friendly, capable general assistant chatting on Telegram. Keep answers short "
    "and clear; use Markdown sparingly. Use the current_time tool whenever the date or time "
    "matters, and say so when you are unsure."
)


@tool
async def current_time(timezone: str = "UTC") -> str:
    """Tell the current date and time.

    Args:
        timezone: An IANA time zone name such as "Europe/Berlin" or "UTC".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(
            f"unknown time zone {timezone!r}; use an IANA name like Europe/Berlin"
        ) from None
    return datetime.now(zone).strftime("%A, %d %B %Y, %H:%M:%S %Z")


@tool
async def roll_dice(sides: int = 6, count: int = 1) -> list[int]:
    """Roll dice and return the results.

    Args:
        sides: Faces per die, 2 to 1000.
        count: How many dice to roll, 1 to 100.
    """
    if not 2 <= sides <= 1000 or not 1 <= count <= 100:
        raise ToolError("sides must be 2..1000 and count 1..100")
    return [random.randint(1, sides) for _ in range(count)]


def default_bot(settings: Settings | None = None) -> Bot:
    """The general assistant bot, configured from ``settings`` (the environment by default)."""
    return Bot(settings=settings, tools=[current_time, roll_dice], system_prompt=SYSTEM_PROMPT)
