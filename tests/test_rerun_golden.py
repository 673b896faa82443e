"""Golden sessions in pytest: ``botkit.testing.rerun`` and ``assert_unchanged``, in-process,
against a session recorded through the real clients and the fakes."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from rerun_shop import FORMAL_PROMPT, shop_bot
from test_rerun import CHAT, record, shop_responder

from botkit import Bot
from botkit.errors import SessionError
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeTelegramServer,
    assert_unchanged,
    fake_llm,
    make_settings,
    rerun,
)
from botkit.testing.anthropic import FakeRequest


async def golden(tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer) -> Path:
    """A conversation recorded through the fakes, kept as ``golden/orders.jsonl``."""
    recorded = await record(tmp_path / "serving", telegram, claude, CHAT)
    kept = tmp_path / "golden" / "orders.jsonl"
    kept.parent.mkdir()
    shutil.copy(recorded, kept)
    return kept


@pytest.fixture
async def bots(claude: FakeAnthropicServer, tmp_path: Path) -> AsyncIterator[Callable[[], Bot]]:
    """Makes the shop bot for testing (on the fake model, its own unused sessions folder);
    each is closed after the test."""
    made: list[Bot] = []

    def make() -> Bot:
        settings = make_settings(tmp_path / "testing")
        made.append(shop_bot(settings=settings, llm=fake_llm(claude, model=settings.model)))
        return made[-1]

    yield make
    for bot in made:
        await bot.aclose()


async def test_a_golden_session_reruns_unchanged_live_and_recorded(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    bots: Callable[[], Bot],
) -> None:
    path = await golden(tmp_path, telegram, claude)
    bot = bots()
    calls = len(claude.requests)

    recorded = await rerun(bot, path, llm="recorded")
    requests_after_recorded = len(claude.requests)
    live = await rerun(bot, path)

    assert_unchanged(recorded, answers="exact")
    assert_unchanged(live, answers="exact")
    assert requests_after_recorded == calls, "recorded mode: no request"
    assert len(claude.requests) == calls + 4
    assert len(recorded.turns) == 3 and not recorded.changed
    assert not (tmp_path / "testing" / "sessions").exists(), "nothing written for the bot"


async def test_assert_unchanged_fails_naming_the_tool_whose_result_changed(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    monkeypatch: pytest.MonkeyPatch,
    bots: Callable[[], Bot],
) -> None:
    path = await golden(tmp_path, telegram, claude)
    monkeypatch.setenv("SHOP_RESULT", "order {id}: lost")

    report = await rerun(bots(), path, llm="recorded")

    with pytest.raises(AssertionError, match="turn 2: changed — tool results: lookup_order"):
        assert_unchanged(report, answers="ignore")


async def test_answers_exact_similar_or_ignored(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    monkeypatch: pytest.MonkeyPatch,
    bots: Callable[[], Bot],
) -> None:
    path = await golden(tmp_path, telegram, claude)
    bot = bots()

    claude.responder = shouting
    close = await rerun(bot, path)
    monkeypatch.setenv("SHOP_PROMPT", FORMAL_PROMPT)
    claude.responder = shop_responder
    far = await rerun(bots(), path)

    assert_unchanged(close, answers="similar")
    assert_unchanged(far, answers="ignore")
    with pytest.raises(AssertionError, match="turn 1: changed — answer"):
        assert_unchanged(close, answers="exact")
    with pytest.raises(AssertionError, match=r"2 turns changed"):
        assert_unchanged(far, answers="similar")


def shouting(request: FakeRequest) -> FakeReply:
    """The shop script, each text answer with a "!" added: a small change."""
    reply = shop_responder(request)
    texts = [block["text"] for block in reply.content if block.get("type") == "text"]
    return FakeReply.text(texts[0] + "!") if texts else reply


async def test_a_missing_or_damaged_golden_session_is_an_error(
    tmp_path: Path, bots: Callable[[], Bot]
) -> None:
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text('{"type":"message","user_id":1,"role":"user","content":[]}\nnot json\n')
    bot = bots()

    with pytest.raises(SessionError, match="no session file"):
        await rerun(bot, tmp_path / "missing.jsonl")
    with pytest.raises(SessionError, match="line 2"):
        await rerun(bot, damaged)
