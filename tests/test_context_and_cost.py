"""Long conversations: commands, usage, compaction, eviction and rebuilding from session files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from botkit import Incoming, Message, read_session_file
from botkit.agent.compaction import SUMMARY_PROMPT, Compactor, message_chars
from botkit.agent.context import SUMMARY_PREFIX, ContextManager
from botkit.pricing import PRICES, estimate
from botkit.sessions import CompactionEntry, ResetEntry, SessionEntry
from botkit.testing import (
    FakeAnthropicServer,
    FakeError,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    ask,
    make_bot,
    running,
)
from botkit.types import TextBlock, Usage

USER, ADMIN = 801, 802


BOT: dict[str, Any] = {
    "allowed_users": frozenset({USER}),
    "admins": frozenset({ADMIN}),
    "model": "claude-sonnet-5-test",
}
"""The settings every bot here has, for ``make_bot(claude, tmp_path, **BOT)``."""


async def test_commands_answer_without_the_llm_and_fill_the_menu(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, **BOT)

    @bot.command("ping", "Check that I'm alive")
    async def ping(message: Incoming, args: str) -> str:
        return f"pong {args}".strip()

    async with running(bot, telegram):
        help_text = (await ask(telegram, USER, "/help")).text
        assert (await ask(telegram, USER, "/ping loud")).text == "pong loud"
    assert "/clear" in help_text and "/usage" in help_text and "/ping" in help_text
    assert claude.requests == []
    menu = [c["command"] for c in telegram.commands()]
    assert menu == [
        "help",
        "clear",
        "usage",
        "model",
        "whoami",
        "timezone",
        "scheduled",
        "memory",
        "forget_me",
        "ping",
    ]

    def menus_set() -> list[Any]:  # per scope: everyone's, and the admin's own chat
        return [r.params.get("scope") for r in telegram.requests_for("setMyCommands")]

    everyone, admin_chat = None, {"type": "chat", "chat_id": ADMIN}
    assert menus_set() == [everyone, admin_chat]
    async with running(make_bot(claude, tmp_path, **BOT), telegram):
        await ask(telegram, USER, "/help")
    assert menus_set() == [everyone, admin_chat] * 2, "changed menu set; same menu not"
    async with running(make_bot(claude, tmp_path, **BOT), telegram):
        await ask(telegram, USER, "/help")
    assert menus_set() == [everyone, admin_chat] * 2


async def test_clear_starts_fresh_and_is_recorded(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, **BOT)
    async with running(bot, telegram):
        await ask(telegram, USER, "remember pineapples")
        cleared = await ask(telegram, USER, "/clear")
        await ask(telegram, USER, "what did I say?")
    assert [m["role"] for m in claude.requests[-1].messages] == ["user"]
    recorded = read_session_file(tmp_path / "sessions" / f"{USER}.jsonl").entries
    assert [e.type for e in recorded] == ["message", "message", "reset", "message", "message"]
    assert "pineapples" in str(recorded[0]), "the earlier messages stay on record…"
    assert "forgotten" not in cleared.plain_text, "…so /clear never claims they are gone"
    assert "They stay in this bot's records" in cleared.plain_text

    restarted = make_bot(claude, tmp_path, **BOT)
    context = await restarted.context_for(USER)
    words = [m.content[-1].text for m in context.messages]  # after the local-time note
    assert words == ["what did I say?", "echo: what did I say?"]


async def test_usage_reports_this_users_tokens_and_cost(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, **BOT)
    async with running(bot, telegram):
        await ask(telegram, USER, "hello")
        await ask(telegram, USER, "hello again")
        report = (await ask(telegram, USER, "/usage")).text
    entries = read_session_file(tmp_path / "sessions" / f"{USER}.jsonl").entries
    used = sum((e.usage for e in entries if isinstance(e, SessionEntry) and e.usage), Usage())
    assert f"{used.input_tokens:,} input tokens" in report
    assert f"{used.output_tokens:,} output tokens" in report
    assert f"{used.cache_read_input_tokens:,} read from" in report
    dollars = PRICES["claude-sonnet-5"].cost(used)
    assert f"${dollars:.4f}" in report
    # what the cache did for this user (#49): its share of the prompts, and the dollars
    prompt = used.input_tokens + used.cache_creation_input_tokens + used.cache_read_input_tokens
    share = round(100 * used.cache_read_input_tokens / prompt)
    assert f"The cache held {share} % of the prompts and " in report, report
    uncached = Usage(input_tokens=prompt, output_tokens=used.output_tokens)
    saved = PRICES["claude-sonnet-5"].cost(uncached) - dollars
    assert (f"saved about ${saved:.4f}" if saved >= 0 else f"cost ${-saved:.4f} more") in report
    assert len(claude.requests) == 2, "/usage cost nothing"


def test_cost_estimate_prices_cache_reads_and_writes() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
    )
    dollars, known = estimate({"claude-sonnet-5": usage})
    assert known
    assert dollars == pytest.approx(2.0 + 10.0 + 2.0 * 1.25 + 2.0 * 0.1)
    newest, _ = estimate({"claude-sonnet-5-5": usage})
    assert newest == pytest.approx(2.0 + 10.0 + 2.0 * 1.25 + 2.0 * 0.05), "reads at 0.05x"
    assert estimate({"mystery-model": usage})[1] is False


async def test_only_admins_switch_the_model(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, **BOT)
    bot.settings.allowed_users = frozenset({USER, ADMIN})
    async with running(bot, telegram):
        assert (await ask(telegram, USER, "/model")).text == "Model: claude-sonnet-5-test"
        assert (
            await ask(telegram, USER, "/model claude-other")
        ).text == bot.options.admin_only_text
        switched = (await ask(telegram, ADMIN, "/model claude-opus-test")).text
        await ask(telegram, USER, "hi")
    assert switched == "Switched from claude-sonnet-5-test to claude-opus-test."
    assert [r.model for r in claude.requests] == ["claude-opus-test"]


def long_text(n: int) -> str:
    return f"message {n}: " + "lorem ipsum " * 40


async def test_long_context_is_compacted_into_a_summary_and_replays_the_same(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.system_text == SUMMARY_PROMPT:
            return FakeReply.text("The user sent numbered lorem ipsum messages.")
        return FakeReply.text("ok " + "dolor " * 40)

    claude.responder = model
    bot = make_bot(claude, tmp_path, **BOT, max_context_chars=6_000)
    async with running(bot, telegram):
        for n in range(12):
            await ask(telegram, USER, long_text(n))
    summaries = [r for r in claude.requests if r.system_text == SUMMARY_PROMPT]
    assert summaries, "a summary was written"
    last = claude.requests[-1].messages
    assert last[0]["content"][0]["text"].startswith(SUMMARY_PREFIX)
    assert sum(len(str(m)) for m in last) < 6_000 * 1.5
    entries = read_session_file(tmp_path / "sessions" / f"{USER}.jsonl").entries
    assert any(isinstance(e, CompactionEntry) for e in entries)

    live = await bot.context_for(USER)
    rebuilt = await make_bot(claude, tmp_path, **BOT, max_context_chars=6_000).context_for(USER)
    assert rebuilt.messages == live.messages, "a replay rebuilds the same context"
    assert rebuilt.usage_by_model == live.usage_by_model


async def test_failed_summary_falls_back_to_truncation(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply | FakeError:
        if request.system_text == SUMMARY_PROMPT:
            return FakeError.server_error()
        return FakeReply.text("fine")

    claude.responder = model
    bot = make_bot(claude, tmp_path, **BOT, max_context_chars=4_000)
    async with running(bot, telegram):
        replies = [(await ask(telegram, USER, long_text(n))).text for n in range(10)]
    assert set(replies) == {"fine"}, "the user never noticed"
    entries = read_session_file(tmp_path / "sessions" / f"{USER}.jsonl").entries
    compactions = [e for e in entries if isinstance(e, CompactionEntry)]
    assert compactions and all("no summary" in c.summary for c in compactions)


async def test_prompt_too_long_compacts_and_retries(
    telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    async with FakeAnthropicServer(context_window=1_500) as claude:
        bot = make_bot(claude, tmp_path, **BOT, max_context_chars=10_000_000)
        async with running(bot, telegram):
            replies = [(await ask(telegram, USER, long_text(n))).text for n in range(12)]
    assert replies[-1].startswith("echo: ") and long_text(11).strip() in replies[-1]
    too_long = [r for r in claude.requests if r.system_text != SUMMARY_PROMPT]
    assert len(too_long) > 12, "some calls were refused as too long and retried"


async def test_idle_contexts_are_evicted_and_rebuilt_from_the_file(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    users = [901, 902, 903, 904]
    bot = make_bot(claude, tmp_path, **BOT, max_contexts=2)
    bot.settings.allowed_users = frozenset(users)
    async with running(bot, telegram):
        for user in users:
            await ask(telegram, user, f"I am {user}")
        assert len(bot.contexts) <= 2
        await ask(telegram, users[0], "who am I?")
    history = claude.requests[-1].messages
    assert f"I am {users[0]}" in str(history[0]), "rebuilt from the session file"


async def test_restore_applies_resets_and_compactions_in_order() -> None:
    def message(text: str) -> SessionEntry:
        return SessionEntry.of(1, Message.user_text(text))

    entries = [
        message("old"),
        ResetEntry(user_id=1),
        message("a"),
        message("b"),
        message("c"),
        CompactionEntry(user_id=1, summary="a and b happened", kept=1),
        message("d"),
    ]
    context = ContextManager.restore(1, entries)
    assert [m.text for m in context.messages] == [SUMMARY_PREFIX + "a and b happened", "c", "d"]


async def test_compaction_is_needed_once_the_conversation_outgrows_its_budget() -> None:
    # needed() counts only what was appended since its last look: a compaction or a reset,
    # which replace what it counted, must be counted anew
    compactor = Compactor(cast(Any, None), max_context_chars=100, trigger=1.0)
    context = ContextManager(1)

    def whole() -> int:
        return sum(message_chars(m) for m in context.messages)

    looks = []
    for message in (
        Message.user_text("x" * 40),
        Message(role="assistant", content=[TextBlock(text="y" * 50)]),
        Message.user_text("z" * 20),
    ):
        await context.append(message)
        looks.append(compactor.needed(context))
    assert looks == [False, False, True]
    await context.compact("short", kept=1)
    assert not compactor.needed(context) and whole() < 100, "the summary and the last message"
    await context.append(Message(role="assistant", content=[TextBlock(text="w" * 90)]))
    assert compactor.needed(context) and whole() > 100
    await context.reset()
    assert not compactor.needed(context)
    await context.append(Message.user_text("v" * 101))
    assert compactor.needed(context)
