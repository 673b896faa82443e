"""The tool loop: call the model, run the tools it asks for, repeat until it answers."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from botkit import tracing
from botkit.agent.compaction import Compactor
from botkit.agent.context import ContextManager
from botkit.agent.events import (
    AgentEnd,
    AgentStart,
    CallEnd,
    CallStart,
    Event,
    EventSink,
    Hooks,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageEvent,
)
from botkit.agent.fitting import fit_media
from botkit.agent.history import (
    INTERRUPTED_IDEMPOTENT_TEXT,
    INTERRUPTED_TOOL_TEXT,
    turn_start,
)
from botkit.errors import MediaTooLargeError, PromptTooLongError
from botkit.llm.base import LLM, LLMRequest, LLMResponse, TextSink
from botkit.tools import ToolContext, ToolRegistry
from botkit.types import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

__all__ = ["AgentLoop", "LoopTexts", "TurnResult"]

log = structlog.get_logger(__name__)

Shrinker = Callable[[ContextManager], Awaitable[bool]]
ProgressSink = Callable[[str | None], Awaitable[None]]
"""Told what the turn is doing while its tools run (``None``: nothing to show any more)."""
PROGRESS_CHARS = 300
"""The most of a thinking summary shown as progress (its end, the newest thought)."""


@dataclass(frozen=True, slots=True)
class LoopTexts:
    """What the user is told when the model gives no normal answer."""

    exhausted: str = (
        "I worked on this for {n} steps without finishing, so I stopped here. "
        "Tell me how to continue, or ask in smaller parts."
    )
    cut_short: str = "\n\n(My answer was cut short because it grew too long.)"
    refused: str = "Sorry, I can't help with that."
    empty: str = "I have nothing to add."
    cut_tool_call: str = (
        "This tool call was cut off by the output limit and was not run. "
        "Call it again with shorter arguments."
    )
    denied: str = "The user denied this tool call, so it was not run."
    expired: str = "Nobody allowed this tool call in time, so it was not run."
    unauthorized: str = "The user may no longer use the assistant, so this tool call was not run."
    running: str = "Running {tools}…"
    """Shown in the draft while tools run, when the model's thinking has no summary to show."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """How a turn ended: the reply for the user and what it cost."""

    text: str
    usage: Usage
    iterations: int
    stop_reason: str
    """The last stop reason, ``max_iterations`` when the loop gave up, or ``approval`` when
    calls wait for a person's Allow (``waiting``)."""
    waiting: tuple[ToolUseBlock, ...] = ()
    """The calls of the last answer that wait for approval (the turn ends until decided)."""


class AgentLoop:
    """Runs one user turn against a context: LLM call, tools, LLM call, … reply."""

    def __init__(
        self,
        llm: LLM,
        *,
        max_iterations: int = 10,
        texts: LoopTexts | None = None,
        compactor: Compactor | None = None,
        model: str | None = None,
        hooks: Hooks | None = None,
        max_parallel_tools: int = 8,
        server_tools: Sequence[ToolDef] = (),
    ) -> None:
        self.llm = llm
        self.server_tools = list(server_tools)
        """Tools the API runs itself (web search, web fetch), offered with every call."""
        self.max_parallel_tools = max_parallel_tools
        """Tool calls run from one answer; the rest get an error result asking for fewer."""
        self.max_iterations = max_iterations
        self.texts = texts or LoopTexts()
        self.compactor = compactor
        self.model = model
        """Overrides the LLM's default model (e.g. after an admin's ``/model``)."""
        self.hooks = hooks or Hooks()

    async def run(
        self,
        context: ContextManager,
        *,
        system: str,
        tools: ToolRegistry,
        tool_context: ToolContext,
        on_text: TextSink | None = None,
        emit: EventSink | None = None,
        task_id: str | None = None,
        decided: Mapping[str, str | None] | None = None,
        decision: str | None = None,
        on_progress: ProgressSink | None = None,
    ) -> TurnResult:
        """Loop until the model answers in text or ``max_iterations`` calls were made.

        While tools run, ``on_progress`` is told what happens: the model's summarized thinking
        when it has one (``BOTKIT_THINKING_DISPLAY=summarized``), else which tools run.

        A call of a tool that ``needs_approval`` ends the turn unrun (``TurnResult.waiting``).
        ``decided`` resumes such a turn: the context's last answer's calls are run first,
        each waiting one as decided (its id mapped to ``None``: allowed; to a text: refused
        with that error result); ``decision`` (``allowed``, ``denied``, ``expired``) is
        recorded with their results."""
        turn = _Turn(self, context, tools, tool_context, on_text, emit, task_id)
        turn.decided = dict(decided or {})
        turn.on_progress = on_progress
        await turn.notify(AgentStart(**turn.stamp))
        if decided is not None:
            await turn.answer_calls(context.messages[-1].tool_uses, approval=decision)
        result = await turn.run(system)
        await turn.notify(
            AgentEnd(
                text=result.text, usage=result.usage, stop_reason=result.stop_reason, **turn.stamp
            )
        )
        return result

    async def call(
        self,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        on_text: TextSink | None,
    ) -> LLMResponse:
        """One LLM call; a context too long is compacted, then truncated, and tried again.

        Compaction comes only before a turn's first call: later calls of the turn send back
        its thinking blocks, which the API refuses after any change before them.
        """
        if self.compactor is not None and _turn_begins(context) and self.compactor.needed(context):
            await self.compactor.compact(context)
        shrinkers: list[Shrinker] = []
        if self.compactor is not None:
            shrinkers = [self.compactor.shrink, self.compactor.truncate]
        newest_only = False
        while True:
            messages = _idempotent_retries(context.prepare(), tools)
            request = self.request(context, system, tools, messages, newest_only=newest_only)
            try:
                return await self.llm.complete(request, on_text)
            except PromptTooLongError:
                if not await _first_that_works(shrinkers, context):
                    raise
                log.warning("loop.prompt_too_long_retry", user_id=context.user_id)
            except MediaTooLargeError as e:
                # Our estimate of older media was off: once more, with the newest message's only.
                if newest_only or fit_media(messages, newest_only=True) == request.messages:
                    raise
                log.warning("loop.media_refused_retry", user_id=context.user_id, error=str(e))
                newest_only = True

    def request(
        self,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        messages: list[Message] | None = None,
        *,
        newest_only: bool = False,
    ) -> LLMRequest:
        """The request a call on ``context`` sends (``messages``: its prepared messages)."""
        if messages is None:
            messages = _idempotent_retries(context.prepare(), tools)
        return LLMRequest(
            system=system,
            messages=fit_media(messages, newest_only=newest_only),
            tools=[*tools.definitions(), *self.server_tools],
            model=self.model,
            pauses=context.pauses(),
        )


class _Turn:
    """The state of one run of the loop: who, which tools, where events go."""

    def __init__(
        self,
        loop: AgentLoop,
        context: ContextManager,
        tools: ToolRegistry,
        tool_context: ToolContext,
        on_text: TextSink | None,
        emit: EventSink | None,
        task_id: str | None,
    ) -> None:
        self.loop, self.texts, self.context = loop, loop.texts, context
        self.tools = tools
        # Tools that ask the model or run tools themselves (sub-agents) use this loop's LLM
        # (charged to the user) and hooks, never uncharged or unchecked copies.
        self.tool_context = replace(tool_context, llm=loop.llm, hooks=loop.hooks)
        self.on_text, self.emit = on_text, emit
        self.stamp: dict[str, Any] = {
            "context_id": context.user_id,
            "task_id": task_id or uuid.uuid4().hex[:12],
        }
        self.streamed_text = False
        self.recorded: dict[str, Any] | None = None
        self.decided: dict[str, str | None] = {}
        """Approval decisions by call id: ``None`` allowed, a text refused with it."""
        self.waiting: tuple[ToolUseBlock, ...] = ()
        self.on_progress: ProgressSink | None = None

    async def progress(self, message: Message) -> None:
        """Tell ``on_progress`` what runs now: the newest thinking summary of ``message``, or
        the names of the tools it calls. Never part of the reply."""
        if self.on_progress is None:
            return
        summaries = [
            b.thinking.strip()
            for b in message.content
            if isinstance(b, ThinkingBlock) and b.thinking.strip()
        ]
        if summaries:
            note = summaries[-1]
            if len(note) > PROGRESS_CHARS:
                note = "…" + note[-PROGRESS_CHARS:].split(" ", 1)[-1]
        else:
            names = ", ".join(dict.fromkeys(call.name for call in message.tool_uses))
            note = self.texts.running.format(tools=names)
        await self.on_progress(note)

    async def notify(self, event: Event) -> None:
        """Send ``event`` to the sink and to the hooks of its kind."""
        if self.emit is not None:
            await self.emit(event)
        if event.kind != "tool_start":  # tool_start hooks run in block_reason, once
            await self.loop.hooks.run(event)

    async def text(self, delta: str) -> None:
        """A streamed piece of text: to ``on_text`` and as an event."""
        if self.on_text is not None:
            await self.on_text(delta)
        if self.emit is not None or self.loop.hooks.handles("text_delta"):
            await self.notify(TextDelta(text=delta, **self.stamp))

    async def run(self, system: str) -> TurnResult:
        listening = self.on_text is not None or self.emit is not None
        usage = Usage()
        for iteration in range(1, self.loop.max_iterations + 1):
            await self.notify(CallStart(iteration=iteration, **self.stamp))
            if listening and self.streamed_text:
                await self.text("\n\n")  # keeps the previous call's streamed text apart
            sink = self.text if listening else None
            response = await self.loop.call(self.context, system, self.tools, sink)
            usage += response.usage
            self.streamed_text = bool(response.message.text)
            await self.notify(UsageEvent(usage=response.usage, model=response.model, **self.stamp))
            waits = self.waits_for_approval(response)
            await self.context.append(
                response.message,
                model=response.model,
                stop_reason=response.stop_reason,
                **self.call_record(system),
                approval="waiting" if waits else None,
            )
            reply = await self.step(response)
            await self.notify(
                CallEnd(iteration=iteration, stop_reason=response.stop_reason, **self.stamp)
            )
            if self.waiting:
                return TurnResult("", usage, iteration, "approval", self.waiting)
            if reply is not None:
                return TurnResult(reply, usage, iteration, response.stop_reason)
        log.warning("loop.exhausted", user_id=self.context.user_id)
        text = self.texts.exhausted.format(n=self.loop.max_iterations)
        return TurnResult(text, usage, self.loop.max_iterations, "max_iterations")

    def call_record(self, system: str) -> dict[str, Any]:
        """What the session records beside an answer so a re-run can compare: the tools the
        call offered and a hash of its system prompt (computed once a turn)."""
        if self.recorded is None:
            self.recorded = {
                "tools": [definition.name for definition in self.tools.definitions()],
                "system_sha256": hashlib.sha256(system.encode()).hexdigest(),
            }
        return self.recorded

    async def step(self, response: LLMResponse) -> str | None:
        """Act on one answer; the reply text when the turn is over, else ``None``."""
        message, reason = response.message, response.stop_reason
        calls = message.tool_uses
        if reason == "pause_turn":
            return None  # the server paused a long turn; sending it back resumes it
        if calls and reason == "tool_use":
            self.waiting = self.waits_for_approval(response)
            if self.waiting:
                return None  # the turn ends here; a decision resumes it (``decided``)
            await self.progress(message)
            await self.answer_calls(calls)
            return None
        if calls:  # cut off mid-call: the arguments may be incomplete, so never run them
            cut = [
                ToolResultBlock(tool_use_id=c.id, content=self.texts.cut_tool_call, is_error=True)
                for c in calls
            ]
            await self.context.append(Message(role="user", content=list(cut)))
            return None
        if reason in ("max_tokens", "model_context_window_exceeded"):
            return (message.text + self.texts.cut_short) if message.text else self.texts.cut_short
        if reason == "refusal":
            return message.text or self.texts.refused
        return with_sources(message) or self.texts.empty

    def waits_for_approval(self, response: LLMResponse) -> tuple[ToolUseBlock, ...]:
        """The calls of ``response`` that wait for a person's Allow (not decided yet)."""
        if response.stop_reason != "tool_use":
            return ()
        calls = response.message.tool_uses[: self.loop.max_parallel_tools]
        return tuple(
            c for c in calls if self.tools.needs_approval(c.name) and c.id not in self.decided
        )

    async def answer_calls(self, calls: list[ToolUseBlock], approval: str | None = None) -> None:
        """Run an answer's calls (at most ``max_parallel_tools``) and record their results
        (with how their ``approval`` was decided, on a resumed turn)."""
        limit = self.loop.max_parallel_tools
        results = await asyncio.gather(*(self.run_tool(call) for call in calls[:limit]))
        refused = [
            ToolResultBlock(
                tool_use_id=c.id,
                content=f"Not run: at most {limit} tool calls per answer. Call it again.",
                is_error=True,
            )
            for c in calls[limit:]
        ]
        await self.context.append(
            Message(role="user", content=[*results, *refused]), approval=approval
        )

    async def run_tool(self, call: ToolUseBlock) -> ToolResultBlock:
        """One tool call, unless a ``tool_start`` hook blocks it (or a person refused it);
        events on both sides."""
        start = ToolStart(call=call, **self.stamp)
        await self.notify(start)
        with tracing.tracer.tool(call) as span:
            refusal = self.decided.get(call.id)
            reason = None if refusal else await self.loop.hooks.block_reason(start)
            if refusal:
                log.info("tool.refused", tool=call.name)
                span.fail("refused")
                result = ToolResultBlock(tool_use_id=call.id, content=refusal, is_error=True)
            elif reason:
                log.info("tool.blocked", tool=call.name, reason=reason)
                span.fail("blocked")
                result = ToolResultBlock(
                    tool_use_id=call.id, content=f"Blocked: {reason}", is_error=True
                )
            else:
                result = await self.tools.execute(call, self.tool_context)
            tracing.tracer.tool_done(span, result)
        known = call.name in self.tools
        await self.notify(ToolEnd(call=call, result=result, known=known, **self.stamp))
        return result


def _idempotent_retries(messages: list[Message], tools: ToolRegistry) -> list[Message]:
    """``messages`` where a cut-off call of an idempotent tool says it may be made again."""
    cut_off = any(
        isinstance(b, ToolResultBlock) and b.content == INTERRUPTED_TOOL_TEXT
        for m in messages
        if m.role == "user"
        for b in m.content
    )
    if not cut_off:  # nearly every call: nothing to rewrite, no map of calls to build
        return messages
    names = {c.id: c.name for m in messages if m.role == "assistant" for c in m.tool_uses}

    def retry(block: object) -> bool:
        return (
            isinstance(block, ToolResultBlock)
            and block.content == INTERRUPTED_TOOL_TEXT
            and tools.is_idempotent(names.get(block.tool_use_id, ""))
        )

    out: list[Message] = []
    for message in messages:
        if message.role == "user" and any(retry(b) for b in message.content):
            content = [
                b.model_copy(update={"content": INTERRUPTED_IDEMPOTENT_TEXT}) if retry(b) else b
                for b in message.content
            ]
            message = message.model_copy(update={"content": content})
        out.append(message)
    return out


def with_sources(message: Message) -> str:
    """``message``'s text and, after it, the pages its words cite (web search and fetch
    results) as Markdown links, each once."""
    text = message.text
    sources: dict[str, str] = {}
    for block in message.content:
        for citation in (block.citations or []) if isinstance(block, TextBlock) else []:
            url = citation.get("url")
            if isinstance(url, str) and url.startswith(("https://", "http://")):
                sources.setdefault(url, str(citation.get("title") or url))
    if not sources or not text:
        return text
    links = ", ".join(f"[{title.replace(']', ')')}]({url})" for url, title in sources.items())
    return f"{text}\n\n{SOURCES_LABEL} {links}"


SOURCES_LABEL = "Sources:"


def _turn_begins(context: ContextManager) -> bool:
    """Whether the context's last message is the one that begins a turn (no answer yet)."""
    messages = context.messages
    return bool(messages) and turn_start(messages) == len(messages) - 1


async def _first_that_works(shrinkers: list[Shrinker], context: ContextManager) -> bool:
    """Use up shrinkers in order until one makes the context smaller."""
    while shrinkers:
        if await shrinkers.pop(0)(context):
            return True
    return False
