"""The tool loop: call the model, run the tools it asks for, repeat until it answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from botkit.agent.compaction import Compactor
from botkit.agent.context import ContextManager
from botkit.errors import PromptTooLongError
from botkit.llm.base import LLM, LLMRequest, LLMResponse, TextSink
from botkit.tools import ToolContext, ToolRegistry
from botkit.types import Message, ToolResultBlock, Usage

__all__ = ["AgentLoop", "LoopTexts", "TurnResult"]

log = structlog.get_logger(__name__)

Shrinker = Callable[[ContextManager], Awaitable[bool]]


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


@dataclass(frozen=True, slots=True)
class TurnResult:
    """How a turn ended: the reply for the user and what it cost."""

    text: str
    usage: Usage
    iterations: int
    stop_reason: str
    """The last stop reason, or ``max_iterations`` when the loop gave up."""


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
    ) -> None:
        self.llm = llm
        self.max_iterations = max_iterations
        self.texts = texts or LoopTexts()
        self.compactor = compactor
        self.model = model
        """Overrides the LLM's default model (e.g. after an admin's ``/model``)."""

    async def run(
        self,
        context: ContextManager,
        *,
        system: str,
        tools: ToolRegistry,
        tool_context: ToolContext,
        on_text: TextSink | None = None,
    ) -> TurnResult:
        """Loop until the model answers in text or ``max_iterations`` calls were made."""
        usage = Usage()
        streamed_text = False
        for iteration in range(1, self.max_iterations + 1):
            if on_text is not None and streamed_text:
                await on_text("\n\n")  # keeps the previous call's streamed text apart
            response = await self._call(context, system, tools, on_text)
            usage += response.usage
            streamed_text = bool(response.message.text)
            await context.append(
                response.message, model=response.model, stop_reason=response.stop_reason
            )
            reply = await self._step(response, context, tools, tool_context)
            if reply is not None:
                return TurnResult(reply, usage, iteration, response.stop_reason)
        log.warning("loop.exhausted", user_id=context.user_id, iterations=self.max_iterations)
        text = self.texts.exhausted.format(n=self.max_iterations)
        return TurnResult(text, usage, self.max_iterations, "max_iterations")

    async def _call(
        self,
        context: ContextManager,
        system: str,
        tools: ToolRegistry,
        on_text: TextSink | None,
    ) -> LLMResponse:
        """One LLM call; a context too long is compacted, then truncated, and tried again."""
        if self.compactor is not None and self.compactor.needed(context):
            await self.compactor.compact(context)
        shrinkers: list[Shrinker] = []
        if self.compactor is not None:
            shrinkers = [self.compactor.shrink, self.compactor.truncate]
        while True:
            request = LLMRequest(
                system=system,
                messages=context.prepare(),
                tools=tools.definitions(),
                model=self.model,
            )
            try:
                return await self.llm.complete(request, on_text)
            except PromptTooLongError:
                if not await _first_that_works(shrinkers, context):
                    raise
                log.warning("loop.prompt_too_long_retry", user_id=context.user_id)

    async def _step(
        self,
        response: LLMResponse,
        context: ContextManager,
        tools: ToolRegistry,
        tool_context: ToolContext,
    ) -> str | None:
        """Act on one answer; the reply text when the turn is over, else ``None``."""
        message, reason = response.message, response.stop_reason
        calls = message.tool_uses
        if reason == "pause_turn":
            return None  # the server paused a long turn; sending it back resumes it
        if calls and reason == "tool_use":
            results = await tools.execute_all(calls, tool_context)
            await context.append(Message(role="user", content=list(results)))
            return None
        if calls:  # cut off mid-call: the arguments may be incomplete, so never run them
            cut = [
                ToolResultBlock(tool_use_id=c.id, content=self.texts.cut_tool_call, is_error=True)
                for c in calls
            ]
            await context.append(Message(role="user", content=list(cut)))
            return None
        if reason in ("max_tokens", "model_context_window_exceeded"):
            return (message.text + self.texts.cut_short) if message.text else self.texts.cut_short
        if reason == "refusal":
            return message.text or self.texts.refused
        return message.text or self.texts.empty


async def _first_that_works(shrinkers: list[Shrinker], context: ContextManager) -> bool:
    """Use up shrinkers in order until one makes the context smaller."""
    while shrinkers:
        if await shrinkers.pop(0)(context):
            return True
    return False
