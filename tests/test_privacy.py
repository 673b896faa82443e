"""A user's data erased (``users forget``, ``/forget_me``) and exported (``users export``) on
both stores (#30): a marker the user sent is nowhere afterwards, in the data folder or the
database; the export holds it; other users keep theirs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr
from test_memory import ALICE, BOB, fresh_database, holding, mem, memory_bot
from test_scaleout import fetchval, queued, queued_bot

from botkit.approvals.store import PendingApproval
from botkit.cli import main
from botkit.payments.plans import Plan
from botkit.payments.store import NewPayment
from botkit.privacy import default_parts, forget_user
from botkit.privacy.command import erase
from botkit.sessions import session_store_for
from botkit.stores.migrate import migrate
from botkit.stores.schedules import NewSchedule
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot
from botkit.testing.telegram import TINY_PNG, FakeTelegramServer


@pytest.fixture(params=["files", "postgres"])
async def stored(
    request: pytest.FixtureRequest,
    postgres_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[dict[str, Any]]:
    """Settings for the bot, also set in the environment for the command line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOTKIT_SESSIONS_DIR", str(tmp_path / "sessions"))
    if request.param == "files":
        monkeypatch.delenv("BOTKIT_DATABASE_URL", raising=False)
        yield {}
        return
    async with fresh_database(postgres_dsn) as db:
        await migrate(db)
        monkeypatch.setenv("BOTKIT_DATABASE_URL", db)
        yield {"database_url": SecretStr(db)}


async def database_text(db: str) -> str:
    """Every row of every table, as text."""
    conn = await asyncpg.connect(db)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        texts = [
            await conn.fetchval(
                f"SELECT coalesce(string_agg(t::text, chr(10)), '') FROM \"{name}\" t"
            )
            for name in [row["table_name"] for row in tables]
        ]
    finally:
        await conn.close()
    return "\n".join(texts)


GROUP = -100500
IN_GROUP: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup"}


async def test_forget_leaves_no_trace_and_export_holds_everything(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    """Alice's private conversation, her own one in a group (``per_user``), a photo she sent,
    her memory, a reminder and her user record all hold the marker: all exported, all erased."""
    mark, bobs = f"MARK{secrets.token_hex(6)}", f"BOBS{secrets.token_hex(6)}"
    photo = TINY_PNG + mark.encode()
    bot = memory_bot(claude, tmp_path, group_context="per_user", **stored)
    async with running(bot, telegram):
        await ask(telegram, ALICE, f"my secret is {mark}")
        await ask(telegram, ALICE, mem(command="create", path="/memories/me.md", file_text=mark))
        await ask(telegram, ALICE, f"@botkit_test_bot in the group {mark}", **IN_GROUP)
        await ask(telegram, BOB, f"mine is {bobs}")
        await ask(telegram, BOB, mem(command="create", path="/memories/me.md", file_text=bobs))
        await ask(telegram, BOB, f"@botkit_test_bot in the group {bobs}", **IN_GROUP)
        before = len(telegram.sent_messages(ALICE))
        telegram.send_photo(ALICE, caption="look", data=photo)
        await telegram.wait_for_messages(ALICE, before + 1)
        users = await bot.access.user_store()
        await users.upsert_user(ALICE, "user", f"Alice {mark}")
        due = datetime.now(UTC) + timedelta(days=1)
        reminder = NewSchedule(ALICE, ALICE, "reminder", f"water {mark}", due, "UTC")
        assert await users.add_schedule(reminder, max_pending=10) is not None
    await bot.aclose()
    db = stored.get("database_url")

    out = tmp_path / "export"
    assert await asyncio.to_thread(main, ["users", "export", str(ALICE), str(out)]) == 0
    media = f"media/{hashlib.sha256(photo).hexdigest()}.png"
    own_in_group = f"sessions/chat_{GROUP}_user_{ALICE}.jsonl"
    assert holding(out, mark.encode()) == {
        "sessions/11.jsonl",
        own_in_group,
        "memory/11/me.md",
        media,
        "records/schedules.json",
        "records/users.json",
    }
    assert (out / media).read_bytes() == photo
    readme = (out / "README.txt").read_text()
    assert all(name in readme for name in ("sessions/11.jsonl", own_in_group, media))
    assert not holding(out, bobs.encode()), "nothing of another user"
    usage = json.loads((out / "records" / "model_usage.json").read_text())
    assert {row["user_id"] for row in usage} == {ALICE}
    [record] = json.loads((out / "records" / "users.json").read_text())
    assert record["user_id"] == ALICE and record["display_name"] == f"Alice {mark}"

    assert await asyncio.to_thread(main, ["users", "forget", str(ALICE), "--yes"]) == 0
    data = tmp_path / "sessions"
    assert holding(data, mark.encode()) == set()
    assert holding(data, bobs.encode()), "Bob's data stays"
    if db is not None:
        text = await database_text(db.get_secret_value())
        assert mark not in text and mark.encode().hex() not in text
        assert bobs in text


async def test_a_running_bot_forgets_too(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    """``users forget`` beside a running bot: its next request holds nothing of before (files:
    the session file is gone, so the cached context is rebuilt; PostgreSQL: its rows)."""
    mark = f"MARK{secrets.token_hex(6)}"
    bot = memory_bot(claude, tmp_path, **stored)
    async with running(bot, telegram):
        await ask(telegram, ALICE, f"my secret is {mark}")
        await ask(telegram, ALICE, "and another thing")
        await asyncio.to_thread(main, ["users", "forget", str(ALICE), "--yes"])
        await ask(telegram, ALICE, "what did I tell you?")
    await bot.aclose()
    assert mark in json.dumps(claude.requests[0].body)
    assert mark not in json.dumps(claude.requests[-1].body)
    assert len(claude.requests[-1].messages) == 1


async def test_forget_me_erases_everything_after_the_confirming_button(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    mark, bobs = f"MARK{secrets.token_hex(6)}", f"BOBS{secrets.token_hex(6)}"
    bot = memory_bot(claude, tmp_path, **stored)
    texts = bot.options.privacy_texts
    data = tmp_path / "sessions"
    async with running(bot, telegram):
        await ask(telegram, ALICE, f"my secret is {mark}")
        await ask(telegram, ALICE, mem(command="create", path="/memories/me.md", file_text=mark))
        await ask(telegram, BOB, f"mine is {bobs}")

        asked = await ask(telegram, ALICE, "/forget_me")
        assert asked.text == texts.confirm
        telegram.press_button(BOB, asked, texts.confirm_button)  # not his to press
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        telegram.press_button(ALICE, asked, texts.cancel_button)
        await telegram.wait_for_requests("answerCallbackQuery", 2)
        assert [m.text for m in telegram.edited_messages(ALICE)] == [texts.cancelled]
        assert holding(data, mark.encode()), "nothing erased before Confirm"

        # what the attack found left in write-ahead logs: a held approval's call and a
        # reminder, both holding her words
        users = await bot.access.user_store()
        due = datetime.now(UTC) + timedelta(days=1)
        reminder = NewSchedule(ALICE, ALICE, "reminder", f"water {mark}", due, "UTC")
        assert await users.add_schedule(reminder, max_pending=10) is not None
        approvals = bot.approvals.store
        await approvals.add(
            PendingApproval(
                id=f"ap{mark}",
                conversation=f"{ALICE}:",
                user_id=ALICE,
                approvers=(),
                chat_id=ALICE,
                turn={"text": mark},
                calls=[{"id": "c1", "name": "send", "input": {"note": mark}}],
                deadline=time.time() + 600,
            )
        )

        asked = await ask(telegram, ALICE, "/forget_me")
        telegram.press_button(ALICE, asked, texts.confirm_button)
        await telegram.wait_for_requests("answerCallbackQuery", 3)
        assert telegram.edited_messages(ALICE)[-1].text == texts.done

        await ask(telegram, ALICE, "what did I tell you?")
        last = claude.requests[-1]
        assert mark not in json.dumps(last.body), "the running bot forgot at once"
        assert len(last.messages) == 1
        # #51: no byte of it left in any file, write-ahead logs included, while still running
        assert holding(data, mark.encode()) == set()
    await bot.aclose()
    assert holding(data, mark.encode()) == set()
    assert holding(data, bobs.encode()), "Bob's data stays"
    if (db := stored.get("database_url")) is not None:
        text = await database_text(db.get_secret_value())
        assert mark not in text and bobs in text


async def test_forget_me_only_in_a_private_chat(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = memory_bot(claude, tmp_path, group_context="shared")
    texts = bot.options.privacy_texts
    async with running(bot, telegram):
        answer = await ask(
            telegram, ALICE, "/forget_me", chat_id=GROUP, chat_type="supergroup", timeout=30
        )
        assert answer.text == texts.private_only
        assert not telegram.edited_messages(GROUP)
    await bot.aclose()


async def test_a_blocked_user_who_erases_stays_blocked(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    mark = f"MARK{secrets.token_hex(6)}"
    bot = memory_bot(claude, tmp_path)
    async with running(bot, telegram):
        await ask(telegram, ALICE, f"my secret is {mark}")
        users = await bot.access.user_store()
        await users.block_user(ALICE)
        bot.access.forget(ALICE)
        await erase(bot, ALICE)
        record = await users.get_user(ALICE)
        assert record is not None and record.blocked and record.display_name is None
        assert (await ask(telegram, ALICE, "hello")).text == bot.options.rejection_text
    await bot.aclose()
    assert holding(tmp_path / "sessions", mark.encode()) == set()


async def test_forget_me_can_be_turned_off(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    on, off = memory_bot(claude, tmp_path / "on"), memory_bot(claude, tmp_path, forget_me=False)
    assert "forget_me" in on.commands
    assert "forget_me" not in off.commands and "forget_me" not in off.buttons
    async with running(off, telegram):
        assert "/forget_me" not in (await ask(telegram, ALICE, "/help")).text
    await on.aclose()
    await off.aclose()


async def test_group_turns_become_erased_and_their_media_go(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    """In a group the user's turns (their message and the bot's answer) become ``[erased]``,
    the sequence stays whole and Bob's turns stay; the photo only they sent is deleted."""
    mark, bobs = f"MARK{secrets.token_hex(6)}", f"BOBS{secrets.token_hex(6)}"
    bot = memory_bot(claude, tmp_path, group_context="shared", **stored)
    group = {"chat_id": GROUP, "chat_type": "supergroup"}
    async with running(bot, telegram):
        await ask(telegram, BOB, f"@botkit_test_bot before {bobs}", **group)
        await ask(telegram, ALICE, f"@botkit_test_bot in the group {mark}", **group)
        await ask(telegram, BOB, f"@botkit_test_bot after {bobs}", **group)
        before = len(telegram.sent_messages(ALICE))
        telegram.send_photo(ALICE, caption="look", data=TINY_PNG + mark.encode())
        telegram.send_photo(BOB, caption="look", data=TINY_PNG + bobs.encode())
        await telegram.wait_for_messages(ALICE, before + 1)
        await telegram.wait_for_messages(BOB, 1)
        erased_turns_before = await group_entries(bot)
        assert await asyncio.to_thread(main, ["users", "forget", str(ALICE), "--yes"]) == 0
        await ask(telegram, BOB, "@botkit_test_bot what was said?", **group)
    await bot.aclose()
    seen = json.dumps(claude.requests[-1].body)
    assert mark not in seen and bobs in seen and "[erased]" in seen, "the running bot rebuilt"
    after = await group_entries(bot)
    assert len(after) == len(erased_turns_before) + 2, "the group's sequence stayed whole"
    erased = [e for e in after if "[erased]" in json.dumps(e["content"])]
    assert [e["role"] for e in erased] == ["user", "assistant"]
    assert all(e["user_id"] != ALICE and e["speaker"] is None for e in erased)
    assert sum(bobs in json.dumps(e) for e in after) == 4, "Bob's turns are untouched"
    data = tmp_path / "sessions"
    assert holding(data, mark.encode()) == set()
    assert holding(data, bobs.encode()), "Bob's photo stays"
    if (db := stored.get("database_url")) is not None:
        text = await database_text(db.get_secret_value())
        assert mark not in text and mark.encode().hex() not in text
        assert bobs.encode().hex() in text, "Bob's photo stays"


async def group_entries(bot: Any) -> list[dict[str, Any]]:
    """The group conversation's entries as recorded (files or rows)."""
    store = session_store_for(bot.settings)
    try:
        recorded = await store.load_stored(f"chat_{GROUP}")  # type: ignore[attr-defined]
    finally:
        await store.close()
    return [entry.model_dump(mode="json") for entry in recorded.entries]


def approving(request: FakeRequest) -> FakeReply:
    """``DELETE <path>`` calls ``delete_file`` (which waits for Allow); else an echo."""
    text = request.last_user_text()
    if text.startswith("DELETE ") and not request.tool_results():
        return FakeReply.tool_use("delete_file", {"path": text.removeprefix("DELETE ")})
    return FakeReply.text(f"echo: {text}")


async def test_pending_approvals_and_held_messages_are_exported_and_erased_payments_kept(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    """A pending approval and a message held behind it hold the marker: exported, then erased.
    A payment record stays (refunds need the charge id, tax law the record) and is exported."""
    mark = f"MARK{secrets.token_hex(6)}"
    bot = memory_bot(claude, tmp_path, **stored)
    claude.responder = approving

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    plan = Plan(id="pro", title="Pro", description="More", stars=50, daily_tokens=1000)
    async with running(bot, telegram):
        await ask(telegram, ALICE, f"DELETE /{mark}")  # the approval request
        telegram.send_text(ALICE, f"meanwhile {mark}")
        for _ in range(200):
            if await bot.approvals.store.next_held(str(ALICE)):
                break
            await asyncio.sleep(0.05)
        now = datetime.now(UTC)
        payments = await bot.payments.store()
        await payments.grant(NewPayment(f"charge-{mark[4:]}", ALICE, plan, 50, now))
    await bot.aclose()

    out = tmp_path / "export"
    assert await asyncio.to_thread(main, ["users", "export", str(ALICE), str(out)]) == 0
    assert {"approvals/approvals.json", "approvals/held_messages.json"} <= holding(
        out, mark.encode()
    )
    assert holding(out, mark[4:].encode()) >= {"records/payments.json"}
    assert await asyncio.to_thread(main, ["users", "forget", str(ALICE), "--yes"]) == 0
    data = tmp_path / "sessions"
    assert holding(data, mark.encode()) == set()
    if (db := stored.get("database_url")) is not None:
        text = await database_text(db.get_secret_value())
        assert mark not in text
        assert f"charge-{mark[4:]}" in text, "the payment record stays"
    else:
        assert holding(data, f"charge-{mark[4:]}".encode()) == {"botkit.db"}


async def test_forget_erases_the_queues_copies_of_their_updates(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
) -> None:
    """With ``receive`` on PostgreSQL and no worker running, Alice's updates wait as jobs (one
    of them failed) and one could not be read: after ``users forget`` the marker is nowhere in
    the database; Bob's waiting update stays."""
    db = stored.get("database_url")
    if db is None:
        pytest.skip("the job queue is PostgreSQL's")
    dsn = db.get_secret_value()
    mark, bobs = f"MARK{secrets.token_hex(6)}", f"BOBS{secrets.token_hex(6)}"
    receiver = queued_bot(claude, telegram, tmp_path, dsn)
    unreadable = {
        "message_id": 1,
        "date": 1,
        "chat": "not a chat",
        "from": {"id": ALICE, "is_bot": False, "first_name": "A"},
        "text": f"unreadable {mark}",
    }
    async with queued(receiver, work=False):
        telegram.send_text(ALICE, f"my secret is {mark}")
        telegram.send_text(ALICE, f"and again {mark}")
        telegram.send_text(BOB, f"mine is {bobs}")
        telegram.inject_update({"message": unreadable})
        for _ in range(200):
            if await fetchval(dsn, QUEUED) == "(3,1)":
                break
            await asyncio.sleep(0.05)
    await receiver.aclose()
    assert await fetchval(dsn, QUEUED) == "(3,1)"
    await fetchval(dsn, FAIL_FIRST_JOB)
    assert mark in await database_text(dsn)

    assert await asyncio.to_thread(main, ["users", "forget", str(ALICE), "--yes"]) == 0
    text = await database_text(dsn)
    assert mark not in text
    assert bobs in text, "Bob's update still waits for a worker"
    assert await fetchval(dsn, QUEUED) == "(1,0)"


FAIL_FIRST_JOB = """
    UPDATE procrastinate_jobs SET status = 'failed'
    WHERE id = (SELECT min(id) FROM procrastinate_jobs)"""
QUEUED = """SELECT ((SELECT count(*) FROM procrastinate_jobs),
                    (SELECT count(*) FROM botkit_unparseable_updates))::text"""


async def test_keep_block_from_the_command_line_keeps_only_the_block(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    stored: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Alice came in through an invite, made one herself, was handed to a person, then was
    blocked: ``users forget --keep-block`` leaves a blocked record without her name, no
    handoff, no invite naming her, no marker anywhere; one audit line says so."""
    mark = f"MARK{secrets.token_hex(6)}"
    bot = make_bot(claude, tmp_path, access="invite", **stored)
    store = await bot.access.user_store()
    theirs = await store.create_invite("user", uses=2)
    async with running(bot, telegram):
        welcome = await ask(telegram, ALICE, f"/start {theirs.code}", first_name=f"A{mark}")
        assert welcome.text == bot.options.welcome_text
        await ask(telegram, ALICE, f"my secret is {mark}")
        store = await bot.access.user_store()
        record = await store.get_user(ALICE)
        assert record is not None and record.display_name == f"A{mark}"
        await store.create_invite("user", created_by=ALICE)
        await store.open_handoff(ALICE, ALICE, 77, f"Alice {mark}")
        await store.set_blocked(ALICE, True)
    await bot.aclose()
    capsys.readouterr()

    forget = ["users", "forget", str(ALICE), "--yes", "--keep-block"]
    assert await asyncio.to_thread(main, forget) == 0
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    [audit] = [line for line in logged if line["event"] == "privacy.user_forgotten"]
    assert audit["user_id"] == ALICE and audit["keep_block"] is True
    assert audit["sessions"] >= 1 and audit["records"] >= 2  # usage, the handoff

    store = await bot.access.user_store()
    try:
        record = await store.get_user(ALICE)
        assert record is not None and record.blocked and record.display_name is None
        assert await store.handoff_of(ALICE) is None
        assert all(invite.created_by != ALICE for invite in await store.list_invites())
    finally:
        await store.close()
    assert holding(tmp_path / "sessions", mark.encode()) == set()
    if (db := stored.get("database_url")) is not None:
        assert mark not in await database_text(db.get_secret_value())


class Pins:
    """Steers a job to one of two queue workers (each running one turn at a time): a turn
    saying ``hold`` waits in the fake model until released, so the worker running it takes
    nothing else. Each worker names itself in its system prompt (``worker w1``)."""

    def __init__(self, claude: FakeAnthropicServer, telegram: FakeTelegramServer, db: str) -> None:
        self.telegram = telegram
        self.db = db
        self.arrived: asyncio.Queue[tuple[str, asyncio.Event]] = asyncio.Queue()
        self.next_user = 500
        claude.responder = self.respond

    async def respond(self, request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text == "hold":
            release = asyncio.Event()
            await self.arrived.put((worker_of(request), release))
            await release.wait()
        return FakeReply.text(f"echo: {text}")

    async def busy(self, worker: str) -> tuple[int, asyncio.Event]:
        """Keep ``worker`` busy with a held turn (of a new user); that user and the release."""
        for _ in range(40):
            user, self.next_user = self.next_user, self.next_user + 1
            self.telegram.send_text(user, "hold")
            who, release = await asyncio.wait_for(self.arrived.get(), 30)
            if who == worker:
                return user, release
            release.set()
            await self.telegram.wait_for_messages(user, 1)
            await self.both_idle()
        raise AssertionError(f"40 held turns in a row ran on the other worker than {worker}")

    async def both_idle(self) -> None:
        """Until no job runs: a worker that ends a job takes one queued meanwhile in the same
        statement, so a held turn sent before that end would go to it, not to the idle one."""
        running = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
        for _ in range(200):
            if not await fetchval(self.db, running):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("a worker's job did not end within 10 s")

    async def ask_on(self, worker: str, user: int, text: str) -> None:
        """``user`` says ``text`` and it runs on ``worker`` (the other one is kept busy)."""
        other = "w2" if worker == "w1" else "w1"
        held, release = await self.busy(other)
        await ask(self.telegram, user, text, timeout=30)
        release.set()
        await self.telegram.wait_for_messages(held, 1)


def worker_of(request: FakeRequest) -> str:
    return "w1" if "worker w1" in request.system_text else "w2"


async def test_forget_drops_the_context_every_queue_worker_holds(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, postgres_db: str
) -> None:
    """Worker 1 holds Alice's context after her first turn, worker 2 after her second; after
    ``users forget`` worker 2 runs a turn, then worker 1: neither request carries anything of
    before. (Numbering the conversation from 1 again after the erasure brought worker 2's new
    rows to the number worker 1 had cached, and worker 1 handed out the erased context.)"""
    await migrate(postgres_db)
    mark = f"MARK{secrets.token_hex(6)}"
    pins = Pins(claude, telegram, postgres_db)
    receiver = queued_bot(claude, telegram, tmp_path, postgres_db)
    workers = [
        queued_bot(claude, telegram, tmp_path / w, postgres_db, system_prompt=f"worker {w}")
        for w in ("w1", "w2")
    ]
    async with (
        queued(receiver, work=False),
        queued(workers[0], receive=False, concurrency=1),
        queued(workers[1], receive=False, concurrency=1),
    ):
        await pins.ask_on("w1", ALICE, f"my secret is {mark}")
        await pins.ask_on("w2", ALICE, "anything else?")
        await forget_user(ALICE, default_parts(receiver.settings))
        erased_at = len(claude.requests)
        await pins.ask_on("w2", ALICE, "what did I say?")
        await pins.ask_on("w1", ALICE, "and to you?")
    alices = [r for r in claude.requests if r.last_user_text() != "hold"]
    assert [worker_of(r) for r in alices] == ["w1", "w2", "w2", "w1"]
    assert all(mark in json.dumps(r.body) for r in alices[:2])
    after = [r for r in claude.requests[erased_at:] if r.last_user_text() != "hold"]
    assert [mark in json.dumps(r.body) for r in after] == [False, False]


def test_export_and_forget_print_their_line_and_no_log_lines(tmp_path: Path) -> None:
    """An operator reads one line of what was done, and no info log lines beside it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOTKIT_")}
    env["BOTKIT_SESSIONS_DIR"] = str(tmp_path / "sessions")
    for command in (["export", "5", str(tmp_path / "out")], ["forget", "5", "--yes"]):
        done = subprocess.run(
            [sys.executable, "-m", "botkit", "users", *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        printed = done.stdout.splitlines()
        assert len(printed) == 1 and not printed[0].startswith("{"), printed
        logged = [json.loads(line)["event"] for line in done.stderr.splitlines()]
        assert logged == (["privacy.user_forgotten"] if command[0] == "forget" else []), (
            "no info lines; an erasure keeps its one audit line, on stderr"
        )
