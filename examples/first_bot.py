"""The README's first example: a bot with one tool."""

from datetime import datetime
from zoneinfo import ZoneInfo

from botkit import Bot, Incoming, tool


@tool
async def time_in(zone: str) -> str:
    """The time now in an IANA time zone.

    Args:
        zone: e.g. Europe/Paris.
    """
    return datetime.now(ZoneInfo(zone)).strftime("%H:%M")


class ClockBot(Bot):
    async def build_prompt(self, message: Incoming) -> str:
        return "You are a concise assistant who knows the time anywhere."


bot = ClockBot(tools=[time_in])
