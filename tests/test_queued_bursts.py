"""Bursts in the queued runtime (#34): the plain messages a user sends while a turn of their
conversation runs are answered in one turn, as ``python -m botkit run`` gathers them, and no
more eagerly; a worker killed mid-turn loses none of them. Real receiver and workers on
PostgreSQL (``receive``/``work``), the real aiogram and anthropic clients against the fakes."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from test_fair_slots import GROUP, taken
from test_poison import GIVEN_UP, Supervised, environment, supervised, texts
from test_scaleout import (
    STALLED,
    fetchval,
    killed_at_end,
    queued,
    queued_bot,
    until,
    worker_process,
)

from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer
from botkit.testing.anthropic import FakeRequest

USER = 1401
ALICE, BOB = 1402, 1403


def slow_first(release: asyncio.Event) -> Callable[[FakeRequest], Awaitable[FakeReply]]:
    """A responder whose turns on a message ending in "slow" wait for ``release``."""

    async def model(request: FakeRequest) -> FakeReply:
        if request.last_user_text().endswith("slow"):
            await release.wait()
        return FakeReply.text(f"echo: {request.last_user_text()}")

    return model


@asynccontextmanager
async def slow_turn_running(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> AsyncIterator[asyncio.Event]:
    """A queued bot (receiver and worker) whose turn on USER's "slow" is running, held until
    the yielded event is set."""
    release = asyncio.Event()
    claude.responder = slow_first(release)
    async with queued(queued_bot(claude, telegram, tmp_path, db)):
        telegram.send_text(USER, "slow")
        await until(lambda: len(claude.requests) == 1)
        yield release


def asked(claude: FakeAnthropicServer) -> list[str]:
    """What each LLM call answered: the last user text of each request, in order."""
    return [request.last_user_text() for request in claude.requests]


async def test_messages_sent_during_a_queued_turn_are_answered_in_one_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    async with slow_turn_running(claude, telegram, tmp_path, db) as release:
        sent = [telegram.send_text(USER, f"more {n}") for n in (1, 2, 3)]
        await taken(telegram, sent[-1])  # queued while the first turn runs
        release.set()
        replies = await telegram.wait_for_messages(USER, 2, timeout=20)
        await asyncio.sleep(1.0)  # the gathered messages' own jobs run, and answer nothing
    assert asked(claude) == ["slow", "more 1\n\nmore 2\n\nmore 3"], "one LLM call for the three"
    assert [m.text for m in telegram.sent_messages(USER)] == [m.text for m in replies]
    assert [m.text for m in replies] == ["echo: slow", "echo: more 1\n\nmore 2\n\nmore 3"]


async def test_messages_queued_while_no_turn_runs_are_answered_one_by_one(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """As with ``run``: messages that arrived together before any of them started each get
    their turn (only those sent during a running turn are gathered)."""
    receiver = queued_bot(claude, telegram, tmp_path, db)
    worker = queued_bot(claude, telegram, tmp_path / "w", db)
    async with queued(receiver, work=False):
        sent = [telegram.send_text(USER, f"early {n}") for n in (1, 2, 3)]
        await taken(telegram, sent[-1])  # all queued, no worker yet: no turn ran meanwhile
        async with queued(worker, receive=False):
            await telegram.wait_for_messages(USER, 3, timeout=20)
    assert asked(claude) == ["early 1", "early 2", "early 3"]


async def test_a_command_ends_a_queued_burst(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    async with slow_turn_running(claude, telegram, tmp_path, db) as release:
        sent = [telegram.send_text(USER, text) for text in ("a1", "a2", "/help", "a3")]
        await taken(telegram, sent[-1])
        release.set()
        await telegram.wait_for_messages(USER, 4, timeout=20)  # /help answers without the LLM
        await asyncio.sleep(0.5)
    assert asked(claude) == ["slow", "a1\n\na2", "a3"], "the command is a turn of its own"


async def test_in_a_shared_group_only_one_members_queued_burst_is_gathered(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    release = asyncio.Event()
    claude.responder = slow_first(release)
    bot = queued_bot(claude, telegram, tmp_path, db, answer_groups="all")
    async with queued(bot):
        telegram.send_text(ALICE, "slow", chat_id=GROUP, chat_type="supergroup")
        await until(lambda: len(claude.requests) == 1)
        sent = [
            telegram.send_text(sender, text, chat_id=GROUP, chat_type="supergroup")
            for sender, text in ((BOB, "b1"), (ALICE, "a1"), (ALICE, "a2"), (BOB, "b2"))
        ]
        await taken(telegram, sent[-1])
        release.set()
        await telegram.wait_for_messages(GROUP, 4, timeout=20)
        await asyncio.sleep(0.5)
    assert asked(claude)[1:] == [  # as test_fair_slots shows ``run`` does
        f"[User (id {BOB}) wrote:]\nb1",
        f"[User (id {ALICE}) wrote:]\na1\n\na2",  # Alice's two, sent during her turn, as one
        f"[User (id {BOB}) wrote:]\nb2",
    ]


async def test_a_gathered_turn_whose_worker_was_killed_answers_every_message_after(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """The job run again gathers the messages its first run claimed, and only those: its
    turn was recorded with them; one sent after the kill is a turn of its own."""
    slow_done, killed = asyncio.Event(), asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text == "slow":
            await slow_done.wait()
        elif text.startswith("b1") and not killed.is_set():
            await killed.wait()  # the first worker's gathered turn hangs until it is dead
        return FakeReply.text(f"echo: {text}")

    claude.responder = model
    receiver = queued_bot(claude, telegram, tmp_path, db)
    doomed = worker_process(telegram, claude, tmp_path, db)
    async with queued(receiver, work=False), killed_at_end(doomed):
        telegram.send_text(USER, "slow")
        await until(lambda: len(claude.requests) == 1, timeout=60)
        sent = [telegram.send_text(USER, f"b{n}") for n in (1, 2, 3)]
        await taken(telegram, sent[-1])
        slow_done.set()
        await until(lambda: len(claude.requests) == 2, timeout=30)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        await taken(telegram, telegram.send_text(USER, "after the kill"))
        killed.set()
        survivor = queued_bot(claude, telegram, tmp_path / "survivor", db)
        async with queued(survivor, receive=False):
            await telegram.wait_for_messages(USER, 3, timeout=30)
            await asyncio.sleep(1.0)
    gathered = "b1\n\nb2\n\nb3"
    assert asked(claude) == ["slow", gathered, gathered, "after the kill"]
    assert [m.text for m in telegram.sent_messages(USER)] == [
        "echo: slow",
        f"echo: {gathered}",
        "echo: after the kill",
    ]


async def test_a_copy_of_a_bursts_first_message_is_not_gathered_into_its_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """A copy of an update queued behind its job (a redelivery once the job ran) finds the
    update claimed by that job: the burst skips it, it is not the message twice."""
    async with slow_turn_running(claude, telegram, tmp_path, db) as release:
        first = telegram.send_text(USER, "m1")
        await taken(telegram, first)
        await fetchval(  # its copy, queued behind it (no queueing lock: as once m1's job ran)
            db,
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args)"
            " SELECT queue_name, task_name, lock, args FROM procrastinate_jobs"
            " WHERE (args->'update'->>'update_id')::bigint = $1",
            first,
        )
        release.set()
        await telegram.wait_for_messages(USER, 2, timeout=20)
        await asyncio.sleep(1.0)  # the copy's own job runs, and answers nothing
    assert asked(claude) == ["slow", "m1"]
    assert [m.text for m in telegram.sent_messages(USER)] == ["echo: slow", "echo: m1"]


async def test_a_message_queued_during_a_scheduled_tasks_turn_is_marked(db: str) -> None:
    """A scheduled task's job (no update in its arguments) running on the conversation's lock
    is a turn: a message queued meanwhile is marked ``during_turn`` (migration 018)."""
    lock = f"user:{USER}"
    await fetchval(
        db,
        "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args, status)"
        " VALUES ('botkit', 'botkit.scheduled_task', $1, $2::jsonb, 'doing')",
        lock,
        json.dumps({"schedule_id": 1, "fired": 1}),
    )
    update = {"update_id": 9, "message": {"message_id": 9, "text": "hi"}}
    marked = await fetchval(
        db,
        "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, args)"
        " VALUES ('botkit', 'botkit.turn', $1, $2::jsonb) RETURNING args ? 'during_turn'",
        lock,
        json.dumps({"update": update}),
    )
    assert marked, "queued during the scheduled task's turn"


async def test_a_rerun_gathers_what_it_claimed_past_a_job_that_committed_late(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With webhook receivers job ids can commit out of order: a job not claimed by the
    gathering one can sit between two it claimed. Its re-run still gathers both (in a group,
    where the answer replies to the last message gathered: the re-run finds the turn recorded
    with all three, so its reply shows which ones it gathered)."""
    slow_done, killed = asyncio.Event(), asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text.endswith("slow"):
            await slow_done.wait()
        elif "b1" in text and not killed.is_set():
            await killed.wait()
        return FakeReply.text(f"echo: {text}")

    claude.responder = model
    in_group = {"chat_id": GROUP, "chat_type": "supergroup"}
    receiver = queued_bot(claude, telegram, tmp_path, db, answer_groups="all")
    monkeypatch.setenv("BOTKIT_ANSWER_GROUPS", "all")  # for the worker process
    doomed = worker_process(telegram, claude, tmp_path, db)
    async with queued(receiver, work=False), killed_at_end(doomed):
        telegram.send_text(ALICE, "slow", **in_group)
        await until(lambda: len(claude.requests) == 1, timeout=60)
        await taken(telegram, telegram.send_text(ALICE, "b1", **in_group))
        await taken(telegram, telegram.send_text(ALICE, "b2", **in_group))
        late_id = await fetchval(db, "SELECT nextval('procrastinate_jobs_id_seq')")
        b3 = telegram.send_text(ALICE, "b3", **in_group)  # its job's id is after late_id's
        await taken(telegram, b3)
        slow_done.set()
        await until(lambda: len(claude.requests) == 2, timeout=30)  # b1..b3 gathered
        late = json.loads(json.dumps(telegram.injected[b3]))
        late["update_id"] = b3 + 1000
        late["message"].update(message_id=late["message"]["message_id"] + 1000, text="late")
        await fetchval(  # the job that took late_id commits only now
            db,
            "INSERT INTO procrastinate_jobs (id, queue_name, task_name, lock, args)"
            " SELECT $1, queue_name, task_name, lock, jsonb_build_object('update', $2::jsonb)"
            " FROM procrastinate_jobs WHERE (args->'update'->>'update_id')::bigint = $3",
            late_id,
            json.dumps(late),
            b3,
        )
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        killed.set()
        survivor = queued_bot(claude, telegram, tmp_path / "survivor", db, answer_groups="all")
        async with queued(survivor, receive=False):
            await telegram.wait_for_messages(GROUP, 3, timeout=30)
            await asyncio.sleep(1.0)
    said = f"[User (id {ALICE}) wrote:]\n"
    assert [m.text for m in telegram.sent_messages(GROUP)] == [
        f"echo: {said}slow",
        f"echo: {said}b1\n\nb2\n\nb3",
        f"echo: {said}late",
    ]
    answer = telegram.sent_messages(GROUP)[1]
    b3_message_id = telegram.injected[b3]["message"]["message_id"]
    assert answer.params["reply_parameters"]["message_id"] == b3_message_id, "b3 was gathered"


BURST_POISON_BOT = """
import os

from botkit import Bot


async def build_prompt(message):
    if message.text.startswith("poison"):
        os._exit(137)  # as an out-of-memory kill or a native crash would end the process
    return "You are a test bot."


bot = Bot(build_prompt=build_prompt)
"""


@pytest.mark.timeout(300)
async def test_a_given_up_burst_gives_up_every_gathered_message_and_tells_once(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """As ``run`` gives up a whole burst: the messages the given-up job gathered are given up
    with it (their own jobs skip them as claimed), and the sender is told once, in reply to
    the last of them."""
    release = asyncio.Event()
    claude.responder = slow_first(release)
    receiver = queued_bot(claude, telegram, tmp_path / "receiver", db)
    home = tmp_path / "w"
    home.mkdir()
    (home / "poison_bot.py").write_text(BURST_POISON_BOT)
    env = environment(
        telegram, claude, home, BOTKIT_DATABASE_URL=db, BOTKIT_STALLED_TIMEOUT=str(STALLED)
    )
    worker = Supervised(home, ["work", "--concurrency", "4"], env)
    async with queued(receiver, work=False), supervised([worker]):
        telegram.send_text(USER, "slow")
        await until(lambda: len(claude.requests) == 1, timeout=90)
        poison, gathered = telegram.send_text(USER, "poison"), telegram.send_text(USER, "m2")
        await taken(telegram, gathered)  # both queued during the slow turn: one burst
        release.set()
        await telegram.wait_for_messages(USER, 2, timeout=200)
        await asyncio.sleep(1.0)  # anything sent twice would be sent by now
    assert worker.deaths == 3, f"the burst killed {worker.deaths} workers"
    assert texts(telegram, USER) == ["echo: slow", GIVEN_UP], "told once"
    notice = telegram.sent_messages(USER)[1]
    last_message_id = telegram.injected[gathered]["message"]["message_id"]
    assert notice.params["reply_parameters"]["message_id"] == last_message_id
    query = "SELECT given_up_at IS NOT NULL FROM botkit_updates WHERE update_id = $1"
    assert await fetchval(db, query, poison), "the job's own message is given up"
    assert await fetchval(db, query, gathered), "and so is the one it gathered"
