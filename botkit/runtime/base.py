"""What a runtime needs of a bot: a narrow view, so runtimes never import ``botkit.bot``."""

from __future__ import annotations

from typing import Protocol

from botkit.agent.events import Hooks
from botkit.commands import Command
from botkit.config import Settings
from botkit.llm.base import LLM
from botkit.messengers.base import ButtonPress, Incoming, Messenger
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.reminders.service import Reminders
from botkit.sessions import SessionStore
from botkit.stores.base import UserStore
from botkit.tools import ToolRegistry

__all__ = ["ServedBot"]


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

    @property
    def llm(self) -> LLM:
        """The model the bot talks to."""
        ...

    @property
    def resident_contexts(self) -> int:
        """How many contexts are in memory now."""
        ...

    async def user_store(self) -> UserStore:
        """The users and invites store."""
        ...

    def command_menu(self, *, admin: bool = False) -> list[tuple[str, str]]:
        """The commands as a menu shows them (to an admin, hidden ones too)."""
        ...

    async def on_start(self) -> None:
        """Called once before messages are taken."""
        ...

    async def handle_safely(self, message: Incoming, messenger: Messenger) -> None:
        """Run one message through the turn pipeline; failures become a polite reply."""
        ...

    async def handle_press(self, press: ButtonPress, messenger: Messenger) -> None:
        """Handle a press of an inline button under one of the bot's messages."""
        ...

    def stop_turn(self, chat_id: int, draft_id: int) -> bool:
        """Cancel the turn whose draft was stopped."""
        ...

    async def aclose(self) -> None:
        """Release what the bot opened."""
        ...
