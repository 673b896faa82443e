"""Tool turns on today's Claude models: thinking blocks kept and sent back as received, bound
to a prefix that stays put within a turn, left out of earlier turns the same way every time,
``drop_block`` where a prefix changed anyway, model switches, the thinking and effort
settings, and the fake holding requests to the documented contract (#44)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import pytest

from botkit import Bot
from botkit.agent.context import ContextManager
from botkit.agent.loop import AgentLoop
from botkit.config import DEFAULT_MODEL
from botkit.errors import ConfigError
from botkit.llm.anthropic import AnthropicLLM
from botkit.llm.base import LLMRequest
from botkit.llm.thinking import ThinkingSettings, problems
from botkit.options import BotOptions
from botkit.pricing import price_for
from botkit.testing import make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.kit import ask, fake_llm
from botkit.testing.telegram import FakeTelegramServer
from botkit.tools import ToolContext, ToolRegistry, tool
from botkit.types import Message, TextBlock, ToolDef, Usage

TODAYS = ["claude-sonnet-5-5", "claude-opus-5-5"]
CONTEXT = ToolContext(user_id=1, chat_id=1, timestamp=datetime.now(UTC))
ALICE = 7001


def counting(request: FakeRequest) -> FakeReply:
    """``count N`` calls ``step`` N times in a row, then answers with the last result."""
    results = request.tool_results()
    asked = request.last_user_text() if not results else ""
    if asked.startswith("count "):
        return FakeReply.tool_use("step", {"n": 1})
    if results:
        done = int(str(results[0]["content"]))
        wanted = _wanted(request)
        if done < wanted:
            return FakeReply.tool_use("step", {"n": done + 1})
        return FakeReply.text(f"counted to {done}")
    return FakeReply.text(f"echo: {request.last_user_text()}")


def _wanted(request: FakeRequest) -> int:
    for message in reversed(request.messages):
        for block in message["content"] if isinstance(message["content"], list) else []:
            text = block.get("text", "") if block.get("type") == "text" else ""
            if text.startswith("count "):
                return int(text.split()[1])
    return 0


def counting_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}), **settings)

    @bot.tool
    async def step(n: int) -> str:
        """Take step ``n``."""
        return str(n)

    return bot


def unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without their cache breakpoints (which move from call to call)."""
    return [
        {
            **m,
            "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
        }
        for m in messages
    ]


def assistant_turns(request: FakeRequest) -> list[list[str]]:
    """The block types of each assistant message a request sent."""
    return [[b["type"] for b in m["content"]] for m in request.messages if m["role"] == "assistant"]


@pytest.mark.parametrize("model", TODAYS)
async def test_a_tool_turn_on_todays_models_sends_its_thinking_back(
    telegram: FakeTelegramServer, tmp_path: Path, model: str
) -> None:
    async with FakeAnthropicServer(responder=counting) as claude:
        bot = counting_bot(claude, tmp_path, model=model)
        async with running(bot, telegram):
            assert (await ask(telegram, ALICE, "count 2")).text == "counted to 2"
            assert (await ask(telegram, ALICE, "hello")).text == "echo: hello", (
                "the conversation goes on after a tool turn"
            )
        await bot.aclose()
    _, second, third, after = claude.requests
    answer = second.messages[1]["content"]
    assert answer[0]["type"] == "thinking" and answer[0]["signature"], "thinking first, signed"
    assert answer[-1]["type"] == "tool_use"
    # every later call of the turn sends the earlier answers unchanged, blocks and all
    assert unmarked(third.messages[: len(second.messages)]) == unmarked(second.messages)
    assert all(turn[0] == "thinking" for turn in assistant_turns(third))
    # the next turn leaves the earlier turn's thinking out, every block of it
    assert all("thinking" not in turn for turn in assistant_turns(after))


async def test_a_chain_of_seven_calls_crosses_the_window_without_moving_it(
    telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    async with FakeAnthropicServer(responder=counting) as claude:
        options = BotOptions(max_messages=10)
        bot = counting_bot(claude, tmp_path, model="claude-sonnet-5-5", options=options)
        async with running(bot, telegram):
            for n in range(4):
                await ask(telegram, ALICE, f"hi {n}")
            before = len(claude.requests)
            assert (await ask(telegram, ALICE, "count 7")).text == "counted to 7"
        await bot.aclose()
    turn = claude.requests[before:]
    assert len(turn) == 8, "seven calls and the answer"
    assert len(turn[-1].messages) > 10, "the chain grew past the 10-message window"
    firsts = {json.dumps(request.messages[0], sort_keys=True) for request in turn}
    assert len(firsts) == 1, "every call of the turn starts where its first call started"


async def test_a_prompt_changed_mid_cycle_asks_the_api_to_drop_the_blocks(
    claude: FakeAnthropicServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approval resumed after the operator edited the prompt: the turn's blocks are bound to
    the old prompt, so the request asks for ``drop_block`` instead of failing."""
    llm = fake_llm(claude, model="claude-opus-5-5")
    context = ContextManager(1)
    await context.append(Message.user_text("delete it"))
    claude.enqueue(FakeReply.tool_use("delete", {}))
    first = await llm.complete(_request(context, "You are careful."))
    await context.append(first.message)
    call = first.message.tool_uses[0]
    await context.append(
        Message(role="user", content=[_result(call.id, "deleted")]), approval="allowed"
    )
    claude.enqueue(FakeReply.text("done"))
    answer = await llm.complete(_request(context, "You are careful. Be brief."))
    assert answer.message.text == "done"
    sent = claude.requests[-1]
    assert sent.body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    assert "thinking-binding-controls-2026-08-01" in sent.headers["anthropic-beta"]
    assert "llm.input_transformed" in capsys.readouterr().out, "what the API dropped is logged"
    await llm.close()


@pytest.mark.parametrize("compacted", [True, False])
async def test_history_compacted_mid_cycle_asks_the_api_to_drop_the_blocks(
    claude: FakeAnthropicServer, compacted: bool
) -> None:
    """A conversation compacted while a tool ran: what came before the turn's blocks is
    another, so the request asks for ``drop_block`` at once (no refused call first)."""
    llm = fake_llm(claude, model="claude-opus-5-5")
    context = ContextManager(1)
    await context.append(Message.user_text("hi"))
    await context.append(Message(role="assistant", content=[TextBlock(text="hello")]))
    await context.append(Message.user_text("delete it"))
    claude.enqueue(FakeReply.tool_use("delete", {}))
    first = await llm.complete(_request(context, "You are careful."))
    await context.append(first.message)
    if compacted:
        await context.compact("They greeted each other.", kept=2)
    call = first.message.tool_uses[0]
    await context.append(Message(role="user", content=[_result(call.id, "deleted")]))
    claude.enqueue(FakeReply.text("done"))
    answer = await llm.complete(_request(context, "You are careful."))
    assert answer.message.text == "done"
    assert len(claude.requests) == 2, "no call refused"
    thinking = claude.requests[-1].body.get("thinking", {})
    if compacted:
        assert thinking["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    else:
        assert "block_binding" not in thinking, "nothing changed: nothing to drop"
    await llm.close()


async def test_the_fake_refuses_a_thinking_block_after_a_changed_prefix(
    claude: FakeAnthropicServer,
) -> None:
    """What a client that edits history gets: the documented 400, and ``drop_block`` with the
    beta header as the way out (with what was dropped in ``input_transformations``)."""
    client = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="k", max_retries=0)
    claude.enqueue(FakeReply.tool_use("t", {}))
    ask_ = [{"role": "user", "content": "q"}]
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    first = await client.messages.create(
        model="claude-sonnet-5-5", max_tokens=100, messages=ask_, tools=tools, system="A"
    )
    answer = first.to_dict()["content"]
    call = answer[-1]["id"]
    history = [
        *ask_,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "1"}]},
    ]
    with pytest.raises(anthropic.BadRequestError, match="bound to a different conversation"):
        await client.messages.create(
            model="claude-sonnet-5-5", max_tokens=100, messages=history, tools=tools, system="B"
        )
    claude.enqueue(FakeReply.text("ok"))
    passed = await client.messages.create(
        model="claude-sonnet-5-5",
        max_tokens=100,
        messages=history,
        tools=tools,
        system="B",
        thinking={"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},  # type: ignore[typeddict-unknown-key]
        extra_headers={"anthropic-beta": "thinking-binding-controls-2026-08-01"},
    )
    assert passed.to_dict()["input_transformations"] == [
        {
            "type": "thinking_dropped",
            "path": "messages.1.content.0",
            "reason": "prefix_binding_mismatch",
        }
    ]
    # and the same history without its thinking block: the 2024 client's mistake
    bare = [history[0], {"role": "assistant", "content": answer[1:]}, history[2]]
    with pytest.raises(anthropic.BadRequestError, match="Expected `thinking`"):
        await client.messages.create(
            model="claude-sonnet-5-5", max_tokens=100, messages=bare, tools=tools, system="A"
        )
    edited = [history[0], {"role": "assistant", "content": answer}, history[2]]
    edited[1]["content"] = [{**answer[0], "signature": answer[0]["signature"][:-4] + "AAAA"}]
    edited[1]["content"] += answer[1:]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        await client.messages.create(
            model="claude-sonnet-5-5", max_tokens=100, messages=edited, tools=tools, system="A"
        )
    await client.close()


async def test_a_session_that_lost_its_thinking_recovers(claude: FakeAnthropicServer) -> None:
    """A tool cycle recorded by an earlier botkit without its thinking block: the API refuses
    to continue it, so botkit sends that cycle written out as text once, and the turn ends."""
    llm = fake_llm(claude)
    claude.enqueue(FakeReply.tool_use("t", {}))
    context = ContextManager(1)
    await context.append(Message.user_text("q"))
    first = await llm.complete(_request(context, "S"))
    lost = Message(role="assistant", content=first.message.tool_uses)  # as botkit kept it
    await context.append(lost)
    await context.append(Message(role="user", content=[_result(lost.tool_uses[0].id, "1")]))
    claude.enqueue(FakeReply.text("fine"))
    answer = await llm.complete(_request(context, "S"))
    assert answer.message.text == "fine"
    assert "[called t {}]" in json.dumps(claude.requests[-1].messages)
    await llm.close()


async def test_switching_models_mid_conversation_keeps_working(
    claude: FakeAnthropicServer,
) -> None:
    """Blocks another model wrote: a 5.x model drops those it cannot read (no error); a model
    without adaptive thinking is not sent them at all."""
    context = ContextManager(1)
    await context.append(Message.user_text("q"))
    sonnet = fake_llm(claude, model="claude-sonnet-5-5")
    claude.enqueue(FakeReply.tool_use("t", {}))
    answer = await sonnet.complete(_request(context, "S"))
    await context.append(answer.message)
    await context.append(
        Message(role="user", content=[_result(answer.message.tool_uses[0].id, "1")])
    )
    for model in ("claude-opus-5-5", "claude-haiku-4-5"):
        other = fake_llm(claude, model=model)
        claude.enqueue(FakeReply.text(f"from {model}"))
        assert (await other.complete(_request(context, "S"))).message.text == f"from {model}"
        await other.close()
    kinds = assistant_turns(claude.requests[-1])
    assert kinds == [["tool_use"]], "Haiku 4.5 gets no Sonnet thinking"
    await sonnet.close()


BETWEEN = {"type": "between_tools"}
SUMMARIZED = {"type": "adaptive", "display": "summarized"}
FIELDS = [
    (ThinkingSettings(effort="low"), "claude-sonnet-5-5", {"output_config": {"effort": "low"}}),
    (ThinkingSettings(mode="between_tools"), "claude-sonnet-5-5", {"thinking": BETWEEN}),
    (ThinkingSettings(mode="off"), "claude-sonnet-5", {"thinking": {"type": "disabled"}}),
    (ThinkingSettings(display="summarized"), "claude-opus-5-5", {"thinking": SUMMARIZED}),
    (ThinkingSettings(effort="max", display="summarized"), "claude-haiku-4-5", {}),
]


@pytest.mark.parametrize(("settings", "model", "fields"), FIELDS)
async def test_thinking_settings_become_the_fields_each_model_takes(
    claude: FakeAnthropicServer, settings: ThinkingSettings, model: str, fields: dict[str, Any]
) -> None:
    assert settings.fields(model) == fields
    llm = fake_llm(claude, model=model, thinking=settings)
    context = ContextManager(1)
    await context.append(Message.user_text("q"))
    assert (await llm.complete(_request(context, "S"))).message.text == "echo: q", (
        "the fake (holding each model to its documented refusals) takes the request"
    )
    await llm.close()


def test_settings_a_model_refuses_are_named() -> None:
    assert problems(ThinkingSettings(mode="off"), "claude-opus-5-5")
    assert "between_tools" in problems(ThinkingSettings(mode="off"), "claude-sonnet-5-5")[0]
    assert problems(ThinkingSettings(mode="between_tools", effort="max"), "claude-sonnet-5-5")
    assert problems(ThinkingSettings(effort="low"), "claude-haiku-4-5")
    assert problems(ThinkingSettings(mode="adaptive"), "claude-haiku-4-5")
    assert not problems(ThinkingSettings(mode="off", effort="high"), "claude-haiku-5-5")
    assert problems(ThinkingSettings(mode="off", effort="max"), "claude-haiku-5-5")


def test_the_default_model_is_priced_as_published() -> None:
    assert DEFAULT_MODEL == "claude-sonnet-5-5"
    million = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    costs = {
        "claude-sonnet-5": 12.0,
        "claude-sonnet-5-5": 12.0,
        "claude-opus-5-5": 24.0,
        "claude-fable-5-1": 60.0,
        "claude-haiku-4-5": 6.0,
    }
    for model, dollars in costs.items():
        price = price_for(model)
        assert price is not None and price.cost(million) == pytest.approx(dollars), model
    reads = Usage(cache_read_input_tokens=1_000_000)
    assert price_for("claude-sonnet-5-5").cost(reads) == pytest.approx(0.10)  # type: ignore[union-attr]
    assert price_for("claude-sonnet-5").cost(reads) == pytest.approx(0.20)  # type: ignore[union-attr]
    hour = Usage(cache_creation_input_tokens=1_000_000, cache_write_1h_tokens=1_000_000)
    assert price_for("claude-sonnet-5-5").cost(hour) == pytest.approx(4.0)  # type: ignore[union-attr]
    small = Usage(input_tokens=1_000, output_tokens=1_000)
    long = Usage(input_tokens=200_000, output_tokens=1_000_000)
    haiku = price_for("claude-haiku-5-5")
    assert haiku is not None
    assert haiku.cost(small) == pytest.approx(0.0006)
    assert haiku.cost(long) == pytest.approx(0.1 + 2.5), "above 100k prompt tokens"


async def test_the_loop_runs_a_tool_cycle_with_thinking_and_approval_resumes(
    claude: FakeAnthropicServer,
) -> None:
    """The loop itself, on the default model: a call that waits for approval, decided later
    with a context rebuilt from its session records, sends the waiting answer's blocks back."""
    llm = fake_llm(claude)
    records: list[Any] = []

    async def record(entry: Any) -> None:
        records.append(entry)

    tools = ToolRegistry()

    @tool(approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    tools.register(delete)
    context = ContextManager(1, on_append=record)
    await context.append(Message.user_text("delete a"))
    claude.enqueue(FakeReply.tool_use("delete", {"path": "a"}), FakeReply.text("gone"))
    loop = AgentLoop(llm)
    waiting = await loop.run(context, system="S", tools=tools, tool_context=CONTEXT)
    assert waiting.stop_reason == "approval"
    again = ContextManager.restore(1, records)  # as after a restart
    call = again.messages[-1].tool_uses[0]
    done = await loop.run(
        again, system="S", tools=tools, tool_context=CONTEXT, decided={call.id: None}
    )
    assert done.text == "gone"
    assert assistant_turns(claude.requests[-1])[0][0] == "thinking"
    await llm.close()


def _request(context: ContextManager, system: str) -> LLMRequest:
    tool = ToolDef(name="t", description="d", input_schema={"type": "object"})
    delete = ToolDef(name="delete", description="d", input_schema={"type": "object"})
    return LLMRequest(system=system, messages=context.prepare(), tools=[tool, delete])


def _result(call_id: str, text: str) -> Any:
    from botkit.types import ToolResultBlock

    return ToolResultBlock(tool_use_id=call_id, content=text)


async def test_an_answer_from_the_default_model_starts_with_thinking(
    claude: FakeAnthropicServer,
) -> None:
    llm: AnthropicLLM = fake_llm(claude)
    context = ContextManager(1)
    await context.append(Message.user_text("hi"))
    answer = await llm.complete(_request(context, "S"), on_text=_ignore)
    assert answer.message.content[0].type == "thinking"
    assert answer.message.text == "echo: hi", "the reply never holds thinking text"
    await llm.close()


async def _ignore(_: str) -> None:
    return None


@pytest.mark.parametrize(
    ("model", "settings", "refusal"),
    [
        ("claude-sonnet-6-0", ThinkingSettings(), "does not know the model 'claude-sonnet-6-0'"),
        ("claude-opus-5-5", ThinkingSettings(mode="off"), "BOTKIT_THINKING=off"),
        ("claude-haiku-4-5", ThinkingSettings(effort="high"), "BOTKIT_EFFORT=high"),
        ("claude-sonnet-5-5", ThinkingSettings(mode="between_tools", effort="max"), "effort"),
    ],
)
async def test_the_start_up_check_refuses_what_the_model_would(
    claude: FakeAnthropicServer, model: str, settings: ThinkingSettings, refusal: str
) -> None:
    """``run`` and ``doctor`` check the model (the Models API) and the thinking settings before
    the first user pays for a refused call."""
    claude.models = frozenset({"claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-4-5"})
    llm = fake_llm(claude, model=model, thinking=settings)
    with pytest.raises(ConfigError, match=refusal):
        await llm.verify(attempts=1)
    assert not claude.requests, "no Messages API call was made"
    await llm.close()


async def test_the_start_up_check_passes_todays_models(claude: FakeAnthropicServer) -> None:
    for model in ("claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1", "claude-haiku-4-5"):
        llm = fake_llm(claude, model=model)
        await llm.verify(attempts=1)
        await llm.close()


def slow_steps(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}), **settings)

    @bot.tool
    async def step(n: int) -> str:
        """Take step ``n``."""
        await asyncio.sleep(0.8)  # long enough for the draft to show what runs
        return str(n)

    return bot


@pytest.mark.parametrize(
    ("display", "shown"),
    [("summarized", "I will answer it step by step"), (None, "Running step…")],
)
async def test_the_draft_shows_what_runs_while_tools_run(
    telegram: FakeTelegramServer, tmp_path: Path, display: str | None, shown: str
) -> None:
    """On a 5.5 model the words between tool calls arrive as thinking: the draft shows the
    summary when there is one, else the tool's name, and the reply holds neither."""
    async with FakeAnthropicServer(responder=counting) as claude:
        bot = slow_steps(
            claude, tmp_path, model="claude-opus-5-5", stream_replies=True, thinking_display=display
        )
        async with running(bot, telegram):
            reply = await ask(telegram, ALICE, "count 1")
        await bot.aclose()
    assert reply.text == "counted to 1"
    drafts = [str(d.params.get("text", "")) for d in telegram.drafts(ALICE)]
    assert any(shown in text for text in drafts), drafts
    assert shown not in reply.text


async def test_a_turn_killed_between_a_call_and_its_result_goes_on(
    claude: FakeAnthropicServer,
) -> None:
    """SIGKILL after the answer with a tool call was recorded, before its result: after the
    restart the next message is sent with the call marked interrupted and the answer's
    thinking in its place (the cycle is still open), and the turn after drops it cleanly."""
    llm = fake_llm(claude, model="claude-opus-5-5")
    records: list[Any] = []

    async def record(entry: Any) -> None:
        records.append(entry)

    context = ContextManager(1, on_append=record)
    await context.append(Message.user_text("delete a"))
    claude.enqueue(FakeReply.tool_use("delete", {"path": "a"}))
    await context.append((await llm.complete(_request(context, "S"))).message)
    restarted = ContextManager.restore(1, records, on_append=record)  # the kill: no result
    await restarted.append(Message.user_text("are you there?"))
    claude.enqueue(FakeReply.text("yes"))
    answer = await llm.complete(_request(restarted, "S"))
    assert answer.message.text == "yes"
    sent = claude.requests[-1].messages
    assert [b["type"] for b in sent[1]["content"]] == ["thinking", "tool_use"]
    assert sent[2]["content"][0]["is_error"], "the call is marked as not run"
    await restarted.append(answer.message)
    await restarted.append(Message.user_text("thanks"))
    claude.enqueue(FakeReply.text("welcome"))
    assert (await llm.complete(_request(restarted, "S"))).message.text == "welcome"
    assert all("thinking" not in turn for turn in assistant_turns(claude.requests[-1]))
    await llm.close()


async def test_a_call_cut_off_by_a_crash_is_reported_as_of_unknown_outcome(
    claude: FakeAnthropicServer,
) -> None:
    """#51: a call that may have run when the process died is not "not run"; a tool that
    declared itself idempotent is said to be safe to call again."""
    from botkit.agent.history import INTERRUPTED_IDEMPOTENT_TEXT, INTERRUPTED_TOOL_TEXT

    tools = ToolRegistry()

    @tool(idempotent=True)
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    @tool
    async def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    tools.register(lookup)
    tools.register(pay)
    llm = fake_llm(claude)
    context = ContextManager(1)
    await context.append(Message.user_text("pay and look up"))
    claude.enqueue(FakeReply.tool_uses([("pay", {"amount": 5}), ("lookup", {"key": "k"})]))
    await context.append((await llm.complete(_request(context, "S"))).message)
    await context.append(Message.user_text("still there?"))  # the crash: no results
    claude.enqueue(FakeReply.text("yes"))
    await AgentLoop(llm).run(context, system="S", tools=tools, tool_context=CONTEXT)
    results = {r["content"] for r in claude.requests[-1].tool_results()}
    assert results == {INTERRUPTED_TOOL_TEXT, INTERRUPTED_IDEMPOTENT_TEXT}
    assert "not run" not in INTERRUPTED_TOOL_TEXT and "unknown" in INTERRUPTED_TOOL_TEXT
    await llm.close()


async def test_a_tool_turn_on_opus_in_the_queued_runtime_on_postgresql(
    telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """The receive/work runtime on PostgreSQL, on Opus 5.5 (notes before a call arrive as
    thinking, forced tool choice refused): a three-call chain sends its blocks back whole."""
    from pydantic import SecretStr

    from botkit.messengers.flood import FloodControl
    from botkit.runtime.cluster import queue_for, serve_queued
    from botkit.runtime.telegram import messenger_for

    async with FakeAnthropicServer(responder=counting) as claude:
        bot = counting_bot(
            claude,
            tmp_path,
            model="claude-opus-5-5",
            database_url=SecretStr(db),
            telegram_bot_token=SecretStr(telegram.token),
            telegram_api_base=telegram.base_url,
            poll_timeout=1,
        )
        messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
        stop = asyncio.Event()
        task = asyncio.create_task(
            serve_queued(
                bot,
                stop,
                receive=True,
                work=True,
                concurrency=2,
                messenger=messenger,
                queue=queue_for(bot.settings, concurrency=2),
                grace_period=5,
            )
        )
        try:
            telegram.send_text(ALICE, "count 3")
            [reply] = await telegram.wait_for_messages(ALICE, timeout=30)
        finally:
            stop.set()
            await task
    assert reply.text == "counted to 3"
    last = claude.requests[-1]
    assert [turn[0] for turn in assistant_turns(last)] == ["thinking"] * 3
