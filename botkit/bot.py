"""``Bot``: the turn cycle, from an incoming message to the reply."""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any

import structlog

from botkit.agent.compaction import Compactor
from botkit.agent.context import ContextManager
from botkit.agent.events import ErrorEvent, Event, EventSink, Hooks, TextDelta, ToolCall
from botkit.agent.loop import AgentLoop, LoopTexts, TurnResult
from botkit.chats import (
    Conversation,
    RejectionLimiter,
    conversation_of,
    framed_text,
    group_note,
    speaker_name,
)
from botkit.commands import Command, CommandHandler, register_builtin_commands
from botkit.config import Settings
from botkit.errors import LLMAuthError, LLMError, LLMOverloadedError, ToolError
from botkit.llm.base import LLM
from botkit.messengers.base import Draft, Incoming, Messenger
from botkit.plugins import Plugin, PromptPlugin, ToolPlugin
from botkit.sessions import JsonlSessionStore, SessionStore
from botkit.skills import SkillLibrary, load_skills
from botkit.stores.base import RedeemFailure, UserRecord, UserStore
from botkit.tools import Tool, ToolContext, ToolRegistry, tool
from botkit.types import ContentBlock, ImageBlock, ImageSource, Message, TextBlock, Usage

__all__ = [
    "Authorize",
    "Bot",
    "BotOptions",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "HandleStart",
]

log = structlog.get_logger(__name__)

HandleStart = Callable[[Incoming, str], Awaitable[str | None]]
"""``/start <payload>``: a non-empty reply is sent and ends the update."""
Authorize = Callable[[Incoming], Awaitable[str | None]]
"""A non-empty string rejects the message with that text; no LLM call is made."""
BuildExtra = Callable[[Incoming], Awaitable[Any]]
"""What tools receive as ``ToolContext.extra`` for this turn (e.g. a database pool)."""
BuildTools = Callable[[Incoming], Awaitable[ToolRegistry | Sequence[Tool]]]
"""The tools offered to the model for this turn."""
BuildPrompt = Callable[[Incoming], Awaitable[str]]
"""The system prompt for this turn."""

ANSWERED_KINDS = frozenset({"text", "photo"})
USER_CACHE_SECONDS = 10.0
"""How long a user record read for a message is trusted (blocking takes effect within it)."""
USER_CACHE_SIZE = 10_000

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant talking with people on Telegram. Answer clearly and "
    "briefly; use tools when they help."
)


@dataclass(frozen=True)
class BotOptions:
    """How a bot behaves; callbacks given here replace the methods of the same name."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: int = 10
    """LLM calls one turn may make before the user is told it stopped."""
    max_messages: int = 40
    """Messages of history sent to the model, at most (tool chains are never split)."""
    rejection_text: str = "Sorry, this bot is private."
    overloaded_text: str = (
        "I'm overloaded right now and couldn't answer. Please try again in a minute."
    )
    error_text: str = "Sorry, something went wrong on my side. Please try again."
    unsupported_text: str = (
        "Sorry, I can only read text and photos. Please write your message as text."
    )
    stopped_text: str = "Stopped."
    unknown_command_text: str = "I don't know /{command}. These are my commands:"
    max_input_chars: int = 16_000
    """Longer user messages are cut, with a note telling the model so."""
    max_contexts: int = 1_000
    """Contexts kept in memory; the least recently used are dropped and rebuilt on demand."""
    max_context_chars: int = 200_000
    """A context past 80 % of this is compacted: older messages become a summary."""
    admin_only_text: str = "Only admins can do that."
    group_admin_only_text: str = "Only this group's admins can do that."
    welcome_text: str = "Welcome! You're in. Just write to me."
    already_registered_text: str = "You're already registered. Just write to me."
    invite_unknown_text: str = "This invite link is not valid. Ask for a new one."
    invite_expired_text: str = "This invite link has expired. Ask for a new one."
    invite_used_up_text: str = "This invite link has already been used. Ask for a new one."
    budget_text: str = "You've used today's allowance of tokens. Please come back tomorrow."
    help_text: str = "Just write to me; I can also use tools when they help. Commands:"
    typing_interval: float = 4.0
    """Seconds between "typing…" signals while a turn runs."""
    typing_delay: float = 1.0
    """A turn quicker than this shows no "typing…" at all: its answer is the sign of life."""
    loop_texts: LoopTexts = field(default_factory=LoopTexts)
    handle_start: HandleStart | None = None
    authorize: Authorize | None = None
    build_extra: BuildExtra | None = None
    build_tools: BuildTools | None = None
    build_prompt: BuildPrompt | None = None


class Bot:
    """An LLM agent for many users: subclass it and override the steps, or pass callbacks."""

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        llm: LLM | None = None,
        sessions: SessionStore | None = None,
        users: UserStore | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        plugins: Iterable[Plugin] = (),
        options: BotOptions | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = settings or Settings()
        self.plugins: list[Plugin] = list(plugins)
        """Composed in order: their prompt parts follow the system prompt, their tools join."""
        self.hooks = Hooks()
        """Lifecycle hooks: ``bot.hooks.on("tool_start", fn)``; see ``botkit.agent.events``."""
        self.messenger: Messenger | None = None
        """Where replies and relayed messages go; set when the bot starts serving."""
        self.options = replace(options or BotOptions(), **overrides)
        self.tools = ToolRegistry()
        for item in tools:
            self.tools.register(item)
        self.sessions: SessionStore = sessions or JsonlSessionStore(self.settings.sessions_dir)
        self._llm = llm
        self._users = users
        self._users_lock = asyncio.Lock()
        self._user_cache: dict[int, tuple[float, UserRecord | None]] = {}
        self._contexts: OrderedDict[int | str, asyncio.Task[ContextManager]] = OrderedDict()
        self._turns: dict[tuple[int, int], asyncio.Task[str]] = {}
        self._group_rejections = RejectionLimiter(self.settings.group_rejection_interval)
        self.model_override: str | None = None
        """Set by an admin's ``/model``: the model every turn uses from then on."""
        self.usage_by_model: dict[str, Usage] = {}
        """What this process's turns cost, per model."""
        self.skills = (
            load_skills(self.settings.skills_dir) if self.settings.skills_dir else SkillLibrary()
        )
        """Skills from BOTKIT_SKILLS_DIR: listed in the prompt, read with ``load_skill``."""
        if self.skills:
            self.plugins += [PromptPlugin(self.skills.prompt_section()), ToolPlugin(self.skills)]
        self.commands: dict[str, Command] = {}
        register_builtin_commands(self)

    @property
    def llm(self) -> LLM:
        """The model this bot talks to; an ``AnthropicLLM`` from settings unless one was given."""
        if self._llm is None:
            from botkit.llm.anthropic import AnthropicLLM

            self._llm = AnthropicLLM(
                api_key=self.settings.require_anthropic_key(),
                model=self.settings.model,
                max_tokens=self.settings.max_tokens,
                base_url=self.settings.anthropic_base_url,
                max_concurrency=self.settings.max_concurrent_turns,
            )
        return self._llm

    def tool(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: register a typed function as a tool of this bot."""
        self.tools.register(fn)
        return fn

    def command(
        self, name: str, description: str, *, admin_only: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Decorator: register ``async def handler(message, args) -> str`` as ``/name``."""

        def register(handler: CommandHandler) -> CommandHandler:
            self.commands[name] = Command(name, description, handler, admin_only)
            return handler

        return register

    def command_menu(self) -> list[tuple[str, str]]:
        """The commands as Telegram's menu shows them."""
        return [(c.name, c.description) for c in self.commands.values()]

    # ---- the turn cycle -------------------------------------------------------------

    async def handle_safely(self, message: Incoming, messenger: Messenger) -> None:
        """``handle``, but a failure is logged and the user gets a polite message."""
        try:
            await self.handle(message, messenger)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("turn.failed", user_id=message.user_id, update_id=message.update_id)
            with suppress(Exception):
                await messenger.send_text(message.chat_id, self.options.error_text)

    async def handle(self, message: Incoming, messenger: Messenger) -> None:
        """Take one incoming message through the gates and the tool loop to a reply."""
        if message.command == "start":
            welcome = await self.handle_start(message, message.command_args)
            if welcome:
                await self._reply(messenger, message, welcome)
                return
        rejection = await self.authorize(message)
        if rejection:
            await self._reject(messenger, message, rejection)
            return
        message = replace(message, user=await self.user_record(message))
        message = await self._with_images(message, messenger)
        if message.kind not in ANSWERED_KINDS or not (message.text or message.images):
            await self._reply(messenger, message, self.options.unsupported_text)
            return
        if message.command is not None:
            await self._reply(messenger, message, await self._answer_command(message))
            return
        if await self.over_budget(message.user_id):
            await self._reply(messenger, message, self.options.budget_text)
            return
        extra = await self.build_extra(message)
        tools = _as_registry(await self.build_tools(message))
        system = _with_note(await self.build_prompt(message), group_note(message))
        context = await self.context_for_message(message)
        async with context.lock, self._typing(messenger, message):
            await context.flush_pending()
            if not context.has_turn(message.update_id):
                await context.append(self._user_turn(message), **_turn_meta(message))
            elif (answered := context.answer_to(message.update_id)) is not None:
                # Handled before a crash, reply maybe unsent: resend it, no new LLM call.
                await self._reply(messenger, message, answered)
                return
            tool_context = self._tool_context(message, extra)
            reply = await self._answer(message, messenger, context, system, tools, tool_context)
            await self._reply(messenger, message, reply)

    async def _reply(self, messenger: Messenger, message: Incoming, text: str) -> None:
        """Answer in the message's chat and topic; in a group, as a reply to it."""
        reply_to = message.message_id if message.in_group else None
        await messenger.send_text(
            message.chat_id, text, thread_id=message.thread_id, reply_to=reply_to
        )

    async def _reject(self, messenger: Messenger, message: Incoming, rejection: str) -> None:
        """Turn a stranger away: always in private, at most once an interval in a group."""
        log.info("turn.rejected", user_id=message.user_id, chat_id=message.chat_id)
        if message.in_group and not self._group_rejections.allow(message.chat_id, message.user_id):
            return
        await self._reply(messenger, message, rejection)

    async def _with_images(self, message: Incoming, messenger: Messenger) -> Incoming:
        """The message with its photos fetched (only ever for an admitted sender)."""
        if not message.photo_ids or message.images:
            return message
        fetched = [await messenger.download(file_id) for file_id in message.photo_ids]
        return replace(message, images=tuple(data for data in fetched if data))

    def _user_turn(self, message: Incoming) -> Message:
        """The user's message as the model sees it: framed with speaker, reply and quote."""
        turn = user_message(message, self.options.max_input_chars)
        if not (message.in_group or message.reply_to or message.quote):
            return turn
        text = framed_text(message, turn.text)
        images = [block for block in turn.content if not isinstance(block, TextBlock)]
        return Message(role="user", content=[*images, TextBlock(text=text)])

    async def _answer_command(self, message: Incoming) -> str:
        """A slash command's reply: ``/start`` alone and unknown commands cost no LLM call."""
        command = self.commands.get(message.command or "")
        if command is not None:
            return await self._run_command(command, message)
        menu = "\n".join(f"/{c.name} — {c.description}" for c in self.commands.values())
        if message.command == "start":
            return f"{self.options.help_text}\n{menu}"
        return f"{self.options.unknown_command_text.format(command=message.command)}\n{menu}"

    async def _answer(
        self,
        message: Incoming,
        messenger: Messenger,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        tool_context: ToolContext,
    ) -> str:
        """Run the loop as its own task, streaming into a draft, so the user can stop it."""
        draft = messenger.draft(message) if self.settings.stream_replies else None
        emit = _draft_sink(draft) if draft is not None else None
        task_id = f"{message.user_id}:{message.update_id}"
        if draft is not None:
            await draft.start()
        first = context.appended
        turn = asyncio.create_task(
            self._run_loop(context, system, tools, tool_context, emit=emit, task_id=task_id)
        )
        stop_key = (message.chat_id, draft.draft_id) if draft is not None else None
        if stop_key is not None:
            self._turns[stop_key] = turn
        try:
            return _all_text(context, first, await turn)
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not turn.cancelled() or (this is not None and this.cancelling()):
                raise
            return await self._stopped(context, draft)
        finally:
            if stop_key is not None:
                self._turns.pop(stop_key, None)
            if draft is not None:
                await draft.finish()

    async def _stopped(self, context: ContextManager, draft: Draft | None) -> str:
        """The user pressed stop: keep what they saw, leave the context valid."""
        partial = draft.text.strip() if draft is not None else ""
        log.info("turn.stopped_by_user", user_id=context.user_id, chars=len(partial))
        if partial:
            shown = Message(role="assistant", content=[TextBlock(text=partial)])
            await context.append(shown, stop_reason="stopped_by_user")
        return partial or self.options.stopped_text

    def stop_turn(self, chat_id: int, draft_id: int) -> bool:
        """Cancel the turn whose draft ``draft_id`` shows in ``chat_id`` (its stop button)."""
        turn = self._turns.get((chat_id, draft_id))
        if turn is None or turn.done():
            return False
        turn.cancel()
        return True

    async def _run_loop(
        self,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        tool_context: ToolContext,
        *,
        emit: EventSink | None = None,
        task_id: str | None = None,
    ) -> str:
        """The loop's reply, or a polite text when the model could not be reached."""
        loop = AgentLoop(
            self.llm,
            max_iterations=self.options.max_iterations,
            texts=self.options.loop_texts,
            compactor=Compactor(self.llm, max_context_chars=self.options.max_context_chars),
            model=self.model_override,
            hooks=self.hooks,
        )
        try:
            result: TurnResult = await loop.run(
                context,
                system=system,
                tools=tools,
                tool_context=tool_context,
                emit=emit,
                task_id=task_id,
            )
        except LLMError as e:
            # A rejected key is reported once by the LLM client; users hear "unavailable".
            overloaded = isinstance(e, LLMOverloadedError | LLMAuthError)
            log.log(
                logging.WARNING if overloaded else logging.ERROR,
                "turn.llm_failed",
                user_id=context.user_id,
                error=str(e),
            )
            text = self.options.overloaded_text if overloaded else self.options.error_text
            if emit is not None:
                await emit(
                    ErrorEvent(
                        context_id=context.user_id,
                        task_id=task_id or "",
                        error=str(e),
                        message=text,
                    )
                )
            return text
        model = self.model_override or self.settings.model
        self.usage_by_model[model] = self.usage_by_model.get(model, Usage()) + result.usage
        if self.settings.daily_token_budget is not None:
            spent = result.usage.input_tokens + result.usage.output_tokens
            spent += result.usage.cache_creation_input_tokens
            await (await self.user_store()).add_usage(tool_context.user_id, _today(), spent)
        log.info(
            "turn.done",
            user_id=context.user_id,
            iterations=result.iterations,
            stop_reason=result.stop_reason,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
        )
        return result.text

    # ---- the steps a bot may override -----------------------------------------------

    async def handle_start(self, message: Incoming, payload: str) -> str | None:
        """Answer ``/start <payload>``; a non-empty reply ends the update before authorize."""
        if self.options.handle_start is not None:
            return await self.options.handle_start(message, payload)
        if not payload:
            return None
        users = await self.user_store()
        result = await users.redeem_invite(payload, message.user_id, _name_of(message))
        self._user_cache.pop(message.user_id, None)
        if result.ok:
            log.info(
                "invite.redeemed", user_id=message.user_id, fresh=not result.already_registered
            )
            if result.already_registered:
                return self.options.already_registered_text
            return self.options.welcome_text
        log.info("invite.refused", user_id=message.user_id, why=str(result.failure))
        return {
            RedeemFailure.EXPIRED: self.options.invite_expired_text,
            RedeemFailure.USED_UP: self.options.invite_used_up_text,
        }.get(result.failure or RedeemFailure.UNKNOWN, self.options.invite_unknown_text)

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message; a text rejects it (sent as is, no LLM call)."""
        if self.options.authorize is not None:
            return await self.options.authorize(message)
        user_id, settings = message.user_id, self.settings
        if user_id in settings.admins:
            return None
        if settings.access == "allowlist":
            return None if user_id in settings.allowed_users else self.options.rejection_text
        record = await self.known_user(user_id)
        if record is not None and record.blocked:
            return self.options.rejection_text
        if settings.access == "open" or record is not None or user_id in settings.allowed_users:
            return None
        return self.options.rejection_text

    async def build_extra(self, message: Incoming) -> Any:
        """What tools get as ``ToolContext.extra`` this turn."""
        if self.options.build_extra is not None:
            return await self.options.build_extra(message)
        return None

    async def build_tools(self, message: Incoming) -> ToolRegistry | Sequence[Tool]:
        """The tools the model may call this turn; all registered tools by default."""
        if self.options.build_tools is not None:
            return await self.options.build_tools(message)
        extra = [t for p in self.plugins for t in p.tools(message)]
        if self.is_admin(message.user_id) or (message.user and message.user.role == "admin"):
            from botkit.invites import invite_tool

            extra.append(invite_tool(self))
        return [*self.tools, *extra] if extra else self.tools

    async def build_prompt(self, message: Incoming) -> str:
        """The system prompt for this turn."""
        if self.options.build_prompt is not None:
            return await self.options.build_prompt(message)
        parts = [self.options.system_prompt]
        parts += [part for p in self.plugins if (part := await p.prompt(message))]
        return "\n\n".join(parts)

    async def on_start(self) -> None:
        """Called once before the bot takes messages; raise ``ConfigError`` to stop cleanly."""

    async def context_for(self, user_id: int, conversation: str | None = None) -> ContextManager:
        """A conversation's context, created on first use from what its session file recorded.

        ``user_id`` alone is that user's private conversation; a group's has its ``conversation``
        key (see ``context_for_message``).
        """
        key: int | str = conversation or user_id
        task = self._contexts.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load_context(user_id, conversation))
            self._contexts[key] = task
            self._evict_idle_contexts()
        else:
            self._contexts.move_to_end(key)
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._contexts.get(key) is task:
                del self._contexts[key]
            raise

    def conversation_of(self, message: Incoming) -> Conversation:
        """Which conversation ``message`` belongs to: private, or its group's (and topic's)."""
        return conversation_of(message, self.settings.group_context)

    async def context_for_message(self, message: Incoming) -> ContextManager:
        """The context of the conversation ``message`` was written in."""
        conversation = self.conversation_of(message)
        return await self.context_for(conversation.owner_id, conversation.key)

    def _evict_idle_contexts(self) -> None:
        """Drop the least recently used contexts beyond ``max_contexts`` that are not in use."""
        excess = len(self._contexts) - self.options.max_contexts
        if excess <= 0:
            return
        # The oldest entries come first; busy ones are skipped, so look a little further.
        for key in list(itertools.islice(self._contexts, excess + 16)):
            task = self._contexts[key]
            if task.done() and not task.exception() and not task.result().lock.locked():
                del self._contexts[key]
                excess -= 1
                if excess <= 0:
                    return

    @property
    def resident_contexts(self) -> int:
        """How many user contexts are in memory now."""
        return len(self._contexts)

    async def _load_context(self, user_id: int, conversation: str | None) -> ContextManager:
        recorded = await self.sessions.load(conversation or user_id)
        return ContextManager.restore(
            user_id,
            recorded.entries,
            conversation=conversation,
            max_messages=self.options.max_messages,
            on_append=self.sessions.append,
        )

    async def aclose(self) -> None:
        """Release what the bot opened (the LLM client)."""
        close = getattr(self._llm, "close", None)
        if close is not None:
            await close()
        if self._users is not None:
            await self._users.close()
            self._users = None
        close_sessions = getattr(self.sessions, "close", None)
        if close_sessions is not None:
            await close_sessions()

    async def user_store(self) -> UserStore:
        """The users and invites store: PostgreSQL with BOTKIT_DATABASE_URL, else SQLite."""
        if self._users is not None:
            return self._users
        async with self._users_lock:
            if self._users is None:
                self._users = await _open_user_store(self.settings)
            return self._users

    async def known_user(self, user_id: int) -> UserRecord | None:
        """The user's record, from a cache of a few seconds (every message needs it)."""
        cached = self._user_cache.get(user_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < USER_CACHE_SECONDS:
            return cached[1]
        record = await (await self.user_store()).get_user(user_id)
        self._remember_user(user_id, record)
        return record

    def _remember_user(self, user_id: int, record: UserRecord | None) -> None:
        if len(self._user_cache) >= USER_CACHE_SIZE:
            self._user_cache.clear()  # cheap and rare: records are re-read on demand
        self._user_cache[user_id] = (time.monotonic(), record)

    async def user_record(self, message: Incoming) -> UserRecord:
        """The sender's record; one admitted by configuration alone gets role admin or user."""
        record = await self.known_user(message.user_id)
        if record is None:  # admitted by config (allowlist, admin, open): not stored
            role = "admin" if self.is_admin(message.user_id) else "user"
            record = UserRecord(message.user_id, role, _name_of(message), _now(), blocked=False)
        return record

    async def over_budget(self, user_id: int) -> bool:
        """Whether the user has used up today's token budget (if one is set)."""
        budget = self.settings.daily_token_budget
        if budget is None:
            return False
        used = await (await self.user_store()).usage_on(user_id, _today())
        return used >= budget

    def is_admin(self, user_id: int) -> bool:
        """Whether ``user_id`` is one of the configured admins."""
        return user_id in self.settings.admins

    async def is_group_admin(self, message: Incoming) -> bool:
        """Whether the sender may manage the group's conversation: the bot's admin or the chat's."""
        if self.is_admin(message.user_id) or (message.user and message.user.role == "admin"):
            return True
        if self.messenger is None:
            return False
        return await self.messenger.is_chat_admin(message.chat_id, message.user_id)

    # ---- events, injection, relaying ------------------------------------------------

    async def stream(
        self, user_id: int, text: str, *, chat_id: int | None = None
    ) -> AsyncIterator[Event]:
        """Run one turn for ``user_id`` outside any messenger, yielding its events as they come.

        No gates or commands: this is the agent itself, for consoles, tests and other hosts.
        """
        message = Incoming(
            update_id=0, user_id=user_id, chat_id=chat_id or user_id, text=text, date=_now()
        )
        events: asyncio.Queue[Event | None] = asyncio.Queue()
        worker = asyncio.create_task(self._stream_turn(message, events))
        try:
            while (event := await events.get()) is not None:
                yield event
            await worker
        finally:
            worker.cancel()
            with suppress(asyncio.CancelledError):
                await worker

    async def _stream_turn(self, message: Incoming, events: asyncio.Queue[Event | None]) -> None:
        try:
            extra = await self.build_extra(message)
            tools = _as_registry(await self.build_tools(message))
            system = await self.build_prompt(message)
            context = await self.context_for(message.user_id)
            async with context.lock:
                await context.flush_pending()
                await context.append(user_message(message, self.options.max_input_chars))
                tool_context = self._tool_context(message, extra)
                task_id = f"{message.user_id}:{uuid.uuid4().hex[:8]}"
                await self._run_loop(
                    context, system, tools, tool_context, emit=events.put, task_id=task_id
                )
        finally:
            await events.put(None)

    async def inject(self, user_id: int, message: Message) -> None:
        """Add ``message`` to another user's context (now, or right after their running turn)."""
        context = await self.context_for(user_id)
        if context.lock.locked():
            context.pending.append(message)
            return
        async with context.lock:
            await context.append(message)

    async def relay(self, sender_id: int, recipient_id: int, text: str) -> str:
        """Send ``text`` from ``sender_id``'s assistant to another user, and tell their context."""
        if self.messenger is None:
            raise ToolError("this bot is not connected to a messenger")
        if recipient_id == sender_id:
            raise ToolError("that is the user you are talking to; just answer them")
        if not await self.can_receive(recipient_id):
            raise ToolError(f"user {recipient_id} is not a user of this bot")
        sender = await self.display_name(sender_id)
        await self.messenger.send_text(recipient_id, f"Message from {sender}:\n{text}")
        # A user-role note, so it also opens a conversation that has no messages yet.
        note = f"[You sent this user a message on behalf of {sender} (id {sender_id}): {text}]"
        await self.inject(recipient_id, Message.user_text(note))
        log.info("relay.sent", sender=sender_id, recipient=recipient_id)
        return f"Delivered to user {recipient_id}."

    async def can_receive(self, user_id: int) -> bool:
        """Whether ``user_id`` may be sent relayed messages: by default, if authorized."""
        probe = Incoming(update_id=0, user_id=user_id, chat_id=user_id, text="", date=_now())
        return not await self.authorize(probe)

    async def display_name(self, user_id: int) -> str:
        """How a user is named to others (override, e.g. with names from a user store)."""
        return f"user {user_id}"

    def send_user_message_tool(self) -> Tool:
        """A ``send_user_message`` tool: message another user; their assistant will know."""
        bot = self

        @tool(name="send_user_message")
        async def send_user_message(ctx: ToolContext, user_id: int, text: str) -> str:
            """Send a Telegram message to another user of this bot and note it in their chat.

            Args:
                user_id: The Telegram user id of the recipient.
                text: The message, written to them directly.
            """
            return await bot.relay(ctx.user_id, user_id, text)

        return send_user_message

    def _tool_context(self, message: Incoming, extra: Any) -> ToolContext:
        return ToolContext(
            user_id=message.user_id,
            chat_id=message.chat_id,
            timestamp=message.date,
            extra=extra,
            injector=self,
        )

    # ---- slash commands -------------------------------------------------------------

    async def _run_command(self, command: Command, message: Incoming) -> str:
        if command.admin_only and not self.is_admin(message.user_id):
            return self.options.admin_only_text
        log.info("command", name=command.name, user_id=message.user_id)
        return await command.handler(message, message.command_args)

    # ---- running ----------------------------------------------------------------------

    def run(self) -> None:
        """Run this bot on Telegram with long polling until interrupted."""
        from botkit.app import run_bot

        run_bot(self)

    @asynccontextmanager
    async def _typing(self, messenger: Messenger, message: Incoming) -> AsyncIterator[None]:
        """Keep "typing…" visible in the chat (and topic) while the block runs."""

        async def keep_typing() -> None:
            await asyncio.sleep(self.options.typing_delay)
            while True:
                with suppress(Exception):
                    await messenger.send_typing(message.chat_id, thread_id=message.thread_id)
                await asyncio.sleep(self.options.typing_interval)

        task = asyncio.create_task(keep_typing())
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


def user_message(message: Incoming, max_chars: int = 16_000) -> Message:
    """The conversation message for an incoming one: its images, then its text (cut if huge)."""
    content: list[ContentBlock] = [
        ImageBlock(source=ImageSource(media_type=_image_type(data), data=_b64(data)))
        for data in message.images
    ]
    text = message.text
    if len(text) > max_chars:
        omitted = len(text) - max_chars
        text = f"{text[:max_chars]}\n\n[The message was cut here: {omitted} more characters.]"
    if text:
        content.append(TextBlock(text=text))
    return Message(role="user", content=content)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_type(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/jpeg"


def _as_registry(tools: ToolRegistry | Sequence[Tool]) -> ToolRegistry:
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    for item in tools:
        registry.register_tool(item)
    return registry


def _draft_sink(draft: Draft) -> EventSink:
    """Streams the text deltas of a turn into a messenger's draft, each call's text apart."""
    after_tool = False

    async def sink(event: Event) -> None:
        nonlocal after_tool
        if isinstance(event, ToolCall):
            after_tool = True
        elif isinstance(event, TextDelta):
            if after_tool and draft.text.strip():
                await draft.update("\n\n")
            after_tool = False
            await draft.update(event.text)

    return sink


def _all_text(context: ContextManager, first: int, reply: str) -> str:
    """Everything the model wrote this turn (text before tool calls too), ending with ``reply``.

    The draft showed all of it, so the final message must not hold less.
    """
    texts = [m.text.strip() for m in context.since(first) if m.role == "assistant"]
    texts = [text for text in texts if text]
    if not texts or texts[-1] != reply.strip():
        texts.append(reply)
    return "\n\n".join(texts)


def _with_note(system: str, note: str | None) -> str:
    return f"{system}\n\n{note}" if note else system


def _turn_meta(message: Incoming) -> dict[str, Any]:
    """What the session records with a user message: its update, and in a group its speaker."""
    meta: dict[str, Any] = {"update_id": message.update_id}
    if message.in_group:
        meta.update(user_id=message.user_id, speaker=speaker_name(message))
    return meta


def _now() -> datetime:
    return datetime.now(UTC)


def _name_of(message: Incoming) -> str | None:
    return message.first_name or message.username


def _today() -> date:
    return datetime.now(UTC).date()


async def _open_user_store(settings: Settings) -> UserStore:
    if settings.database_url is not None:
        from botkit.stores.postgres import PostgresUserStore

        return await PostgresUserStore.connect(settings.database_url.get_secret_value())
    from botkit.stores.sqlite import SqliteUserStore

    path = settings.database_path or settings.sessions_dir / "botkit.db"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return SqliteUserStore(path)
