"""Retention (#27.4): ``python -m botkit prune`` removes old entries and unreferenced media, never
what a live context needs, on JSONL files and PostgreSQL, and never loses a racing append."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from botkit.agent import ContextManager
from botkit.sessions import (
    CompactionEntry,
    JsonlSessionStore,
    PostgresSessionStore,
    ResetEntry,
    SessionEntry,
    SessionStore,
)
from botkit.sessions.jsonl import read_session_file
from botkit.sessions.retention import needed_from, prune_files
from botkit.types import (
    DocumentBlock,
    DocumentSource,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

Entry = SessionEntry | ResetEntry | CompactionEntry
NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=60)


def at(entry: Entry, when: datetime) -> Entry:
    return entry.model_copy(update={"timestamp": when})


def said(user: int, text: str, when: datetime, **meta: object) -> Entry:
    return at(SessionEntry.of(user, Message.user_text(text), **meta), when)


def answered(user: int, text: str, when: datetime) -> Entry:
    message = Message(role="assistant", content=[TextBlock(text=text)])
    return at(SessionEntry.of(user, message), when)


def pdf(name: str) -> bytes:
    return f"%PDF-1.4 {name} ".encode() * 40


def with_pdf(user: int, name: str, when: datetime) -> Entry:
    source = DocumentSource(data=base64.b64encode(pdf(name)).decode())
    content = [DocumentBlock(source=source, title=f"{name}.pdf"), TextBlock(text=name)]
    return at(SessionEntry.of(user, Message(role="user", content=content)), when)


def media_name(name: str) -> str:
    return f"{hashlib.sha256(pdf(name)).hexdigest()}.pdf"


def histories() -> dict[int, list[Entry]]:
    """Four users: cleared long ago; compacted long ago; all recent; never cleared (all old)."""
    return {
        42: [
            with_pdf(42, "old", OLD),
            answered(42, "read old", OLD),
            at(ResetEntry(user_id=42, reason="/clear"), OLD),
            with_pdf(42, "kept", OLD),  # old, but the live context holds it
            answered(42, "read kept", OLD),
            said(42, "today", NOW),
            answered(42, "echo: today", NOW),
        ],
        43: [
            said(43, "one", OLD),
            answered(43, "two", OLD),
            said(43, "three", OLD),
            answered(43, "four", OLD),
            at(CompactionEntry(user_id=43, summary="counting", kept=2), OLD),
            said(43, "five", NOW),
        ],
        44: [said(44, "new", NOW), answered(44, "newer", NOW)],
        45: [said(45, "ancient", OLD), answered(45, "and still the context", OLD)],
    }


REMOVED = {42: 3, 43: 2, 44: 0, 45: 0}


@pytest.fixture(params=["jsonl", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "jsonl":
        return tmp_path / "sessions"
    dsn: str = request.getfixturevalue("migrated_db")
    return dsn


@pytest.fixture
async def store(backend: Path | str) -> AsyncIterator[SessionStore]:
    opened: SessionStore
    if isinstance(backend, Path):
        opened = JsonlSessionStore(backend)
    else:
        opened = await PostgresSessionStore.connect(backend)
    yield opened
    await opened.close()


def run_prune(backend: Path | str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env.pop("BOTKIT_DATABASE_URL", None)
    env.pop("BOTKIT_RETENTION_DAYS", None)
    if isinstance(backend, Path):
        env["BOTKIT_SESSIONS_DIR"] = str(backend)
    else:
        env["BOTKIT_DATABASE_URL"] = backend
        env["BOTKIT_SESSIONS_DIR"] = str(cwd / "unused")
    return subprocess.run(
        [sys.executable, "-m", "botkit", "prune", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def snapshot(store: SessionStore) -> dict[int, list[bytes]]:
    return {user: [e.to_line() for e in (await store.load(user)).entries] for user in REMOVED}


async def media_names(store: SessionStore) -> set[str]:
    if isinstance(store, JsonlSessionStore):
        return {p.name for p in (store.directory / "media").iterdir()}
    assert isinstance(store, PostgresSessionStore)
    async with store._connection() as conn:
        return {r["name"] for r in await conn.fetch("SELECT name FROM botkit_session_media")}


async def test_prune_removes_old_entries_and_their_media_but_not_what_contexts_need(
    store: SessionStore, backend: Path | str, tmp_path: Path
) -> None:
    written = histories()
    for entries in written.values():
        for entry in entries:
            await store.append(entry)
    before = await snapshot(store)
    contexts = {u: ContextManager.restore(u, (await store.load(u)).entries) for u in written}

    dry = run_prune(backend, tmp_path, "--days", "30", "--dry-run")

    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "42: would remove 3 entries",
        "43: would remove 2 entries",
        f"would remove 5 entries from 2 conversations and 1 media ({len(pdf('old')) / 1e6:.1f} MB)",
    ]
    assert await snapshot(store) == before, "a dry run changes nothing"
    assert await media_names(store) == {media_name("old"), media_name("kept")}

    done = run_prune(backend, tmp_path, "--days", "30")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("removed 5 entries from 2 conversations and 1")
    after = await snapshot(store)
    for user, count in REMOVED.items():
        assert after[user] == before[user][count:], f"user {user}: the oldest {count} went"
        rebuilt = ContextManager.restore(user, (await store.load(user)).entries)
        assert rebuilt.messages == contexts[user].messages, "the live context is untouched"
    assert await media_names(store) == {media_name("kept")}
    again = run_prune(backend, tmp_path, "--days", "30")
    assert again.stdout.splitlines() == [
        "removed 0 entries from 0 conversations and 0 media (0.0 MB)"
    ]


async def test_a_pruned_conversation_goes_on_in_a_running_store(
    store: SessionStore, backend: Path | str, tmp_path: Path
) -> None:
    for entry in histories()[42]:
        await store.append(entry)

    assert run_prune(backend, tmp_path, "--days", "30").returncode == 0
    await store.append(said(42, "after the prune", NOW))

    texts = [m.text for m in (await store.load(42)).messages]
    assert texts == ["kept", "read kept", "today", "echo: today", "after the prune"]
    if isinstance(store, JsonlSessionStore):
        assert read_session_file(store.path_for(42)).problems == []


def test_prune_without_a_retention_setting_says_what_to_pass(tmp_path: Path) -> None:
    result = run_prune(tmp_path / "sessions", tmp_path)
    zero = run_prune(tmp_path / "sessions", tmp_path, "--days", "0")

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (
        "botkit: BOTKIT_RETENTION_DAYS is not set: pass --days N to say what to keep\n"
    )
    assert zero.returncode == 2 and zero.stderr == "botkit: --days must be more than 0, got 0\n"


async def test_appends_racing_with_prunes_are_never_lost_or_torn(tmp_path: Path) -> None:
    """Each round appends a recent message, an old one and an old reset (so every prune has
    something to rewrite) while prunes run in another thread: every recent message stays."""
    directory = tmp_path / "sessions"
    store = JsonlSessionStore(directory)
    stop = asyncio.Event()

    def prune_until_stopped() -> int:
        rounds = 0
        while not stop.is_set() or rounds == 0:
            prune_files(directory, NOW - timedelta(days=30), dry_run=False)
            rounds += 1
        return rounds

    pruning = asyncio.create_task(asyncio.to_thread(prune_until_stopped))
    for i in range(300):
        await store.append(said(42, f"recent {i}", NOW))
        await store.append(said(42, f"old {i}", OLD))
        await store.append(at(ResetEntry(user_id=42), OLD))
        if i % 10 == 0:
            await asyncio.sleep(0)
    stop.set()
    rounds = await pruning
    prune_files(directory, NOW - timedelta(days=30), dry_run=False)
    await store.close()

    loaded = read_session_file(directory / "42.jsonl")
    assert rounds > 1 and loaded.problems == []
    assert [m.text for m in loaded.messages] == [f"recent {i}" for i in range(300)]


def test_needed_from_keeps_exactly_what_a_rebuild_reads() -> None:
    """On random histories (messages, tool calls, deferred notes, resets, compactions), the
    context rebuilt from the entries from ``needed_from`` on is the one every entry makes."""
    rng = random.Random(27)
    for _ in range(300):
        entries = random_history(rng)
        start = needed_from(entries)
        whole = every_entry_applied(entries)
        for rebuilt in (
            ContextManager.restore(7, entries[start:]),
            ContextManager.restore(7, entries),
        ):
            assert rebuilt.messages == whole.messages, entries
            assert rebuilt.pending == whole.pending
            assert [rebuilt.has_turn(n) for n in range(60)] == [
                whole.has_turn(n) for n in range(60)
            ]
        if start < len(entries):  # and it is the latest such entry
            shorter = every_entry_applied(entries[start + 1 :])
            assert (shorter.messages, shorter.pending) != (whole.messages, whole.pending)


def every_entry_applied(entries: list[Entry]) -> ContextManager:
    """The oracle: a context with every entry applied in turn, none skipped."""
    context = ContextManager(7)
    for entry in entries:
        if isinstance(entry, ResetEntry):
            context.clear()
        elif isinstance(entry, CompactionEntry):
            context._apply_compaction(entry.summary, entry.kept)
        elif entry.deferred:
            context.pending.append(entry.to_message())
        else:
            if entry.role == "user" and any(b.type != "tool_result" for b in entry.content):
                context._flush()
            context._add(entry.to_message(), entry.update_id)
    return context


def random_history(rng: random.Random) -> list[Entry]:
    entries: list[Entry] = []
    for n in range(rng.randint(0, 25)):
        kind = rng.choice(["turn", "turn", "tools", "deferred", "reset", "compaction"])
        if kind == "turn":
            entries += [said(7, f"q{n}", NOW, update_id=n), answered(7, f"a{n}", NOW)]
        elif kind == "tools":
            call = ToolUseBlock(id=f"t{n}", name="now")
            entries += [
                said(7, f"q{n}", NOW, update_id=n),
                at(SessionEntry.of(7, Message(role="assistant", content=[call])), NOW),
                at(
                    SessionEntry.of(
                        7,
                        Message(
                            role="user",
                            content=[ToolResultBlock(tool_use_id=f"t{n}", content="12")],
                        ),
                    ),
                    NOW,
                ),
                answered(7, f"a{n}", NOW),
            ]
        elif kind == "deferred":
            entries.append(said(7, f"note{n}", NOW, deferred=True))
        elif kind == "reset":
            entries.append(at(ResetEntry(user_id=7), NOW))
        else:
            entries.append(
                at(CompactionEntry(user_id=7, summary=f"s{n}", kept=rng.randint(0, 4)), NOW)
            )
    return entries


async def test_postgres_appends_with_media_racing_sweeps_keep_their_media(
    migrated_db: str,
) -> None:
    writer = await PostgresSessionStore.connect(migrated_db)
    sweeper = await PostgresSessionStore.connect(migrated_db)
    stop = asyncio.Event()

    async def sweep_until_stopped() -> int:
        rounds = 0
        while not stop.is_set() or rounds == 0:
            await sweeper.unreferenced_media(delete=True)
            rounds += 1
        return rounds

    try:
        sweeping = asyncio.create_task(sweep_until_stopped())
        for i in range(150):
            await writer.append(with_pdf(42, f"pdf {i}", NOW))
        stop.set()
        rounds = await sweeping
        with capture_logs() as logs:
            loaded = await writer.load(42)
    finally:
        await writer.close()
        await sweeper.close()

    assert rounds > 1
    assert [e["media"] for e in logs if e["event"] == "session.media_missing"] == []
    assert len(loaded.entries) == 150
