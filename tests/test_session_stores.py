"""Session stores: one contract, run against JSONL files and PostgreSQL; and what only PostgreSQL
does (sequence numbers, export and import, a bot on a database)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from botkit import Settings
from botkit.agent import ContextManager
from botkit.errors import ConfigError, SessionError
from botkit.sessions import (
    CompactionEntry,
    JsonlSessionStore,
    PostgresSessionStore,
    ResetEntry,
    SessionEntry,
    SessionStore,
    session_store_for,
)
from botkit.sessions.jsonl import read_session_file
from botkit.sessions.media import MEDIA_DIR
from botkit.sessions.transfer import export_sessions, import_sessions
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, make_bot, running
from botkit.testing.anthropic import is_note
from botkit.testing.telegram import TINY_PNG
from botkit.types import (
    DocumentBlock,
    DocumentSource,
    ImageBlock,
    ImageSource,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

Entry = SessionEntry | ResetEntry | CompactionEntry
USER = 42
GROUP = "chat_-100123_7"
START = datetime(2026, 11, 23, 10, 15, 2, 114000, tzinfo=UTC)


def conversation(user: int = USER) -> list[Entry]:
    """A turn with a tool call, a reset, another turn, a compaction: every kind of entry."""
    usage = Usage(input_tokens=412, output_tokens=31, cache_read_input_tokens=7)
    messages: list[tuple[Message, dict[str, Any]]] = [
        (Message.user_text("What time is it? ☕"), {"update_id": 90017}),
        (
            Message(
                role="assistant",
                content=[ToolUseBlock(id="toolu_01", name="now", input={"tz": "UTC", "n": 1.5})],
                usage=usage,
            ),
            {"model": "claude-test", "stop_reason": "tool_use"},
        ),
        (Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_01", content="12")]), {}),
        (
            Message(role="assistant", content=[TextBlock(text="It is noon.")], usage=usage),
            {"model": "claude-test", "stop_reason": "end_turn"},
        ),
    ]
    entries: list[Entry] = [SessionEntry.of(user, m, **meta) for m, meta in messages]
    entries.append(ResetEntry(user_id=user, reason="/clear"))
    entries.append(SessionEntry.of(user, Message.user_text("again"), update_id=90018))
    entries.append(CompactionEntry(user_id=user, summary="Asked the time.", kept=1, usage=usage))
    return [_at(e, i) for i, e in enumerate(entries)]


def group_conversation() -> list[Entry]:
    """Two members speaking in a group's topic, and the bot's answer."""
    said = [
        SessionEntry.of(5, Message.user_text("hi all"), conversation=GROUP, speaker="Ann"),
        SessionEntry.of(6, Message.user_text("hello"), conversation=GROUP, speaker="Bo"),
        SessionEntry.of(
            5,
            Message(role="assistant", content=[TextBlock(text="Hello, Ann and Bo.")]),
            conversation=GROUP,
            model="claude-test",
        ),
    ]
    return [_at(e, i) for i, e in enumerate(said)]


def _at(entry: Entry, seconds: int) -> Entry:
    return entry.model_copy(update={"timestamp": START + timedelta(seconds=seconds)})


def lines_of(entries: Sequence[Entry]) -> list[bytes]:
    return [entry.to_line() for entry in entries]


Opener = Callable[[], Awaitable[SessionStore]]


@pytest.fixture(params=["jsonl", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the sessions live: a folder of JSONL files, or a migrated PostgreSQL database."""
    if request.param == "jsonl":
        return tmp_path / "sessions"
    dsn: str = request.getfixturevalue("migrated_db")
    return dsn


@pytest.fixture
async def open_store(backend: Path | str) -> AsyncIterator[Opener]:
    """Opens stores on the backend's data: a second one is another process on the same data."""
    opened: list[SessionStore] = []

    async def open_one() -> SessionStore:
        store: SessionStore
        if isinstance(backend, Path):
            store = JsonlSessionStore(backend)
        else:
            store = await PostgresSessionStore.connect(backend)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


# --- the contract: every session store ---------------------------------------------------------


async def test_entries_read_back_as_the_same_lines(open_store: Opener) -> None:
    store = await open_store()
    written = conversation() + group_conversation()
    for entry in written:
        await store.append(entry)

    private, group = await store.load(USER), await store.load(GROUP)

    assert lines_of(private.entries) == lines_of(conversation())
    assert lines_of(group.entries) == lines_of(group_conversation())
    assert [e.speaker for e in group.entries if isinstance(e, SessionEntry)] == ["Ann", "Bo", None]
    assert private.problems == [] and group.problems == []


async def test_a_conversation_without_entries_is_empty(open_store: Opener) -> None:
    store = await open_store()
    await store.append(conversation()[0])

    for key in (USER + 1, "chat_-5"):
        loaded = await store.load(key)
        assert loaded.entries == [] and loaded.problems == []


async def test_a_restarted_store_reads_and_continues_the_conversation(open_store: Opener) -> None:
    first = await open_store()
    entries = conversation()
    for entry in entries[:3]:
        await first.append(entry)
    await first.close()

    again = await open_store()
    for entry in entries[3:]:
        await again.append(entry)

    assert lines_of((await again.load(USER)).entries) == lines_of(entries)


async def test_concurrent_appends_keep_the_order_they_were_made_in(open_store: Opener) -> None:
    store = await open_store()
    said = [SessionEntry.of(USER, Message.user_text(f"message {i}")) for i in range(50)]

    await asyncio.gather(*(store.append(entry) for entry in said))

    assert lines_of((await store.load(USER)).entries) == lines_of(said)


async def test_a_context_restored_from_the_store_is_the_one_recorded(open_store: Opener) -> None:
    store = await open_store()
    live = ContextManager(USER, on_append=store.append, max_messages=40)
    await live.append(Message.user_text("one"), update_id=1)
    await live.append(Message(role="assistant", content=[TextBlock(text="two")]), model="m")
    await live.append(Message.user_text("three"), update_id=2)

    restored = ContextManager.restore(USER, (await store.load(USER)).entries, max_messages=40)

    assert restored.messages == live.messages


# --- PostgreSQL: numbers, workers, failures ---------------------------------------------------


@pytest.fixture
async def pg(migrated_db: str) -> AsyncIterator[PostgresSessionStore]:
    store = await PostgresSessionStore.connect(migrated_db)
    yield store
    await store.close()


async def test_entries_are_numbered_and_a_reader_can_ask_for_what_came_after(
    pg: PostgresSessionStore,
) -> None:
    entries = conversation()
    for entry in entries:
        await pg.append(entry)

    whole, tail, nothing = (
        await pg.load(USER),
        await pg.load_after(USER, 5),
        await pg.load_after(USER, 7),
    )

    assert await pg.last_sequence(USER) == 7 and await pg.last_sequence(USER + 1) == 0
    assert whole.numbers == [1, 2, 3, 4, 5, 6, 7] and whole.last_seq == 7
    assert lines_of(tail.entries) == lines_of(entries[5:]) and tail.numbers == [6, 7]
    assert nothing.entries == [] and nothing.last_seq == 7


async def test_a_released_connection_costs_no_reset_query(migrated_db: str) -> None:
    """The store leaves no session state behind (its locks are transaction-scoped), so giving a
    connection back to its pool sends nothing: asyncpg's reset query would be one more round
    trip for every append and read."""
    store = await PostgresSessionStore.connect(migrated_db, min_size=1, max_size=1)
    watcher = await asyncpg.connect(migrated_db)
    try:
        for entry in conversation()[:2]:
            await store.append(entry)
        assert await store.last_sequence(USER) == 2
        ran = await watcher.fetchval(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    finally:
        await watcher.close()
        await store.close()
    assert "botkit_session_heads" in ran, f"the last query was {ran!r}"


async def test_a_cached_context_sees_what_another_worker_appended(migrated_db: str) -> None:
    worker_a = await PostgresSessionStore.connect(migrated_db)
    worker_b = await PostgresSessionStore.connect(migrated_db)
    try:
        entries = conversation()
        for entry in entries[:4]:
            await worker_a.append(entry)
        cached = await worker_a.load(USER)
        for entry in entries[4:]:
            await worker_b.append(entry)

        assert await worker_a.last_sequence(USER) != cached.last_seq
        caught_up = await worker_a.load_after(USER, cached.last_seq)
    finally:
        await worker_a.close()
        await worker_b.close()
    assert lines_of(cached.entries + caught_up.entries) == lines_of(entries)


async def test_two_processes_appending_at_once_never_share_or_skip_a_number(
    migrated_db: str,
) -> None:
    stores = [await PostgresSessionStore.connect(migrated_db) for _ in range(2)]
    said = {
        name: [SessionEntry.of(USER, Message.user_text(f"{name} {i}")) for i in range(25)]
        for name in ("a", "b")
    }
    try:
        await asyncio.gather(
            *(store.append(e) for store, name in zip(stores, said, strict=True) for e in said[name])
        )
        loaded = await stores[0].load(USER)
    finally:
        for store in stores:
            await store.close()

    assert loaded.numbers == list(range(1, 51))
    texts = [text_of(e) for e in loaded.entries if isinstance(e, SessionEntry)]
    for name, entries in said.items():
        mine = [t for t in texts if t.startswith(f"{name} ")]
        assert mine == [text_of(e) for e in entries], "each process's order is kept"


async def test_missing_tables_say_to_run_migrate(postgres_db: str) -> None:
    with pytest.raises(ConfigError, match="python -m botkit migrate"):
        await PostgresSessionStore.connect(postgres_db)
    lazy = PostgresSessionStore.lazy(postgres_db)
    with pytest.raises(ConfigError, match="python -m botkit migrate"):
        await lazy.append(conversation()[0])
    await lazy.close()


async def test_an_unreachable_database_is_a_session_error_without_the_password() -> None:
    store = PostgresSessionStore.lazy("postgresql://u:hunter2@127.0.0.1:9/db")
    with pytest.raises(SessionError) as raised:
        await store.load(USER)
    await store.close()
    assert "cannot connect to the session database" in str(raised.value)
    assert "hunter2" not in str(raised.value)


async def test_a_damaged_row_is_skipped_and_reported_by_its_number(
    pg: PostgresSessionStore, migrated_db: str
) -> None:
    entries = conversation()[:3]
    for entry in entries:
        await pg.append(entry)
    conn = await asyncpg.connect(migrated_db)
    try:
        await conn.execute("UPDATE botkit_sessions SET entry = '{\"role\": 1' WHERE seq = 2")
    finally:
        await conn.close()

    loaded = await pg.load(USER)

    assert lines_of(loaded.entries) == lines_of([entries[0], entries[2]])
    assert [n for n, _ in loaded.problems] == [2]
    assert loaded.numbers == [1, 3] and loaded.last_seq == 3


def test_the_settings_choose_the_store(tmp_path: Path) -> None:
    files = Settings(_env_file=None, sessions_dir=tmp_path)
    database = Settings(_env_file=None, sessions_dir=tmp_path, database_url="postgresql:///x")

    assert isinstance(session_store_for(files), JsonlSessionStore)
    assert isinstance(session_store_for(database), PostgresSessionStore)


# --- export and import --------------------------------------------------------------------------


async def write_jsonl(directory: Path) -> dict[str, bytes]:
    """Session files written by the JSONL store: two users and a group; their bytes by name."""
    store = JsonlSessionStore(directory)
    for entry in conversation() + conversation(USER + 1) + group_conversation():
        await store.append(entry)
    await store.close()
    return files_in(directory)


def files_in(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def run_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    clean.pop("BOTKIT_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "botkit", *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_export_after_import_gives_back_the_same_bytes(
    migrated_db: str, tmp_path: Path
) -> None:
    written = await write_jsonl(tmp_path / "before")

    imported = run_cli(tmp_path, "sessions", "import", "before", BOTKIT_DATABASE_URL=migrated_db)
    exported = run_cli(tmp_path, "sessions", "export", "after", "--dsn", migrated_db)

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == "imported 3 conversations (17 entries)\n"
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == "exported 3 conversations (17 entries)\n"
    after = files_in(tmp_path / "after")
    assert after == written
    assert sorted(after) == sorted([f"{USER}.jsonl", f"{USER + 1}.jsonl", f"{GROUP}.jsonl"])


async def test_importing_twice_adds_nothing_and_says_so(
    pg: PostgresSessionStore, tmp_path: Path
) -> None:
    await write_jsonl(tmp_path)

    first = await import_sessions(pg, tmp_path)
    second = await import_sessions(pg, tmp_path)

    assert (first.conversations, first.entries, first.skipped) == (3, 17, 0)
    assert (second.conversations, second.entries, second.skipped) == (0, 0, 3)
    assert f"skipped {USER}.jsonl: the database already has 7 entries for {USER}" in second.notes
    assert second.summary == "imported 0 conversations (0 entries), 3 skipped"
    assert await pg.last_sequence(USER) == 7 and len((await pg.load(USER)).entries) == 7


async def test_import_skips_damaged_lines_and_reports_them(
    pg: PostgresSessionStore, tmp_path: Path
) -> None:
    good = conversation()[:2]
    (tmp_path / f"{USER}.jsonl").write_bytes(
        good[0].to_line() + b"not json\n" + good[1].to_line() + b'{"version":1,"user_'
    )
    (tmp_path / "inbox.jsonl").write_bytes(b'{"update_id": 1}\n')

    report = await import_sessions(pg, tmp_path)

    assert lines_of((await pg.load(USER)).entries) == lines_of(good)
    corrupt, torn, inbox = report.notes
    assert corrupt.startswith(f"{USER}.jsonl line 2: ") and corrupt.endswith("(skipped)")
    assert torn == f"{USER}.jsonl line 4: torn last line (no newline) (skipped)"
    assert inbox == "skipped inbox.jsonl: not a session file (<user id>.jsonl)"
    assert (report.conversations, report.entries, report.skipped) == (1, 2, 1)


async def test_export_never_overwrites_a_file(pg: PostgresSessionStore, tmp_path: Path) -> None:
    for entry in conversation() + group_conversation():
        await pg.append(entry)
    (tmp_path / f"{USER}.jsonl").write_bytes(b"mine\n")

    report = await export_sessions(pg, tmp_path)

    assert (tmp_path / f"{USER}.jsonl").read_bytes() == b"mine\n"
    assert (tmp_path / f"{GROUP}.jsonl").read_bytes() == b"".join(lines_of(group_conversation()))
    assert (tmp_path / f"{GROUP}.jsonl").stat().st_mode & 0o777 == 0o600
    assert (report.conversations, report.skipped) == (1, 1)


async def test_a_context_rebuilt_from_postgres_equals_one_rebuilt_from_files(
    pg: PostgresSessionStore, tmp_path: Path
) -> None:
    files = JsonlSessionStore(tmp_path)
    entries = [*conversation(), SessionEntry.of(USER, Message.user_text("last"), update_id=3)]
    for entry in entries:
        await files.append(entry)
    await import_sessions(pg, tmp_path)

    from_files = ContextManager.restore(USER, (await files.load(USER)).entries)
    from_postgres = ContextManager.restore(USER, (await pg.load(USER)).entries)

    assert from_postgres.messages == from_files.messages
    texts = [text_of_message(m) for m in from_files.messages]
    assert texts == ["[Summary of the earlier conversation]\nAsked the time.", "again", "last"]


def test_cli_sessions_errors_are_one_line_without_the_password(tmp_path: Path) -> None:
    refused = run_cli(
        tmp_path, "sessions", "export", "out", "--dsn", "postgresql://u:hunter2@127.0.0.1:9/db"
    )
    nonsense = run_cli(tmp_path, "sessions", "import", ".", BOTKIT_DATABASE_URL="not-a-dsn")
    unset = run_cli(tmp_path, "sessions", "export", "out")
    for result in (refused, nonsense, unset):
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "hunter2" not in result.stderr
    assert refused.stderr.startswith("botkit: cannot export sessions: cannot connect")
    assert nonsense.stderr.startswith("botkit: cannot import sessions: cannot connect")
    assert "BOTKIT_DATABASE_URL is not set" in unset.stderr


async def test_cli_import_of_a_missing_folder_is_one_line(migrated_db: str, tmp_path: Path) -> None:
    result = run_cli(tmp_path, "sessions", "import", "nowhere", "--dsn", migrated_db)
    assert result.returncode == 2
    assert result.stderr == "botkit: cannot import sessions: no such directory: nowhere\n"


# --- a bot on PostgreSQL ------------------------------------------------------------------------


async def test_a_bot_with_a_database_keeps_its_turns_there_and_remembers_them(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, migrated_db: str, tmp_path: Path
) -> None:
    settings = Settings(
        _env_file=None,
        allowed_users=frozenset({USER}),
        sessions_dir=tmp_path / "sessions",
        database_url=migrated_db,
        stream_replies=False,
    )

    first = make_bot(claude, tmp_path, settings=settings)
    async with running(first, telegram):
        telegram.send_text(USER, "my name is Ann")
        await telegram.wait_for_messages(USER, 1)
    await first.aclose()

    again = make_bot(claude, tmp_path, settings=settings)
    async with running(again, telegram):
        telegram.send_text(USER, "what is my name?")
        await telegram.wait_for_messages(USER, 2)
    await again.aclose()

    store = await PostgresSessionStore.connect(migrated_db)
    recorded = await store.load(USER)
    await store.close()
    assert [(e.role, text_of(e)) for e in recorded.entries if isinstance(e, SessionEntry)] == [
        ("user", "my name is Ann"),
        ("assistant", "echo: my name is Ann"),
        ("user", "what is my name?"),
        ("assistant", "echo: what is my name?"),
    ]
    remembered = [m["content"] for m in claude.requests[-1].messages]
    assert "my name is Ann" in str(remembered), "the restarted bot sent the earlier turn"
    assert not (tmp_path / "sessions" / f"{USER}.jsonl").exists()


def text_of(entry: SessionEntry) -> str:
    return text_of_message(entry.to_message())


def text_of_message(message: Message) -> str:
    return "".join(
        b.text for b in message.content if isinstance(b, TextBlock) and not is_note(b.text)
    )


# --- media: stored once by content hash, referenced from the entries (#15) ----------------------

PNG_B64 = base64.b64encode(TINY_PNG).decode()


def with_media(user: int = USER) -> list[Entry]:
    """A photo sent twice, a PDF, a text file, and a tool's picture shown to the model."""
    pdf = base64.b64encode(b"%PDF-1.4 tiny").decode()
    photo = ImageBlock(source=ImageSource(media_type="image/png", data=PNG_B64))
    said = Message(
        role="user",
        content=[
            photo,
            DocumentBlock(source=DocumentSource(data=pdf), title="a.pdf"),
            DocumentBlock(
                source=DocumentSource(type="text", media_type="text/plain", data="x,y\n1,2\n"),
                title="b.csv",
            ),
            TextBlock(text="look"),
        ],
    )
    result = ToolResultBlock(tool_use_id="toolu_01", content="sent", images=(photo,))
    entries = [
        SessionEntry.of(user, said, update_id=1),
        SessionEntry.of(user, Message(role="user", content=[photo, result])),
    ]
    return [_at(e, i) for i, e in enumerate(entries)]


async def stored_text(store: SessionStore, backend: Path | str) -> bytes:
    if isinstance(store, JsonlSessionStore):
        return store.path_for(USER).read_bytes()
    assert isinstance(store, PostgresSessionStore)
    return b"".join(await store.lines(USER))


async def test_media_are_stored_once_and_read_back_inline(
    open_store: Opener, backend: Path | str
) -> None:
    writer = await open_store()
    for entry in with_media():
        await writer.append(entry)

    raw = await stored_text(writer, backend)
    loaded = (await (await open_store()).load(USER)).entries

    assert PNG_B64 not in raw.decode() and b"1,2" not in raw, "no media inline in the entries"
    assert raw.decode().count('"type":"stored"') == 5
    assert lines_of(loaded) == lines_of(with_media())


async def test_jsonl_media_files_are_private_and_named_by_their_hash(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path / "sessions")
    for entry in with_media():
        await store.append(entry)
    await store.close()

    media = tmp_path / "sessions" / "media"
    names = sorted(p.name for p in media.iterdir())
    assert f"{hashlib.sha256(TINY_PNG).hexdigest()}.png" in names
    assert sorted(name.rsplit(".", 1)[1] for name in names) == ["pdf", "png", "txt"]
    assert stat.S_IMODE(media.stat().st_mode) == 0o700
    assert {stat.S_IMODE((media / n).stat().st_mode) for n in names} == {0o600}


async def test_missing_media_leave_a_placeholder_not_a_crash(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    for entry in with_media():
        await store.append(entry)
    for path in (tmp_path / "media").iterdir():
        path.unlink()

    first, second = (await JsonlSessionStore(tmp_path).load(USER)).messages

    assert [b.text for b in first.content if isinstance(b, TextBlock)] == [
        "[A picture sent here is no longer stored]",
        "[The document a.pdf sent here is no longer stored]",
        "[The document b.csv sent here is no longer stored]",
        "look",
    ]
    assert isinstance(second.content[1], ToolResultBlock) and second.content[1].images is None


async def test_a_reference_that_is_not_a_hash_never_reads_a_file_outside_the_media(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    (tmp_path / "secret.png").write_bytes(TINY_PNG)  # what "../../secret" would name
    forged = ImageSource(type="stored", media_type="image/png", sha256="../../secret")
    said = Message(role="user", content=[ImageBlock(source=forged), TextBlock(text="look")])
    sessions.mkdir()
    (sessions / f"{USER}.jsonl").write_bytes(SessionEntry.of(USER, said).to_line())
    (sessions / MEDIA_DIR).mkdir()

    [loaded] = (await JsonlSessionStore(sessions).load(USER)).messages

    assert [b.text for b in loaded.content if isinstance(b, TextBlock)] == [
        "[A picture sent here is no longer stored]",
        "look",
    ]
    assert PNG_B64 not in str(read_session_file(sessions / f"{USER}.jsonl").entries)


async def test_lines_with_inline_media_from_before_still_load(tmp_path: Path) -> None:
    old = with_media()[0]
    (tmp_path / f"{USER}.jsonl").write_bytes(old.to_line())

    [entry] = (await JsonlSessionStore(tmp_path).load(USER)).entries

    assert entry.to_line() == old.to_line()


async def test_export_writes_the_media_and_import_reads_them(
    pg: PostgresSessionStore, migrated_db: str, tmp_path: Path
) -> None:
    for entry in with_media():
        await pg.append(entry)

    await export_sessions(pg, tmp_path / "out")
    exported = read_session_file(tmp_path / "out" / f"{USER}.jsonl").entries
    other = await PostgresSessionStore.connect(migrated_db)
    try:
        async with other._connection() as conn:
            await conn.execute(
                "TRUNCATE botkit_sessions, botkit_session_heads, botkit_session_media"
            )
        await import_sessions(other, tmp_path / "out")
        imported = (await other.load(USER)).entries
    finally:
        await other.close()

    assert lines_of(exported) == lines_of(with_media())
    assert lines_of(imported) == lines_of(with_media())
