"""Budgets cannot be bypassed: every finished LLM call is charged, whatever happens next."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from botkit import Bot, Settings, tool
from botkit.agent.compaction import SUMMARY_PROMPT
from botkit.llm.anthropic import AnthropicLLM
from botkit.sessions import CompactionEntry, SessionEntry, read_session_file
from botkit.testing import (
    FakeAnthropicServer,
    FakeError,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    running,
)

USER = 1301


def make_bot(claude: FakeAnthropicServer, tmp_path: Path, *, stream: bool = False) -> Bot:
    settings = Settings(
        _env_file=None,
        allowed_users=frozenset({USER}),
        sessions_dir=tmp_path / "sessions",
        stream_replies=stream,
        daily_token_budget=1_000_000,
    )
    llm = AnthropicLLM(
        api_key="k", model="claude-sonnet-5-5", base_url=claude.base_url, max_retries=0
    )
    return Bot(settings=settings, llm=llm)


async def spent(bot: Bot) -> int:
    await bot.access.ledger.flush()  # budget tokens are written in batches
    return await (await bot.access.user_store()).usage_on(USER, datetime.now(UTC).date())


async def test_a_turn_failing_at_its_second_call_still_charges_the_first(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    @tool
    async def look() -> str:
        """Looks."""
        return "seen"

    claude.enqueue(FakeReply.tool_use("look", {}), FakeError.invalid_request("boom"))
    bot = make_bot(claude, tmp_path)
    bot.tools.register(look)
    async with running(bot, telegram):
        telegram.send_text(USER, "look around " * 50)
        [reply] = await telegram.wait_for_messages(USER)
        assert reply.plain_text == bot.options.error_text
        assert await spent(bot) > 0, "the finished first call was charged"


async def test_a_stopped_turn_still_charges_the_calls_it_made(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Never ends."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    claude.enqueue(FakeReply.tool_use("wait_forever", {}))
    bot = make_bot(claude, tmp_path, stream=True)
    bot.tools.register(wait_forever)
    async with running(bot, telegram):
        telegram.send_text(USER, "work " * 50)
        await asyncio.wait_for(started.wait(), 10)
        draft_id = telegram.drafts(USER)[0].params["draft_id"]
        telegram.inject_update(
            {
                "stopped_message_generation": {
                    "chat": {"id": USER, "type": "private", "first_name": "U"},
                    "draft_id": draft_id,
                }
            }
        )
        await telegram.wait_for_messages(USER)
        assert await spent(bot) > 0, "stopping did not make the first call free"


async def test_a_call_stopped_mid_stream_is_charged_for_what_it_used(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.chunk_delay = 0.5  # a long answer, still streaming when the user presses stop
    claude.enqueue(FakeReply.text("word " * 200))
    bot = make_bot(claude, tmp_path, stream=True)
    async with running(bot, telegram):
        telegram.send_text(USER, "tell me a long story " * 20)
        for _ in range(200):
            if claude.first_delta_at:
                break
            await asyncio.sleep(0.05)
        assert claude.first_delta_at, "the answer never started streaming"
        draft_id = telegram.drafts(USER)[0].params["draft_id"]
        telegram.inject_update(
            {
                "stopped_message_generation": {
                    "chat": {"id": USER, "type": "private", "first_name": "U"},
                    "draft_id": draft_id,
                }
            }
        )
        await telegram.wait_for_messages(USER)
        prompt_tokens = len("tell me a long story " * 20) // 4
        assert await spent(bot) >= prompt_tokens, "the stopped call's input was not charged"
        assert len(claude.requests) == 1


async def test_parallel_tool_calls_per_answer_are_capped(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    runs: list[int] = []

    @tool
    async def fetch(n: int) -> str:
        """Fetches item n.

        Args:
            n: Which item.
        """
        runs.append(n)
        return f"item {n}"

    claude.enqueue(
        FakeReply.tool_uses([("fetch", {"n": n}) for n in range(12)]), FakeReply.text("done")
    )
    bot = make_bot(claude, tmp_path)
    bot.tools.register(fetch)
    async with running(bot, telegram):
        telegram.send_text(USER, "fetch all")
        await telegram.wait_for_messages(USER)
    assert sorted(runs) == list(range(bot.options.max_parallel_tools))
    results = claude.requests[1].tool_results()
    assert len(results) == 12, "every call is answered, the extra ones with an error"
    assert sum(bool(r.get("is_error")) for r in results) == 12 - bot.options.max_parallel_tools


async def test_cache_reads_count_at_a_tenth_and_summaries_count_in_full(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.system_text == SUMMARY_PROMPT:
            return FakeReply.text("The user sent numbered lorem ipsum messages.")
        return FakeReply.text("ok " + "dolor " * 40)

    claude.responder = model
    bot = make_bot(claude, tmp_path)
    bot.options = replace(bot.options, max_context_chars=6_000)
    async with running(bot, telegram):
        for n in range(8):
            telegram.send_text(USER, f"message {n}: " + "lorem ipsum " * 40)
            await telegram.wait_for_messages(USER, n + 1)
        charged = await spent(bot)
    entries = read_session_file(tmp_path / "sessions" / f"{USER}.jsonl").entries
    calls = [e.usage for e in entries if isinstance(e, SessionEntry | CompactionEntry) and e.usage]
    summaries = [e for e in entries if isinstance(e, CompactionEntry) and e.usage]
    assert summaries, "a summary was written, by an LLM call"
    assert sum(u.cache_read_input_tokens for u in calls) >= 100, "later calls read the cache"
    expected = sum(
        u.input_tokens
        + u.output_tokens
        + u.cache_creation_input_tokens
        + round(u.cache_read_input_tokens * 0.1)
        for u in calls
    )
    assert charged == expected, "every call, summaries included; cache reads at a tenth"


async def test_a_budget_counts_tokens_not_written_yet_and_a_close_writes_them(
    tmp_path: Path,
) -> None:
    """Tokens charged against a budget are written in batches (no store write per call), yet
    the very next check counts them; closing writes what is left."""
    from botkit.access import Access
    from botkit.options import BotOptions
    from botkit.testing.kit import make_settings
    from botkit.types import Usage

    access = Access(make_settings(tmp_path, daily_token_budget=1_000), BotOptions())
    try:
        store = await access.user_store()
        today = datetime.now(UTC).date()
        await access.charge(USER, Usage(input_tokens=600), "claude-sonnet-5")
        assert not await access.over_budget(USER)
        await access.charge(USER, Usage(input_tokens=600), "claude-sonnet-5")
        assert await store.usage_on(USER, today) == 0, "not written yet"
        assert await access.over_budget(USER), "counted all the same"
    finally:
        await access.close()
    reopened = Access(make_settings(tmp_path, daily_token_budget=1_000), BotOptions())
    try:
        assert await (await reopened.user_store()).usage_on(USER, today) == 1_200
        assert await reopened.over_budget(USER)
    finally:
        await reopened.close()
