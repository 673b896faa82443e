"""The tool loop, driven through the real anthropic SDK against the fake Messages API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from botkit import (
    AgentLoop,
    ContextManager,
    LLMOverloadedError,
    Message,
    PromptTooLongError,
    TextBlock,
    ToolContext,
    ToolRegistry,
    tool,
)
from botkit.agent.events import HOOK_FAILED_REASON, Hooks, TextDelta, ToolStart
from botkit.agent.loop import LoopTexts
from botkit.llm.anthropic import AnthropicLLM
from botkit.testing import fake_llm
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply

TEXTS = LoopTexts()


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


ADDED: list[int] = []


@tool
async def add_and_remember(a: int, b: int) -> int:
    """Add two numbers, and note that the tool ran."""
    ADDED.append(a + b)
    return a + b


@pytest.fixture
async def llm(claude: FakeAnthropicServer) -> AsyncIterator[AnthropicLLM]:
    client = fake_llm(claude)
    yield client
    await client.close()


def tool_context() -> ToolContext:
    return ToolContext(user_id=1, chat_id=1, timestamp=datetime.now(UTC))


async def run(llm: AnthropicLLM, context: ContextManager, *, max_iterations: int = 10) -> str:
    loop = AgentLoop(llm, max_iterations=max_iterations)
    registry = ToolRegistry([add, explode])
    result = await loop.run(context, system="sys", tools=registry, tool_context=tool_context())
    return result.text


async def asked(context: ContextManager, text: str) -> ContextManager:
    await context.append(Message.user_text(text))
    return context


async def test_tool_result_reaches_the_model_and_the_answer_is_returned(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.tool_use("add", {"a": 2, "b": 3}), FakeReply.text("5 it is"))
    context = await asked(ContextManager(1), "2+3?")
    assert await run(llm, context) == "5 it is"
    assert claude.requests[0].tool_names == ["add", "explode"]
    assert claude.requests[0].system_text == "sys"
    assert claude.requests[1].tool_results()[0]["content"] == "5"
    assert [m.role for m in context.messages] == ["user", "assistant", "user", "assistant"]


async def test_crashing_tool_becomes_an_error_result_and_the_turn_goes_on(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.tool_use("explode", {}), FakeReply.text("that failed"))
    context = await asked(ContextManager(1), "go")
    assert await run(llm, context) == "that failed"
    result = claude.requests[1].tool_results()[0]
    assert result["is_error"] is True
    assert "RuntimeError: boom" in result["content"]


async def test_invalid_arguments_are_reported_not_run(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.tool_use("add", {"a": "many"}), FakeReply.text("sorry"))
    context = await asked(ContextManager(1), "go")
    await run(llm, context)
    result = claude.requests[1].tool_results()[0]
    assert result["is_error"] is True
    assert "a" in result["content"] and "b" in result["content"]


async def test_parallel_tool_calls_are_answered_in_order(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(
        FakeReply.tool_uses([("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})]),
        FakeReply.text("2 and 4"),
    )
    context = await asked(ContextManager(1), "go")
    await run(llm, context)
    assert [r["content"] for r in claude.requests[1].tool_results()] == ["2", "4"]


async def test_loop_stops_after_max_iterations_and_says_so(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.responder = lambda _request: FakeReply.tool_use("add", {"a": 1, "b": 1})
    context = await asked(ContextManager(1), "loop forever")
    text = await run(llm, context, max_iterations=3)
    assert text == TEXTS.exhausted.format(n=3)
    assert len(claude.requests) == 3

    claude.responder = lambda _request: FakeReply.text("fresh start")
    assert await run(llm, await asked(context, "next")) == "fresh start"
    last = claude.requests[-1].messages
    assert last[-1]["role"] == "user", "the next turn still sends a valid conversation"


async def test_tool_call_cut_by_max_tokens_is_never_run(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    ran: list[int] = []

    @tool
    async def record(n: int) -> str:
        """Records n."""
        ran.append(n)
        return "ok"

    claude.enqueue(
        FakeReply([{"type": "tool_use", "name": "record", "input": {"n": 1}}], "max_tokens"),
        FakeReply.text("retried"),
    )
    context = await asked(ContextManager(1), "go")
    loop = AgentLoop(llm)
    result = await loop.run(
        context, system="s", tools=ToolRegistry([record]), tool_context=tool_context()
    )
    assert result.text == "retried"
    assert ran == []
    cut = claude.requests[1].tool_results()[0]
    assert cut["is_error"] is True and "cut off" in cut["content"]


async def test_text_cut_by_max_tokens_is_delivered_with_a_note(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.text("The first half", stop_reason="max_tokens"))
    text = await run(llm, await asked(ContextManager(1), "long story"))
    assert text == "The first half" + TEXTS.cut_short


async def test_context_window_exceeded_is_delivered_with_a_note(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.text("partial", stop_reason="model_context_window_exceeded"))
    assert await run(llm, await asked(ContextManager(1), "x")) == "partial" + TEXTS.cut_short


async def test_pause_turn_is_resumed(claude: FakeAnthropicServer, llm: AnthropicLLM) -> None:
    claude.enqueue(
        FakeReply.text("searching…", stop_reason="pause_turn"), FakeReply.text("found it")
    )
    assert await run(llm, await asked(ContextManager(1), "search")) == "found it"
    assert claude.requests[1].messages[-1]["role"] == "assistant", "the paused answer is sent back"


async def test_refusal_gets_a_polite_reply(claude: FakeAnthropicServer, llm: AnthropicLLM) -> None:
    claude.enqueue(FakeReply([], "refusal"))
    assert await run(llm, await asked(ContextManager(1), "bad")) == TEXTS.refused


async def test_overloaded_model_raises_a_botkit_error(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeError.overloaded())
    with pytest.raises(LLMOverloadedError):
        await run(llm, await asked(ContextManager(1), "x"))


async def test_prompt_too_long_is_recognised(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeError.prompt_too_long())
    with pytest.raises(PromptTooLongError):
        await run(llm, await asked(ContextManager(1), "x"))


async def test_streamed_text_arrives_in_pieces(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    answer = "A fairly long answer that the fake server splits into several text deltas."
    claude.enqueue(FakeReply.text(answer))
    claude.chunk_delay = 0.15  # further apart than a stream's text is gathered for
    deltas: list[str] = []

    async def sink(delta: str) -> None:
        deltas.append(delta)

    loop = AgentLoop(llm)
    context = await asked(ContextManager(1), "talk")
    result = await loop.run(
        context, system="s", tools=ToolRegistry(), tool_context=tool_context(), on_text=sink
    )
    assert result.text == answer
    assert len(deltas) > 1 and "".join(deltas) == answer
    assert claude.requests[0].stream is True


async def test_text_delta_hooks_see_the_stream_beside_its_text_sink(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    answer = "A fairly long answer that the fake server splits into several text deltas."
    claude.enqueue(FakeReply.text(answer))
    claude.chunk_delay = 0.15  # further apart than a stream's text is gathered for
    hooks = Hooks()
    seen: list[TextDelta] = []
    shown: list[str] = []

    @hooks.on("text_delta")
    async def watch(event: TextDelta) -> None:
        seen.append(event)

    async def sink(delta: str) -> None:
        shown.append(delta)

    loop = AgentLoop(llm, hooks=hooks)
    context = await asked(ContextManager(7), "talk")
    await loop.run(
        context, system="s", tools=ToolRegistry(), tool_context=tool_context(), on_text=sink
    )
    assert len(seen) > 1 and [event.text for event in seen] == shown
    assert "".join(shown) == answer
    assert {event.context_id for event in seen} == {7}


async def test_usage_is_summed_over_the_turn(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeReply.tool_use("add", {"a": 1, "b": 2}), FakeReply.text("3"))
    loop = AgentLoop(llm)
    context = await asked(ContextManager(1), "sum")
    result = await loop.run(
        context, system="s", tools=ToolRegistry([add]), tool_context=tool_context()
    )
    per_call = [m.usage for m in context.messages if m.role == "assistant"]
    assert all(
        u is not None and u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        for u in per_call
    )
    assert result.usage.output_tokens == sum(u.output_tokens for u in per_call if u)
    assert result.iterations == 2


async def test_history_is_trimmed_to_max_messages(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    context = ContextManager(1, max_messages=4)
    for n in range(5):
        await context.append(Message.user_text(f"q{n}"))
        await context.append(Message(role="assistant", content=[TextBlock(text=f"a{n}")]))
    claude.enqueue(FakeReply.text("ok"))
    await run(llm, await asked(context, "latest"))
    sent = claude.requests[0].messages
    assert [m["content"][0]["text"] for m in sent] == ["q4", "a4", "latest"]


async def test_overload_in_the_middle_of_a_stream_is_an_overload(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.enqueue(FakeError.overloaded(mid_stream=True))

    async def sink(delta: str) -> None:
        pass

    loop = AgentLoop(llm)
    context = await asked(ContextManager(1), "x")
    with pytest.raises(LLMOverloadedError):
        await loop.run(
            context, system="s", tools=ToolRegistry(), tool_context=tool_context(), on_text=sink
        )


async def test_each_turn_reads_the_previous_prefix_from_the_cache(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    context = ContextManager(1)
    for n in range(3):
        claude.enqueue(FakeReply.text(f"answer {n} " + "words " * 50))
        await run(llm, await asked(context, f"question {n} " + "more " * 50))
    first, second, third = (r for r in claude.requests)
    hour = {"type": "ephemeral", "ttl": "1h"}  # the same for every user: kept an hour (#34)
    assert first.body["system"][0]["cache_control"] == hour
    assert first.body["tools"][-1]["cache_control"] == hour
    usages = [m.usage for m in context.messages if m.role == "assistant"]
    assert usages[0] is not None and usages[0].cache_read_input_tokens == 0
    for later in usages[1:]:
        assert later is not None
        fresh = later.input_tokens + later.cache_creation_input_tokens
        assert later.cache_read_input_tokens > fresh, "most of the prompt was read from cache"
    assert second.messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert third.messages[0]["content"][-1].get("cache_control") is None, "only the tail is marked"


async def test_after_a_pause_of_ten_minutes_the_tools_and_system_prompt_are_still_cached(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    context = ContextManager(1)
    tools = ToolRegistry([add_and_remember])
    system = "You are a careful assistant. " * 200
    for n in range(3):
        claude.enqueue(FakeReply.text(f"answer {n} " + "words " * 50))
        await asked(context, f"question {n} " + "more " * 50)
        await AgentLoop(llm).run(context, system=system, tools=tools, tool_context=tool_context())
        claude.advance(10 * 60)  # the user pauses: 5-minute entries expire, 1-hour ones stay
    first, *later = claude.usages
    prefix = first["cache_creation"]["ephemeral_1h_input_tokens"]
    assert prefix >= len(system) // 4, "the tools and system prompt were written for an hour"
    for usage in later:
        assert usage["cache_read_input_tokens"] == prefix, "read back after the pause"
        assert usage["cache_creation"]["ephemeral_1h_input_tokens"] == 0, "not written again"
        assert usage["cache_creation"]["ephemeral_5m_input_tokens"] > 0, "the conversation was"


async def test_a_tool_start_hook_that_raises_blocks_the_call(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    hooks = Hooks()

    @hooks.on("tool_start")
    async def policy_check(event: ToolStart) -> str | None:
        raise ConnectionError("the policy service is down")

    claude.enqueue(FakeReply.tool_use("add_and_remember", {"a": 2, "b": 3}), FakeReply.text("ok"))
    ADDED.clear()
    loop = AgentLoop(llm, hooks=hooks)
    context = await asked(ContextManager(1), "2+3?")
    result = await loop.run(
        context,
        system="sys",
        tools=ToolRegistry([add_and_remember]),
        tool_context=tool_context(),
    )

    assert ADDED == [], "the tool never ran"
    assert result.text == "ok", "the turn went on"
    sent = claude.requests[1].tool_results()[0]
    assert sent["is_error"] is True
    assert sent["content"] == f"Blocked: {HOOK_FAILED_REASON}"
    assert "policy service" not in sent["content"], "the hook's error stays in the log"
