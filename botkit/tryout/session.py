"""The terminal side of ``python -m botkit try``: lines in as Telegram messages, replies out.

Each line is sent to the fake Bot API as a message from the terminal's user; the bot polls it
as it would poll Telegram (aiogram, the gates, commands, the tool loop, the session files),
and what it sends back is printed. Tool calls are shown as they end.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from botkit.agent.events import ToolEnd
from botkit.bot import Bot
from botkit.messengers.base import Incoming
from botkit.runtime.console import tool_line
from botkit.testing.harness import running
from botkit.testing.telegram import FakeTelegramServer

__all__ = ["QUIET_SECONDS", "REPLY_TIMEOUT", "try_bot"]

REPLY_TIMEOUT = 180.0
"""Seconds to wait for the first reply to a line (a real model may think a while)."""
QUIET_SECONDS = 1.0
"""A turn counts as over once the bot has sent nothing more for this long."""


async def try_bot(
    bot: Bot, telegram: FakeTelegramServer, user_id: int, source: TextIO, out: TextIO
) -> None:
    """Answer each line of ``source`` through ``bot`` on ``telegram`` until EOF."""

    async def show_tool(event: ToolEnd) -> None:
        print(f"tool> {tool_line(event.call, event.result)}", file=out, flush=True)

    bot.hooks.on("tool_end", show_tool)
    async with running(bot, telegram):
        print(f"tools: {', '.join(await offered_tools(bot, user_id)) or 'none'}", file=out)
        print("Write a message, /help for the commands; Ctrl-D ends.", file=out, flush=True)
        while line := await asyncio.to_thread(_prompt, source, out):
            if text := line.strip():
                await _exchange(telegram, user_id, text, out)


async def offered_tools(bot: Bot, user_id: int) -> list[str]:
    """The names of the tools the model is offered in ``user_id``'s private chat."""
    message = Incoming(
        update_id=0, user_id=user_id, chat_id=user_id, text="", date=datetime.now(UTC)
    )
    return [tool.name for tool in await bot.build_tools(message)]


def _prompt(source: TextIO, out: TextIO) -> str:
    if source.isatty():
        print("you> ", end="", file=out, flush=True)
    return source.readline()


async def _exchange(telegram: FakeTelegramServer, user_id: int, text: str, out: TextIO) -> None:
    """Send ``text`` and print what the bot sends back, until it goes quiet."""
    printed = _count(telegram, user_id)
    messages = len(telegram.sent_messages(user_id))
    telegram.send_text(user_id, text, first_name="You")
    wait = REPLY_TIMEOUT
    while True:
        try:
            await telegram.wait_for_messages(user_id, messages + 1, wait)
        except AssertionError:  # nothing more within ``wait``
            if wait == REPLY_TIMEOUT:
                print("(no reply)", file=out, flush=True)
            return
        messages = len(telegram.sent_messages(user_id))
        printed = _print_new(telegram, user_id, printed, out)
        wait = QUIET_SECONDS


def _count(telegram: FakeTelegramServer, chat_id: int) -> int:
    return len(telegram.sent_messages(chat_id)) + len(telegram.sent_files(chat_id))


def _print_new(telegram: FakeTelegramServer, chat_id: int, seen: int, out: TextIO) -> int:
    """Print the messages and files sent since ``seen``, in order; return the new count."""
    items: list[tuple[int, str]] = [
        (m.message_id, m.plain_text) for m in telegram.sent_messages(chat_id)
    ]
    items += [
        (
            f.message_id,
            f"[{f.method[4:].lower()}: {f.filename or 'unnamed'}]"
            + (f" {f.caption}" if f.caption else ""),
        )
        for f in telegram.sent_files(chat_id)
    ]
    items.sort()
    for _, text in items[seen:]:
        print(f"bot> {text}", file=out, flush=True)
    return len(items)


def sessions_note(folder: Path) -> str:
    """Where this run's session files are, said once at the start and once at the end."""
    return f"sessions: {folder} (JSONL, one file per conversation; kept after you leave)"
