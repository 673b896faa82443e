"""Fair turn slots: a busy group holds one slot, not all of them, and scheduled task turns take
the same slots as users' messages (#26)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_scaleout import queued, queued_bot

from botkit import Bot
from botkit.messengers.base import Incoming
from botkit.runtime.scheduler import TurnDispatcher
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    make_bot,
    running,
)

MEMBERS = list(range(1201, 1209))
ALONE = 1300
GROUP = -100_1200
BOT = "botkit_test_bot"
LATENCY = 1.0
"""Seconds the fake Messages API waits before each answer."""
T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


class FixedClock:
    """A wall clock that moves only when told to."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def slotted_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    values: dict[str, Any] = {
        "allowed_users": frozenset({*MEMBERS, ALONE}),
        "max_concurrent_turns": 4,
        **settings,
    }
    return make_bot(claude, tmp_path, **values)


async def timed_private_reply(telegram: FakeTelegramServer, text: str) -> float:
    """Seconds from sending ``text`` in private to the bot's reply."""
    before = len(telegram.sent_messages(ALONE))
    started = time.monotonic()
    telegram.send_text(ALONE, text)
    await telegram.wait_for_messages(ALONE, before + 1, timeout=30)
    return time.monotonic() - started


async def taken(telegram: FakeTelegramServer, update_id: int) -> None:
    """Wait until the bot's poller confirmed ``update_id`` (it was handed to the runtime)."""
    while telegram.confirmed_offset <= update_id:
        await telegram.wait_for_requests("getUpdates", len(telegram.requests_for("getUpdates")) + 1)


async def test_a_busy_group_does_not_delay_a_private_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.latency = LATENCY
    bot = slotted_bot(claude, tmp_path)
    async with running(bot, telegram, grace_period=60):
        await timed_private_reply(telegram, "warming up")  # connections, session file
        idle = await timed_private_reply(telegram, "alone, first")
        sent = [
            telegram.send_text(
                member, f"@{BOT} question {n}", chat_id=GROUP, chat_type="supergroup"
            )
            for n, member in enumerate(MEMBERS)
        ]
        await taken(telegram, sent[-1])
        busy = await timed_private_reply(telegram, "alone, second")
        answers = await telegram.wait_for_messages(GROUP, len(MEMBERS), timeout=60)
    print(f"private reply: idle {idle:.2f} s, after the group wrote {busy:.2f} s")
    assert busy < 1.5 * idle, f"idle {idle:.2f} s, busy {busy:.2f} s"
    assert len(answers) == len(MEMBERS), "every member was answered"
    group_turns = [r.last_user_text() for r in claude.requests if "question" in r.last_user_text()]
    asked = [int(text.rsplit(" ", 1)[1]) for text in group_turns]
    assert asked == list(range(len(MEMBERS))), "the group's turns in the order they were written"
    assert all(f"(id {member})" in text for member, text in zip(MEMBERS, group_turns, strict=True))


async def test_a_busy_group_does_not_delay_a_private_reply_in_the_queued_runtime(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, db: str
) -> None:
    # procrastinate fetches no job whose lock (its conversation's) a running job holds, so the
    # group's waiting turns take none of the worker's slots: this holds without a change.
    claude.latency = LATENCY
    bot = queued_bot(claude, telegram, tmp_path, db, max_concurrent_turns=4)
    async with queued(bot, concurrency=4):
        await timed_private_reply(telegram, "warming up")  # connections, session file
        idle = await timed_private_reply(telegram, "alone, first")
        sent = [
            telegram.send_text(
                member, f"@{BOT} question {n}", chat_id=GROUP, chat_type="supergroup"
            )
            for n, member in enumerate(MEMBERS)
        ]
        await taken(telegram, sent[-1])
        busy = await timed_private_reply(telegram, "alone, second")
        answers = await telegram.wait_for_messages(GROUP, len(MEMBERS), timeout=60)
    print(f"queued: private reply idle {idle:.2f} s, after the group wrote {busy:.2f} s")
    assert busy < 1.5 * idle, f"idle {idle:.2f} s, busy {busy:.2f} s"
    assert len(answers) == len(MEMBERS)


def gauge(bot: Bot, name: str) -> float:
    value = bot.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


async def until(predicate: Any, timeout: float = 20.0) -> None:  # noqa: ASYNC109
    """Wait until ``predicate()`` is true (polled), or fail saying so."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_a_scheduled_task_turn_waits_for_a_slot_like_a_message(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    slow_user = MEMBERS[0]
    release, slow_started = asyncio.Event(), asyncio.Event()
    slow_answers_before_task: list[int] = []

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if request.tool_results():
            return FakeReply.text("task set")
        if "[Scheduled task" in text:
            slow_answers_before_task.append(len(telegram.sent_messages(slow_user)))
            return FakeReply.text("task done")
        if text.endswith("TASK"):
            return FakeReply.tool_use("schedule_task", {"when": "10m", "instruction": "report"})
        slow_started.set()
        await release.wait()
        return FakeReply.text("slow done")

    claude.responder = model
    bot = slotted_bot(claude, tmp_path, max_concurrent_turns=1)
    clock = bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALONE, "TASK")
        await telegram.wait_for_messages(ALONE, 1)
        telegram.send_text(slow_user, "slow")
        await asyncio.wait_for(slow_started.wait(), 10)
        clock.advance(timedelta(minutes=10))
        assert bot.reminders.wake is not None, "the firing loop runs"
        bot.reminders.wake()
        # The task's turn either waits for the one slot, or (the old way) asks the model now.
        await until(lambda: slow_answers_before_task or gauge(bot, "botkit_turns_waiting") == 1)
        running_then = gauge(bot, "botkit_turns_running")
        release.set()
        _, answer = await telegram.wait_for_messages(ALONE, 2)
    assert answer.plain_text == "task done"
    assert slow_answers_before_task == [1], "the task's turn started once the slow one ended"
    assert running_then == 1, "one slot, one turn running"


async def test_in_a_shared_group_only_one_members_burst_is_gathered(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    alice, bob = MEMBERS[0], MEMBERS[1]
    release, started = asyncio.Event(), asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text.endswith("slow"):
            started.set()
            await release.wait()
        return FakeReply.text("ok")

    claude.responder = model
    bot = slotted_bot(claude, tmp_path, answer_groups="all")
    async with running(bot, telegram):
        telegram.send_text(alice, "slow", chat_id=GROUP, chat_type="supergroup")
        await asyncio.wait_for(started.wait(), 10)
        sent = [
            telegram.send_text(sender, text, chat_id=GROUP, chat_type="supergroup")
            for sender, text in ((bob, "b1"), (alice, "a1"), (alice, "a2"), (bob, "b2"))
        ]
        await taken(telegram, sent[-1])
        release.set()
        await telegram.wait_for_messages(GROUP, 4)
    turns = [r.last_user_text() for r in claude.requests][1:]
    assert len(turns) == 3, turns
    assert turns == [
        f"[User (id {bob}) wrote:]\nb1",
        f"[User (id {alice}) wrote:]\na1\n\na2",  # Alice's two, sent during her turn, as one
        f"[User (id {bob}) wrote:]\nb2",
    ]


async def test_a_scheduled_task_is_not_gathered_into_a_users_burst(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    release, slow_started = asyncio.Event(), asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if request.tool_results():
            return FakeReply.text("task set")
        if text.endswith("TASK"):
            return FakeReply.tool_use("schedule_task", {"when": "10m", "instruction": "report"})
        if text.endswith("slow"):
            slow_started.set()
            await release.wait()
        return FakeReply.text("ok")

    claude.responder = model
    bot = slotted_bot(claude, tmp_path)
    clock = bot.reminders.clock = FixedClock(T0)
    async with running(bot, telegram):
        telegram.send_text(ALONE, "TASK")
        await telegram.wait_for_messages(ALONE, 1)
        telegram.send_text(ALONE, "slow")
        await asyncio.wait_for(slow_started.wait(), 10)
        await taken(telegram, telegram.send_text(ALONE, "quick one"))
        clock.advance(timedelta(minutes=10))
        assert bot.reminders.wake is not None, "the firing loop runs"
        bot.reminders.wake()
        await until(lambda: gauge(bot, "botkit_turns_waiting") == 2)  # "quick one", the task
        release.set()
        await telegram.wait_for_messages(ALONE, 4)
    *_, quick, task = [r.last_user_text() for r in claude.requests]
    assert quick.endswith("quick one") and "[Scheduled task" not in quick
    assert task.startswith("[Scheduled task #1") and "quick one" not in task


async def test_cancelling_the_turns_ends_the_wait_of_a_run_turn() -> None:
    started = asyncio.Event()

    async def endless(message: Incoming) -> None:
        started.set()
        await asyncio.Event().wait()

    dispatcher = TurnDispatcher(endless)
    task_turn = Incoming(update_id=-1, user_id=1, chat_id=1, text="task", date=T0)
    waiting = asyncio.create_task(dispatcher.run(task_turn))
    await asyncio.wait_for(started.wait(), 10)
    await dispatcher.cancel_all()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 10)
    assert not await dispatcher.drain(0.1), "the cancelled turn never finished"
