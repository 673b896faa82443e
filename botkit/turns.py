"""The turn pipeline: one incoming message through the bot's steps to its reply.

Telegram turns, ``Bot.stream``, the console and (later) queue workers all run turns here:
(the operators' chat, for handoffs) → handle_start → authorize → user record → commands →
(handed over: relay and stop) → budget → the conversation's choices (model, persona,
instructions) → build_extra, build_tools, build_prompt → context_for →
the tool loop → the reply. LLM errors become user texts here;
usage is charged, drafts are streamed and the stop button is honoured here.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from botkit import tracing
from botkit.access import Access
from botkit.agent.compaction import Compactor
from botkit.agent.context import ContextManager
from botkit.agent.events import ErrorEvent, Event, EventSink, Hooks
from botkit.agent.loop import AgentLoop, ProgressSink, TurnResult
from botkit.agent.pool import ContextPool
from botkit.approvals.service import Approvals
from botkit.chats import RejectionLimiter, conversation_of, framed_text, group_note, speaker_name
from botkit.choices.turn import NO_CHOICE, TurnChoice, TurnChoices
from botkit.commands import ButtonHandler, Command, PressAnswer, help_intro, visible_commands
from botkit.config import Settings
from botkit.errors import (
    LLMAuthError,
    LLMError,
    LLMOverloadedError,
    MediaTooLargeError,
    PromptTooLongError,
)
from botkit.feedback import FeedbackRecorder
from botkit.files import MB, FileLimits, FileReader, megabytes
from botkit.images import DECODE_BUDGET, image_type
from botkit.llm.base import LLM, LLMRequest, LLMResponse, TextSink, metered
from botkit.llm.keepwarm import KEEPER_USER_ID, CacheKeeper
from botkit.llm.prepared import PreparedAnswers
from botkit.messengers.base import (
    ButtonPress,
    Draft,
    Incoming,
    Messenger,
    OutgoingFile,
    Reaction,
    Reply,
)
from botkit.metrics import Metrics, TurnOutcome
from botkit.options import BotOptions
from botkit.payments.service import Payments
from botkit.plugins import Plugin, join_parts, prompt_parts, turn_notes
from botkit.prefixwatch import PrefixWatch
from botkit.tools import Tool, ToolContext, ToolFile, ToolRegistry
from botkit.types import (
    ContentBlock,
    ImageBlock,
    ImageSource,
    Message,
    TextBlock,
    ToolDef,
    ToolResultBlock,
    Usage,
)

if TYPE_CHECKING:
    from botkit.handoff import Handoffs
    from botkit.stores.handoffs import Handoff
    from botkit.voice.service import Voice

__all__ = ["ANSWERED_KINDS", "BotSteps", "TurnPipeline", "as_registry", "user_message"]

log = structlog.get_logger(__name__)

SEEN_REACTION = "👀"
"""The reaction that shows a message was taken (BOTKIT_REACTIONS=on)."""
ANSWERED_KINDS = frozenset({"text", "photo", "document"})
"""Kinds always read; voice and audio too when the bot can transcribe."""


class BotSteps(Protocol):
    """What the pipeline needs of a bot: its configuration and the steps of the turn cycle."""

    settings: Settings
    options: BotOptions
    commands: dict[str, Command]
    buttons: dict[str, ButtonHandler]
    hooks: Hooks
    model_override: str | None
    approvals: Approvals
    payments: Payments
    plugins: list[Plugin]
    voice: Voice | None

    @property
    def choices(self) -> TurnChoices:
        """Each conversation's model, persona and instructions."""
        ...

    @property
    def llm(self) -> LLM:
        """The model the bot talks to."""
        ...

    async def handle_start(self, message: Incoming, payload: str) -> str | None:
        """``/start <payload>``: a non-empty reply ends the update before authorize."""
        ...

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message; a text rejects it."""
        ...

    async def build_extra(self, message: Incoming) -> Any:
        """What tools get as ``ToolContext.extra`` this turn."""
        ...

    async def build_tools(self, message: Incoming) -> ToolRegistry | Sequence[Tool]:
        """The tools the model may call this turn."""
        ...

    async def build_prompt(self, message: Incoming) -> str:
        """The system prompt for this turn."""
        ...

    async def transcribe(self, audio: bytes, mime: str) -> str | None:
        """What a voice note or audio file says (``None``: not understood)."""
        ...

    @property
    def can_transcribe(self) -> bool:
        """Whether voice notes are understood."""
        ...


class ChargedLLM:
    """An LLM whose every call is charged as it ends: loop calls, compaction summaries, the
    calls of a turn that is stopped or fails later, and a call stopped or failed mid-stream
    (for the tokens it had used by then), all count (and are measured)."""

    def __init__(
        self,
        llm: LLM,
        charge: Callable[[str, Usage], Awaitable[None]],
        metrics: Metrics | None = None,
        model: str = "",
    ) -> None:
        self.llm = llm
        self.charge = charge
        """Called with the model and the usage of each call."""
        self.metrics = metrics
        self.model = model
        """The model a request without one goes to, for the metrics of failed calls."""

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Answer ``request`` with the wrapped LLM, then charge what the call cost."""
        started = time.perf_counter()
        with metered() as meter:
            try:
                response = await self.llm.complete(request, on_text)
            except BaseException as e:
                if isinstance(e, LLMError) and self.metrics is not None:
                    seconds = time.perf_counter() - started
                    model = request.model or self.model
                    self.metrics.llm_call(model, _llm_outcome(e), seconds, None)
                if _billed(meter.usage):  # stopped or broken mid-stream: charge what it used
                    await asyncio.shield(self.charge(meter.model, meter.usage))
                raise
        if self.metrics is not None:
            seconds = time.perf_counter() - started
            self.metrics.llm_call(response.model, "ok", seconds, response.usage)
        await self.charge(response.model, response.usage)
        return response

    async def close(self) -> None:
        """Nothing of its own to release: the wrapped LLM is the bot's."""


def _billed(usage: Usage) -> bool:
    return bool(
        usage.input_tokens
        or usage.output_tokens
        or usage.cache_creation_input_tokens
        or usage.cache_read_input_tokens
    )


class TurnPipeline:
    """Runs turns for one bot: the gates, the steps, the context, the loop and the reply."""

    def __init__(
        self,
        bot: BotSteps,
        access: Access,
        contexts: ContextPool,
        metrics: Metrics | None = None,
        handoffs: Handoffs | None = None,
    ) -> None:
        self.bot = bot
        self.access = access
        self.contexts = contexts
        self.handoffs = handoffs
        """Conversations handed to people (BOTKIT_OPERATORS_CHAT); ``None``: no handoff."""
        self.metrics = metrics or Metrics()
        """Where turns and LLM calls are counted."""
        self.usage_by_model: dict[str, Usage] = {}
        """What this process's turns cost, per model."""
        self.prepared = PreparedAnswers()
        """Answers prepared ahead (a batched task's), used for the call they were made for."""
        self.prefix_watch = PrefixWatch()
        """Names, once, a part of the cached prompt (prompt part, tool) that changes most turns."""
        self._turns: dict[tuple[int, int], asyncio.Task[tuple[str, TurnOutcome]]] = {}
        self._group_rejections = RejectionLimiter(bot.settings.group_rejection_interval)
        self.feedback = FeedbackRecorder(contexts, self.metrics, bot.settings.group_context)
        """Users' reactions to replies, recorded as feedback on their turns."""
        limits = FileLimits.from_megabytes(
            bot.settings.max_file_mb,
            max_text_chars=bot.options.max_text_file_chars,
            max_image_pixels=bot.settings.max_image_pixels,
        )
        transcribe = bot.transcribe if bot.can_transcribe else None
        self.voice = bot.voice
        """Voice notes heard (unless the bot transcribes itself) and answers spoken."""
        if self.voice is not None:
            self.voice.charge = self._charge  # seconds heard, characters spoken: as LLM calls
            self.voice.metrics = self.metrics
        hearing = self.voice if self.voice is not None and self.voice.hears else None
        show_heard = bot.settings.show_transcript
        self.files = FileReader(limits, bot.options.file_texts, transcribe, hearing, show_heard)
        """Reads what users send: documents, pictures, voice (``bot.transcribe``, else
        ``botkit.voice``)."""
        DECODE_BUDGET.resize(bot.settings.image_memory_mb)  # one budget for the process

    async def handle_safely(self, message: Incoming, messenger: Messenger) -> None:
        """``handle``, but a failure is logged and the user gets a polite message."""
        started = message.received_at or time.monotonic()
        outcome: TurnOutcome = "error"
        with tracing.tracer.turn(message, messenger, self.bot.settings.group_context) as span:
            try:
                outcome = await self.handle(message, messenger)
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except Exception as e:
                span.fail(type(e).__qualname__)
                self.metrics.turn_failed("error", type(e).__qualname__)
                log.exception("turn.failed", user_id=message.user_id, update_id=message.update_id)
                with suppress(Exception):
                    await self._reply(messenger, message, self.bot.options.error_text)
            finally:
                tracing.tracer.turn_ended(span, outcome)
                self.metrics.turn_done(outcome, time.monotonic() - started)

    async def handle(self, message: Incoming, messenger: Messenger) -> TurnOutcome:
        """Take one incoming message through the gates and the tool loop to a reply.

        Returns how the turn ended (the ``outcome`` of ``botkit_turns_total``).
        """
        if self.handoffs and await self.handoffs.take_operator_message(message, messenger):
            return "handoff"  # the operators' chat: not a user's turn, and no gate applies
        if message.payment is not None:  # paid: granted once, whatever the gates say now
            await self.bot.payments.take_payment(message, messenger)
            return "payment"
        if message.command == "start":
            welcome = await self.bot.handle_start(message, message.command_args)
            tracing.tracer.gate("handle_start", not welcome)
            if welcome:
                await self._reply(messenger, message, welcome)
                return "command"
        rejection = await self.bot.authorize(message)
        tracing.tracer.gate("authorize", not rejection)
        if rejection:
            if not message.listen_for:  # a group voice note not known to be for the bot: silent
                await self._reject(messenger, message, rejection)
            return "rejected"
        message = replace(message, user=await self.access.user_record(message))
        if not self.files.readable(message):
            await self._reply(messenger, message, self.bot.options.unsupported_text)
            return "unsupported"
        # Every gate runs before a file is fetched: downloads and decoding cost CPU and memory.
        if message.command is not None:
            await self._reply(messenger, message, await self._answer_command(message))
            return "command"
        if self.handoffs and await self.handoffs.relay_if_handed_off(message, messenger):
            return "handoff"  # a person answers this conversation now: relayed, no LLM call
        over_budget = await self.access.over_budget(message.user_id)
        tracing.tracer.gate("budget", not over_budget)
        if over_budget:
            if not message.listen_for:
                await self._reply(messenger, message, self.access.budget_text)
            return "budget"
        read = await self._read_files(message, messenger)
        if read is None:
            return "unaddressed"  # a group voice note that did not say the bot's name
        if isinstance(read, str):
            await self._reply(messenger, message, read)  # a file over a limit, or unreadable
            return "unsupported"
        message = read
        if not (message.text or message.images or message.content):
            await self._reply(messenger, message, self.bot.options.unsupported_text)
            return "unsupported"
        choice = await self.bot.choices.for_turn(message)  # its model, persona, instructions
        if choice.notice:
            await self._reply(messenger, message, choice.notice)  # a plan's choice has ended
        extra = await self.bot.build_extra(message)
        tools = choice.tools(as_registry(await self.bot.build_tools(message)))
        parts = await self.named_parts(message, choice)
        system = _with_note(join_parts(parts), group_note(message))
        context = await self.context_for(message)
        self.prefix_watch.observe(context.key, [*parts, *tool_parts(tools)])
        note = await turn_notes(self.bot.plugins, message)
        draft = messenger.draft(message) if self.bot.settings.stream_replies else None
        # A draft shows "Thinking…" at once; "typing…" is for chats without one.
        async with (
            context.lock,
            self._typing(messenger, message, wanted=draft is None),
            self._seen(messenger, message),
        ):
            if await self.bot.approvals.holds(message, context):
                return "held"  # its conversation waits for a decision; it runs after
            if not context.has_turn(message.update_id):
                await context.flush_pending()  # notes relayed since the last turn, in order
                # With media, recorded only once the API takes them: a refusal keeps nothing.
                turn = self._user_turn(message, note)
                await context.append(turn, provisional=turn.has_media, **_turn_meta(message))
            elif (answered := context.answer_to(message.update_id)) is not None:
                # Handled before a crash, reply maybe unsent: resend it, no new LLM call.
                await self._reply(messenger, message, answered)
                return "answered"
            tool_context = self._tool_context(message, extra, messenger)
            reply, outcome = await self._answer(
                message, messenger, context, system, tools, tool_context, draft, choice.model
            )
            await self._end_turn(message, messenger, context, tools, reply, outcome)
            return outcome

    async def _end_turn(
        self,
        message: Incoming,
        messenger: Messenger,
        context: ContextManager,
        tools: ToolRegistry,
        reply: str,
        outcome: TurnOutcome,
    ) -> None:
        """Send the reply; or, when a call waits for approval, the request for it."""
        await context.keep()  # a turn stopped before its first answer keeps its message
        if outcome == "waiting":
            if reply.strip():  # what the model wrote before the call, as the draft showed it
                await self._reply(messenger, message, reply.strip())
            await self.bot.approvals.request(message, context, tools, messenger)
            return
        await self._reply(messenger, message, reply)
        if outcome == "answered":
            await self._speak(message, messenger, reply)

    async def _speak(self, message: Incoming, messenger: Messenger, reply: str) -> None:
        """The reply spoken too, as voice notes after its text (``/voice``,
        BOTKIT_VOICE_REPLIES); whatever fails, the text was sent and stands."""
        if self.voice is None or not await self.voice.wants_spoken(message):
            return
        try:
            await self.voice.speak_reply(message, reply, messenger)
        except Exception as e:  # the voice note refused (the text already went)
            log.warning("turn.voice_not_sent", user_id=message.user_id, error=str(e))

    async def resume(
        self,
        message: Incoming,
        decided: dict[str, str | None],
        messenger: Messenger,
        decision: str | None = None,
    ) -> None:
        """Go on with the turn of ``message`` whose last answer's waiting calls were decided
        (``decided``: call id to ``None``, allowed, or the error text refusing it). It is
        built as a new turn is: the gates again (a user blocked meanwhile gets no call run and
        no LLM call), their record, the plugins' prompt parts."""
        rejection = await self.bot.authorize(message)
        tracing.tracer.gate("authorize", not rejection)
        if rejection:
            await self._refuse_resumed(message, messenger, decided, rejection)
            return
        if self.handoffs and (handoff := await self.handoffs.open_for(message)):
            await self._hold_during_handoff(message, messenger, decided, handoff)
            return  # a person answers this conversation now: no call runs, no LLM call
        message = replace(message, user=await self.access.user_record(message))
        choice = await self.bot.choices.for_turn(message)
        extra = await self.bot.build_extra(message)
        tools = choice.tools(as_registry(await self.bot.build_tools(message)))
        system = _with_note(await self.system_prompt(message, choice), group_note(message))
        context = await self.context_for(message)
        async with context.lock, self._typing(messenger, message):
            if not _still_waiting(context, decided):
                return
            tool_context = self._tool_context(message, extra, messenger)
            task_id = f"{message.user_id}:{message.update_id}"
            first = context.appended
            text, outcome = await self._run_loop(
                context,
                system,
                tools,
                tool_context,
                task_id=task_id,
                decided=decided,
                decision=decision,
                model=choice.model,
            )
            reply = _all_text(context, first, text)
            await self._end_turn(message, messenger, context, tools, reply, outcome)

    async def _refuse_resumed(
        self,
        message: Incoming,
        messenger: Messenger,
        decided: dict[str, str | None],
        rejection: str,
    ) -> None:
        """The turn's user may no longer use the bot: every call of the waiting answer gets
        an error result (the session stays valid), nothing runs, the model is not asked."""
        log.info("approval.user_rejected", user_id=message.user_id, chat_id=message.chat_id)
        refusal = self.bot.options.loop_texts.unauthorized
        if await self._refuse_waiting_calls(message, decided, refusal) is not None:
            await self._reject(messenger, message, rejection)

    async def _hold_during_handoff(
        self,
        message: Incoming,
        messenger: Messenger,
        decided: dict[str, str | None],
        handoff: Handoff,
    ) -> None:
        """An approval decided while a person holds the conversation: its calls are refused
        (the session stays valid), the model is not asked, the operators are told."""
        log.info("approval.held_by_handoff", user_id=message.user_id)
        options = self.bot.options
        names = await self._refuse_waiting_calls(message, decided, options.handoff_held_call_text)
        if names is not None and self.handoffs is not None:
            note = options.handoff_held_call_note.format(tools=", ".join(names))
            await self.handoffs.tell_operators(handoff, note, messenger)

    async def _refuse_waiting_calls(
        self, message: Incoming, decided: dict[str, str | None], refusal: str
    ) -> list[str] | None:
        """Answer every call of the waiting answer with ``refusal`` as an error result; the
        names of the tools refused (``None`` when the turn no longer waits)."""
        context = await self.context_for(message)
        async with context.lock:
            if not _still_waiting(context, decided):
                return None
            calls = context.messages[-1].tool_uses
            results = [
                ToolResultBlock(tool_use_id=call.id, content=refusal, is_error=True)
                for call in calls
            ]
            await context.append(Message(role="user", content=[*results]), approval="denied")
            await context.keep()
        return list(dict.fromkeys(call.name for call in calls))

    async def _read_files(self, message: Incoming, messenger: Messenger) -> Incoming | str | None:
        """``message`` with its files fetched and read, or the text telling the user why not
        (``None``: a group voice note that did not say the bot's name)."""
        refusal = await self._over_media_quota(message)
        if refusal is not None:
            return refusal
        return await self.files.read(message, messenger, partial(self._reply, messenger, message))

    async def _over_media_quota(self, message: Incoming) -> str | None:
        """The text refusing the message's pictures and documents when, with what the sender
        has stored in every conversation, they would pass BOTKIT_MAX_MEDIA_MB (before
        download)."""
        documents = [a for a in message.attachments if a.kind == "document"]
        measure = getattr(self.contexts.sessions, "user_media_bytes", None)
        if not (documents or message.photo_ids) or measure is None:
            return None
        # what the sender stored anywhere: their private chat and every group they write in
        stored: int = await measure(message.user_id)
        incoming = sum(a.file_size or 0 for a in documents)
        quota = int(self.bot.settings.max_media_mb * MB)
        if stored + incoming <= quota and stored < quota:
            return None
        log.info("files.media_quota", user_id=message.user_id, stored=stored, limit=quota)
        texts = self.bot.options.file_texts
        return texts.over_media_quota.format(stored=megabytes(stored), limit=megabytes(quota))

    async def _reply(self, messenger: Messenger, message: Incoming, text: str | Reply) -> None:
        """Answer in the message's chat and topic; in a group, as a reply to it."""
        reply_to = message.message_id if message.in_group else None
        if isinstance(text, Reply):
            await messenger.send_reply(
                message.chat_id, text, thread_id=message.thread_id, reply_to=reply_to
            )
            return
        await messenger.send_text(
            message.chat_id, text, thread_id=message.thread_id, reply_to=reply_to
        )

    async def handle_reaction(self, reaction: Reaction) -> None:
        """A user's reaction on a message: feedback on the turn the message answers (a
        failure is logged: a reaction is never worth an error message)."""
        try:
            await self.feedback.record(reaction)
        except Exception:
            log.exception("feedback.failed", chat_id=reaction.chat_id)

    @asynccontextmanager
    async def _seen(self, messenger: Messenger, message: Incoming) -> AsyncIterator[None]:
        """With BOTKIT_REACTIONS=on, 👀 on the message while the bot works on it."""
        react = getattr(messenger, "set_reaction", None)
        if self.bot.settings.reactions != "on" or react is None or message.message_id is None:
            yield
            return
        await react(message.chat_id, message.message_id, SEEN_REACTION)
        try:
            yield
        finally:
            await react(message.chat_id, message.message_id, None)

    async def handle_press(self, press: ButtonPress, messenger: Messenger) -> None:
        """A press of an inline button: its handler (by the data's prefix) answers, and may
        edit the message; a failure is logged and the presser told. A presser the gates
        would not admit (blocked since, or never admitted) gets the rejection and no handler."""
        if self.handoffs and await self.handoffs.take_operator_press(press, messenger):
            return  # the operators' chat ("Done" under a handoff's topic): no gate applies
        rejection = await self.bot.authorize(press.as_incoming())
        if rejection:
            log.info("press.rejected", user_id=press.user_id, chat_id=press.chat_id)
            await messenger.answer_press(press.press_id, rejection)
            return
        prefix, _, payload = press.data.partition(":")
        handler = self.bot.buttons.get(prefix)
        answer = PressAnswer()
        try:
            if handler is not None:
                answer = await handler(press, payload)
            if answer.edit is not None:
                await messenger.edit_reply(press.chat_id, press.message_id, answer.edit)
        except Exception:
            log.exception("press.failed", user_id=press.user_id, data=press.data)
            answer = PressAnswer(self.bot.options.error_text)
        await messenger.answer_press(press.press_id, answer.notice)

    async def _reject(self, messenger: Messenger, message: Incoming, rejection: str) -> None:
        """Turn a stranger away: always in private, at most once an interval in a group."""
        log.info("turn.rejected", user_id=message.user_id, chat_id=message.chat_id)
        if message.in_group and not self._group_rejections.allow(message.chat_id, message.user_id):
            return
        await self._reply(messenger, message, rejection)

    def _user_turn(self, message: Incoming, note: str | None = None) -> Message:
        """The user's message as the model sees it: framed with speaker, reply and quote,
        with the plugins' ``turn_note`` (e.g. the local time: here, not in the system prompt,
        it changes nothing the prompt cache already holds) between the media and the text."""
        turn = user_message(message, self.bot.options.max_input_chars)
        media = [block for block in turn.content if not isinstance(block, TextBlock)]
        texts = [block for block in turn.content if isinstance(block, TextBlock)]
        if message.in_group or message.reply_to or message.quote or message.forwarded_from:
            texts = [TextBlock(text=framed_text(message, turn.text))]
        elif not note:
            return turn
        noted = [TextBlock(text=note)] if note else []
        return Message(role="user", content=[*media, *noted, *texts])

    async def _answer_command(self, message: Incoming) -> str | Reply:
        """A slash command's reply: ``/start`` alone and unknown commands cost no LLM call."""
        visible = visible_commands(self.bot.commands, admin=self.access.sender_is_admin(message))
        command = self.bot.commands.get(message.command or "")
        if command is not None and command in visible:
            return await self._run_command(command, message)
        menu = "\n".join(f"/{c.name} — {c.description}" for c in visible)
        if message.command == "start":
            hears = self.bot.can_transcribe or self.files.hearing is not None
            return f"{help_intro(self.bot.options, hears)}\n{menu}"
        return f"{self.bot.options.unknown_command_text.format(command=message.command)}\n{menu}"

    async def _answer(
        self,
        message: Incoming,
        messenger: Messenger,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        tool_context: ToolContext,
        draft: Draft | None,
        model: str | None = None,
    ) -> tuple[str, TurnOutcome]:
        """Run the loop as its own task, streaming into ``draft``, so the user can stop it
        (with ``model``: the conversation's choice, else the bot's)."""
        task_id = f"{message.user_id}:{message.update_id}"
        if draft is not None:
            await draft.start()
        first = context.appended
        if draft is None:  # no stop button to press: the loop runs in this task
            text, outcome = await self._run_loop(
                context, system, tools, tool_context, task_id=task_id, model=model
            )
            return _all_text(context, first, text), outcome
        turn = asyncio.create_task(
            self._run_loop(
                context,
                system,
                tools,
                tool_context,
                on_text=draft.update,
                task_id=task_id,
                on_progress=draft.status,
                model=model,
            )
        )
        stop_key = (message.chat_id, draft.draft_id) if draft is not None else None
        if stop_key is not None:
            self._turns[stop_key] = turn
        try:
            text, outcome = await turn
            return _all_text(context, first, text), outcome
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not turn.cancelled() or (this is not None and this.cancelling()):
                raise
            return await self._stopped(context, draft), "stopped"
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
        return partial or self.bot.options.stopped_text

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
        on_text: TextSink | None = None,
        emit: EventSink | None = None,
        task_id: str | None = None,
        decided: dict[str, str | None] | None = None,
        decision: str | None = None,
        on_progress: ProgressSink | None = None,
        model: str | None = None,
    ) -> tuple[str, TurnOutcome]:
        """The loop's reply, or a polite text when the model could not be reached; the
        answer's text streams to ``on_text``, what runs meanwhile to ``on_progress``, the
        loop's events to ``emit``; ``decided`` resumes a turn whose calls waited for
        approval; ``model``, the conversation's choice, overrides the bot's."""
        charge = partial(self._charge, tool_context.user_id)
        chosen = model or self.bot.model_override
        self._count_keeper(self.bot.llm)
        answering = self.prepared.wrap(self.bot.llm)  # the bot's LLM while none waits
        llm = ChargedLLM(answering, charge, self.metrics, chosen or self.bot.settings.model)
        loop = AgentLoop(
            llm,
            max_iterations=self.bot.options.max_iterations,
            texts=self.bot.options.loop_texts,
            compactor=Compactor(llm, max_context_chars=self.bot.options.max_context_chars),
            model=chosen,
            hooks=self.bot.hooks,
            max_parallel_tools=self.bot.options.max_parallel_tools,
            server_tools=_server_tools(self.bot.settings),
        )
        try:
            result: TurnResult = await loop.run(
                context,
                system=system,
                tools=tools,
                tool_context=tool_context,
                on_text=on_text,
                emit=emit,
                task_id=task_id,
                decided=decided,
                decision=decision,
                on_progress=on_progress,
            )
        except MediaTooLargeError as e:
            withdrawn = context.withdraw()  # its message, unless a first answer recorded it
            user_id = context.user_id
            log.warning("turn.media_refused", user_id=user_id, withdrawn=withdrawn, error=str(e))
            text = self.bot.options.media_refused_text
            if emit is not None:
                error = ErrorEvent(
                    context_id=context.user_id, task_id=task_id or "", error=str(e), message=text
                )
                await emit(error)
            return text, "unsupported"
        except LLMError as e:
            await context.keep()
            # A rejected key is reported once by the LLM client; users hear "unavailable".
            overloaded = isinstance(e, LLMOverloadedError | LLMAuthError)
            log.log(
                logging.WARNING if overloaded else logging.ERROR,
                "turn.llm_failed",
                user_id=context.user_id,
                error=str(e),
            )
            text = self.bot.options.overloaded_text if overloaded else self.bot.options.error_text
            self.metrics.turn_failed("overloaded" if overloaded else "error", type(e).__qualname__)
            if emit is not None:
                await emit(
                    ErrorEvent(
                        context_id=context.user_id,
                        task_id=task_id or "",
                        error=str(e),
                        message=text,
                    )
                )
            return text, "overloaded" if overloaded else "error"
        log.info(
            "turn.done",
            user_id=context.user_id,
            iterations=result.iterations,
            stop_reason=result.stop_reason,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
        )
        return result.text, "waiting" if result.waiting else "answered"

    async def _charge(self, user_id: int, model: str, usage: Usage) -> None:
        """Count one LLM call: per model for this process, against the user's budget."""
        self.usage_by_model[model] = self.usage_by_model.get(model, Usage()) + usage
        await self.access.charge(user_id, usage, model)

    def _count_keeper(self, llm: LLM) -> None:
        """Have ``llm``'s cache keeper (if any) count its reads as the bot's own calls."""
        keeper = getattr(llm, "keeper", None)
        if isinstance(keeper, CacheKeeper) and keeper.on_usage is None:
            keeper.on_usage = self._count_kept

    async def _count_kept(self, model: str, usage: Usage) -> None:
        """Count a cache keeper's read as the bot's own call: in usage records and metrics,
        against no one's budget."""
        self.metrics.llm_call(model, "ok", 0.0, usage)
        self.usage_by_model[model] = self.usage_by_model.get(model, Usage()) + usage
        self.access.ledger.add(KEEPER_USER_ID, model, usage)

    async def charge_call(self, user_id: int, model: str, usage: Usage) -> None:
        """Count an LLM call made outside a turn (a batch whose answer went unused)."""
        self.metrics.llm_call(model, "ok", 0.0, usage)
        await self._charge(user_id, model, usage)

    async def first_request(self, message: Incoming) -> LLMRequest | None:
        """The request a turn for ``message`` would send first, built as ``handle`` builds
        it, nothing recorded (a batched task's, sent ahead); ``None`` when the turn would
        not ask the model (its user is over budget)."""
        if await self.access.over_budget(message.user_id):
            return None
        message = replace(message, user=await self.access.user_record(message))
        choice = await self.bot.choices.for_turn(message)
        tools = choice.tools(as_registry(await self.bot.build_tools(message)))
        system = _with_note(await self.system_prompt(message, choice), group_note(message))
        context = await self.context_for(message)
        turn = self._user_turn(message, await turn_notes(self.bot.plugins, message))
        server_tools = _server_tools(self.bot.settings)
        loop = AgentLoop(
            self.bot.llm, model=choice.model or self.bot.model_override, server_tools=server_tools
        )
        async with context.lock:
            return loop.request(context.preview(turn), system, tools)

    async def context_for(self, message: Incoming) -> ContextManager:
        """The context of the conversation ``message`` was written in."""
        conversation = conversation_of(message, self.bot.settings.group_context)
        return await self.contexts.get(conversation.owner_id, conversation.key)

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
            choice = await self.bot.choices.for_turn(message)
            extra = await self.bot.build_extra(message)
            tools = choice.tools(as_registry(await self.bot.build_tools(message)))
            system = await self.system_prompt(message, choice)
            context = await self.contexts.get(message.user_id)
            async with context.lock:
                await context.flush_pending()
                await context.append(user_message(message, self.bot.options.max_input_chars))
                tool_context = self._tool_context(message, extra)
                task_id = f"{message.user_id}:{uuid.uuid4().hex[:8]}"
                await self._run_loop(
                    context,
                    system,
                    tools,
                    tool_context,
                    emit=events.put,
                    task_id=task_id,
                    model=choice.model,
                )
        finally:
            await events.put(None)

    async def rerun_turn(self, message: Incoming, turn: Message, messenger: Messenger) -> str:
        """Run a recorded user ``turn`` again (``replay --rerun``): the bot's build_extra,
        build_tools, build_prompt and the tool loop, on ``message``'s conversation, with
        ``ToolContext.rerun`` set. No gates or commands; the reply is returned, not sent."""
        choice = await self.bot.choices.for_turn(message)
        extra = await self.bot.build_extra(message)
        tools = choice.tools(as_registry(await self.bot.build_tools(message)))
        system = _with_note(await self.system_prompt(message, choice), group_note(message))
        context = await self.context_for(message)
        async with context.lock:
            await context.flush_pending()
            await context.append(turn, **_turn_meta(message))
            tool_context = replace(self._tool_context(message, extra, messenger), rerun=True)
            reply, _ = await self._answer(
                message, messenger, context, system, tools, tool_context, None, choice.model
            )
        return reply

    async def system_prompt(self, message: Incoming, choice: TurnChoice = NO_CHOICE) -> str:
        """The bot's ``build_prompt`` and the chosen persona's prompt, then the features'
        parts (its plugins': reminders and time zone, skills...) unless
        ``BotOptions.feature_prompts`` is off, then the user's instructions, marked as theirs.
        All change rarely, so the cached prefix holds."""
        return join_parts(await self.named_parts(message, choice))

    async def named_parts(
        self, message: Incoming, choice: TurnChoice = NO_CHOICE
    ) -> list[tuple[str, str]]:
        """The system prompt's parts, named as the prefix watch compares them."""
        prompt = choice.with_persona(await self.bot.build_prompt(message))
        if self.bot.options.feature_prompts:
            parts = await prompt_parts(prompt, self.bot.plugins, message)
        else:
            parts = [("build_prompt", prompt)] if prompt else []
        if instructions := choice.with_instructions(""):
            parts.append(("instructions", instructions))
        return parts

    def _tool_context(
        self, message: Incoming, extra: Any, messenger: Messenger | None = None
    ) -> ToolContext:
        send_file = partial(self._send_file, messenger, message) if messenger else None
        return ToolContext(
            user_id=message.user_id,
            chat_id=message.chat_id,
            thread_id=message.thread_id,
            chat_type=message.chat_type,
            timestamp=message.date,
            extra=extra,
            injector=self.contexts,
            send_file=send_file,
        )

    async def _send_file(self, messenger: Messenger, message: Incoming, file: ToolFile) -> None:
        """A tool's file or picture, into the turn's chat and topic."""
        outgoing = OutgoingFile(file.data, file.filename, file.mime, file.caption, file.as_photo)
        log.info("turn.file_sent", user_id=message.user_id, mime=file.mime, size=len(file.data))
        await messenger.send_file(message.chat_id, outgoing, thread_id=message.thread_id)

    async def _run_command(self, command: Command, message: Incoming) -> str | Reply:
        if command.admin_only and not self.access.is_admin(message.user_id):
            return self.bot.options.admin_only_text
        log.info("command", name=command.name, user_id=message.user_id)
        return await command.handler(message, message.command_args)

    @asynccontextmanager
    async def _typing(
        self, messenger: Messenger, message: Incoming, *, wanted: bool = True
    ) -> AsyncIterator[None]:
        """Keep "typing…" visible in the chat (and topic) while the block runs (if ``wanted``)."""
        if not wanted:
            yield
            return

        async def keep_typing() -> None:
            while True:
                with suppress(Exception):
                    await messenger.send_typing(message.chat_id, thread_id=message.thread_id)
                await asyncio.sleep(self.bot.options.typing_interval)

        tasks: list[asyncio.Task[None]] = []
        # A timer, not a task: most turns end before "typing…" is due, and cost no task then.
        due = asyncio.get_running_loop().call_later(
            self.bot.options.typing_delay, lambda: tasks.append(asyncio.create_task(keep_typing()))
        )
        try:
            yield
        finally:
            due.cancel()
            for task in tasks:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task


def user_message(message: Incoming, max_chars: int = 16_000) -> Message:
    """The conversation message for an incoming one: its files, images, then its text (cut if
    huge)."""
    content: list[ContentBlock] = list(message.content)
    content += [
        ImageBlock(source=ImageSource(media_type=image_type(data) or "image/jpeg", data=_b64(data)))
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


def as_registry(tools: ToolRegistry | Sequence[Tool]) -> ToolRegistry:
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    for item in tools:
        registry.register_tool(item)
    return registry


def _all_text(context: ContextManager, first: int, reply: str) -> str:
    """Everything the model wrote this turn (text before tool calls too), ending with ``reply``.

    The draft showed all of it, so the final message must not hold less.
    """
    texts = [m.text.strip() for m in context.since(first) if m.role == "assistant"]
    texts = [text for text in texts if text]
    if not texts or texts[-1] != reply.strip():
        texts.append(reply)
    return "\n\n".join(texts)


def _still_waiting(context: ContextManager, decided: dict[str, str | None]) -> bool:
    """Whether the context's last answer is the one with the decided calls (not cleared)."""
    last = context.messages[-1] if len(context) else None
    if last is None or not {c.id for c in last.tool_uses} >= decided.keys():
        log.warning("approval.turn_gone", user_id=context.user_id)  # e.g. /clear
        return False
    return True


def _with_note(system: str, note: str | None) -> str:
    return f"{system}\n\n{note}" if note else system


def tool_parts(tools: ToolRegistry) -> list[tuple[str, str]]:
    """Each tool's definition, named, as the prefix watch compares them (orjson, not the
    model's ``repr``: this runs every turn; once per definition, as it is frozen)."""
    return [(f"tool {d.name}", d.schema_text) for d in tools.definitions()]


_SERVER_TOOLS: dict[tuple[Any, ...], list[ToolDef]] = {}


def _server_tools(settings: Settings) -> list[ToolDef]:
    """The definitions of BOTKIT_WEB_SEARCH and BOTKIT_WEB_FETCH (built once per value)."""
    key = (settings.web_search, settings.web_fetch, *settings.web_domains, settings.web_max_uses)
    if key not in _SERVER_TOOLS:
        _SERVER_TOOLS[key] = settings.server_tools().definitions()
    return _SERVER_TOOLS[key]


def _turn_meta(message: Incoming) -> dict[str, Any]:
    """What the session records with a user message: its update, and in a group its speaker."""
    meta: dict[str, Any] = {"update_id": message.update_id, "sent_at": message.date}
    if message.message_id is not None:
        meta["message_id"] = message.message_id
    if message.in_group:
        meta.update(user_id=message.user_id, speaker=speaker_name(message))
    return meta


def _now() -> datetime:
    return datetime.now(UTC)


def _llm_outcome(error: LLMError) -> str:
    """The ``outcome`` label of a failed LLM call."""
    if isinstance(error, LLMOverloadedError):
        return "overloaded"
    if isinstance(error, LLMAuthError):
        return "auth"
    if isinstance(error, PromptTooLongError):
        return "too_long"
    return "error"
