"""Start-up: polling never waits for the command menus; one data folder, one bot."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from botkit.messengers.flood import FloodControl
from botkit.testing import ask, make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer
from botkit.testing.telegram import FakeTelegramServer

MANY_ADMINS = frozenset(range(10_001, 10_501))
MEMBER = 42


async def first_poll_delay(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path, admins: frozenset[int]
) -> float:
    """Seconds from getMe to the first getUpdates of a bot with ``admins``, paced as served."""
    bot = make_bot(claude, home, admins=admins, allowed_users=frozenset({MEMBER}))
    telegram.requests.clear()
    async with running(bot, telegram, flood=FloodControl()):
        (poll, *_) = await telegram.wait_for_requests("getUpdates", timeout=15)
        assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
        await telegram.wait_for_requests("setMyCommands")  # meanwhile, in the background
    (me,) = telegram.requests_for("getMe")
    return poll.at - me.at


async def test_500_admins_do_not_delay_the_first_poll(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    alone = await first_poll_delay(telegram, claude, tmp_path / "none", frozenset())
    crowded = await first_poll_delay(telegram, claude, tmp_path / "many", MANY_ADMINS)
    print(f"first getUpdates after getMe: {alone:.3f} s alone, {crowded:.3f} s with 500 admins")
    assert crowded - alone < 1.0, (alone, crowded)


async def test_menus_are_published_in_the_background_and_only_when_changed(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    admins = frozenset(range(10_001, 10_021))
    bot = make_bot(claude, tmp_path, admins=admins)
    async with running(bot, telegram):
        await telegram.wait_for_requests("setMyCommands", 1 + len(admins))
    assert all(telegram.commands({"type": "chat", "chat_id": a}) for a in admins)

    telegram.requests.clear()
    again = make_bot(claude, tmp_path, admins=admins)
    async with running(again, telegram):
        await telegram.wait_for_requests("getMyCommands", 1 + len(admins))
    assert not telegram.requests_for("setMyCommands"), "nothing changed, nothing set"


async def test_failing_menus_are_one_log_line_and_the_bot_serves(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async with running(make_bot(claude, tmp_path), telegram):  # the default menu, set
        await telegram.wait_for_requests("setMyCommands")
    admins = frozenset(range(10_001, 10_031))
    bot = make_bot(claude, tmp_path, admins=admins, allowed_users=frozenset({MEMBER}))
    telegram.requests.clear()
    telegram.fail_next(
        "setMyCommands", error_code=400, description="Bad Request: chat not found", times=30
    )
    with capture_logs() as logs:
        async with running(bot, telegram):
            assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
            await telegram.wait_for_requests("setMyCommands", len(admins))
            assert (await ask(telegram, MEMBER, "still there?")).text == "echo: still there?"
    failures = [e for e in logs if e["event"].endswith("commands_not_set")]
    assert [e["event"] for e in failures] == ["bot.admin_commands_not_set"]
    assert failures[0]["count"] == len(admins) and "chat not found" in failures[0]["error"]
