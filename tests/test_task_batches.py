"""Scheduled tasks at half price (#49, point 5): a task that is not urgent has its first LLM call
answered by a Message Batch, delivered when the batch ends, exactly once; against the fake
Telegram and the fake Messages API (its batch endpoints, through the real SDK), on SQLite and
in the queued runtime on PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_reminders import ALICE, scripted
from test_scaleout import fetchval, queued, queued_bot

from botkit import Bot
from botkit.pricing import batch_model, estimate, price_for
from botkit.reminders.service import Place
from botkit.stores import Schedule
from botkit.testing import make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.kit import DEFAULT_MODEL
from botkit.testing.telegram import FakeTelegramServer
from botkit.types import Usage

POLL = 0.2
"""BOTKIT_BATCH_POLL in these tests: the firing loop looks at the batches this often."""


def with_later(request: FakeRequest) -> FakeReply:
    """``LATER when|instruction`` schedules a task that is not urgent; else as ``scripted``."""
    if request.tool_results():
        return scripted(request)
    word, _, rest = request.last_user_text().splitlines()[-1].partition(" ")
    if word == "LATER":
        when, instruction = rest.split("|")
        args = {"when": when, "instruction": instruction, "urgent": False}
        return FakeReply.tool_use("schedule_task", args)
    return scripted(request)


@pytest.fixture
async def claude() -> Any:
    async with FakeAnthropicServer(responder=with_later) as server:
        yield server


def batch_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    values: dict[str, Any] = {"allowed_users": frozenset({ALICE}), "batch_poll": POLL}
    return make_bot(claude, tmp_path, **{**values, **settings})


async def batch_sent(claude: FakeAnthropicServer, count: int = 1) -> None:
    async with asyncio.timeout(15):
        while len(claude.batches.batches) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def the_schedule(bot: Bot) -> Schedule:
    (schedule,) = await (await bot.access.user_store()).pending_schedules(ALICE)
    return schedule


async def test_a_task_that_is_not_urgent_is_answered_by_its_batch_at_half_price(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = batch_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "LATER 1s|Summarise the week")
        (confirmation,) = await telegram.wait_for_messages(ALICE, 1, timeout=10)
        assert confirmation.plain_text.startswith("tool said: Task #1 set for ")
        await batch_sent(claude)
        waiting = await the_schedule(bot)
        assert waiting.status == "firing" and waiting.batch_id in claude.batches.batches
        await asyncio.sleep(3 * POLL)
        assert len(telegram.sent_messages(ALICE)) == 1, "nothing before the batch ends"
        await claude.end_batch()
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
        await asyncio.sleep(3 * POLL)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(ALICE)) == 2, "delivered once"
    (batched,) = claude.batch_requests
    assert batched.last_user_text().startswith("[Scheduled task #1, set earlier by the user; ")
    assert "stream" not in batched.body
    assert len(claude.requests) == 2, "the task's turn called the model only through the batch"
    assert await (await bot.access.user_store()).pending_schedules(ALICE) == []
    # priced at half, under the model's batched name, in the process and in the metrics
    batched_usage = bot.turns.usage_by_model[batch_model(DEFAULT_MODEL)]
    assert batched_usage.output_tokens > 0
    full, _ = estimate({DEFAULT_MODEL: batched_usage})
    half, known = estimate({batch_model(DEFAULT_MODEL): batched_usage})
    assert known and half == pytest.approx(full / 2)
    labels = {"model": batch_model(DEFAULT_MODEL)}
    cost = bot.metrics.registry.get_sample_value("botkit_llm_cost_usd_total", labels)
    assert cost == pytest.approx(half)
    await bot.aclose()


async def test_a_batched_answer_calling_a_tool_goes_on_at_once_with_its_thinking_kept(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def looks_first(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if "[Scheduled task" in text and "what is planned" in text and not request.tool_results():
            return FakeReply.tool_use("list_scheduled", {})
        return with_later(request)

    claude.responder = looks_first
    bot = batch_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "LATER 1s|Tell me what is planned")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        await batch_sent(claude)
        await claude.end_batch()
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
    assert answer.plain_text.startswith("tool said: #1 task, ")
    (batched,) = claude.batch_requests
    after = claude.requests[-1]  # the tool's result, sent at once with the batch's answer
    assert after.tool_results() and after.at > batched.at
    calling = after.messages[-2]
    assert [b["type"] for b in calling["content"]] == ["thinking", "tool_use"]
    assert calling["content"][0]["signature"], "the signed thinking block sent back as received"
    await bot.aclose()


async def test_the_user_is_answered_at_once_while_the_batch_runs_and_the_task_after_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = batch_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "LATER 1s|Summarise the week")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        await batch_sent(claude)
        telegram.send_text(ALICE, "how are you?")
        _, meanwhile = await telegram.wait_for_messages(ALICE, 2, timeout=10)
        assert meanwhile.plain_text.startswith("echo: ")
        await claude.end_batch()
        *_, answer = await telegram.wait_for_messages(ALICE, 3, timeout=10)
        await asyncio.sleep(3 * POLL)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(ALICE)) == 3
    # The conversation moved, so the batch's answer no longer fits: asked at once, and the
    # batch that ran is counted all the same.
    assert claude.requests[-1].last_user_text().startswith("[Scheduled task #1")
    assert bot.turns.usage_by_model[batch_model(DEFAULT_MODEL)].output_tokens > 0
    assert bot.turns.usage_by_model[DEFAULT_MODEL].output_tokens > 0
    await bot.aclose()


async def test_a_batched_answer_counts_half_against_the_budget_and_none_is_sent_over_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    budget = 1_000_000
    bot = batch_bot(claude, tmp_path, daily_token_budget=budget)
    today = datetime.now(UTC).date()
    async with running(bot, telegram):
        store = await bot.access.user_store()
        telegram.send_text(ALICE, "LATER 1s|Summarise the week")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        await batch_sent(claude)
        await bot.access.ledger.flush()  # budget tokens are written in batches
        before = await store.usage_on(ALICE, today)
        await claude.end_batch()
        await telegram.wait_for_messages(ALICE, 2, timeout=10)
        await bot.access.ledger.flush()
        charged = await store.usage_on(ALICE, today) - before
        usage = bot.turns.usage_by_model[batch_model(DEFAULT_MODEL)]
        at_once = usage.input_tokens + usage.output_tokens + usage.cache_creation_input_tokens
        at_once += round(usage.cache_read_input_tokens * 0.1)
        assert charged == round(at_once / 2)

        await store.add_usage(ALICE, today, budget)  # today's allowance is gone
        await bot.reminders.add(Place(ALICE, ALICE), "task", "second", "1s", urgent=False)
        replies = await telegram.wait_for_messages(ALICE, 3, timeout=10)
    assert replies[2].plain_text == bot.options.budget_text
    assert len(claude.batches.batches) == 1, "no batch sent for a user over budget"
    await bot.aclose()


@pytest.mark.parametrize("result", ["errored", "expired", "canceled"])
async def test_a_batch_that_brings_no_answer_falls_back_to_a_turn_at_once(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    result: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bot = batch_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "LATER 1s|Summarise the week")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        await batch_sent(claude)
        await claude.end_batch(result=result)
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
        await asyncio.sleep(3 * POLL)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(ALICE)) == 2
    assert claude.requests[-1].last_user_text().startswith("[Scheduled task #1")
    assert batch_model(DEFAULT_MODEL) not in bot.turns.usage_by_model, "nothing billed as batched"
    await bot.aclose()


@pytest.mark.parametrize(
    ("mode", "word", "batched"),
    [("marked", "TASK", False), ("off", "LATER", False), ("all", "TASK", True)],
)
async def test_which_tasks_wait_for_a_batch_is_the_settings(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    mode: str,
    word: str,
    batched: bool,
) -> None:
    bot = batch_bot(claude, tmp_path, task_batches=mode)
    async with running(bot, telegram):
        telegram.send_text(ALICE, f"{word} 1s|Summarise the week")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        if batched:
            await batch_sent(claude)
            await claude.end_batch()
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
    assert answer.plain_text == "done: Summarise the week"
    assert len(claude.batches.batches) == (1 if batched else 0)
    assert len(claude.requests) == (2 if batched else 3)
    await bot.aclose()


async def test_a_restart_while_the_batch_runs_delivers_once_without_sending_it_again(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    first = batch_bot(claude, tmp_path)
    async with running(first, telegram):
        telegram.send_text(ALICE, "LATER 1s|Summarise the week")
        await telegram.wait_for_messages(ALICE, 1, timeout=10)
        await batch_sent(claude)
    await first.aclose()
    await claude.end_batch()
    second = batch_bot(claude, tmp_path)
    async with running(second, telegram):
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
        await asyncio.sleep(3 * POLL)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(ALICE)) == 2, "delivered once"
    assert len(claude.batches.batches) == 1, "the recorded batch was read, not sent again"
    assert len(claude.requests) == 2, "answered by the batch"
    await second.aclose()


# ---- the fake's Message Batches endpoints, through the real SDK --------------------------


async def test_the_fake_serves_message_batches_to_the_sdk(claude: FakeAnthropicServer) -> None:
    claude.responder = lambda request: FakeReply.text(f"re: {request.last_user_text()}")
    client = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="k", max_retries=0)
    params = {"model": DEFAULT_MODEL, "max_tokens": 64}
    try:
        batch = await client.messages.batches.create(
            requests=[
                {"custom_id": "a-1", "params": {**params, "messages": _says("one")}},
                {"custom_id": "b_2", "params": {**params, "messages": _says("two")}},
                {"custom_id": "bad", "params": {**params, "messages": []}},
            ]
        )
        assert batch.processing_status == "in_progress" and batch.results_url is None
        assert batch.request_counts.processing == 3
        with pytest.raises(anthropic.AnthropicError, match="finished processing"):
            await client.messages.batches.results(batch.id)
        await claude.end_batch(batch.id)
        ended = await client.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended" and ended.ended_at is not None
        assert (ended.request_counts.succeeded, ended.request_counts.errored) == (2, 1)
        results = {
            r.custom_id: r.result async for r in await client.messages.batches.results(batch.id)
        }
        assert results["a-1"].type == "succeeded"
        assert results["a-1"].message.content[-1].text == "re: one"  # type: ignore[union-attr]
        assert results["bad"].type == "errored", "params are checked as the batch runs"
        cancelled = await client.messages.batches.create(
            requests=[{"custom_id": "c", "params": {**params, "messages": _says("three")}}]
        )
        assert (await client.messages.batches.cancel(cancelled.id)).processing_status == "canceling"
        await claude.end_batch(cancelled.id)
        (only,) = [r async for r in await client.messages.batches.results(cancelled.id)]
        assert only.result.type == "canceled"
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.batches.retrieve("msgbatch_nope")
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("requests", "problem"),
    [
        ([], "at least 1 item"),
        ([{"custom_id": "x", "params": {}}, {"custom_id": "x", "params": {}}], "Duplicate"),
        ([{"custom_id": "no spaces", "params": {}}], "custom_id"),
        ([{"custom_id": "s", "params": {"stream": True}}], "stream"),
        ([{"custom_id": "z", "params": {"max_tokens": 0}}], "max_tokens"),
    ],
)
async def test_the_fake_refuses_a_malformed_batch_with_a_400(
    claude: FakeAnthropicServer, requests: list[dict[str, Any]], problem: str
) -> None:
    client = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="k", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError, match=problem):
            await client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    finally:
        await client.close()
    assert claude.batches.batches == {}


def _says(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_a_batched_calls_price_is_half_of_every_kind_of_token() -> None:
    usage = Usage(
        input_tokens=1000,
        output_tokens=500,
        cache_creation_input_tokens=2000,
        cache_write_1h_tokens=1000,
        cache_read_input_tokens=4000,
    )
    for model in ("claude-sonnet-5-5", "claude-haiku-5-5", "claude-opus-4"):
        full = price_for(model)
        half = price_for(batch_model(model))
        assert full is not None and half is not None
        assert half.cost(usage) == pytest.approx(full.cost(usage) / 2)
    assert price_for(batch_model("not-a-model")) is None


# ---- the queued runtime on PostgreSQL ------------------------------------------------------


async def test_a_batch_task_across_a_worker_restart_is_delivered_once_on_postgresql(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db, batch_poll=POLL)
    first = queued_bot(claude, telegram, tmp_path / "w1", db, batch_poll=POLL)
    async with queued(receiver, work=False):
        async with queued(first, receive=False):
            telegram.send_text(7, "LATER 1s|Summarise the week")
            await telegram.wait_for_messages(7, 1, timeout=20)
            await batch_sent(claude)
            held = "SELECT batch_id FROM botkit_schedules WHERE id = 1 AND status = 'firing'"
            assert await fetchval(db, held) in claude.batches.batches
        await claude.end_batch()  # ends while no worker runs
        second = queued_bot(claude, telegram, tmp_path / "w2", db, batch_poll=POLL)
        async with queued(second, receive=False):
            _, answer = await telegram.wait_for_messages(7, 2, timeout=30)
            await asyncio.sleep(1.0)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(7)) == 2, "delivered once"
    assert len(claude.batches.batches) == 1, "the recorded batch was read, not sent again"
    assert len(claude.requests) == 2, "answered by the batch"
    row = "SELECT status || ':' || coalesce(batch_id, '-') FROM botkit_schedules WHERE id = 1"
    assert await fetchval(db, row) == "done:-"
    billed = "SELECT sum(output_tokens) FROM botkit_model_usage WHERE model = $1"
    async with asyncio.timeout(20):  # the ledger writes every few seconds
        while not await fetchval(db, billed, batch_model(DEFAULT_MODEL)):  # noqa: ASYNC110
            await asyncio.sleep(0.2)


async def test_the_user_is_answered_on_the_queue_while_their_tasks_batch_runs(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db, batch_poll=POLL)
    worker = queued_bot(claude, telegram, tmp_path / "w", db, batch_poll=POLL)
    async with queued(receiver, work=False), queued(worker, receive=False):
        telegram.send_text(7, "LATER 1s|Summarise the week")
        await telegram.wait_for_messages(7, 1, timeout=20)
        await batch_sent(claude)
        telegram.send_text(7, "still there?")
        _, meanwhile = await telegram.wait_for_messages(7, 2, timeout=20)
        assert meanwhile.plain_text.startswith("echo: ")
        await claude.end_batch()
        *_, answer = await telegram.wait_for_messages(7, 3, timeout=30)
        await asyncio.sleep(1.0)
    assert answer.plain_text == "done: Summarise the week"
    assert len(telegram.sent_messages(7)) == 3
    assert len(claude.batches.batches) == 1
