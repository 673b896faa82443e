"""Moving to PostgreSQL moves everything: ``migrate --from-sqlite`` carries users, invites,
usage, time zones, reminders, handoffs, payments, approvals waiting with the messages held
behind them, memory files and conversations over, and a second run changes nothing (#31)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from botkit.approvals.postgres import PostgresApprovals
from botkit.approvals.store import PendingApproval, SqliteApprovals
from botkit.choices.store import SqliteChoices
from botkit.memory.postgres import PostgresMemoryStore
from botkit.memory.store import FileMemoryStore
from botkit.payments.plans import Plan
from botkit.payments.store import NewPayment, PostgresPayments, SqlitePayments
from botkit.sessions import JsonlSessionStore, PostgresSessionStore, SessionEntry
from botkit.stores import PostgresUserStore, SqliteUserStore
from botkit.stores.base import ModelUsage
from botkit.stores.from_sqlite import APPROVAL_TABLES, MEMORY_TABLE, TABLES
from botkit.stores.schedules import NewSchedule
from botkit.types import Message, Usage

ALICE, BOB, NEWCOMER = 11, 12, 13
DAY = date(2026, 11, 20)
DUE = datetime(2030, 1, 2, 9, 30, tzinfo=UTC)
PLAN = Plan(id="pro", title="Pro", description="More tokens", stars=50, daily_tokens=99_000)
WAITING = PendingApproval(
    id="ap1",
    conversation=f"{ALICE}:",
    user_id=ALICE,
    approvers=(BOB,),
    chat_id=ALICE,
    turn={"sender": ALICE, "chat": ALICE},
    calls=[{"id": "call1", "name": "refund", "input": {"order": 7}}],
    deadline=DUE.timestamp(),
)
HELD = {"update_id": 5, "message": {"text": "are you there?"}}
MEMORY = {"/memories/plumber.md": "Alice's plumber is Marco.", "/memories/pets.md": "a cat"}
SPENT = Usage(
    input_tokens=10, output_tokens=20, cache_creation_input_tokens=30, cache_read_input_tokens=40
)


def run_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    clean = {k: v for k, v in clean.items() if not k.startswith("BOTKIT_")}
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def fill_sqlite(folder: Path) -> str:
    """A bot's SQLite store and one session file, as a single-process bot leaves them; the
    code of an invite not used yet."""
    store = await SqliteUserStore.connect(folder / "botkit.db")
    await store.upsert_user(ALICE, "manager", "Alice")
    await store.upsert_user(BOB, "user", "Bob")
    await store.set_blocked(BOB, True)
    invite = await store.create_invite("cleaner", uses=2, expires_at=DUE, created_by=ALICE)
    await store.add_usage(ALICE, DAY, 1234)
    await store.add_model_usage([ModelUsage(ALICE, DAY, "claude-x", SPENT)])
    await store.set_timezone(ALICE, "Europe/Paris")
    reminder = NewSchedule(ALICE, ALICE, "reminder", "call the plumber", DUE, "Europe/Paris")
    assert await store.add_schedule(reminder, max_pending=50) is not None
    await store.open_handoff(BOB, BOB, 777, "Bob")
    await store.close()
    payments = SqlitePayments(folder / "botkit.db")
    assert await payments.grant(NewPayment("charge-1", ALICE, PLAN, 50, DUE)) is not None
    await payments.close()
    choices = SqliteChoices(folder / "botkit.db")
    await choices.set(str(ALICE), ALICE, {"model": "claude-haiku-5-5", "instructions": "Be brief."})
    await choices.close()
    approvals = SqliteApprovals(folder / "approvals.db")
    await approvals.add(WAITING)
    await approvals.hold(WAITING.conversation, HELD)
    await approvals.close()
    await FileMemoryStore(folder / "memory").save(str(ALICE), MEMORY)
    sessions = JsonlSessionStore(folder)
    await sessions.append(SessionEntry.of(ALICE, Message.user_text("hello")))
    await sessions.close()
    return invite.code


async def snapshot(dsn: str) -> dict[str, list[Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        names = [t for t, _ in (*TABLES, *APPROVAL_TABLES)] + [MEMORY_TABLE]
        tables = {t: await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2") for t in names}
        tables["sessions"] = await conn.fetch("SELECT * FROM botkit_sessions ORDER BY 1, 2")
        return {name: [tuple(row) for row in rows] for name, rows in tables.items()}
    finally:
        await conn.close()


async def test_migrate_from_sqlite_moves_users_invites_usage_schedules_and_sessions(
    tmp_path: Path, postgres_db: str
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    code = await fill_sqlite(folder)
    env = {"BOTKIT_DATABASE_URL": postgres_db, "BOTKIT_SESSIONS_DIR": str(folder)}

    first = run_cli(tmp_path, "migrate", "--from-sqlite", **env)
    assert first.returncode == 0, first.stderr
    assert "2 users, 1 invites, 1 usage, 1 model_usage, 1 timezones, 1 schedules" in first.stdout
    assert (
        "1 handoffs, 1 payments, 1 choices, 1 approvals, 1 held_messages, 2 memory" in first.stdout
    )
    assert "imported 1 conversation (1 entries)" in first.stdout
    moved = await snapshot(postgres_db)

    second = run_cli(tmp_path, "migrate", "--from-sqlite", str(folder / "botkit.db"), **env)
    assert second.returncode == 0, second.stderr
    assert await snapshot(postgres_db) == moved, "a second run changes nothing"

    store = await PostgresUserStore.connect(postgres_db)
    try:
        alice, bob = await store.get_user(ALICE), await store.get_user(BOB)
        assert alice is not None and (alice.role, alice.display_name) == ("manager", "Alice")
        assert bob is not None and bob.blocked
        assert await store.usage_on(ALICE, DAY) == 1234
        (spent,) = await store.model_usage_since(DAY)
        assert (spent.model, spent.usage) == ("claude-x", SPENT)
        assert await store.get_timezone(ALICE) == "Europe/Paris"
        (pending,) = await store.pending_schedules(ALICE)
        assert (pending.text, pending.due_at, pending.kind) == ("call the plumber", DUE, "reminder")
        redeemed = await store.redeem_invite(code, NEWCOMER, "New")
        assert redeemed.ok, "the invite link sent before the move still works"
        assert (await store.get_user(NEWCOMER)).role == "cleaner"  # type: ignore[union-attr]
        later = NewSchedule(BOB, BOB, "reminder", "later", DUE + timedelta(days=1), "UTC")
        added = await store.add_schedule(later, max_pending=50)
        assert added is not None and added.id > pending.id, "new ids follow the moved ones"
        handoff = await store.handoff_in_topic(777)
        assert handoff is not None and (handoff.user_id, handoff.is_open) == (BOB, True)
        grant = await PostgresPayments(store.pool).active(ALICE, DUE)
        assert grant is not None and (grant.plan_id, grant.daily_tokens) == ("pro", 99_000)
        await check_approvals(store)
    finally:
        await store.close()
    memory = PostgresMemoryStore(postgres_db)
    try:
        assert await memory.load(str(ALICE)) == MEMORY
    finally:
        await memory.close()
    sessions = await PostgresSessionStore.connect(postgres_db)
    try:
        (entry,) = (await sessions.load(ALICE)).entries
        assert (
            isinstance(entry, SessionEntry) and entry.content == Message.user_text("hello").content
        )
    finally:
        await sessions.close()


async def check_approvals(store: PostgresUserStore) -> None:
    """The approval waits in PostgreSQL as it did in SQLite, its held message after it, and a
    message held now follows the moved one."""

    async def pool() -> Any:
        return store.pool

    approvals = PostgresApprovals(pool)
    assert await approvals.get(WAITING.id) == WAITING
    assert await approvals.waiting(WAITING.conversation)
    await approvals.hold(WAITING.conversation, {"update_id": 6})
    first = await approvals.next_held(WAITING.conversation)
    assert first is not None and first.update == HELD
    await approvals.release(first.seq)
    second = await approvals.next_held(WAITING.conversation)
    assert second is not None and second.update == {"update_id": 6} and second.seq > first.seq


def test_migrate_from_a_missing_sqlite_file_says_so(tmp_path: Path, postgres_db: str) -> None:
    done = run_cli(
        tmp_path, "migrate", "--from-sqlite", "nowhere.db", BOTKIT_DATABASE_URL=postgres_db
    )
    assert done.returncode == 2
    assert "no SQLite file at nowhere.db" in done.stderr and "Traceback" not in done.stderr
