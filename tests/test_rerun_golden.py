"""Golden sessions in pytest: ``botkit.testing.rerun`` and ``assert_unchanged``, in-process,
against a session recorded through the real clients and the fakes."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from rerun_shop import FORMAL_PROMPT, shop_bot
from test_rerun import CHAT, record, shop_responder

from botkit import Bot
from botkit.errors import SessionError
from botkit.relay import send_user_message_tool
from botkit.reminders.tools import RERUN_TEXT
from botkit.rerun.scratch import QuietMessenger
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeTelegramServer,
    ask,
    assert_unchanged,
    fake_llm,
    make_settings,
    rerun,
    running,
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


class RelayingBot(Bot):
    """Reminders on, and ``send_user_message`` to anyone allowed (no user records needed)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tools.register_tool(send_user_message_tool(self))

    async def can_relay(self, sender_id: int, recipient_id: int) -> bool:
        return recipient_id in self.settings.allowed_users


def errands(request: FakeRequest) -> FakeReply:
    """ "remind me" → remind(10m); "tell 43" → send_user_message(43); results read back."""
    results = request.tool_results()
    if results:
        return FakeReply.text(f"Done: {results[0].get('content')}")
    said = request.last_user_text()
    if said == "remind me":
        return FakeReply.tool_use("remind", {"when": "10m", "text": "Call the plumber"})
    if said == "tell 43":
        return FakeReply.tool_use("send_user_message", {"user_id": 43, "text": "Lunch at one?"})
    return FakeReply.text(f"echo: {said}")


async def test_a_rerun_schedules_nothing_and_relays_nothing(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    claude.responder = errands
    settings = make_settings(tmp_path, allowed_users=frozenset({42, 43}))
    serving = RelayingBot(settings=settings, llm=fake_llm(claude, model=settings.model))
    async with running(serving, telegram):
        await ask(telegram, 42, "remind me")
        await ask(telegram, 42, "tell 43")
    await serving.aclose()
    sessions = tmp_path / "sessions"
    recipient = (sessions / "43.jsonl").read_bytes()
    to_43 = len(telegram.sent_messages(43))
    rerunning = RelayingBot(settings=settings, llm=fake_llm(claude, model=settings.model))
    rerunning.messenger = QuietMessenger()  # as the command line gives it
    try:
        scheduled = await rerunning.reminders.pending(42)

        report = await rerun(rerunning, sessions / "42.jsonl", llm="recorded")

        assert len(await rerunning.reminders.pending(42)) == len(scheduled) == 1
    finally:
        await rerunning.aclose()
    assert (sessions / "43.jsonl").read_bytes() == recipient, "no note in the recipient's"
    assert len(telegram.sent_messages(43)) == to_43
    first, second = report.turns
    assert first.now.calls[0].result == RERUN_TEXT and first.changed_results == ["remind"]
    assert second.now.calls[0].result == "Delivered to user 43." and not second.changed
