"""What a runtime needs of a bot: a narrow view, so runtimes never import ``botkit.bot``."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Protocol

import structlog

from botkit.access import Access
from botkit.agent.events import Hooks
from botkit.agent.pool import ContextPool
from botkit.approvals.service import Approvals
from botkit.commands import Command
from botkit.config import Settings
from botkit.console.app import ConsoleApp
from botkit.llm.base import LLM
from botkit.messengers.base import Incoming, Messenger
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.payments.service import Payments
from botkit.reminders.service import Reminders
from botkit.sessions import SessionStore
from botkit.tools import ToolRegistry
from botkit.turns import TurnPipeline

__all__ = ["ServedBot", "until_signalled"]

log = structlog.get_logger(__name__)


class ServedBot(Protocol):
    """A bot as a runtime sees it: its configuration, its turns, its start and end."""

    settings: Settings
    options: BotOptions
    hooks: Hooks
    tools: ToolRegistry
    commands: dict[str, Command]
    messenger: Messenger | None
    metrics: Metrics
    sessions: SessionStore
    reminders: Reminders
    payments: Payments
    access: Access
    contexts: ContextPool
    turns: TurnPipeline
    approvals: Approvals
    console: ConsoleApp | None

    @property
    def llm(self) -> LLM:
        """The model the bot talks to."""
        ...

    async def on_start(self) -> None:
        """Called once before messages are taken."""
        ...

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message's sender; a text refuses them."""
        ...

    async def aclose(self) -> None:
        """Release what the bot opened."""
        ...


async def until_signalled(serve: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``serve(stop)``: SIGINT or SIGTERM sets ``stop`` (a graceful end), a second one
    cancels it at once."""
    stop = asyncio.Event()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and main is not None:
            log.warning("bot.stopping_now")
            main.cancel()  # second signal: no more waiting
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    with suppress(asyncio.CancelledError):
        await serve(stop)


def freeze_startup_objects() -> None:
    """Leave what start-up made (modules, classes, clients: some 350,000 objects) out of the
    garbage collector's full passes, which otherwise walk all of it again every few hundred
    turns (a quarter of a second of CPU each, on a small machine). Only for a process that
    serves and nothing else."""
    gc.collect()
    gc.freeze()
