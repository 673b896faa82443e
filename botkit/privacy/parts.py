"""The parts of what botkit holds about a user, each able to forget and to export it.

A feature that keeps something about users adds a ``Part`` to ``default_parts``
(``botkit.privacy.defaults``; or passes its own list to ``forget_user`` / ``export_user``):
``forget`` deletes it, ``export`` writes it into the export folder and returns the files it
wrote with a line about each.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol

import orjson

from botkit.config import Settings
from botkit.memory.store import MemoryStore
from botkit.privacy.sessions import media_of, own_conversations, own_keys, referenced_media
from botkit.privacy.sqlite import leave_no_trace
from botkit.sessions.jsonl import JsonlSessionStore

__all__ = [
    "InboxPart",
    "MemoryPart",
    "Part",
    "RecordsPart",
    "SessionsPart",
]

Described = dict[str, str]
"""Files an export wrote (relative to its folder), each with what it holds."""


class Part(Protocol):
    """One kind of data about a user."""

    name: str

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete the user's data of this kind; how many items went."""
        ...

    async def export(self, user_id: int, folder: Path) -> Described:
        """Write the user's data of this kind under ``folder``."""
        ...


_per_user_keys = own_keys


class SessionsPart:
    """The user's private conversation (its JSONL file, or its PostgreSQL rows); exported with
    their per-member group conversations and the media all of these refer to."""

    name = "sessions"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete the private conversation.

        On PostgreSQL its head row stays, numbered on past its last entry: a worker that cached
        the conversation at any number it ever had sees it changed and rebuilds it (numbering
        from 1 again could meet a cached number and hand out the erased context).
        """
        if self.settings.database_url is None:
            path = JsonlSessionStore(self.settings.sessions_dir).path_for(user_id)
            existed = path.exists()
            path.unlink(missing_ok=True)
            return int(existed)
        async with _pg(self.settings) as conn, conn.transaction():
            return await forget_rows(conn, str(user_id))

    async def export(self, user_id: int, folder: Path) -> Described:
        """Each conversation as JSONL (one entry a line), its media in ``media/``."""
        described: Described = {}
        names: set[str] = set()
        for key, data in await own_conversations(self.settings, user_id):
            if not data:
                continue
            target = folder / "sessions" / f"{key}.jsonl"
            _write(target, data)
            described[str(target.relative_to(folder))] = _conversation_text(key, user_id)
            names |= referenced_media(data)
        for name, data in (await media_of(self.settings, names)).items():
            target = folder / "media" / name
            _write(target, data)
            described[str(target.relative_to(folder))] = "a picture or document you sent or got"
        return described


async def forget_rows(conn: Any, key: str) -> int:
    """Delete a conversation's rows, its head moved past their numbers; how many went."""
    gone: str = await conn.execute("DELETE FROM botkit_sessions WHERE conversation = $1", key)
    await conn.execute(
        "UPDATE botkit_session_heads SET last_seq = last_seq + 1 WHERE conversation = $1", key
    )
    return int(gone.split()[-1])


def _conversation_text(key: str, user_id: int) -> str:
    if key == str(user_id):
        return "your private conversation, one entry a line"
    return "your own conversation in a group, one entry a line"


class MemoryPart:
    """The long-term memory of the user's private conversation (and per-member group ones)."""

    name = "memory"

    def __init__(self, store: MemoryStore, settings: Settings | None = None) -> None:
        self.store = store
        self.settings = settings
        """Where the sessions are, to find the shared groups the user writes in (export)."""

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete those memories."""
        keys = _per_user_keys(await self.store.keys(), user_id)
        for key in keys:
            await self.store.clear(key)
        await self.store.close()
        return len(keys)

    async def export(self, user_id: int, folder: Path) -> Described:
        """Each memory file as a file: their own, and those of the shared groups they write in
        (which an erasure does not edit: the model wrote them from what every member said)."""
        described: Described = {}
        keys = await self.store.keys()
        groups = await self._shared_groups(user_id, keys)
        for key in [*_per_user_keys(keys, user_id), *groups]:
            about = (
                "a file of the memory of a group you write in (the model's notes from what "
                "its members said; an erasure keeps it)"
                if key in groups
                else "a file of the bot's memory of you"
            )
            for path, text in (await self.store.load(key)).items():
                target = folder / "memory" / key / _storable(path)
                _write(target, text.encode("utf-8"))
                described[str(target.relative_to(folder))] = about
        await self.store.close()
        return described

    async def _shared_groups(self, user_id: int, keys: list[str]) -> list[str]:
        """The shared group conversations with a memory that ``user_id`` wrote in."""
        shared = [k for k in keys if k.startswith("chat_") and "_user_" not in k]
        if self.settings is None or not shared:
            return []
        if self.settings.database_url is None:
            return await asyncio.to_thread(self._written_in_files, user_id, shared)
        async with _pg(self.settings) as conn:
            rows = await conn.fetch(
                """SELECT DISTINCT conversation FROM botkit_sessions
                WHERE conversation = ANY($1::text[]) AND strpos(entry, $2) > 0""",
                shared,
                f'"user_id":{user_id},',
            )
        return sorted(row["conversation"] for row in rows)

    def _written_in_files(self, user_id: int, shared: list[str]) -> list[str]:
        assert self.settings is not None
        mark = f'"user_id":{user_id},'.encode()
        found = []
        for key in shared:
            path = self.settings.sessions_dir / f"{key}.jsonl"
            with suppress(FileNotFoundError):
                if mark in path.read_bytes():
                    found.append(key)
        return found


def _storable(path: str) -> str:
    """A memory path as a file system takes it: a name too long for one (accepted before
    botkit capped them) keeps its start and gains a hash of the whole."""
    parts = []
    for part in path.split("/"):
        if len(part.encode("utf-8")) > 128:
            digest = hashlib.sha256(part.encode("utf-8")).hexdigest()[:16]
            part = f"{part[:64]}-{digest}"
        parts.append(part)
    return "/".join(parts)


class RecordsPart:
    """Rows with the user's id in the user store (SQLite or PostgreSQL): the user record,
    token usage, schedules, time zone, task runs, and any table a feature adds with a
    ``user_id`` column; invites they created stop naming them."""

    name = "records"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete the rows (with ``keep_block``, a blocked record without a name stays)."""
        tables = await self._tables()
        gone = 0
        for table in tables:
            if table in KEPT:
                continue
            if table == "botkit_users" and keep_block:
                await self._run(
                    "UPDATE botkit_users SET blocked = {true}, display_name = NULL "
                    "WHERE user_id = {0}",
                    user_id,
                )
                continue
            gone += await self._run(f"DELETE FROM {table} WHERE user_id = {{0}}", user_id)
        await self._run(
            "UPDATE botkit_invites SET created_by = NULL WHERE created_by = {0}", user_id
        )
        return gone

    async def export(self, user_id: int, folder: Path) -> Described:
        """One JSON file per table holding rows of the user."""
        described: Described = {}
        for table in await self._tables():
            rows = await self._rows(f"SELECT * FROM {table} WHERE user_id = {{0}}", user_id)
            if rows:
                target = folder / "records" / f"{table.removeprefix('botkit_')}.json"
                _write(target, json.dumps(rows, indent=2, default=str).encode("utf-8"))
                described[str(target.relative_to(folder))] = _TABLE_TEXTS.get(
                    table, f"your rows of {table}"
                )
        return described

    async def _tables(self) -> list[str]:
        """The botkit tables with a ``user_id`` column (but approvals: a part of their own)."""
        return [name for name in await self._all_tables() if name != "botkit_approvals"]

    async def _all_tables(self) -> list[str]:
        if self.settings.database_url is None:
            names = [
                row["name"]
                for row in await self._rows(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'botkit_%'"
                )
            ]
            return [
                name
                for name in names
                if any(
                    c["name"] == "user_id" for c in await self._rows(f"PRAGMA table_info({name})")
                )
            ]
        rows = await self._rows(
            "SELECT table_name AS name FROM information_schema.columns WHERE column_name = "
            "'user_id' AND table_name LIKE 'botkit_%' AND table_schema = current_schema()"
        )
        return sorted(row["name"] for row in rows)

    async def _columns(self, table: str) -> set[str]:
        return {column["name"] for column in await self._rows(f"PRAGMA table_info({table})")}

    async def _rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        if self.settings.database_url is None:
            return await asyncio.to_thread(self._sqlite, query, args, fetch=True)
        async with _pg(self.settings) as conn:
            return [dict(row) for row in await conn.fetch(_numbered(query), *args)]

    async def _run(self, query: str, *args: Any) -> int:
        if self.settings.database_url is None:
            return len(await asyncio.to_thread(self._sqlite, query, args, fetch=False))
        async with _pg(self.settings) as conn:
            status: str = await conn.execute(_numbered(query), *args)
        return int(status.split()[-1])

    def _sqlite(self, query: str, args: tuple[Any, ...], *, fetch: bool) -> list[dict[str, Any]]:
        path = self.settings.database_path or self.settings.sessions_dir / "botkit.db"
        if not Path(path).exists():
            return []
        db = sqlite3.connect(path)
        db.row_factory = sqlite3.Row
        try:
            if not fetch:
                db.execute("PRAGMA secure_delete = ON")  # the freed pages are zeroed
            cursor = db.execute(query.format(*["?"] * len(args), true=1), args)
            if fetch:
                return [dict(row) for row in cursor.fetchall()]
            db.commit()
            leave_no_trace(db)
            return [{}] * max(cursor.rowcount, 0)
        finally:
            db.close()


KEPT = frozenset({"botkit_payments"})
"""Tables an erasure keeps the user's rows of: payment records (a refund needs the charge id,
and tax law requires keeping them); ``users export`` includes them."""

_TABLE_TEXTS = {
    "botkit_payments": "your payments (kept after an erasure: refunds and tax law need them)",
    "botkit_handoffs": "your conversations handed to a person",
    "botkit_choices": "the model, persona and standing instructions you chose per conversation",
    "botkit_users": "your user record: role, name, when you joined, whether you are blocked",
    "botkit_usage": "tokens you used per day",
    "botkit_model_usage": "tokens you used per day and model",
    "botkit_schedules": "your reminders and scheduled tasks",
    "botkit_timezones": "your time zone",
    "botkit_voice_modes": "whether the bot answers you with voice notes (/voice)",
    "botkit_task_runs": "when your scheduled tasks ran",
    "botkit_console_links": "sign-in links to the operators' console you asked for (hashed)",
}


class InboxPart:
    """Copies of the user's updates in the inbox journal (files runtime)."""

    name = "inbox"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Rewrite the journal without the lines holding the user's updates."""
        try:
            lines = self.path.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            return 0
        kept = [line for line in lines if not _from_user(line, user_id)]
        if len(kept) != len(lines):
            temporary = self.path.with_suffix(".forget")
            _write(temporary, b"".join(kept))
            os.replace(temporary, self.path)
        return len(lines) - len(kept)

    async def export(self, user_id: int, folder: Path) -> Described:
        """Nothing of its own: the updates' texts are in the sessions."""
        return {}


def _from_user(line: bytes, user_id: int) -> bool:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return _has_sender(record, user_id)


def _has_sender(value: Any, user_id: int) -> bool:
    if isinstance(value, Mapping):
        sender = value.get("from")
        if isinstance(sender, Mapping) and sender.get("id") == user_id:
            return True
        return any(_has_sender(v, user_id) for v in value.values())
    if isinstance(value, list):
        return any(_has_sender(v, user_id) for v in value)
    return False


def _numbered(query: str) -> str:
    """A ``{0}``-style query in PostgreSQL's ``$1`` style."""
    return query.format(*[f"${i + 1}" for i in range(9)], true="true")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


class _pg:
    """One PostgreSQL connection for a command-line run."""

    def __init__(self, settings: Settings) -> None:
        assert settings.database_url is not None
        self.dsn = settings.database_url.get_secret_value()
        self.conn: Any = None

    async def __aenter__(self) -> Any:
        import asyncpg  # type: ignore[import-untyped]

        self.conn = await asyncpg.connect(self.dsn)
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        await self.conn.close()
