"""``Bot``: the bot's own steps of the turn cycle, and what it registers.

A turn runs through ``botkit.turns``: handle_start → authorize → build_extra, build_tools,
build_prompt → context_for → the tool loop → the reply. Override the steps in a subclass, or
pass them as callbacks. The features every bot has are attached by ``botkit.features``; the
runtimes in ``botkit.runtime`` serve it (``python -m botkit run module:bot``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from botkit import tracing
from botkit.access import Access
from botkit.agent.context import ContextManager
from botkit.agent.events import Hooks
from botkit.agent.pool import ContextPool
from botkit.approvals.service import Approvals
from botkit.choices.personas import Persona
from botkit.choices.service import Choices
from botkit.commands import ButtonHandler, Command, CommandHandler
from botkit.config import Settings
from botkit.console.app import ConsoleApp
from botkit.features import attach_features, close_features
from botkit.handoff import Handoffs
from botkit.invites import invite_tool
from botkit.llm.base import LLM
from botkit.memory.store import MemoryStore
from botkit.messengers.base import Incoming, Messenger
from botkit.metrics import Metrics
from botkit.options import Authorize, BotOptions, BuildExtra, BuildPrompt, BuildTools, HandleStart
from botkit.payments.plans import Plan
from botkit.payments.service import Payments
from botkit.plugins import Plugin
from botkit.reminders.service import Reminders
from botkit.sessions import SessionStore, session_store_for
from botkit.skills import SkillLibrary
from botkit.stores.base import UserStore
from botkit.tools import Tool, ToolRegistry, tool
from botkit.turns import TurnPipeline
from botkit.types import ToolUseBlock
from botkit.voice.service import Voice

__all__ = [
    "Authorize",
    "Bot",
    "BotOptions",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "HandleStart",
]


class Bot:
    """An LLM agent for many users: subclass it and override the steps, or pass callbacks."""

    # Attached by ``botkit.features`` as the bot is built:
    skills: SkillLibrary
    """Skills from BOTKIT_SKILLS_DIR: listed in the prompt, read with ``load_skill``."""
    payments: Payments
    """Plans sold for Telegram Stars (``plans`` and BOTKIT_PLANS): ``/plans``, budgets."""
    reminders: Reminders
    """Reminders and scheduled tasks, kept in the user store; fired by the runtime."""
    memory: MemoryStore | None
    """Each conversation's long-term memory (``None``: off)."""
    handoffs: Handoffs | None
    """Handing conversations to people (with BOTKIT_OPERATORS_CHAT); else ``None``."""
    approvals: Approvals
    """Calls of tools marked ``approval=True`` wait here for a person's Allow."""
    voice: Voice | None  # voice notes heard, answers spoken (BOTKIT_TRANSCRIBE_URL, …)
    choices: Choices  # each conversation's model, persona and instructions

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        llm: LLM | None = None,
        sessions: SessionStore | None = None,
        users: UserStore | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        plugins: Iterable[Plugin] = (),
        plans: Iterable[Plan] = (),
        personas: Iterable[Persona] = (),
        options: BotOptions | None = None,
        tracer_provider: Any = None,
        **overrides: Any,
    ) -> None:
        self.settings = settings or Settings()
        tracing.install(self.settings, tracer_provider)  # on with OTEL_* or a provider given
        self.options = replace(options or BotOptions(), **overrides)
        self.plugins: list[Plugin] = list(plugins)
        """Composed in order: their prompt parts follow the system prompt, their tools join."""
        self.hooks = Hooks()
        """Lifecycle hooks: ``bot.hooks.on("tool_start", fn)``; see ``botkit.agent.events``."""
        self.metrics = Metrics()
        """This bot's Prometheus metrics (served with BOTKIT_METRICS_PORT)."""
        self.metrics.watch_tools(self.hooks)
        self.messenger: Messenger | None = None
        """Where replies and relayed messages go; set when the bot starts serving."""
        self.console: ConsoleApp | None = None  # served with BOTKIT_CONSOLE_PORT
        self.tools = ToolRegistry()
        for item in tools:
            self.tools.register(item)
        self.sessions: SessionStore = sessions or session_store_for(self.settings)
        self.model_override: str | None = None
        """Set by an admin's ``/model``: the model turns use (unless one chose another)."""
        self.commands: dict[str, Command] = {}
        self.buttons: dict[str, ButtonHandler] = {}
        """Inline-button handlers by the prefix of the button's data (``<prefix>:<payload>``)."""
        self._llm = llm
        self.can_transcribe = self.options.transcribe is not None or (
            type(self).transcribe is not Bot.transcribe
        )
        """Whether voice notes are understood: ``transcribe`` was overridden or passed."""
        self.access = Access(self.settings, self.options, users)
        """The default gates, invite redemption, budgets and the user-record cache."""
        options = self.options
        self.contexts = ContextPool(
            self.sessions, max_contexts=options.max_contexts, max_messages=options.max_messages
        )
        """The conversations' contexts in memory."""
        attach_features(self, plans, personas)
        self.turns = TurnPipeline(self, self.access, self.contexts, self.metrics, self.handoffs)
        """Runs a message through these steps to its reply."""
        self.approvals.turns = self.turns  # a decided approval resumes its turn there

    @property
    def llm(self) -> LLM:
        """The model this bot talks to; an ``AnthropicLLM`` from settings unless one was given."""
        if self._llm is None:
            from botkit.llm.anthropic import AnthropicLLM

            self._llm = AnthropicLLM.from_settings(self.settings)
        return self._llm

    @llm.setter
    def llm(self, llm: LLM) -> None:
        """Talk to ``llm`` instead (before the bot starts: ``try``'s scripted model)."""
        self._llm = llm

    # ---- registration -----------------------------------------------------------------

    def tool(self, fn: Callable[..., Any] | None = None, /, *, approval: bool = False) -> Any:
        """Decorator: register a typed function as a tool of this bot: ``@bot.tool``, or
        ``@bot.tool(approval=True)`` (a person presses Allow before each call runs)."""

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            self.tools.register(tool(approval=True)(f) if approval else f)
            return f

        return register if fn is None else register(fn)

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Decorator: register ``async def handler(message, args) -> str`` as ``/name``
        (``hidden``: for admins only, and unknown to everyone else)."""

        def register(handler: CommandHandler) -> CommandHandler:
            self.commands[name] = Command(name, description, handler, admin_only, hidden)
            return handler

        return register

    # ---- the steps a bot may override -----------------------------------------------

    async def handle_start(self, message: Incoming, payload: str) -> str | None:
        """Answer ``/start <payload>``; a non-empty reply ends the update before authorize."""
        if self.options.handle_start is not None:
            return await self.options.handle_start(message, payload)
        return await self.access.redeem(message, payload)

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message; a text rejects it (sent as is, no LLM call)."""
        if self.options.authorize is not None:
            return await self.options.authorize(message)
        return await self.access.authorize(message)

    async def build_extra(self, message: Incoming) -> Any:
        """What tools get as ``ToolContext.extra`` this turn."""
        if self.options.build_extra is not None:
            return await self.options.build_extra(message)
        return None

    async def build_tools(self, message: Incoming) -> ToolRegistry | Sequence[Tool]:
        """The tools the model may call this turn: all registered tools by default, and in an
        admin's private chat ``create_invite``."""
        if self.options.build_tools is not None:
            return await self.options.build_tools(message)
        extra = [t for p in self.plugins for t in p.tools(message)]
        # Never in a group: its context holds what any member wrote, and could steer the call.
        # Nor on a forward: its words are someone else's, however much they read as an order.
        admin_here = (
            message.chat_type == "private"
            and message.forwarded_from is None
            and self.access.sender_is_admin(message)
        )
        if admin_here and "create_invite" not in self.tools:
            extra.append(invite_tool(self))
        return [*self.tools, *extra] if extra else self.tools

    async def build_prompt(self, message: Incoming) -> str:
        """The system prompt for this turn; the plugins' parts are added after it (unless
        ``feature_prompts=False``)."""
        if self.options.build_prompt is not None:
            return await self.options.build_prompt(message)
        return self.options.prompt_for(rich=self.settings.rich_messages == "auto")

    async def context_for(self, user_id: int, conversation: str | None = None) -> ContextManager:
        """A conversation's context: ``user_id``'s private one, or a group's ``conversation``."""
        return await self.contexts.get(user_id, conversation)

    async def transcribe(self, audio: bytes, mime: str) -> str | None:
        """What a voice note or audio file says; ``None`` (the default): not understood.

        Override it (or pass ``transcribe=``): the text becomes the turn, shown to the user."""
        if self.options.transcribe is not None:
            return await self.options.transcribe(audio, mime)
        return None

    async def approvers(self, call: ToolUseBlock, message: Incoming) -> Sequence[int]:
        """Who else may allow ``call`` (``approval=True``): e.g. a manager; by default nobody."""
        return ()

    async def on_start(self) -> None:
        """Called once before the bot takes messages; raise ``ConfigError`` to stop cleanly."""

    async def display_name(self, user_id: int) -> str:
        """How a user is named to others (override, e.g. with names from a user store)."""
        return f"user {user_id}"

    async def can_relay(self, sender_id: int, recipient_id: int) -> bool:
        """Whether ``sender_id``'s assistant may message ``recipient_id``: by default, when both
        are registered users and neither is blocked."""
        for user_id in (sender_id, recipient_id):
            record = await self.access.known_user(user_id)
            if record is None or record.blocked:
                return False
        return True

    async def aclose(self) -> None:
        """Release what the bot opened: features' stores, LLM client, user store, sessions."""
        await close_features(self)
        if self._llm is not None:
            await self._llm.close()
        await self.access.close()
        await self.sessions.close()
