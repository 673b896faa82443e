"""``python -m botkit console``: talk to a bot in the terminal, same loop and sessions."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from botkit.bot import Bot
from botkit.messengers.base import Incoming

__all__ = ["ConsoleMessenger", "run_console"]

PROMPT = "you> "
BOT = "bot> "


class ConsoleDraft:
    """Prints the answer as it streams in."""

    def __init__(self, out: TextIO, on_finish: Callable[[str], None]) -> None:
        self.out = out
        self.on_finish = on_finish
        self.text = ""

    async def update(self, delta: str) -> None:
        """Print ``delta`` at once."""
        if not self.text:
            self.out.write(BOT)
        self.text += delta
        self.out.write(delta)
        self.out.flush()

    async def finish(self) -> None:
        """End the streamed line."""
        if self.text:
            self.out.write("\n")
            self.out.flush()
        self.on_finish(self.text)


class ConsoleMessenger:
    """A messenger whose chat is this terminal."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._streamed: str | None = None

    async def send_text(self, chat_id: int, text: str) -> None:
        """Print a reply, unless it was just streamed word for word."""
        streamed, self._streamed = self._streamed, None
        if streamed is not None and streamed.strip() == text.strip():
            return
        self.out.write(f"{BOT}{text}\n")
        self.out.flush()

    async def send_typing(self, chat_id: int) -> None:
        """Nothing to show: the streamed text is the sign of life."""

    def draft(self, message: Incoming) -> ConsoleDraft:
        """A draft that prints as it goes."""
        return ConsoleDraft(self.out, self._remember_streamed)

    def _remember_streamed(self, text: str) -> None:
        self._streamed = text


async def run_console(bot: Bot, *, user_id: int, stdin: TextIO | None = None) -> None:
    """Read lines from ``stdin`` and answer each as a turn of ``user_id``; EOF ends."""
    source = stdin or sys.stdin
    messenger = ConsoleMessenger()
    bot.messenger = messenger
    try:
        await bot.on_start()
        while True:
            if source.isatty():
                sys.stdout.write(PROMPT)
                sys.stdout.flush()
            line = await asyncio.to_thread(source.readline)
            if not line:
                return
            text = line.strip()
            if not text:
                continue
            message = Incoming(
                update_id=-time.time_ns(),  # negative and unique: never a Telegram update id
                user_id=user_id,
                chat_id=user_id,
                text=text,
                date=datetime.now(UTC),
            )
            await bot.handle_safely(message, messenger)
    finally:
        await bot.aclose()
