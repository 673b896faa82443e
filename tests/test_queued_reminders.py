"""Reminders and scheduled tasks in the scale-out runtimes: a receiver and several workers on
a real PostgreSQL, the real aiogram and anthropic clients against the fakes (#13)."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_reminders import (
    T0,
    FixedClock,
    buttons_of,
    check_the_operator_cancels_any_schedule,
    firing_loop_runs,
    look_now,
    scripted,
)
from test_scaleout import fetchval, killed_at_end, queued, queued_bot, until, worker_process

from botkit.reminders.limits import PAUSED_RECHECK
from botkit.reminders.service import Place
from botkit.runtime.scheduled import QueuedSchedules
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer
from botkit.testing.anthropic import FakeRequest

pytestmark = pytest.mark.usefixtures("db")


@pytest.fixture
def claude_scripted(claude: FakeAnthropicServer) -> FakeAnthropicServer:
    claude.responder = scripted
    return claude


async def test_a_reminder_fires_once_whatever_the_number_of_workers(
    claude_scripted: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    users = list(range(301, 311))
    receiver = queued_bot(claude_scripted, telegram, tmp_path, db)
    workers = [queued_bot(claude_scripted, telegram, tmp_path / f"w{n}", db) for n in range(2)]
    async with (
        queued(receiver, work=False),
        queued(workers[0], receive=False),
        queued(workers[1], receive=False),
    ):
        for user in users:
            telegram.send_text(user, f"REMIND 2s|reminder of {user}")
        for user in users:
            _, reminder = await telegram.wait_for_messages(user, 2, timeout=30)
            assert reminder.plain_text == f"reminder of {user}"
        await asyncio.sleep(1.5)  # a second delivery would come now
    for user in users:
        assert len(telegram.sent_messages(user)) == 2, "the confirmation and the reminder, once"
    assert len(claude_scripted.requests) == 2 * len(users), "no model call at delivery"
    done = "SELECT count(*) FROM botkit_schedules WHERE status = 'done' AND fired = 1"
    assert await fetchval(db, done) == len(users)


async def test_a_scheduled_task_is_a_turn_on_a_worker_in_order_with_the_users_messages(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    async def slow_when_asked(request: FakeRequest) -> FakeReply:
        if request.last_user_text().endswith("SLOW") and not request.tool_results():
            await asyncio.sleep(3)  # the task falls due meanwhile
            return FakeReply.text("slow answer")
        return scripted(request)

    claude.responder = slow_when_asked
    receiver = queued_bot(claude, telegram, tmp_path, db)
    workers = [queued_bot(claude, telegram, tmp_path / f"w{n}", db) for n in range(2)]
    async with (
        queued(receiver, work=False),
        queued(workers[0], receive=False),
        queued(workers[1], receive=False),
    ):
        telegram.send_text(7, "TASK 1s|Summarise my open tasks")
        await telegram.wait_for_messages(7, 1, timeout=20)
        telegram.send_text(7, "SLOW")
        replies = await telegram.wait_for_messages(7, 3, timeout=30)
        await asyncio.sleep(1.0)
    assert [r.plain_text for r in replies[1:]] == ["slow answer", "done: Summarise my open tasks"]
    assert len(telegram.sent_messages(7)) == 3
    task_turn = claude.requests[-1]
    assert task_turn.last_user_text().startswith("[Scheduled task #1, set earlier by the user")
    assert "schedule_task" not in task_turn.tool_names and "remind" not in task_turn.tool_names
    history = [m for m in task_turn.body["messages"] if m["role"] == "assistant"]
    assert any("slow answer" in str(m["content"]) for m in history), "it waited its turn"
    assert await fetchval(db, "SELECT status FROM botkit_schedules WHERE id = 1") == "done"


async def test_a_task_job_for_an_occurrence_already_recorded_does_nothing(
    claude_scripted: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude_scripted, telegram, tmp_path, db)
    async with queued(bot) as queue:
        telegram.send_text(7, "TASK 1s|once only|every 1h")
        await telegram.wait_for_messages(7, 2, timeout=20)
        fired = "SELECT fired FROM botkit_schedules WHERE id = 1 AND status = 'pending'"
        await until_fetched(db, fired, 1)
        # A late copy of the first occurrence's job (its claim had been taken again).
        schedules = QueuedSchedules(bot, bot.messenger, queue)  # type: ignore[arg-type]
        await schedules.run(0, 1, 0)
        await asyncio.sleep(0.5)
    assert len(telegram.sent_messages(7)) == 2
    assert await fetchval(db, fired) == 1


async def until_fetched(db: str, query: str, value: object) -> None:
    """Wait until ``query`` answers ``value`` (polled), or fail."""
    async with asyncio.timeout(20):
        while await fetchval(db, query) != value:  # noqa: ASYNC110 (polling the database)
            await asyncio.sleep(0.1)


async def test_a_cancel_button_pressed_under_scheduled_cancels_through_the_queue(
    claude_scripted: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_bot(claude_scripted, telegram, tmp_path, db)
    worker = queued_bot(claude_scripted, telegram, tmp_path / "w", db)
    async with queued(receiver, work=False), queued(worker, receive=False):
        telegram.send_text(7, "REMIND 1h|call mum")
        await telegram.wait_for_messages(7, 1, timeout=20)
        telegram.send_text(7, "/scheduled")
        listing = (await telegram.wait_for_messages(7, 2, timeout=20))[1]
        assert buttons_of(listing.params) == ["Cancel #1"]
        telegram.press_button(7, listing, "Cancel #1")
        await telegram.wait_for_requests("answerCallbackQuery", 1, timeout=20)
        (edited,) = telegram.edited_messages(7)
    answers = [r.params.get("text") for r in telegram.requests_for("answerCallbackQuery")]
    assert answers == ["Cancelled #1."]
    assert edited.message_id == listing.message_id
    assert await fetchval(db, "SELECT status FROM botkit_schedules WHERE id = 1") == "cancelled"


async def test_a_task_whose_worker_is_killed_mid_turn_is_answered_once_by_another(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    release = asyncio.Event()

    async def stuck_until_released(request: FakeRequest) -> FakeReply:
        if "[Scheduled task" in request.last_user_text() and not release.is_set():
            await release.wait()  # the doomed worker's turn hangs until it is dead
        return scripted(request)

    claude.responder = stuck_until_released
    setter = queued_bot(claude, telegram, tmp_path, db)
    await setter.reminders.add(Place(7, 7), "task", "sum up the day", "2s")
    await setter.aclose()
    doomed = worker_process(telegram, claude, tmp_path, db)
    async with killed_at_end(doomed):
        await until(lambda: len(claude.requests) == 1, timeout=60)
        doomed.send_signal(signal.SIGKILL)
        await asyncio.to_thread(doomed.wait, 10)
        release.set()
        survivor = queued_bot(claude, telegram, tmp_path / "survivor", db)
        async with queued(survivor, receive=False):
            (answer,) = await telegram.wait_for_messages(7, 1, timeout=30)
            await asyncio.sleep(1.0)
    assert answer.plain_text == "done: sum up the day"
    assert len(telegram.sent_messages(7)) == 1
    assert await fetchval(db, "SELECT status FROM botkit_schedules WHERE id = 1") == "done"


async def test_a_removed_users_task_and_group_reminder_wait_on_the_queue_until_readmitted(
    claude_scripted: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    group = -100777
    bot = queued_bot(
        claude_scripted, telegram, tmp_path, db, access="allowlist", allowed_users=frozenset({7})
    )
    clock = bot.reminders.clock = FixedClock(T0)
    in_group = Place(7, group, chat_type="supergroup")
    await bot.reminders.add(in_group, "reminder", "https://phish.example", "1m", "every 1m")
    await bot.reminders.add(Place(7, 7), "task", "sum up", "1m", "every 1h")
    paused = "SELECT count(*) FROM botkit_schedules WHERE paused_until IS NOT NULL"
    async with queued(bot):
        await firing_loop_runs(bot)
        bot.settings.allowed_users = frozenset()  # the operator removed user 7
        clock.advance(timedelta(minutes=2))
        look_now(bot)
        await until_fetched(db, paused, 2)  # the task through its job, the reminder at once
        await asyncio.sleep(1.0)
        assert telegram.sent_messages(group) == telegram.sent_messages(7) == []
        bot.settings.allowed_users = frozenset({7})  # and took them back
        clock.advance(PAUSED_RECHECK)
        look_now(bot)
        (reminder,) = await telegram.wait_for_messages(group, 1, timeout=20)
        (answer,) = await telegram.wait_for_messages(7, 1, timeout=20)
        await until_fetched(db, paused, 0)
    assert reminder.plain_text.startswith("https://phish.example")
    assert answer.plain_text == "done: sum up"
    assert len(claude_scripted.requests) == 1, "no task turn while they were out"


async def test_the_operator_cancels_any_schedule_on_postgresql(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    env = {**os.environ, "BOTKIT_DATABASE_URL": db, "BOTKIT_SESSIONS_DIR": str(tmp_path)}
    bot = queued_bot(claude, telegram, tmp_path, db)
    await check_the_operator_cancels_any_schedule(bot, env)


async def test_a_task_past_the_users_runs_for_the_day_is_put_off_on_the_queue(
    claude_scripted: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    bot = queued_bot(claude_scripted, telegram, tmp_path, db, max_task_runs=2)
    clock = bot.reminders.clock = FixedClock(T0)
    for n in range(3):
        await bot.reminders.add(Place(7, 7), "task", f"job {n}", "1m")
    async with queued(bot):
        await firing_loop_runs(bot)
        clock.advance(timedelta(minutes=1))
        look_now(bot)
        replies = await telegram.wait_for_messages(7, 3, timeout=30)
        await asyncio.sleep(1.0)
    answers = [r.plain_text for r in replies if r.plain_text.startswith("done: job ")]
    (notice,) = [r.plain_text for r in replies if r.plain_text not in answers]
    assert len(telegram.sent_messages(7)) == 3 and len(answers) == 2
    assert notice.startswith("Scheduled task #") and "may run 2 times a day" in notice
    assert len(claude_scripted.requests) == 2
    due = "SELECT due_at FROM botkit_schedules WHERE status = 'pending'"
    assert await fetchval(db, due) == datetime(2026, 11, 25, tzinfo=UTC)
    runs = "SELECT count(*) FROM botkit_task_runs WHERE user_id = 7"
    assert await fetchval(db, runs) == 2
