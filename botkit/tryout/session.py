"""What ``python -m botkit try`` says around the terminal chat: the tools offered, the folder."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from botkit.bot import Bot
from botkit.messengers.base import Incoming

__all__ = ["offered_tools", "sessions_note"]


async def offered_tools(bot: Bot, user_id: int) -> list[str]:
    """The names of the tools the model is offered in ``user_id``'s private chat."""
    message = Incoming(
        update_id=0, user_id=user_id, chat_id=user_id, text="", date=datetime.now(UTC)
    )
    return [tool.name for tool in await bot.build_tools(message)]


def sessions_note(folder: Path) -> str:
    """Where this run's session files are, said once at the start and once at the end."""
    return f"sessions: {folder} (JSONL, one file per conversation; kept after you leave)"
