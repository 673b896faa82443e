"""Slash commands: answered by the bot itself, never by the LLM. The built-in ones live here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog

from botkit.access import Access
from botkit.agent.context import ContextManager
from botkit.chats import conversation_of
from botkit.config import Settings
from botkit.messengers.base import ButtonPress, Incoming, Messenger, Reply
from botkit.options import BotOptions
from botkit.pricing import cache_savings, estimate
from botkit.skills import SkillLibrary
from botkit.types import Usage

if TYPE_CHECKING:
    from botkit.voice.service import Voice

__all__ = [
    "ButtonHandler",
    "Command",
    "CommandHandler",
    "CommandHost",
    "PressAnswer",
    "command_menu",
    "context_of",
    "help_intro",
    "register_builtin_commands",
    "understands_voice",
    "visible_commands",
]

log = structlog.get_logger(__name__)

CommandHandler = Callable[[Incoming, str], Awaitable[str | Reply]]
"""A slash command: gets the message and the text after the command, returns the reply
(a ``Reply`` to put inline buttons under it)."""


@dataclass(frozen=True)
class PressAnswer:
    """What a button press does: a short notice for the presser, a new text for the message."""

    notice: str | None = None
    edit: Reply | None = None
    """Replaces the message the button was under (text and buttons)."""


ButtonHandler = Callable[[ButtonPress, str], Awaitable[PressAnswer]]
"""Handles presses of buttons whose data is ``<prefix>:<payload>``; gets the press and the
payload. The presser may be anyone who sees the message: check that they may do it."""


@dataclass(frozen=True)
class Command:
    """A slash command; it answers without calling the LLM."""

    name: str
    description: str
    handler: CommandHandler
    admin_only: bool = False
    hidden: bool = False
    """For admins only, and unknown to everyone else: not in their menu or ``/help``."""


class CommandHost(Protocol):
    """What the built-in commands need of a bot."""

    settings: Settings
    options: BotOptions
    commands: dict[str, Command]
    skills: SkillLibrary
    model_override: str | None
    access: Access
    messenger: Messenger | None

    voice: Voice | None

    @property
    def can_transcribe(self) -> bool:
        """Whether the bot transcribes voice notes itself (its own ``transcribe``)."""
        ...

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...

    async def context_for(self, user_id: int, conversation: str | None = None) -> ContextManager:
        """A conversation's context."""
        ...


def visible_commands(commands: dict[str, Command], *, admin: bool) -> list[Command]:
    """The commands a user may see: hidden ones only for an admin."""
    return [c for c in commands.values() if admin or not c.hidden]


def command_menu(commands: dict[str, Command], *, admin: bool = False) -> list[tuple[str, str]]:
    """The commands as Telegram's menu shows them (to an admin, hidden ones too)."""
    return [(c.name, c.description) for c in visible_commands(commands, admin=admin)]


def understands_voice(bot: CommandHost) -> bool:
    """Whether voice notes are understood: the bot's own ``transcribe``, or a speech API
    (BOTKIT_TRANSCRIBE_URL)."""
    return bot.can_transcribe or (bot.voice is not None and bot.voice.hears)


def help_intro(options: BotOptions, can_transcribe: bool) -> str:
    """The help's first line: what the bot accepts (voice too, when it can transcribe)."""
    if not can_transcribe:
        return options.help_text
    intro, colon, rest = options.help_text.rpartition(" Commands:")
    if not colon:
        return f"{options.help_text} {options.voice_help_text}"
    return f"{intro} {options.voice_help_text}{colon}{rest}"


def register_builtin_commands(bot: CommandHost) -> None:
    """``/help``, ``/clear``, ``/usage``, ``/model`` and, with skills, ``/skills``."""

    async def help_(message: Incoming, args: str) -> str:
        visible = visible_commands(bot.commands, admin=bot.access.sender_is_admin(message))
        lines = [f"/{c.name} — {c.description}" for c in visible]
        return "\n".join([help_intro(bot.options, understands_voice(bot)), *lines])

    async def clear(message: Incoming, args: str) -> str:
        if message.in_group and not await bot.access.is_group_admin(message, bot.messenger):
            return bot.options.group_admin_only_text
        context = await context_of(bot, message)
        async with context.lock:
            await context.reset("/clear")
        return bot.options.group_clear_text if message.in_group else bot.options.clear_text

    async def usage(message: Incoming, args: str) -> str:
        # The conversation it is asked in: in a group the group's, never the speaker's private
        # one (that would tell the group how much someone uses the bot alone).
        context = await context_of(bot, message)
        whose = "This group's conversation" if message.in_group else "Your usage"
        return usage_report(context.usage_by_model, whose=whose)

    async def model(message: Incoming, args: str) -> str:
        current = bot.model_override or bot.settings.model
        wanted = args.strip()
        if not wanted:
            return f"Model: {current}"
        if not bot.access.is_admin(message.user_id):
            return bot.options.admin_only_text
        bot.model_override = wanted
        log.info("model.switched", model=wanted, by=message.user_id)
        return f"Switched from {current} to {wanted}."

    async def skills(message: Incoming, args: str) -> str:
        return bot.skills.listing()

    async def whoami(message: Incoming, args: str) -> str:
        admin = bot.access.is_admin(message.user_id)
        role = "admin" if admin else message.user.role if message.user else "user"
        return bot.options.whoami_text.format(user_id=message.user_id, role=role)

    bot.command("help", "What this bot can do")(help_)
    bot.command("clear", "Start a fresh conversation")(clear)
    bot.command("usage", "Tokens this conversation used and their cost")(usage)
    bot.command("model", "Show the model (admins: /model NAME switches)")(model)
    bot.command("whoami", "Your Telegram user id and role")(whoami)
    if bot.skills:
        bot.command("skills", "Skills I can use")(skills)


async def context_of(bot: CommandHost, message: Incoming) -> ContextManager:
    """The context of the conversation ``message`` was written in (a group's, in a group)."""
    conversation = conversation_of(message, bot.settings.group_context)
    return await bot.context_for(conversation.owner_id, conversation.key)


def usage_report(usage_by_model: dict[str, Usage], *, whose: str = "Your usage") -> str:
    """One sentence with the tokens used and their estimated cost, starting with ``whose``."""
    total = sum(usage_by_model.values(), Usage())
    dollars, known = estimate(usage_by_model)
    cost = f"about ${dollars:.4f}" + ("" if known else " (some prices unknown)")
    prompt = total.input_tokens + total.cache_creation_input_tokens + total.cache_read_input_tokens
    cached = ""
    if prompt and (total.cache_read_input_tokens or total.cache_creation_input_tokens):
        share = round(100 * total.cache_read_input_tokens / prompt)
        saved = cache_savings(usage_by_model)
        effect = f"saved about ${saved:.4f}" if saved >= 0 else f"cost ${-saved:.4f} more"
        cached = f" The cache held {share} % of the prompts and {effect}."
    return (
        f"{whose}: {total.input_tokens:,} input tokens, {total.output_tokens:,} output "
        f"tokens, {total.cache_creation_input_tokens:,} written to and "
        f"{total.cache_read_input_tokens:,} read from the prompt cache; {cost}.{cached}"
        f"{_by_model(usage_by_model)}"
    )


def _by_model(usage_by_model: dict[str, Usage]) -> str:
    """Each model's tokens and cost, when the conversation used more than one."""
    if len(usage_by_model) < 2:
        return ""
    lines = []
    for model, usage in sorted(usage_by_model.items()):
        tokens = usage.input_tokens + usage.output_tokens
        tokens += usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        dollars, _ = estimate({model: usage})
        lines.append(f"\n{model}: {tokens:,} tokens, about ${dollars:.4f}")
    return "\nBy model:" + "".join(lines)
