"""The memory in a turn: a prompt part, the tool bound to the turn's conversation, ``/memory``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from botkit.access import Access
from botkit.chats import conversation_of
from botkit.commands import ButtonHandler, CommandHandler, PressAnswer
from botkit.config import Settings
from botkit.memory.paths import display
from botkit.memory.store import MemoryStore, memory_key, memory_store_for
from botkit.memory.tool import MemoryLimits, MemoryTool
from botkit.messengers.base import Button, ButtonPress, Incoming, Messenger, Reply
from botkit.options import BotOptions
from botkit.plugins import Plugin
from botkit.tools import Tool

__all__ = ["MEMORY_PROMPT", "MemoryPlugin", "enable_memory"]

log = structlog.get_logger(__name__)

MEMORY_PROMPT = (
    "You have a long-term memory: the `memory` tool, with files under /memories that stay when "
    "this conversation is cleared, summarised or resumed later. Before anything else in a "
    "conversation, view /memories to see what you remembered. Keep there what will matter "
    "later (who you talk with, their preferences, what is in progress), short and tidy, and "
    "update or delete what is no longer true. Never store passwords or other secrets. This "
    "memory belongs to this conversation alone."
)
"""The system prompt's part about the memory (the same every turn, so the cache holds)."""

BUTTON_PREFIX = "memory"
_MAX_SHOWN = 3_500  # characters of a listing: one Telegram message holds 4,096


class MemoryHost(Protocol):
    """What the memory needs of a bot: its configuration, plugins, commands and buttons."""

    settings: Settings
    options: BotOptions
    plugins: list[Plugin]
    buttons: dict[str, ButtonHandler]
    access: Access
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


class MemoryPlugin(Plugin):
    """Tells the model about its memory and offers the memory tool of the turn's conversation."""

    def __init__(self, store: MemoryStore, settings: Settings) -> None:
        self.store = store
        self.limits = MemoryLimits.from_settings(settings)
        self.group_context = settings.group_context

    def key_of(self, message: Incoming) -> str:
        """The memory ``message``'s conversation has: never another's."""
        conversation = conversation_of(message, self.group_context)
        return memory_key(conversation.owner_id, conversation.key)

    async def prompt(self, message: Incoming) -> str | None:
        """The memory part of the system prompt."""
        return MEMORY_PROMPT

    def tools(self, message: Incoming) -> Sequence[Tool]:
        """The memory tool, bound to this message's conversation."""
        return [MemoryTool(self.store, self.key_of(message), self.limits)]


def enable_memory(bot: MemoryHost) -> MemoryStore | None:
    """Give ``bot`` its memory (unless BOTKIT_MEMORY or ``Bot(memory=False)`` turn it off):
    the plugin, ``/memory`` and its button. Returns the store, or ``None`` when off."""
    if not (bot.settings.memory and bot.options.memory):
        return None
    store = memory_store_for(bot.settings)
    plugin = MemoryPlugin(store, bot.settings)
    bot.plugins.append(plugin)
    texts = bot.options.memory_texts
    clear_button = Reply("", ((Button(texts.clear_button, f"{BUTTON_PREFIX}:clear"),),))

    async def clear(message: Incoming) -> str:
        if message.in_group and not await bot.access.is_group_admin(message, bot.messenger):
            return bot.options.group_admin_only_text
        key = plugin.key_of(message)
        await store.clear(key)
        log.info("memory.cleared", conversation=key, by=message.user_id)
        return texts.cleared

    async def memory(message: Incoming, args: str) -> str | Reply:
        if args.strip().lower() == "clear":
            return await clear(message)
        files = await store.load(plugin.key_of(message))
        if not files:
            return texts.empty
        return Reply(_listing(files, texts.header, texts.more), clear_button.buttons)

    async def press(press: ButtonPress, payload: str) -> PressAnswer:
        done = await clear(press.as_incoming())
        return PressAnswer(done, Reply(done) if done == texts.cleared else None)

    bot.command("memory", "What I remember (/memory clear forgets it)")(memory)
    bot.buttons[BUTTON_PREFIX] = press
    return store


def _listing(files: dict[str, str], header: str, more: str) -> str:
    """The memory's files and their texts, cut to fit one message."""
    text = "\n\n".join([header, *(f"{display(p)}:\n{files[p]}" for p in sorted(files))])
    if len(text) <= _MAX_SHOWN:
        return text
    return f"{text[:_MAX_SHOWN]}\n{more.format(count=len(text) - _MAX_SHOWN)}"
