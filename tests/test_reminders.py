"""Reminders and scheduled tasks: set by the model, fired by the runtime, exactly once, in the
chat they were asked in; against the fake Telegram and the fake Messages API (#13)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from botkit import Bot
from botkit.reminders.firing import claim_due
from botkit.reminders.limits import PAUSED_RECHECK
from botkit.reminders.service import Place
from botkit.stores import Schedule
from botkit.stores.schedules import NewSchedule
from botkit.testing import make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.telegram import FakeTelegramServer

ALICE, BOB, STRANGER = 1001, 1002, 1666
GROUP, TOPIC = -1001234, 7
T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def scripted(request: FakeRequest) -> FakeReply:
    """``REMIND when|text[|repeat]``, ``TASK when|instruction[|repeat]``, ``CANCEL id``,
    ``LIST`` call the tools; a scheduled task is done; a tool result is read back."""
    results = request.tool_results()
    if results:
        return FakeReply.text(f"tool said: {results[0]['content']}")
    text = request.last_user_text()
    if "[Scheduled task" in text:
        return FakeReply.text(f"done: {text.splitlines()[-1]}")
    word, _, rest = text.splitlines()[-1].partition(" ")  # in a group, after who wrote it
    parts = rest.split("|")
    if word == "REMIND":
        args = dict(zip(["when", "text", "repeat"], parts, strict=False))
        return FakeReply.tool_use("remind", args)
    if word == "TASK":
        args = dict(zip(["when", "instruction", "repeat"], parts, strict=False))
        return FakeReply.tool_use("schedule_task", args)
    if word == "CANCEL":
        return FakeReply.tool_use("cancel_scheduled", {"id": int(rest)})
    if word == "LIST":
        return FakeReply.tool_use("list_scheduled", {})
    return FakeReply.text(f"echo: {text}")


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=scripted) as server:
        yield server


class FixedClock:
    """A wall clock that moves only when told to."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def reminder_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    return make_bot(claude, tmp_path, allowed_users=frozenset({ALICE, BOB}), **settings)


def look_now(bot: Bot) -> None:
    """Have the running firing loop look for due schedules now (the clock was moved)."""
    assert bot.reminders.wake is not None, "the firing loop runs"
    bot.reminders.wake()


async def firing_loop_runs(bot: Bot) -> None:
    """Wait until the served bot's firing loop has started (and made its first look)."""
    async with asyncio.timeout(10):
        while bot.reminders.wake is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def recorded(bot: Bot, fired: int) -> Schedule:
    """Alice's one pending schedule, once ``fired`` deliveries of it were recorded."""
    store = await bot.access.user_store()
    async with asyncio.timeout(10):
        while True:
            (pending,) = await store.pending_schedules(ALICE)
            if pending.fired == fired and pending.status == "pending":
                return pending
            await asyncio.sleep(0.02)


def fired(bot: Bot, kind: str, outcome: str) -> float | None:
    """``botkit_schedules_fired_total`` for ``kind`` and ``outcome``."""
    labels = {"kind": kind, "outcome": outcome}
    return bot.metrics.registry.get_sample_value("botkit_schedules_fired_total", labels)


async def no_more_messages(telegram: FakeTelegramServer, chat_id: int, count: int) -> None:
    """Give the bot a second to send anything more, then check it sent exactly ``count``."""
    await asyncio.sleep(1.0)
    assert len(telegram.sent_messages(chat_id)) == count


async def test_a_reminder_arrives_verbatim_once_in_the_chat_it_was_asked_in(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    text = "Call the plumber: 0171 *555* 12 — before noon!"
    bot = reminder_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, f"REMIND 2s|{text}")
        confirmation, reminder = await telegram.wait_for_messages(ALICE, 2, timeout=10)
        assert confirmation.plain_text.startswith("tool said: Reminder #1 set for ")
        assert reminder.plain_text == "Call the plumber: 0171 555 12 — before noon!"
        assert "<i>555</i>" in reminder.text or "<b>555</b>" in reminder.text, "as Markdown"
        await no_more_messages(telegram, ALICE, 2)
    assert len(claude.requests) == 2, "delivery called no model"
    assert telegram.sent_messages(BOB) == []
    assert fired(bot, "reminder", "delivered") == 1
    assert fired(bot, "reminder", "late") == fired(bot, "reminder", "failed") == 0


async def test_a_reminder_asked_in_a_forum_topic_arrives_in_that_topic(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, answer_groups="all")
    async with running(bot, telegram):
        telegram.send_text(
            ALICE, "REMIND 1s|stand-up", chat_id=GROUP, chat_type="supergroup", thread_id=TOPIC
        )
        _, reminder = await telegram.wait_for_messages(GROUP, 2, timeout=10)
    assert reminder.plain_text == "stand-up"
    assert reminder.params.get("message_thread_id") == TOPIC
    assert telegram.sent_messages(ALICE) == [], "not in the private chat"


async def test_a_cancelled_reminder_never_arrives(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "REMIND 1s|never")
        await telegram.wait_for_messages(ALICE, 1)
        telegram.send_text(ALICE, "CANCEL 1")
        replies = await telegram.wait_for_messages(ALICE, 2)
        assert replies[1].plain_text == "tool said: Cancelled #1: it will not fire."
        await asyncio.sleep(1.0)
        await no_more_messages(telegram, ALICE, 2)
    assert await (await bot.access.user_store()).pending_schedules() == []
    await bot.aclose()  # serving closed its store; the one opened here too


async def test_a_scheduled_task_runs_a_real_turn_and_its_answer_is_delivered(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "TASK 1s|Summarise my open tasks")
        confirmation, answer = await telegram.wait_for_messages(ALICE, 2, timeout=10)
    assert confirmation.plain_text.startswith("tool said: Task #1 set for ")
    assert answer.plain_text == "done: Summarise my open tasks"
    turn = claude.requests[-1]
    assert turn.last_user_text().startswith("[Scheduled task #1, set earlier by the user; due ")
    assert "This is not a new message from the user" in turn.last_user_text()
    assert "remind" not in turn.tool_names and "schedule_task" not in turn.tool_names
    assert "list_scheduled" in turn.tool_names and "cancel_scheduled" in turn.tool_names
    setting = claude.requests[0]
    assert "remind" in setting.tool_names and "schedule_task" in setting.tool_names
    lines = (tmp_path / "sessions" / f"{ALICE}.jsonl").read_bytes().splitlines()
    session = [orjson.loads(line) for line in lines]
    recorded = [e for e in session if e["role"] == "user" and e.get("update_id", 0) < 0]
    assert len(recorded) == 1, "the scheduled turn is in the session, under its own update id"
    assert session[-1]["content"][-1] == {"type": "text", "text": answer.plain_text}
    assert fired(bot, "task", "delivered") == 1
    answered = bot.metrics.registry.get_sample_value("botkit_turns_total", {"outcome": "answered"})
    assert answered == 2, "the message that set it, and the scheduled turn"


async def test_a_repeat_fires_on_its_grid_not_by_drift(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    clock = bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "REMIND 10m|stretch|every 2h")
        await telegram.wait_for_messages(ALICE, 1)
        first_due = T0 + timedelta(minutes=10)
        clock.advance(timedelta(minutes=10))
        look_now(bot)
        await telegram.wait_for_messages(ALICE, 2)
        clock.advance(timedelta(hours=2, minutes=3))  # the second look comes 3 minutes late
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 3)
        pending = await recorded(bot, fired=2)
    assert [r.plain_text for r in replies[1:]] == ["stretch", "stretch"]
    assert pending.due_at == first_due + timedelta(hours=4), "from the definition, not from now"


async def test_a_reminder_due_long_ago_says_it_is_late(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, timezone="Europe/Berlin")
    clock = bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "REMIND 2026-11-24T09:30|water the plants")
        await telegram.wait_for_messages(ALICE, 1)
        clock.advance(timedelta(hours=3))  # as if the bot had been down meanwhile
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 2)
    assert replies[1].plain_text == (
        "water the plants\n\n(Late: this reminder was due Tue 24 Nov 2026 09:30 CET.)"
    )
    assert fired(bot, "reminder", "late") == 1


async def test_a_blocked_users_reminders_do_not_fire_until_unblocked(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    clock = bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "REMIND 10m|stretch")
        await telegram.wait_for_messages(ALICE, 1)
        store = await bot.access.user_store()
        await store.block_user(ALICE)
        clock.advance(timedelta(minutes=11))
        look_now(bot)
        await no_more_messages(telegram, ALICE, 1)
        assert await store.set_blocked(ALICE, False)
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 2)
    assert replies[1].plain_text == "stretch"


async def test_the_25th_task_run_of_a_user_in_a_utc_day_is_put_off_to_the_next(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    assert bot.settings.max_task_runs == 24, "the default"
    clock = bot.reminders.clock = FixedClock(T0)
    for n in range(25):
        await bot.reminders.add(Place(ALICE, ALICE), "task", f"job {n}", "10m")
    async with running(bot, telegram):
        await firing_loop_runs(bot)
        clock.advance(timedelta(minutes=10))
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 25, timeout=60)
        await no_more_messages(telegram, ALICE, 25)
        (put_off,) = await (await bot.access.user_store()).pending_schedules(ALICE)
        midnight = datetime(2026, 11, 25, tzinfo=UTC)
        assert put_off.due_at == midnight and put_off.fired == 0
        clock.now = midnight  # a new UTC day: its run happens
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 26, timeout=20)
    texts = [r.plain_text for r in replies]
    notice = (
        f"Scheduled task #{put_off.id} was put off to Wed 25 Nov 2026 00:00 UTC: scheduled "
        "tasks may run 24 times a day."
    )
    assert texts.count(notice) == 1
    done = sorted(t for t in texts[:25] if t.startswith("done: "))
    assert len(done) == 24 and f"done: {put_off.text}" not in done
    assert texts[25] == f"done: {put_off.text}"
    task_turns = [r for r in claude.requests if "[Scheduled task" in r.last_user_text()]
    assert len(task_turns) == 25, "24 on the first day, one on the next"
    assert fired(bot, "task", "put_off") == 1
    await bot.aclose()


async def test_a_removed_users_schedules_pause_are_listed_paused_and_resume_once_readmitted(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, answer_groups="all")
    clock = bot.reminders.clock = FixedClock(T0)
    group = Place(ALICE, GROUP, chat_type="supergroup")
    await bot.reminders.add(group, "reminder", "https://phish.example", "1m", "every 1m")
    await bot.reminders.add(Place(ALICE, ALICE), "task", "sum up", "1m", "every 1h")
    async with running(bot, telegram):
        await firing_loop_runs(bot)
        bot.settings.allowed_users = frozenset({BOB})  # the operator removed Alice
        for _ in range(3):
            clock.advance(timedelta(minutes=1))
            look_now(bot)
            await asyncio.sleep(0.3)
        await no_more_messages(telegram, GROUP, 0)
        await no_more_messages(telegram, ALICE, 0)
        store = await bot.access.user_store()
        assert [s.paused for s in await store.pending_schedules(ALICE)] == [True, True]
        assert fired(bot, "reminder", "paused") == fired(bot, "task", "paused") == 1
        bot.settings.allowed_users = frozenset({ALICE, BOB})  # and took her back
        clock.advance(PAUSED_RECHECK)
        look_now(bot)
        (reminder,) = await telegram.wait_for_messages(GROUP, 1)
        (answer,) = await telegram.wait_for_messages(ALICE, 1)
        await no_more_messages(telegram, GROUP, 1)
        listed = await store.pending_schedules(ALICE)
    assert reminder.plain_text.startswith("https://phish.example\n\n(Late: ")
    assert answer.plain_text == "done: sum up"
    assert claude.requests and all("phish" not in str(r.messages) for r in claude.requests)
    assert len(claude.requests) == 1, "no task turn while she was out"
    assert [s.paused for s in listed] == [False, False], "firing again on their grids"
    await bot.aclose()


async def until_turns(bot: Bot, count: int) -> None:
    """Wait until ``count`` turns were answered (charged and recorded)."""
    registry = bot.metrics.registry
    async with asyncio.timeout(10):
        answered = {"outcome": "answered"}
        while registry.get_sample_value("botkit_turns_total", answered) != count:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_scheduled_turns_count_against_the_users_budget(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    budget = 1_000_000
    bot = reminder_bot(claude, tmp_path, daily_token_budget=budget)
    clock = bot.reminders.clock = FixedClock(T0)
    today = datetime.now(UTC).date()
    async with running(bot, telegram):
        store = await bot.access.user_store()
        telegram.send_text(ALICE, "TASK 10m|first")
        await telegram.wait_for_messages(ALICE, 1)
        await until_turns(bot, 1)
        await bot.access.ledger.flush()  # budget tokens are written in batches
        before = await store.usage_on(ALICE, today)
        clock.advance(timedelta(minutes=10))
        look_now(bot)
        await telegram.wait_for_messages(ALICE, 2)
        await until_turns(bot, 2)
        await bot.access.ledger.flush()
        assert await store.usage_on(ALICE, today) > before, "the scheduled turn was charged"

        await store.add_usage(ALICE, today, budget)  # today's allowance is gone
        await bot.reminders.add(Place(ALICE, ALICE), "task", "second", "10m")
        clock.advance(timedelta(minutes=10))
        look_now(bot)
        replies = await telegram.wait_for_messages(ALICE, 3)
    assert replies[2].plain_text == bot.options.budget_text
    assert not any("second" in r.last_user_text() for r in claude.requests), "no model call"


async def test_a_crash_between_delivery_and_record_redelivers_only_the_one_in_flight(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, schedule_lease=60)
    clock = bot.reminders.clock = FixedClock(T0)
    for text in ["delivered and recorded", "in flight at the crash", "not yet taken"]:
        await bot.reminders.add(Place(ALICE, ALICE), "reminder", text, "1m")
    clock.advance(timedelta(minutes=1))
    # The process before the crash: it claimed two, recorded the first, died sending the second.
    recorded_one, in_flight = await claim_due(bot, limit=2)
    store = await bot.access.user_store()
    assert await store.finish_schedule(
        recorded_one, next_due=None, fired_at=clock(), delivered=True
    )
    async with running(bot, telegram):
        (untaken,) = await telegram.wait_for_messages(ALICE, 1)
        await no_more_messages(telegram, ALICE, 1)  # the one in flight is still leased
        clock.advance(timedelta(seconds=61))
        look_now(bot)
        _, again = await telegram.wait_for_messages(ALICE, 2)
        await no_more_messages(telegram, ALICE, 2)
        assert await store.pending_schedules() == []
    assert (untaken.plain_text, again.plain_text) == ("not yet taken", in_flight.text)
    assert in_flight.text == "in flight at the crash"


async def test_unreadable_when_and_repeat_are_tool_errors_the_model_can_correct(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, max_scheduled=1)
    async with running(bot, telegram):
        for n, text in enumerate(
            ["REMIND someday|x", "REMIND 2020-01-01T09:00Z|x", "TASK 1h|x|fortnightly",
             "TASK 1h|x|61 * * * *", "REMIND 1h|ok", "REMIND 2h|one too many"],
            start=1,
        ):  # fmt: skip
            telegram.send_text(ALICE, text)
            await telegram.wait_for_messages(ALICE, n)
    results = [r.tool_results()[0] for r in claude.requests if r.tool_results()]
    errors = [str(r["content"]) for r in results if r.get("is_error")]
    assert len(results) == 6 and len(errors) == 5
    assert "ISO 8601" in errors[0] and "in the past" in errors[1]
    assert "cron" in errors[2] and "not a valid cron expression" in errors[3]
    assert "already has 1 reminders and tasks pending" in errors[4]


async def test_a_task_repeating_more_often_than_the_minimum_is_a_tool_error_naming_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    async with running(bot, telegram):
        for n, text in enumerate(
            ["TASK 1h|check the news|every 1m", "TASK 1h|check the news|*/5 * * * *",
             "TASK 1h|check the news|every 59m", "REMIND 1h|drink water|every 1m",
             "TASK 1h|check the news|hourly", "TASK 1h|check the news|0 9,17 * * 1-5"],
            start=1,
        ):  # fmt: skip
            telegram.send_text(ALICE, text)
            await telegram.wait_for_messages(ALICE, n)
        pending = await (await bot.access.user_store()).pending_schedules(ALICE)
    results = [r.tool_results()[0] for r in claude.requests if r.tool_results()]
    errors = [str(r["content"]) for r in results if r.get("is_error")]
    assert len(results) == 6 and len(errors) == 3
    for error in errors:
        assert "too often for a scheduled task: a task may repeat at most once every 1h" in error
        assert "use remind for a plain reminder" in error
    assert [(s.kind, s.repeat) for s in pending] == [
        ("reminder", "every 1m"),
        ("task", "every 1h"),
        ("task", "0 9,17 * * 1-5"),
    ]
    await bot.aclose()  # serving closed its store; the one opened here too


@pytest.mark.parametrize(
    ("repeat", "due"),
    [
        ("every 520000w", T0),  # stored before repeats were bounded: its next time overflows
        ("daily", datetime(9999, 12, 31, 9, 0, tzinfo=UTC)),  # the calendar's last day
    ],
)
async def test_a_schedule_whose_next_time_is_past_the_calendar_ends_after_firing_once(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    repeat: str,
    due: datetime,
) -> None:
    bot = reminder_bot(claude, tmp_path, schedule_lease=60)
    clock = bot.reminders.clock = FixedClock(due)
    store = await bot.access.user_store()
    new = NewSchedule(ALICE, ALICE, "reminder", "last one", due, "UTC", repeat=repeat)
    made = await store.add_schedule(new, max_pending=5)
    assert made is not None
    async with running(bot, telegram):
        (delivered,) = await telegram.wait_for_messages(ALICE, 1)
        clock.advance(timedelta(seconds=61))  # past the lease: a claim left behind re-fires
        look_now(bot)
        await no_more_messages(telegram, ALICE, 1)
        store = await bot.access.user_store()
        assert await store.pending_schedules() == []
    assert delivered.plain_text == "last one"
    assert fired(bot, "reminder", "delivered") == 1
    await bot.aclose()


async def test_the_user_can_set_a_time_zone_and_the_model_reads_their_local_time(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "/timezone Mars/Olympus")
        (refused,) = await telegram.wait_for_messages(ALICE, 1)
        telegram.send_text(ALICE, "/timezone Asia/Tokyo")
        _, accepted = await telegram.wait_for_messages(ALICE, 2)
        telegram.send_text(ALICE, "hello")
        await telegram.wait_for_messages(ALICE, 3)
    assert "unknown time zone 'Mars/Olympus'" in refused.plain_text
    assert (
        accepted.plain_text == "Time zone set. Your time: Tue 24 Nov 2026 17:00 JST (Asia/Tokyo)."
    )
    request = claude.requests[-1]
    note, said = request.messages[-1]["content"]
    assert note["text"] == "[Tue 24 Nov 2026 17:00 JST (Asia/Tokyo)]"
    assert said["text"] == "hello"
    assert "The user's time zone is Asia/Tokyo" in request.system_text
    assert "17:00" not in request.system_text, "the minute stays out of the cached prompt"


async def test_a_bot_can_leave_the_scheduling_tools_out(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}), scheduling=False)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "hello")
        await telegram.wait_for_messages(ALICE, 1)
    assert "remind" not in claude.requests[0].tool_names
    assert claude.requests[0].last_user_text() == "hello"
    assert "timezone" not in bot.commands


def buttons_of(message_params: dict[str, Any]) -> list[str]:
    markup = message_params.get("reply_markup") or {}
    if isinstance(markup, str):
        markup = json.loads(markup)
    return [button["text"] for row in markup.get("inline_keyboard", []) for button in row]


async def test_scheduled_lists_what_is_pending_and_its_cancel_button_cancels(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, timezone="Europe/Berlin")
    bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        for n, text in enumerate(["REMIND 1h|call mum", "TASK 2h|sum up the day|daily"], 1):
            telegram.send_text(ALICE, text)
            await telegram.wait_for_messages(ALICE, n)
        telegram.send_text(ALICE, "/scheduled")
        listing = (await telegram.wait_for_messages(ALICE, 3))[2]
        assert listing.plain_text == (
            "Scheduled:\n#1 reminder, Tue 24 Nov 2026 10:00 CET: call mum\n"
            "#2 task, Tue 24 Nov 2026 11:00 CET, daily: sum up the day"
        )
        assert buttons_of(listing.params) == ["Cancel #1", "Cancel #2"]

        telegram.press_button(STRANGER, listing, "Cancel #1")  # e.g. forwarded, or blocked
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        telegram.press_button(BOB, listing, "Cancel #1")
        await telegram.wait_for_requests("answerCallbackQuery", 2)
        telegram.press_button(ALICE, listing, "Cancel #1")
        await telegram.wait_for_requests("answerCallbackQuery", 3)
        (edited,) = telegram.edited_messages(ALICE)
    answers = [r.params.get("text") for r in telegram.requests_for("answerCallbackQuery")]
    assert answers == [
        bot.options.rejection_text,
        "Only the one who scheduled it can cancel it.",
        "Cancelled #1.",
    ]
    assert edited.message_id == listing.message_id
    assert edited.plain_text == (
        "Scheduled:\n#2 task, Tue 24 Nov 2026 11:00 CET, daily: sum up the day"
    )
    assert buttons_of(edited.params) == ["Cancel #2"]
    assert [s.id for s in await (await bot.access.user_store()).pending_schedules(ALICE)] == [2]
    await bot.aclose()  # serving closed its store; the one opened here too
    assert len(claude.requests) == 4, "listing and cancelling called no model"


async def test_in_a_group_only_what_was_set_there_is_listed_never_a_private_reminder(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path, timezone="Europe/Berlin", answer_groups="all")
    bot.reminders.clock = FixedClock(T0)
    in_group = {"chat_id": GROUP, "chat_type": "supergroup"}
    async with running(bot, telegram):
        telegram.send_text(ALICE, "REMIND 1h|ask the doctor about the test results")
        await telegram.wait_for_messages(ALICE, 1)
        telegram.send_text(ALICE, "REMIND 2h|stand-up", **in_group)
        await telegram.wait_for_messages(GROUP, 1)
        telegram.send_text(ALICE, "/scheduled", **in_group)
        listing = (await telegram.wait_for_messages(GROUP, 2))[1]
        telegram.send_text(ALICE, "LIST", **in_group)
        listed = (await telegram.wait_for_messages(GROUP, 3))[2]
        telegram.press_button(ALICE, listing, "Cancel #2")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        telegram.send_text(ALICE, "/scheduled")
        private = (await telegram.wait_for_messages(ALICE, 2))[1]
    assert listing.plain_text == "Scheduled:\n#2 reminder, Tue 24 Nov 2026 11:00 CET: stand-up"
    assert buttons_of(listing.params) == ["Cancel #2"]
    assert listed.plain_text == "tool said: #2 reminder, Tue 24 Nov 2026 11:00 CET: stand-up"
    (edited,) = telegram.edited_messages(GROUP)
    assert edited.plain_text == "Nothing is scheduled.", "the private one stays out after a press"
    group_calls = [str(r.messages) for r in claude.requests if "wrote:]" in str(r.messages)]
    assert len(group_calls) == 4 and "doctor" not in str(group_calls)
    assert private.plain_text == (
        "Scheduled:\n#1 reminder, Tue 24 Nov 2026 10:00 CET: ask the doctor about the test results"
    )


async def test_a_groups_admin_sees_and_cancels_the_groups_schedules_paused_ones_too(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    carol = 1003
    bot = make_bot(
        claude,
        tmp_path,
        allowed_users=frozenset({ALICE, BOB, carol}),
        answer_groups="all",
        timezone="Europe/Berlin",
    )
    clock = bot.reminders.clock = FixedClock(T0)
    in_group = {"chat_id": GROUP, "chat_type": "supergroup"}
    await bot.reminders.add(Place(ALICE, GROUP, chat_type="supergroup"), "reminder", "phish", "1m")
    await bot.reminders.add(Place(ALICE, ALICE), "reminder", "private one", "2h")
    await bot.reminders.add(Place(carol, GROUP, chat_type="supergroup"), "reminder", "mine", "3h")
    telegram.make_chat_admin(GROUP, BOB)
    async with running(bot, telegram):
        await firing_loop_runs(bot)
        bot.settings.allowed_users = frozenset({BOB, carol})  # Alice was removed
        clock.advance(timedelta(minutes=1))
        look_now(bot)
        store = await bot.access.user_store()
        async with asyncio.timeout(10):
            while not (await store.pending_schedules(ALICE))[0].paused:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        telegram.send_text(carol, "/scheduled", **in_group)
        (own,) = await telegram.wait_for_messages(GROUP, 1)
        telegram.send_text(BOB, "/scheduled", **in_group)
        listing = (await telegram.wait_for_messages(GROUP, 2))[1]
        telegram.press_button(carol, listing, "Cancel #1")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        telegram.press_button(BOB, listing, "Cancel #1")
        await telegram.wait_for_requests("answerCallbackQuery", 2)
        (edited,) = telegram.edited_messages(GROUP)
        left = await store.pending_schedules()
    assert own.plain_text == "Scheduled:\n#3 reminder, Tue 24 Nov 2026 12:00 CET: mine"
    assert listing.plain_text == (
        "Scheduled:\n#1 reminder, Tue 24 Nov 2026 09:01 CET: phish (paused) (set by user 1001)\n"
        "#3 reminder, Tue 24 Nov 2026 12:00 CET: mine (set by user 1003)"
    )
    assert buttons_of(listing.params) == ["Cancel #1", "Cancel #3"]
    answers = [r.params.get("text") for r in telegram.requests_for("answerCallbackQuery")]
    assert answers == ["Only the one who scheduled it can cancel it.", "Cancelled #1."]
    assert edited.plain_text == (
        "Scheduled:\n#3 reminder, Tue 24 Nov 2026 12:00 CET: mine (set by user 1003)"
    )
    assert [s.id for s in left] == [2, 3], "the private one is no group's business"
    assert len(claude.requests) == 0
    await bot.aclose()


# ---- a real process, killed and restarted ---------------------------------------------


class BotProcess:
    """``python -m botkit`` against the fakes, in ``home``."""

    def __init__(self, telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path):
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))},
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE": telegram.base_url,
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": claude.base_url,
            "BOTKIT_SESSIONS_DIR": str(home / "sessions"),
            "BOTKIT_ALLOWED_USERS": str(ALICE),
            "BOTKIT_POLL_TIMEOUT": "5",
            "BOTKIT_STREAM_REPLIES": "false",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "botkit"],
            cwd=self.home,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def end(self, sig: signal.Signals) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return await asyncio.to_thread(self.process.wait, 30)


async def journaled_done(inbox: Path, update_id: int) -> None:
    """Wait until the inbox marks the turn of ``update_id`` finished (else a restart would
    answer it again, as botkit does for turns cut off by a crash)."""
    async with asyncio.timeout(10):
        while True:
            if orjson.dumps({"done": update_id}) in await asyncio.to_thread(inbox.read_bytes):
                return
            await asyncio.sleep(0.02)


async def test_a_reminder_set_before_a_sigkill_arrives_once_after_the_restart(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = BotProcess(telegram, claude, tmp_path)
    bot.start()
    try:
        update_id = telegram.send_text(ALICE, "REMIND 5s|take the cake out")
        (confirmation,) = await telegram.wait_for_messages(ALICE, 1, timeout=30)
        assert confirmation.plain_text.startswith("tool said: Reminder #1 set")
        await journaled_done(tmp_path / "sessions" / "inbox.jsonl", update_id)
        await bot.end(signal.SIGKILL)
        assert telegram.sent_messages(ALICE) == [confirmation], "killed before it was due"
        bot.start()
        _, reminder = await telegram.wait_for_messages(ALICE, 2, timeout=30)
        assert reminder.plain_text == "take the cake out"
        await no_more_messages(telegram, ALICE, 2)
        assert await bot.end(signal.SIGTERM) == 0
    finally:
        if bot.process is not None and bot.process.poll() is None:
            await bot.end(signal.SIGKILL)


# ---- the operator's view -----------------------------------------------------------------


async def test_the_operator_lists_pending_schedules(
    claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = reminder_bot(claude, tmp_path)
    reminders = bot.reminders
    reminders.clock = FixedClock(T0)
    await reminders.add(Place(ALICE, ALICE), "reminder", "call mum", "1h")
    await reminders.add(Place(BOB, GROUP, TOPIC, "supergroup"), "task", "sum up", "2h", "daily")
    await (await bot.access.user_store()).block_user(BOB)  # his schedules wait: listed as paused
    await bot.aclose()
    env = {**os.environ, "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions")}
    run = [sys.executable, "-m", "botkit", "scheduled"]
    everyone = await asyncio.to_thread(
        subprocess.run, [*run, "--json"], env=env, capture_output=True, check=True
    )
    rows = [json.loads(line) for line in everyone.stdout.splitlines()]
    assert [(r["id"], r["user_id"], r["kind"], r["text"]) for r in rows] == [
        (1, ALICE, "reminder", "call mum"),
        (2, BOB, "task", "sum up"),
    ]
    assert rows[1]["chat_id"] == GROUP and rows[1]["thread_id"] == TOPIC
    assert rows[1]["repeat"] == "daily" and rows[1]["due_at"] == "2026-11-24T10:00:00+00:00"
    assert [r["paused"] for r in rows] == [False, True]
    bob = await asyncio.to_thread(
        subprocess.run, [*run, "--user", str(BOB)], env=env, capture_output=True, check=True
    )
    assert "(paused: its owner may not use the bot now)" in bob.stdout.decode()
    alice = await asyncio.to_thread(
        subprocess.run, [*run, "--user", str(ALICE)], env=env, capture_output=True, check=True
    )
    lines = alice.stdout.decode().splitlines()
    assert len(lines) == 1 and "#1 reminder" in lines[0] and "call mum" in lines[0]


async def operator(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m botkit scheduled ARGS`` with ``env``; its exit status and output."""
    run = [sys.executable, "-m", "botkit", "scheduled", *args]
    return await asyncio.to_thread(subprocess.run, run, env=env, capture_output=True, text=True)


async def check_the_operator_cancels_any_schedule(bot: Bot, env: dict[str, str]) -> None:
    """Two users' schedules: the operator cancels one of each by id, an unknown one fails."""
    bot.reminders.clock = FixedClock(T0)
    await bot.reminders.add(Place(ALICE, ALICE), "reminder", "call mum", "1h")
    await bot.reminders.add(Place(BOB, GROUP, None, "supergroup"), "reminder", "phish", "1m")
    await bot.aclose()
    cancelled = await operator(env, "cancel", "2")
    assert cancelled.returncode == 0, cancelled.stderr
    (line,) = cancelled.stdout.splitlines()
    assert line.startswith(f"Cancelled #2 reminder for user {BOB} in chat {GROUP}: ")
    assert line.endswith(": phish")
    again = await operator(env, "cancel", "2")
    unknown = await operator(env, "cancel", "99")
    for refused, number in [(again, 2), (unknown, 99)]:
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.splitlines() == [f"botkit: no pending reminder or task #{number}"]
    left = await operator(env, "--json")
    assert [json.loads(row)["id"] for row in left.stdout.splitlines()] == [1]


async def test_the_operator_cancels_any_schedule_by_its_id(
    claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = {**os.environ, "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions")}
    await check_the_operator_cancels_any_schedule(reminder_bot(claude, tmp_path), env)
