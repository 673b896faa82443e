"""The default user store: one SQLite file, no server, the schema made on first use."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from typing import Any

import aiosqlite
import structlog

from botkit.errors import ConfigError, StoreError
from botkit.stores._sqlite_console import CONSOLE_SCHEMA, SqliteConsoleLinks
from botkit.stores._sqlite_handoffs import HANDOFF_SCHEMA, SqliteHandoffs
from botkit.stores._sqlite_schedules import (
    SCHEDULE_SCHEMA,
    SqliteSchedules,
    upgrade_schedule_table,
)
from botkit.stores.base import (
    INVITE_PREFIX_LENGTH,
    DailyUsage,
    Invite,
    ModelUsage,
    RedeemFailure,
    RedeemResult,
    RevokeResult,
    StoredInvite,
    UserRecord,
    check_tokens,
    hash_invite_code,
    is_invite_prefix,
    new_invite,
    token_kinds,
    utc,
)
from botkit.types import Usage

__all__ = ["SCHEMA_VERSION", "SqliteUserStore"]

SCHEMA_VERSION = 2
"""Kept in the file's ``PRAGMA user_version``; a newer file is refused.

1: invite codes in plain text. 2: only their SHA-256 and prefix (converted on open).
"""

_MIN_SQLITE = (3, 35, 0)  # RETURNING
_PRIVATE_FILE = 0o600
_SIDE_FILES = ("-wal", "-shm", "-journal")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order

_CREATE_INVITES = """CREATE TABLE IF NOT EXISTS botkit_invites (
        code_hash   TEXT    PRIMARY KEY CHECK (length(code_hash) = 64),
        code_prefix TEXT    NOT NULL,
        role        TEXT    NOT NULL,
        uses_left   INTEGER NOT NULL CHECK (uses_left >= 0),
        expires_at  TEXT,
        created_by  INTEGER,
        created_at  TEXT    NOT NULL
    )"""

log = structlog.get_logger(__name__)

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS botkit_users (
        user_id      INTEGER PRIMARY KEY,
        role         TEXT    NOT NULL,
        display_name TEXT,
        joined_at    TEXT    NOT NULL,
        blocked      INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS botkit_users_role_idx ON botkit_users (role)",
    _CREATE_INVITES,
    """CREATE TABLE IF NOT EXISTS botkit_usage (
        user_id INTEGER NOT NULL,
        day     TEXT    NOT NULL,
        tokens  INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
        PRIMARY KEY (user_id, day)
    )""",
    *SCHEDULE_SCHEMA,
    *HANDOFF_SCHEMA,
    *CONSOLE_SCHEMA,
    """CREATE TABLE IF NOT EXISTS botkit_model_usage (
        user_id               INTEGER NOT NULL,
        day                   TEXT    NOT NULL,
        model                 TEXT    NOT NULL,
        input_tokens          INTEGER NOT NULL DEFAULT 0,
        output_tokens         INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
        cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0,
        audio_seconds         INTEGER NOT NULL DEFAULT 0,
        spoken_chars          INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, day, model)
    )""",
    """CREATE TABLE IF NOT EXISTS botkit_voice_modes (
        user_id      INTEGER NOT NULL,
        conversation TEXT    NOT NULL,
        mode         TEXT    NOT NULL CHECK (mode IN ('off', 'mirror', 'always')),
        updated_at   TEXT    NOT NULL,
        PRIMARY KEY (user_id, conversation)
    )""",
)
_ADDED_USAGE_COLUMNS = ("cache_write_1h_tokens", "audio_seconds", "spoken_chars")
"""Added to ``botkit_model_usage`` since (#49, #46): a file an earlier botkit made gets them."""

_USER = "user_id, role, display_name, joined_at, blocked"
_INVITE = "role, uses_left, expires_at, created_by, created_at"
_INSERT_INVITE = f"""
    INSERT INTO botkit_invites (code_hash, code_prefix, {_INVITE}) VALUES (?, ?, ?, ?, ?, ?, ?)"""

_UPSERT_USER = f"""
    INSERT INTO botkit_users (user_id, role, display_name, joined_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (user_id) DO UPDATE SET
        role = excluded.role,
        display_name = coalesce(excluded.display_name, botkit_users.display_name)
    RETURNING {_USER}"""
_BLOCK_USER = f"""
    INSERT INTO botkit_users (user_id, role, joined_at, blocked) VALUES (?, ?, ?, 1)
    ON CONFLICT (user_id) DO UPDATE SET blocked = 1
    RETURNING {_USER}"""
_LIST_USERS = f"""
    SELECT {_USER} FROM botkit_users
    WHERE (?1 IS NULL OR role = ?1) AND (?2 IS NULL OR blocked = ?2)
    ORDER BY joined_at, user_id LIMIT ?3 OFFSET ?4"""
_LISTED = f"code_hash, code_prefix, {_INVITE}"
_INVITE_BY_HASH = f"SELECT {_LISTED} FROM botkit_invites WHERE code_hash = ?"
_INVITES_BY_PREFIX = f"""
    SELECT {_LISTED} FROM botkit_invites WHERE substr(code_prefix, 1, length(?1)) = ?1
    ORDER BY created_at, code_hash"""
_INSERT_USER = f"""
    INSERT INTO botkit_users (user_id, role, display_name, joined_at) VALUES (?, ?, ?, ?)
    RETURNING {_USER}"""
_TAKE_USE = """
    UPDATE botkit_invites SET uses_left = uses_left - 1
    WHERE code_hash = ? AND uses_left > 0 AND (expires_at IS NULL OR expires_at > ?)
    RETURNING role"""
_ADD_USAGE = """
    INSERT INTO botkit_usage (user_id, day, tokens) VALUES (?, ?, ?)
    ON CONFLICT (user_id, day) DO UPDATE SET tokens = botkit_usage.tokens + excluded.tokens"""

_ADD_MODEL_USAGE = """
    INSERT INTO botkit_model_usage (user_id, day, model, input_tokens, output_tokens,
        cache_read_tokens, cache_creation_tokens, cache_write_1h_tokens, audio_seconds,
        spoken_chars)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (user_id, day, model) DO UPDATE SET
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
        cache_creation_tokens = cache_creation_tokens + excluded.cache_creation_tokens,
        cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
        audio_seconds = audio_seconds + excluded.audio_seconds,
        spoken_chars = spoken_chars + excluded.spoken_chars"""
_MODEL_USAGE_SINCE = """
    SELECT user_id, day, model, input_tokens, output_tokens, cache_read_tokens,
        cache_creation_tokens, cache_write_1h_tokens, audio_seconds, spoken_chars
    FROM botkit_model_usage WHERE day >= ? ORDER BY day, user_id, model"""
_SET_VOICE_MODE = """
    INSERT INTO botkit_voice_modes (user_id, conversation, mode, updated_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (user_id, conversation) DO UPDATE SET mode = excluded.mode,
        updated_at = excluded.updated_at"""


def _model_usage(user_id: int, day: date, model: str, *tokens: int) -> ModelUsage:
    inputs, outputs, reads, writes, hour_writes, heard, spoken = (int(t) for t in tokens)
    usage = Usage(
        input_tokens=inputs,
        output_tokens=outputs,
        cache_read_input_tokens=reads,
        cache_creation_input_tokens=writes,
        cache_write_1h_tokens=hour_writes,
        audio_seconds=heard,
        spoken_chars=spoken,
    )
    return ModelUsage(int(user_id), day, model, usage)


def _to_db(moment: datetime) -> str:
    return utc(moment).strftime(_TIME_FORMAT)


def _from_db(text: str) -> datetime:
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


def _user(row: Sequence[Any]) -> UserRecord:
    user_id, role, display_name, joined_at, blocked = row
    return UserRecord(user_id, role, display_name, _from_db(joined_at), bool(blocked))


def _invite(code: str, row: Sequence[Any]) -> Invite:
    role, uses_left, expires_at, created_by, created_at = row
    expires = None if expires_at is None else _from_db(expires_at)
    return Invite(code, role, uses_left, expires, created_by, _from_db(created_at))


def _stored_invite(row: Sequence[Any]) -> StoredInvite:
    prefix, role, uses_left, expires_at, created_by, created_at = row
    expires = None if expires_at is None else _from_db(expires_at)
    return StoredInvite(prefix, role, uses_left, expires, created_by, _from_db(created_at))


def _first(rows: Iterable[Sequence[Any]]) -> Sequence[Any] | None:
    return next(iter(rows), None)


def _one(rows: Iterable[Sequence[Any]]) -> Sequence[Any]:
    return next(iter(rows))


class SqliteUserStore(SqliteSchedules, SqliteHandoffs, SqliteConsoleLinks):
    """A :class:`~botkit.stores.UserStore` in one SQLite file.

    The file and its tables are made on first use, the file readable by its owner only (as
    are the ``-wal`` and ``-shm`` files SQLite makes beside it). One store holds one
    connection and runs one operation at a time on it; several stores (or processes) may
    share a file, as every write is a ``BEGIN IMMEDIATE`` transaction, waiting up to
    ``busy_timeout`` seconds for another's to finish. A file that cannot be opened is a
    :class:`ConfigError`; a database that fails afterwards (locked past ``busy_timeout``, say)
    a :class:`StoreError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        """The database file (or ``":memory:"``)."""
        self._busy_timeout = busy_timeout
        self._db: aiosqlite.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def connect(
        cls, path: str | os.PathLike[str], *, busy_timeout: float = 30.0
    ) -> SqliteUserStore:
        """A store on ``path``, opened now and its schema made, rather than on first use."""
        store = cls(path, busy_timeout=busy_timeout)
        async with store._lock:
            await store._connection()
        return store

    async def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        async with self._lock:
            self._closed = True
            if self._reader is not None:
                reader, self._reader = self._reader, None
                reader.close()
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()

    async def get_user(self, user_id: int) -> UserRecord | None:
        """The user, or ``None`` if they are not registered."""
        sql = f"SELECT {_USER} FROM botkit_users WHERE user_id = ?"
        row = _first(await self._point_read(sql, (user_id,), "reading a user"))
        return None if row is None else _user(row)

    async def upsert_user(
        self, user_id: int, role: str, display_name: str | None = None
    ) -> UserRecord:
        """Register the user, or set their role (and their name, if given) if registered."""
        now = _to_db(datetime.now(UTC))
        async with self._transaction("registering a user") as db:
            rows = await db.execute_fetchall(_UPSERT_USER, (user_id, role, display_name, now))
        return _user(_one(rows))

    async def set_blocked(self, user_id: int, blocked: bool) -> bool:
        """Block or unblock a user; ``False`` if there is no such user."""
        sql = "UPDATE botkit_users SET blocked = ? WHERE user_id = ? RETURNING user_id"
        async with self._transaction("blocking or unblocking a user") as db:
            rows = await db.execute_fetchall(sql, (int(blocked), user_id))
        return _first(rows) is not None

    async def set_role(self, user_id: int, role: str) -> bool:
        """Change a user's role; ``False`` if there is no such user."""
        sql = "UPDATE botkit_users SET role = ? WHERE user_id = ? RETURNING user_id"
        async with self._transaction("changing a user's role") as db:
            rows = await db.execute_fetchall(sql, (role, user_id))
        return _first(rows) is not None

    async def block_user(self, user_id: int, role: str = "user") -> UserRecord:
        """Block the user; one never registered is registered now, with ``role``, blocked."""
        async with self._transaction("blocking a user") as db:
            rows = await db.execute_fetchall(
                _BLOCK_USER, (user_id, role, _to_db(datetime.now(UTC)))
            )
        return _user(_one(rows))

    async def list_users(
        self,
        role: str | None = None,
        *,
        blocked: bool | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[UserRecord]:
        """Every user (or those with ``role``, or ``blocked`` or not), in the order they joined;
        from the ``offset``-th, at most ``limit`` of them (all, with ``None``)."""
        flag = None if blocked is None else int(blocked)
        async with self._read("listing users") as db:
            values = (role, flag, -1 if limit is None else limit, offset)
            rows = await db.execute_fetchall(_LIST_USERS, values)
        return [_user(row) for row in rows]

    async def create_invite(
        self,
        role: str,
        uses: int = 1,
        expires_at: datetime | None = None,
        created_by: int | None = None,
    ) -> Invite:
        """A new invite with a fresh code, redeemable ``uses`` times until ``expires_at``."""
        invite = new_invite(role, uses, expires_at, created_by)
        expires = None if invite.expires_at is None else _to_db(invite.expires_at)
        created = _to_db(invite.created_at)
        values = (invite.code_hash, invite.prefix, role, uses, expires, created_by, created)
        async with self._transaction("creating an invite") as db:
            await db.execute_fetchall(_INSERT_INVITE, values)
        return invite

    async def get_invite(self, code: str) -> Invite | None:
        """The invite with this code, or ``None``."""
        async with self._read("reading an invite") as db:
            return await self._get_invite(db, code)

    async def redeem_invite(
        self, code: str, user_id: int, display_name: str | None = None
    ) -> RedeemResult:
        """Atomically take one use of the invite and register the user with its role.

        A user who is already registered keeps their record and role, takes no use of
        the invite, and gets a success with ``already_registered`` set, whatever the code.
        """
        now = datetime.now(UTC)
        async with self._transaction("redeeming an invite") as db:
            rows = await db.execute_fetchall(
                f"SELECT {_USER} FROM botkit_users WHERE user_id = ?", (user_id,)
            )
            if (existing := _first(rows)) is not None:
                return RedeemResult.success(_user(existing), already_registered=True)
            code_hash = hash_invite_code(code)
            taken = _first(await db.execute_fetchall(_TAKE_USE, (code_hash, _to_db(now))))
            if taken is None:
                invite = await self._get_invite(db, code)
                if invite is None:
                    return RedeemResult.failed(RedeemFailure.UNKNOWN)
                return RedeemResult.failed(invite.refusal(now) or RedeemFailure.USED_UP)
            values = (user_id, taken[0], display_name, _to_db(now))
            rows = await db.execute_fetchall(_INSERT_USER, values)
        return RedeemResult.success(_user(_one(rows)))

    async def list_invites(self) -> list[StoredInvite]:
        """Every invite, used up and expired ones too, oldest first."""
        sql = f"SELECT code_prefix, {_INVITE} FROM botkit_invites ORDER BY created_at, code_hash"
        async with self._read("listing invites") as db:
            rows = await db.execute_fetchall(sql)
        return [_stored_invite(row) for row in rows]

    async def revoke_invite(self, code: str) -> RevokeResult:
        """Delete the invite with this code, or the only one whose prefix starts with it.

        ``code`` is a whole code, or up to :data:`INVITE_PREFIX_LENGTH` leading characters
        of one; a prefix several invites share revokes none of them.
        """
        async with self._transaction("revoking an invite") as db:
            rows = list(await db.execute_fetchall(_INVITE_BY_HASH, (hash_invite_code(code),)))
            if not rows and is_invite_prefix(code):
                rows = list(await db.execute_fetchall(_INVITES_BY_PREFIX, (code,)))
            if len(rows) == 1:
                await db.execute("DELETE FROM botkit_invites WHERE code_hash = ?", (rows[0][0],))
        return RevokeResult(tuple(_stored_invite(row[1:]) for row in rows))

    async def add_usage(self, user_id: int, day: date, tokens: int) -> None:
        """Add ``tokens`` to what the user spent on ``day``."""
        values = (user_id, day.isoformat(), check_tokens(tokens))
        async with self._transaction("adding token usage") as db:
            await db.execute_fetchall(_ADD_USAGE, values)

    async def add_usages(self, entries: Sequence[tuple[int, date, int]]) -> None:
        """Add tokens to what each user spent on a day, ``(user_id, day, tokens)`` each, in
        one transaction."""
        values = [(user, day.isoformat(), check_tokens(tokens)) for user, day, tokens in entries]
        async with self._transaction("adding token usage") as db:
            await db.executemany(_ADD_USAGE, values)

    async def usage_on(self, user_id: int, day: date) -> int:
        """The tokens the user spent on ``day`` (0 if none)."""
        sql = "SELECT tokens FROM botkit_usage WHERE user_id = ? AND day = ?"
        row = _first(await self._point_read(sql, (user_id, day.isoformat()), "reading token usage"))
        return 0 if row is None else int(row[0])

    async def usage_since(self, first_day: date) -> list[DailyUsage]:
        """What each user spent on each day from ``first_day`` on, by day, then user id."""
        sql = "SELECT user_id, day, tokens FROM botkit_usage WHERE day >= ? ORDER BY day, user_id"
        async with self._read("listing token usage") as db:
            rows = await db.execute_fetchall(sql, (first_day.isoformat(),))
        return [DailyUsage(int(u), date.fromisoformat(d), int(t)) for u, d, t in rows]

    async def add_model_usage(self, entries: Sequence[ModelUsage]) -> None:
        """Add each entry's tokens to its user, day and model (all in one transaction)."""
        rows = [(e.user_id, e.day.isoformat(), e.model, *token_kinds(e.usage)) for e in entries]
        if not rows:
            return
        async with self._transaction("adding token usage per model") as db:
            await db.executemany(_ADD_MODEL_USAGE, rows)

    async def model_usage_since(self, first_day: date) -> list[ModelUsage]:
        """Tokens per user, day and model from ``first_day`` on, by day, user id, model."""
        async with self._read("listing token usage per model") as db:
            rows = await db.execute_fetchall(_MODEL_USAGE_SINCE, (first_day.isoformat(),))
        return [_model_usage(u, date.fromisoformat(d), *rest) for u, d, *rest in rows]

    async def get_voice_mode(self, owner_id: int, conversation: str) -> str | None:
        """The ``/voice`` choice of ``owner_id``'s ``conversation`` (``off``, ``mirror``,
        ``always``), or ``None``."""
        sql = "SELECT mode FROM botkit_voice_modes WHERE user_id = ? AND conversation = ?"
        params = (owner_id, conversation)
        row = _first(await self._point_read(sql, params, "reading a voice choice"))
        return None if row is None else str(row[0])

    async def set_voice_mode(self, owner_id: int, conversation: str, mode: str) -> None:
        """Remember ``mode`` as the ``/voice`` choice of ``owner_id``'s ``conversation``."""
        values = (owner_id, conversation, mode, _to_db(datetime.now(UTC)))
        async with self._transaction("setting a voice choice") as db:
            await db.execute_fetchall(_SET_VOICE_MODE, values)

    @staticmethod
    async def _get_invite(db: aiosqlite.Connection, code: str) -> Invite | None:
        sql = f"SELECT {_INVITE} FROM botkit_invites WHERE code_hash = ?"
        row = _first(await db.execute_fetchall(sql, (hash_invite_code(code),)))
        return None if row is None else _invite(code, row)

    @asynccontextmanager
    async def _read(self, doing: str) -> AsyncIterator[aiosqlite.Connection]:
        """The connection, for one statement (a transaction of its own) ``doing`` something."""
        async with self._lock, self._converted(doing):
            yield await self._connection()

    async def _point_read(
        self, sql: str, params: Sequence[object], doing: str
    ) -> Iterable[Sequence[Any]]:
        """The rows of one small read by key, which every turn makes (the user's record, time
        zone, usage).

        Read on the event loop's own thread through a second connection: such a read takes a
        few microseconds, the hop to aiosqlite's thread and back about twenty times that in
        CPU. Committed writes are seen (each read is its own transaction). When that
        connection cannot read at once (the file busy: SQLite waits for no one here), the read
        goes through aiosqlite as every other statement does.
        """
        reader = await self._point_reader()
        if reader is not None:
            try:
                return reader.execute(sql, params).fetchall()
            except sqlite3.OperationalError:
                pass  # busy or locked: wait for it on aiosqlite's thread instead
            except sqlite3.Error as e:
                raise self._store_error(doing, e) from e
        async with self._read(doing) as db:
            return await db.execute_fetchall(sql, params)

    async def _point_reader(self) -> sqlite3.Connection | None:
        """The connection for point reads, opened after the schema is made; ``None`` for an
        in-memory database (a second connection would see another one)."""
        if self._reader is not None or self.path in ("", ":memory:"):
            return self._reader
        async with self._lock, self._converted("opening the user store"):
            await self._connection()
            if self._reader is None:
                self._reader = sqlite3.connect(
                    self.path, timeout=0, isolation_level=None, check_same_thread=False
                )
        return self._reader

    @asynccontextmanager
    async def _transaction(self, doing: str) -> AsyncIterator[aiosqlite.Connection]:
        """The connection inside ``BEGIN IMMEDIATE``: committed if the block succeeds."""
        async with self._lock, self._converted(doing):
            db = await self._connection()
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                await db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    await db.rollback()
                raise

    @asynccontextmanager
    async def _converted(self, doing: str) -> AsyncIterator[None]:
        """SQLite's errors as :class:`StoreError`, saying what failed on which file."""
        try:
            yield
        except sqlite3.Error as e:
            raise self._store_error(doing, e) from e

    def _store_error(self, doing: str, e: sqlite3.Error) -> StoreError:
        return StoreError(
            f"the user store {self.path} failed while {doing}: {type(e).__name__}: {e}"
        )

    async def _connection(self) -> aiosqlite.Connection:
        """The open connection, opened and the schema made if need be; call under the lock."""
        if self._closed:
            raise RuntimeError("this SqliteUserStore is closed")
        if self._db is None:
            if sqlite3.sqlite_version_info < _MIN_SQLITE:
                raise ConfigError(
                    f"SQLite {sqlite3.sqlite_version} is too old for the user store: "
                    "it needs 3.35 or newer"
                )
            # A failed aiosqlite connect leaves its thread to finish later, perhaps after the
            # event loop has closed (an error in that thread): so first see that it can open.
            try:
                await asyncio.to_thread(_try_open, self.path)
            except (sqlite3.Error, OSError) as e:
                raise ConfigError(f"cannot open {self.path} as the user store: {e}") from e
            db = await aiosqlite.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None
            )
            try:
                await _prepare(db, self.path)
            except BaseException:
                await db.close()
                raise
            self._db = db
        return self._db


def _try_open(path: str) -> None:
    _make_private(path)
    sqlite3.connect(path).close()


def _make_private(path: str) -> None:
    """Create the file ``0600`` before SQLite does; restrict the files an older botkit made.

    SQLite gives its ``-wal``, ``-shm`` and ``-journal`` files the database file's permissions.
    """
    if path in ("", ":memory:"):
        return
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT, _PRIVATE_FILE))
    for name in (path, *(path + suffix for suffix in _SIDE_FILES)):
        try:
            if stat.S_IMODE(os.stat(name).st_mode) & 0o077:
                os.chmod(name, _PRIVATE_FILE)
        except FileNotFoundError:
            continue
        except PermissionError as e:  # not ours to change: say so, and keep the bot running
            log.warning("user_store.permissions_not_restricted", path=name, error=str(e))


async def _prepare(db: aiosqlite.Connection, path: str) -> None:
    """Set the connection up and make the tables, unless the file is from a newer botkit."""
    try:
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute("PRAGMA secure_delete = ON")  # deleted rows are zeroed, not left
        await db.execute("BEGIN IMMEDIATE")
        version = int(_one(await db.execute_fetchall("PRAGMA user_version"))[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{path} holds user store schema {version}, newer than this botkit "
                f"understands ({SCHEMA_VERSION}): upgrade botkit"
            )
        if version == 1:
            await _hash_invite_codes(db)
        for statement in _SCHEMA:
            await db.execute(statement)
        await upgrade_schedule_table(db)
        await _add_usage_columns(db)
        await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        await db.execute("COMMIT")
    except sqlite3.Error as e:
        raise ConfigError(f"cannot use {path} as the user store: {e}") from e


async def _add_usage_columns(db: aiosqlite.Connection) -> None:
    """Give a usage table an earlier botkit made the columns added since: 1-hour cache writes
    (#49), seconds heard and characters spoken (#46)."""
    info = await db.execute_fetchall("PRAGMA table_info(botkit_model_usage)")
    columns = {row[1] for row in info}
    for column in _ADDED_USAGE_COLUMNS:
        if column not in columns:
            await db.execute(
                f"ALTER TABLE botkit_model_usage ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            )


async def _hash_invite_codes(db: aiosqlite.Connection) -> None:
    """Schema 1 kept invite codes in plain text: keep only their hash and prefix instead."""
    columns = "code, role, uses_left, expires_at, created_by, created_at"
    rows = await db.execute_fetchall(f"SELECT {columns} FROM botkit_invites")
    await db.execute("PRAGMA secure_delete = ON")  # the dropped pages are zeroed, not left
    await db.execute("DROP TABLE botkit_invites")
    await db.execute(_CREATE_INVITES)
    await db.executemany(
        _INSERT_INVITE,
        [(hash_invite_code(code), code[:INVITE_PREFIX_LENGTH], *rest) for code, *rest in rows],
    )
