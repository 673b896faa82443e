"""Sessions in PostgreSQL: the entries of the JSONL files, one row each, numbered per conversation.

Each row holds the entry's JSONL line (without its newline) as text, so what is read back, or
exported, is byte for byte what was written. An append takes its conversation's next number under
the lock of that conversation's row in ``botkit_session_heads``: numbers commit in order, so a
reader that has seen up to N and asks for "everything after N" never misses an entry (another
worker's included). Within one process, appends to a conversation are numbered in call order.
The tables come from ``python -m botkit migrate``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import orjson
import structlog
from pydantic import ValidationError

from botkit.errors import ConfigError, SessionError
from botkit.sessions.base import NumberedSessionFile
from botkit.sessions.jsonl import (
    CompactionEntry,
    FeedbackEntry,
    ResetEntry,
    SessionEntry,
    parse_entry,
    with_media,
)
from botkit.sessions.locks import KeyedLocks
from botkit.sessions.media import externalize, references
from botkit.sessions.usage import stored_media

__all__ = ["PostgresSessionStore"]

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry

_RUN_MIGRATE = "run `python -m botkit migrate`"
_TABLES = ("botkit_sessions", "botkit_session_heads")


async def _kept(conn: Any) -> None:
    """A released connection's reset: none. asyncpg's default sends one more query per
    release (unlock advisory locks, close cursors, unlisten, reset settings), and this store
    leaves none of those behind: its locks are transaction-scoped, and asyncpg itself still
    rolls back a transaction left open."""


_DEFAULT_POOL: dict[str, Any] = {
    "min_size": 1,
    "max_size": 10,
    "reset": _kept,
    # asyncpg closes a connection idle for 300 s by a timer it sets at every release and
    # cancels at the next acquire: CPU on every statement (#34). Kept, a process holds the
    # connections its busiest moment opened, at most ``max_size``.
    "max_inactive_connection_lifetime": 0,
}

_APPEND = """
    WITH head AS (
        INSERT INTO botkit_session_heads AS h (conversation, last_seq) VALUES ($1, 1)
        ON CONFLICT (conversation) DO UPDATE SET last_seq = h.last_seq + 1
        RETURNING last_seq
    )
    INSERT INTO botkit_sessions (conversation, seq, entry, recorded_at)
    SELECT $1, last_seq, $2, $3 FROM head"""
_LOAD_AFTER = """
    SELECT seq, entry FROM botkit_sessions WHERE conversation = $1 AND seq > $2 ORDER BY seq"""
_LAST = "SELECT last_seq FROM botkit_session_heads WHERE conversation = $1"
_LOCK_HEAD = """
    INSERT INTO botkit_session_heads (conversation, last_seq) VALUES ($1, 0)
    ON CONFLICT (conversation) DO UPDATE SET last_seq = botkit_session_heads.last_seq
    RETURNING last_seq"""
_SET_HEAD = "UPDATE botkit_session_heads SET last_seq = $2 WHERE conversation = $1"
_COLUMNS = ["conversation", "seq", "entry", "recorded_at"]
_PUT_MEDIA = """
    INSERT INTO botkit_session_media (name, data) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"""
_GET_MEDIA = "SELECT name, data FROM botkit_session_media WHERE name = ANY($1::text[])"
MEDIA_LOCK = 0x626F746B69746D
"""The advisory lock an append with media holds shared and prune's media sweep exclusively."""
_MEDIA_IN_USE = f"SELECT pg_advisory_xact_lock_shared({MEDIA_LOCK})"
_DELETE_ENTRIES = "DELETE FROM botkit_sessions WHERE conversation = $1 AND seq = ANY($2::bigint[])"
_MEDIA_SWEEP = f"SELECT pg_advisory_xact_lock({MEDIA_LOCK})"
_UNREFERENCED = """
    FROM botkit_session_media WHERE split_part(name, '.', 1) NOT IN (
        SELECT (regexp_matches(s.entry, '"sha256":"([0-9a-f]{64})"', 'g'))[1]
        FROM botkit_sessions s
        WHERE (s.conversation, s.seq) NOT IN (
            SELECT * FROM unnest($1::text[], $2::bigint[]) AS gone (conversation, seq)))"""
_COUNT_UNREFERENCED = "SELECT name, octet_length(data) AS size" + _UNREFERENCED
_DELETE_UNREFERENCED = "DELETE" + _UNREFERENCED + " RETURNING name, octet_length(data) AS size"
_MEDIA_BYTES = """
    SELECT coalesce(sum(octet_length(data)), 0) FROM botkit_session_media
    WHERE name = ANY($1::text[])"""
_USER_MEDIA = """
    SELECT entry FROM botkit_sessions
    WHERE (conversation = $1 OR conversation LIKE 'chat\\_%') AND strpos(entry, '"stored"') > 0"""
_CONVERSATION_PAGE = """
    SELECT h.conversation, h.last_seq, s.recorded_at
    FROM botkit_session_heads h
    LEFT JOIN botkit_sessions s ON s.conversation = h.conversation AND s.seq = h.last_seq
    WHERE h.last_seq > 0
        AND ($1::text IS NULL OR h.conversation LIKE $1)
        AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM botkit_sessions t
            WHERE t.conversation = h.conversation AND t.entry ILIKE $2))
        AND ($5::timestamptz IS NULL OR s.recorded_at >= $5)
    ORDER BY s.recorded_at DESC NULLS LAST, h.conversation
    LIMIT $3 OFFSET $4"""
_CONVERSATIONS = """
    SELECT conversation FROM botkit_session_heads WHERE last_seq > 0 ORDER BY conversation"""

log = structlog.get_logger(__name__)


class PostgresSessionStore:
    """A :class:`~botkit.sessions.SessionStore` in PostgreSQL, over an asyncpg pool.

    It never creates tables: ``python -m botkit migrate`` does. Before its first query it checks
    that they are there, and raises :class:`ConfigError` if not. Database failures are
    :class:`SessionError`, without the password.
    """

    def __init__(self, pool: Any) -> None:
        self._pool: Any = pool
        self._dsn: str | None = None
        self._pool_options: dict[str, Any] = {}
        self._owns_pool = False
        self._schema_ok = False
        self._connecting = asyncio.Lock()
        self._order = KeyedLocks()

    @classmethod
    def lazy(cls, dsn: str, **pool_options: Any) -> PostgresSessionStore:
        """A store that makes its pool (``asyncpg.create_pool``) on first use, and closes it."""
        store = cls(None)
        store._dsn = dsn
        store._pool_options = {**_DEFAULT_POOL, **pool_options}
        store._owns_pool = True
        return store

    @classmethod
    async def connect(cls, dsn: str, **pool_options: Any) -> PostgresSessionStore:
        """A store on a new pool, connected and its tables checked now."""
        store = cls.lazy(dsn, **pool_options)
        try:
            await store.check_schema()
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def dsn(self) -> str | None:
        """The database a lazy store connects to (``None``: a pool was passed in)."""
        return self._dsn

    async def check_schema(self) -> None:
        """Raise :class:`ConfigError` unless the session tables exist."""
        pool = await self._ensure_pool()
        async with self._errors_converted(), pool.acquire() as conn:
            missing = [t for t in _TABLES if await _missing(conn, t)]
        if missing:
            raise ConfigError(
                f"the database lacks botkit's session tables ({', '.join(missing)}): {_RUN_MIGRATE}"
            )
        self._schema_ok = True

    async def close(self) -> None:
        """Close the pool if this store made it; a pool passed in is left to its owner."""
        async with self._connecting:
            if self._owns_pool and self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    async def append(self, entry: Entry) -> None:
        """Record ``entry`` as its conversation's next numbered row."""
        entry, blobs = _media_apart(entry)
        async with self._order.holding(entry.key), self._connection() as conn:
            if not blobs:
                await conn.execute(_APPEND, entry.key, *_stored(entry))
                return
            async with conn.transaction():  # prune deletes no media between these two
                await conn.execute(_MEDIA_IN_USE)
                await self._put_media(conn, blobs)
                await conn.execute(_APPEND, entry.key, *_stored(entry))

    async def load(self, key: int | str) -> NumberedSessionFile:
        """Everything recorded for a conversation (a user id, or a group's key), oldest first."""
        return await self.load_after(key, 0)

    async def load_stored(self, key: int | str) -> NumberedSessionFile:
        """Everything recorded for a conversation, its media left as references."""
        return await self.load_after(key, 0, media=False)

    async def load_after(
        self, key: int | str, seq: int, *, media: bool = True
    ) -> NumberedSessionFile:
        """The conversation's entries numbered after ``seq``; damaged rows reported by number.

        ``media=False`` leaves pictures and documents as references.
        """
        async with self._connection() as conn:
            rows = await conn.fetch(_LOAD_AFTER, str(key), seq)
            file = _numbered(str(key), [(row["seq"], row["entry"]) for row in rows], seq)
            return await self._with_media(conn, file) if media else file

    async def last_sequence(self, key: int | str) -> int:
        """The number of the conversation's last entry (0 when it has none)."""
        async with self._connection() as conn:
            last = await conn.fetchval(_LAST, str(key))
        return 0 if last is None else int(last)

    async def conversations(self) -> list[str]:
        """The keys of every conversation with entries, sorted."""
        async with self._connection() as conn:
            return [row["conversation"] for row in await conn.fetch(_CONVERSATIONS)]

    async def conversation_page(
        self,
        *,
        offset: int,
        limit: int,
        key_part: str | None = None,
        text: str | None = None,
        since: datetime | None = None,
    ) -> list[tuple[str, int, datetime | None]]:
        """A page of conversations, the latest written to first: (key, entries' last number,
        when the last was written); only keys containing ``key_part``, only those with an
        entry containing ``text`` (any case), only those written to ``since``, when given."""
        async with self._connection() as conn:
            rows = await conn.fetch(
                _CONVERSATION_PAGE,
                None if key_part is None else f"%{_like_escaped(key_part)}%",
                None if text is None else f"%{_like_escaped(text)}%",
                limit,
                offset,
                since,
            )
        return [(row["conversation"], row["last_seq"], row["recorded_at"]) for row in rows]

    async def lines(self, key: int | str) -> list[bytes]:
        """The conversation's entries as stored: JSONL lines, newline included, oldest first."""
        async with self._connection() as conn:
            rows = await conn.fetch(_LOAD_AFTER, str(key), 0)
        return [row["entry"].encode() + b"\n" for row in rows]

    async def import_entries(self, key: int | str, entries: Iterable[Entry]) -> int:
        """Record ``entries`` as a conversation that has none yet; how many it had before.

        A conversation that already has entries is left as it is (and its count returned), so
        importing the same session twice never duplicates it.
        """
        conversation = str(key)
        apart = [_media_apart(e) for e in entries]
        records = [(conversation, n, *_stored(e)) for n, (e, _) in enumerate(apart, start=1)]
        async with self._connection() as conn, conn.transaction():
            existing = int(await conn.fetchval(_LOCK_HEAD, conversation))
            if existing or not records:
                return existing
            await self._put_media(conn, {k: v for _, blobs in apart for k, v in blobs.items()})
            await conn.copy_records_to_table("botkit_sessions", records=records, columns=_COLUMNS)
            await conn.execute(_SET_HEAD, conversation, len(records))
        return 0

    async def media(self, names: Iterable[str]) -> dict[str, bytes]:
        """The stored media of these names (those that are gone are left out)."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        async with self._connection() as conn:
            found = await _fetch_media(conn, wanted)
        for name in set(wanted) - found.keys():
            log.warning("session.media_missing", media=name)
        return found

    async def delete_entries(self, key: int | str, seqs: Sequence[int]) -> None:
        """Delete the conversation's entries of these numbers (the others keep theirs)."""
        async with self._connection() as conn:
            await conn.execute(_DELETE_ENTRIES, str(key), list(seqs))

    async def unreferenced_media(
        self, *, excluding: Sequence[tuple[str, int]] = (), delete: bool
    ) -> list[tuple[str, int]]:
        """Media no entry refers to (ignoring the ``excluding`` entries): names and sizes.

        With ``delete`` they are deleted, under the advisory lock an append with media holds
        shared, so media an entry being written refers to are never among them.
        """
        gone = ([key for key, _ in excluding], [seq for _, seq in excluding])
        async with self._connection() as conn:
            if not delete:
                rows = await conn.fetch(_COUNT_UNREFERENCED, *gone)
            else:
                async with conn.transaction():
                    await conn.execute(_MEDIA_SWEEP)
                    rows = await conn.fetch(_DELETE_UNREFERENCED, *gone)
        return sorted((row["name"], int(row["size"])) for row in rows)

    async def user_media_bytes(self, user_id: int) -> int:
        """The bytes of the media ``user_id`` has stored in every conversation they write in
        (their private one and the groups'), each file once: the quota is per user."""
        async with self._connection() as conn:
            rows = await conn.fetch(_USER_MEDIA, str(user_id))
            names = stored_media((row["entry"] for row in rows), user_id)
            if not names:
                return 0
            return int(await conn.fetchval(_MEDIA_BYTES, sorted(names)))

    async def media_bytes(self, key: int | str, user_id: int) -> int:
        """The bytes of the media ``user_id`` has stored in a conversation (for the quota)."""
        async with self._connection() as conn:
            rows = await conn.fetch(_LOAD_AFTER, str(key), 0)
            names = stored_media((row["entry"] for row in rows), user_id)
            if not names:
                return 0
            return int(await conn.fetchval(_MEDIA_BYTES, sorted(names)))

    async def _put_media(self, conn: Any, blobs: dict[str, bytes]) -> None:
        if blobs:
            await conn.executemany(_PUT_MEDIA, list(blobs.items()))

    async def _with_media(self, conn: Any, file: NumberedSessionFile) -> NumberedSessionFile:
        """``file`` with the media its entries refer to put back."""
        names = {
            n for e in file.entries if isinstance(e, SessionEntry) for n in references(e.content)
        }
        if not names:
            return file
        found = await _fetch_media(conn, sorted(names))
        for name in names - found.keys():
            log.warning("session.media_missing", media=name)
        entries = [with_media(e, found.get) for e in file.entries]
        return replace(file, entries=entries)

    async def _ensure_pool(self) -> Any:
        """The pool, made on first use by a lazy store."""
        if self._pool is not None:
            return self._pool
        async with self._connecting:
            if self._pool is None:
                self._pool = await self._create_pool()
        return self._pool

    async def _create_pool(self) -> Any:
        dsn = self._dsn or ""
        try:
            return await asyncpg.create_pool(dsn, **self._pool_options)
        except (OSError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            message = _without_password(str(e), dsn)
            raise SessionError(f"cannot connect to the session database: {message}") from e

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        """A pooled connection, once the tables are known to be there."""
        if not self._schema_ok:
            await self.check_schema()
        pool = await self._ensure_pool()
        async with self._errors_converted(), pool.acquire() as conn:
            yield conn

    @asynccontextmanager
    async def _errors_converted(self) -> AsyncIterator[None]:
        """asyncpg's errors as botkit's: a missing table says to migrate, the rest SessionError."""
        try:
            yield
        except asyncpg.UndefinedTableError as e:
            raise ConfigError(f"{e}: {_RUN_MIGRATE}") from e
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            message = _without_password(str(e), self._dsn or "")
            raise SessionError(f"session database: {message}") from e


async def _missing(conn: Any, table: str) -> bool:
    return await conn.fetchval("SELECT to_regclass($1)", table) is None


def _numbered(key: str, rows: list[tuple[int, str]], after: int) -> NumberedSessionFile:
    """Rows parsed into entries; a row that does not parse is reported with its number."""
    entries: list[Entry] = []
    numbers: list[int] = []
    problems: list[tuple[int, str]] = []
    for seq, line in rows:
        try:
            entries.append(parse_entry(line))
            numbers.append(seq)
        except (orjson.JSONDecodeError, ValidationError) as e:
            reason = (str(e).splitlines() or [type(e).__name__])[0]
            problems.append((seq, reason))
            log.warning("session.row_skipped", conversation=key, seq=seq, reason=reason)
    last = rows[-1][0] if rows else after
    return NumberedSessionFile(entries, problems, numbers=numbers, last_seq=last)


async def _fetch_media(conn: Any, names: list[str]) -> dict[str, bytes]:
    return {row["name"]: bytes(row["data"]) for row in await conn.fetch(_GET_MEDIA, names)}


def _media_apart(entry: Entry) -> tuple[Entry, dict[str, bytes]]:
    """The entry with references for its media, and the media's bytes to store."""
    if not isinstance(entry, SessionEntry):
        return entry, {}
    content, blobs = externalize(entry.content)
    return (entry.model_copy(update={"content": content}) if blobs else entry), blobs


def _stored(entry: Entry) -> tuple[str, datetime]:
    """What a row holds of ``entry``: its JSONL line (no newline), and when it was written."""
    stamp = entry.timestamp if entry.timestamp.tzinfo else entry.timestamp.replace(tzinfo=UTC)
    return entry.to_line().rstrip(b"\n").decode(), stamp


def _without_password(text: str, dsn: str) -> str:
    """``text`` with the DSN's password, if it shows, replaced by ``***``."""
    try:
        password = urlsplit(dsn).password
    except ValueError:
        return text
    return text.replace(password, "***") if password else text


def _like_escaped(text: str) -> str:
    """``text`` matched literally by LIKE (its ``%``, ``_`` and ``\\`` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
