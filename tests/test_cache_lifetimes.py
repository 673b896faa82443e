"""Cache lifetimes chosen per conversation (#49): a conversation that pauses keeps its prompt
cache for an hour; one whose turns follow quickly keeps five minutes. Through the real Bot on
both stores and runtimes, with the fakes' clocks moved as a user who pauses would."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from test_doctor import environment, lines, run_doctor
from test_scaleout import queued, queued_bot

from botkit import Bot, Incoming
from botkit.llm.caching import conversation_lifetime, mark_cache_points
from botkit.llm.keepwarm import KEEPER_USER_ID, CacheKeeper
from botkit.prefixwatch import PrefixWatch
from botkit.stores.postgres import PostgresUserStore
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, ask, make_bot
from botkit.testing.harness import running
from botkit.types import Usage

SYSTEM = "You answer questions about the shop's opening hours, briefly and kindly. " * 60
PAUSE = 10 * 60


def test_auto_keeps_an_hour_only_after_a_pause_longer_than_five_minutes() -> None:
    assert conversation_lifetime("auto", ()) == "5m", "nothing known yet"
    assert conversation_lifetime("auto", (20.0, 240.0)) == "5m"
    assert conversation_lifetime("auto", (20.0, 601.0)) == "1h"
    assert conversation_lifetime("auto", (601.0, 1.0, 1.0, 1.0, 1.0)) == "5m", "the latest 4"
    assert conversation_lifetime("5m", (3_000.0,)) == "5m"
    assert conversation_lifetime("1h", ()) == "1h"


def test_the_entry_the_next_turn_reads_is_kept_longest_and_breakpoints_stay_in_order() -> None:
    def body(*messages: dict[str, Any]) -> dict[str, Any]:
        return {"system": "rules", "tools": [{"name": "t"}], "messages": list(messages)}

    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    answer = {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    call = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "", "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": "t", "input": {}},
        ],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}

    first = body(user("q1"), answer, user("q2"))
    mark_cache_points(first, "1h")
    # q1 opened the turn before: marked too, so the call finds it however long that turn was
    assert [_mark(m) for m in first["messages"]] == ["1h", None, "1h"]
    first_prev = body(user("q0"), answer, user("q1"), answer, user("q2"))
    mark_cache_points(first_prev, "1h")
    assert [_mark(m) for m in first_prev["messages"]] == [None, None, "1h", None, "1h"]

    cycle = body(user("q1"), answer, user("q2"), call, result)
    mark_cache_points(cycle, "1h")
    # the turn's opening for an hour; the tool cycle (its thinking will not be sent again) 5m
    assert [_mark(m) for m in cycle["messages"]] == [None, None, "1h", None, "5m"]
    assert cycle["system"][-1]["cache_control"]["ttl"] == "1h"
    assert cycle["tools"][-1]["cache_control"]["ttl"] == "1h"

    quick = body(user("q2"), call, result)
    mark_cache_points(quick, "5m")
    assert [_mark(m) for m in quick["messages"]] == ["5m", None, "5m"]


def _mark(message: dict[str, Any]) -> str | None:
    control = message["content"][-1].get("cache_control")
    if control is None:
        return None
    return str(control.get("ttl", "5m"))


async def _pausing_conversation(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, user: int, turns: int = 4
) -> list[dict[str, Any]]:
    """``turns`` questions, ten minutes apart on both fakes' clocks; the usage of each call."""
    claude.responder = lambda request: FakeReply.text(f"Open until six ({request.model}).")
    for n in range(turns):
        reply = await ask(telegram, user, f"Question {n} of {user}: open on day {n}?", timeout=20)
        assert reply.text.startswith("Open until six")
        telegram.advance(PAUSE)
        claude.advance(PAUSE)
    return list(claude.usages)


def _conversation_reread(usages: list[dict[str, Any]]) -> list[bool]:
    """For each call after the first: whether it read more than the tools and system prompt
    from the cache (the conversation so far, not written again)."""
    shared = usages[1]["cache_read_input_tokens"]  # the first call wrote; the second read these
    return [u["cache_read_input_tokens"] > shared for u in usages[2:]]


async def test_a_conversation_that_pauses_reads_itself_from_the_cache_after_each_pause(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM)
    async with running(bot, telegram):
        usages = await _pausing_conversation(claude, telegram, 71)
    # turn 2 knew of no pause yet (5 minutes: expired); from turn 3 on, an hour
    assert _conversation_reread(usages) == [True, True]
    assert usages[2]["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    sent = [r.body["messages"][-1]["content"][-1]["cache_control"] for r in claude.requests]
    assert [c.get("ttl", "5m") for c in sent] == ["5m", "1h", "1h", "1h"]


async def test_with_a_fixed_five_minute_lifetime_each_pause_writes_the_conversation_again(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM, cache_ttl="5m")
    async with running(bot, telegram):
        usages = await _pausing_conversation(claude, telegram, 72)
    assert _conversation_reread(usages) == [False, False]
    assert all(u["cache_creation"]["ephemeral_1h_input_tokens"] == 0 for u in usages[1:])


async def test_turns_that_follow_quickly_keep_five_minutes(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM)
    claude.responder = lambda request: FakeReply.text("Yes.")
    async with running(bot, telegram):
        for n in range(4):
            await ask(telegram, 73, f"quick {n}")
    sent = [r.body["messages"][-1]["content"][-1]["cache_control"] for r in claude.requests]
    assert all("ttl" not in control for control in sent), "five minutes, the API's default"
    assert all(u["cache_creation"]["ephemeral_1h_input_tokens"] == 0 for u in claude.usages[1:])


@pytest.mark.parametrize("workers", [1, 2])
async def test_the_pace_is_read_from_the_session_records_in_the_queued_runtime(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    workers: int,
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db, system_prompt=SYSTEM)
    others = [
        queued_bot(claude, telegram, tmp_path / f"w{n}", db, system_prompt=SYSTEM)
        for n in range(workers)
    ]
    if workers == 1:
        async with queued(receiver):
            usages = await _pausing_conversation(claude, telegram, 74)
    else:
        async with queued(receiver, work=False), queued(others[0]), queued(others[1]):
            usages = await _pausing_conversation(claude, telegram, 75)
    assert _conversation_reread(usages) == [True, True]


# --- a prefix that stays put (#49 point 2) ----------------------------------------------------


class ClockBot(Bot):
    """A bot that puts the time, to the microsecond, into its system prompt: a common mistake."""

    async def build_prompt(self, message: Incoming) -> str:
        return f"{SYSTEM}\nIt is now {datetime.now(UTC).isoformat()}."


async def test_a_build_prompt_that_changes_every_turn_is_reported_once_naming_it(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, bot_class=ClockBot, access="open")
    claude.responder = lambda request: FakeReply.text("ok")
    with capture_logs() as logs:
        async with running(bot, telegram):
            for n in range(8):
                await ask(telegram, 81, f"turn {n}")
    reports = [e for e in logs if e["event"] == "cache.prefix_unstable"]
    assert [(e["part"], e["conversation"]) for e in reports] == [("build_prompt", "81")]
    assert reports[0]["changed"] == "4 of the last 6 turns"


async def test_a_steady_prompt_is_never_reported(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM)
    claude.responder = lambda request: FakeReply.text("ok")
    with capture_logs() as logs:
        async with running(bot, telegram):
            for n in range(8):
                await ask(telegram, 82, f"turn {n}")
    assert not [e for e in logs if e["event"] == "cache.prefix_unstable"]


def test_the_watch_names_a_tool_whose_definition_changes_and_forgets_old_conversations() -> None:
    watch = PrefixWatch()
    reported: list[str] = []
    for n in range(6):
        reported += watch.observe("u1", [("build_prompt", "same"), ("tool clock", f"v{n}")])
    assert reported == ["tool clock"]
    assert watch.observe("u1", [("build_prompt", "same"), ("tool clock", "v9")]) == []


async def test_doctor_checks_a_conversations_prefix_from_its_record_and_two_builds(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    module = tmp_path / "clockbot.py"
    module.write_text(
        "from datetime import UTC, datetime\n"
        "from botkit import Bot\n\n"
        "class ClockBot(Bot):\n"
        "    async def build_prompt(self, message):\n"
        "        return f'Be brief. It is {datetime.now(UTC).isoformat()}.'\n\n"
        "class SteadyBot(Bot):\n"
        "    async def build_prompt(self, message):\n"
        "        return 'Be brief.'\n\n"
        "clock = ClockBot()\n"
        "steady = SteadyBot()\n"
    )
    bot = make_bot(claude, tmp_path, bot_class=ClockBot, access="open")
    claude.responder = lambda request: FakeReply.text("ok")
    async with running(bot, telegram):
        for n in range(3):
            await ask(telegram, 83, f"turn {n}")
    env = environment(
        telegram, claude, tmp_path, BOTKIT_SESSIONS_DIR=str(bot.settings.sessions_dir)
    )
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])

    clock = await run_doctor(tmp_path, env, "clockbot:clock", "--conversation", "83")
    steady = await run_doctor(tmp_path, env, "clockbot:steady", "--conversation", "83")

    [line] = lines(clock, "cache prefix of 83")
    assert line.startswith("✗") and "system prompt changed 2 time(s)" in line
    assert "these parts differ: build_prompt" in line
    [line] = lines(steady, "cache prefix of 83")
    assert "came out the same" in line, "the steady bot builds the same prompt twice"
    assert "changed 2 time(s)" in line and line.startswith("✗"), "the record still shows it"


async def test_usage_tells_the_user_what_the_cache_held_across_their_pauses(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    claude.responder = lambda request: FakeReply.text("We are open until six. " * 30)
    shares: dict[str, int] = {}
    for user, ttl in ((84, "auto"), (85, "5m")):
        bot = make_bot(
            claude, tmp_path / ttl, access="open", system_prompt=f"[{ttl}] {SYSTEM}", cache_ttl=ttl
        )
        async with running(bot, telegram):
            for n in range(6):
                await ask(telegram, user, f"Question {n}: " + "are you open on Sunday? " * 20)
                telegram.advance(PAUSE)
                claude.advance(PAUSE)
            report = (await ask(telegram, user, "/usage")).text
        assert "saved about $" in report
        shares[ttl] = int(report.split("The cache held ")[1].split(" %")[0])
    # Kept an hour, the conversation is read back after each pause; kept five minutes, each
    # pause writes it again and only the tools and system prompt are read.
    assert shares["auto"] >= shares["5m"] + 10, shares


async def _pass(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, bot: Bot, s: float
) -> None:
    """Let ``s`` seconds pass on both fakes' clocks, the bot's cache keeper reading what falls
    due on the way (its own task would, in real time)."""
    keeper = _keeper(bot)
    end = claude.now() + s
    while (due := keeper.next_due()) is not None and due <= end:
        claude.advance(max(0.0, due - claude.now()))
        await keeper.ping_due()
    claude.advance(max(0.0, end - claude.now()))
    telegram.advance(s)


def _keeper(bot: Bot) -> CacheKeeper:
    keeper = getattr(bot.llm, "keeper", None)
    assert isinstance(keeper, CacheKeeper)
    return keeper


@pytest.mark.parametrize("keep_warm", [True, False])
async def test_a_user_back_after_seventy_minutes_reads_the_tools_and_system_prompt_kept_warm(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, keep_warm: bool
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM, cache_keep_warm=keep_warm)
    claude.responder = lambda request: FakeReply.text("Open until six.")
    if keep_warm:
        _keeper(bot).clock = claude.now  # its reads fall due on the cache's clock
    async with running(bot, telegram):
        for n, pause in enumerate([PAUSE, PAUSE, PAUSE, 70 * 60]):
            await ask(telegram, 86, f"Question {n}: are you open on day {n}?")
            if keep_warm:
                await _pass(claude, telegram, bot, pause)
            else:
                claude.advance(pause)
                telegram.advance(pause)
        await ask(telegram, 86, "And on Sunday?")
        kept_usage = sum(bot.turns.usage_by_model.values(), Usage())
    shared = claude.usages[1]["cache_read_input_tokens"]  # the second call read tools + system
    back = claude.usages[-1]  # the conversation's own entry expired 10 minutes before
    pings = [r for r in claude.requests if r.body["max_tokens"] == 1]
    if not keep_warm:
        assert pings == [] and bot.llm.keeper is None  # type: ignore[attr-defined]
        assert back["cache_read_input_tokens"] == 0, "tools and system written again at 2x"
        return
    assert len(pings) == 1, "one read 55 minutes after the entry was written, then idle"
    turn = claude.requests[-1].body
    assert pings[0].body["tools"] == turn["tools"] and pings[0].body["system"] == turn["system"]
    assert pings[0].body["thinking"] == {"type": "between_tools"}, "Sonnet 5.5 thinks unless so"
    assert back["cache_read_input_tokens"] == shared > 0, "tools and system read, not written"
    # the keeper's read is billed like any call: it is in the process's usage
    assert _prompt(kept_usage) == tuple(map(sum, zip(*map(_sent, claude.usages), strict=True)))


async def test_a_quick_conversation_keeps_nothing_warm(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, access="open", system_prompt=SYSTEM)
    claude.responder = lambda request: FakeReply.text("Yes.")
    async with running(bot, telegram):
        for n in range(3):
            await ask(telegram, 87, f"quick {n}")
        assert _keeper(bot).next_due() is None, "five-minute conversations are left to expire"


def _prompt(usage: Usage) -> tuple[int, ...]:
    u = usage
    return u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens


def _sent(raw: dict[str, Any]) -> tuple[int, ...]:
    """A call's prompt usage as the fake reported it."""
    return raw["input_tokens"], raw["cache_creation_input_tokens"], raw["cache_read_input_tokens"]


async def test_the_keeper_stops_reading_a_prefix_the_model_does_not_cache_or_no_one_uses() -> None:
    now = [0.0]
    sent: list[dict[str, Any]] = []
    cached = {"short": 0, "long": 3_000}

    async def ping(body: dict[str, Any]) -> Usage:  # the API's usage for each prefix
        sent.append(body)
        return Usage(input_tokens=1, cache_read_input_tokens=cached[body["system"][0]["text"]])

    keeper = CacheKeeper(ping, thinking_off=lambda model: {}, clock=lambda: now[0])
    for text in cached:
        body = {"model": "m", "system": [{"type": "text", "text": text}], "messages": []}
        keeper.note(body, Usage(cache_creation_input_tokens=3_000), "1h")
    assert keeper.next_due() == 55 * 60
    now[0] = 55 * 60
    assert await keeper.ping_due() == 2
    # below the model's minimum nothing is cached: reading it again would save nothing
    now[0] = 110 * 60
    assert await keeper.ping_due() == 1 and sent[-1]["system"][0]["text"] == "long"
    # an hour after a paused conversation last used it, the prefix is left to expire
    now[0] = 200 * 60
    assert keeper.next_due() is None and await keeper.ping_due() == 0
    await keeper.close()


async def test_the_keeper_works_in_the_queued_runtime_and_its_reads_are_in_postgresql_usage(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude, telegram, tmp_path, db, system_prompt=SYSTEM)
    claude.responder = lambda request: FakeReply.text("Open until six.")
    _keeper(bot).clock = claude.now
    async with queued(bot):
        for n, pause in enumerate([PAUSE, PAUSE, PAUSE, 70 * 60]):
            await ask(telegram, 88, f"Question {n}: are you open on day {n}?", timeout=20)
            await _pass(claude, telegram, bot, pause)
        await ask(telegram, 88, "And on Sunday?", timeout=20)
    shared = claude.usages[1]["cache_read_input_tokens"]
    assert claude.usages[-1]["cache_read_input_tokens"] == shared > 0
    store = await PostgresUserStore.connect(db)
    try:
        rows = await store.model_usage_since(datetime.now(UTC).date() - timedelta(days=1))
    finally:
        await store.close()
    [kept] = [row for row in rows if row.user_id == KEEPER_USER_ID]
    assert kept.usage.cache_read_input_tokens == shared, "the keeper's read, as the bot's own"
