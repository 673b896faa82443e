"""The user store on PostgreSQL, over an asyncpg pool; the tables come from migrations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import UTC, date, datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from botkit.errors import ConfigError, StoreError
from botkit.stores._postgres_console import PostgresConsoleLinks
from botkit.stores._postgres_handoffs import PostgresHandoffs
from botkit.stores._postgres_schedules import PostgresSchedules
from botkit.stores.base import (
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
)
from botkit.stores.changes import ChangeFeed
from botkit.stores.migrate import pending_migrations
from botkit.stores.migrate import without_password as _without_password
from botkit.types import Usage

__all__ = ["PostgresUserStore"]

_RUN_MIGRATE = "run `python -m botkit migrate`"
_OWN_QUERIES: ContextVar[bool] = ContextVar("botkit_user_store_own_queries", default=False)
"""Set while the store's own queries hold a connection (its release then needs no reset)."""


async def _reset_unless_own(conn: Any) -> None:
    """The pool's reset of a released connection: asyncpg's default query (unlock advisory
    locks, close cursors, unlisten, reset settings) after a tool's use of ``store.pool``, none
    after the store's own queries, which leave none of those behind (their locks are
    transaction-scoped) and would pay one more round trip each. asyncpg itself still rolls
    back a transaction left open either way."""
    if _OWN_QUERIES.get():
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


@contextmanager
def own_queries() -> Iterator[None]:
    """Within: connections of the user store's pool are released without asyncpg's reset
    query, for botkit's own queries over ``store.pool`` (the approvals'), which leave no
    advisory lock, cursor, listener or setting behind: one round trip a turn less."""
    own = _OWN_QUERIES.set(True)
    try:
        yield
    finally:
        _OWN_QUERIES.reset(own)


_DRIVER_ERRORS = (
    OSError,  # refused, reset, timed out
    asyncpg.PostgresError,
    asyncpg.InterfaceError,  # e.g. the pool was closed
    asyncpg.InternalClientError,
)

_USER = "user_id, role, display_name, joined_at, blocked"
_INVITE = "role, uses_left, expires_at, created_by, created_at"

_GET_USER = f"SELECT {_USER} FROM botkit_users WHERE user_id = $1"
_UPSERT_USER = f"""
    INSERT INTO botkit_users (user_id, role, display_name, joined_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT (user_id) DO UPDATE SET
        role = excluded.role,
        display_name = coalesce(excluded.display_name, botkit_users.display_name)
    RETURNING {_USER}"""
_BLOCK_USER = f"""
    INSERT INTO botkit_users (user_id, role, joined_at, blocked) VALUES ($1, $2, $3, true)
    ON CONFLICT (user_id) DO UPDATE SET blocked = true
    RETURNING {_USER}"""
_LIST_USERS = f"""
    SELECT {_USER} FROM botkit_users
    WHERE ($1::text IS NULL OR role = $1) AND ($2::boolean IS NULL OR blocked = $2)
    ORDER BY joined_at, user_id LIMIT $3 OFFSET $4"""
_LISTED = f"code_hash, code_prefix, {_INVITE}"
_INVITE_BY_HASH = f"SELECT {_LISTED} FROM botkit_invites WHERE code_hash = $1 FOR UPDATE"
_INVITES_BY_PREFIX = f"""
    SELECT {_LISTED} FROM botkit_invites WHERE left(code_prefix, length($1)) = $1
    ORDER BY created_at, code_hash FOR UPDATE"""
_USAGE_SINCE = """
    SELECT user_id, day, tokens FROM botkit_usage WHERE day >= $1 ORDER BY day, user_id"""
_REGISTER = f"""
    INSERT INTO botkit_users (user_id, role, display_name, joined_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT (user_id) DO NOTHING
    RETURNING {_USER}"""
_TAKE_USE = """
    UPDATE botkit_invites SET uses_left = uses_left - 1
    WHERE code_hash = $1 AND uses_left > 0 AND (expires_at IS NULL OR expires_at > $2)
    RETURNING role"""
_GET_INVITE = f"SELECT {_INVITE} FROM botkit_invites WHERE code_hash = $1"
_INSERT_INVITE = f"""
    INSERT INTO botkit_invites (code_hash, code_prefix, {_INVITE})
    VALUES ($1, $2, $3, $4, $5, $6, $7)"""
_ADD_USAGE = """
    INSERT INTO botkit_usage (user_id, day, tokens) VALUES ($1, $2, $3)
    ON CONFLICT (user_id, day) DO UPDATE SET tokens = botkit_usage.tokens + excluded.tokens"""
_ADD_MODEL_USAGE = """
    INSERT INTO botkit_model_usage AS u (user_id, day, model, input_tokens, output_tokens,
        cache_read_tokens, cache_creation_tokens, cache_write_1h_tokens, audio_seconds,
        spoken_chars)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (user_id, day, model) DO UPDATE SET
        input_tokens = u.input_tokens + excluded.input_tokens,
        output_tokens = u.output_tokens + excluded.output_tokens,
        cache_read_tokens = u.cache_read_tokens + excluded.cache_read_tokens,
        cache_creation_tokens = u.cache_creation_tokens + excluded.cache_creation_tokens,
        cache_write_1h_tokens = u.cache_write_1h_tokens + excluded.cache_write_1h_tokens,
        audio_seconds = u.audio_seconds + excluded.audio_seconds,
        spoken_chars = u.spoken_chars + excluded.spoken_chars"""
_MODEL_USAGE_SINCE = """
    SELECT user_id, day, model, input_tokens, output_tokens, cache_read_tokens,
        cache_creation_tokens, cache_write_1h_tokens, audio_seconds, spoken_chars
    FROM botkit_model_usage WHERE day >= $1 ORDER BY day, user_id, model"""
_SET_VOICE_MODE = """
    INSERT INTO botkit_voice_modes (user_id, conversation, mode) VALUES ($1, $2, $3)
    ON CONFLICT (user_id, conversation) DO UPDATE SET mode = excluded.mode, updated_at = now()"""


_KEPT_CONNECTIONS = {"max_inactive_connection_lifetime": 0}
"""No idle close, as the session store's pool (``botkit.sessions.postgres``) says why."""


class _RegisteredMeanwhile(Exception):
    """Another transaction registered the user first: undo the use taken of the invite."""


def _user(row: Any) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        role=row["role"],
        display_name=row["display_name"],
        joined_at=row["joined_at"],
        blocked=row["blocked"],
    )


def _invite(code: str, row: Any) -> Invite:
    return Invite(
        code=code,
        role=row["role"],
        uses_left=row["uses_left"],
        expires_at=row["expires_at"],
        created_by=row["created_by"],
        created_at=row["created_at"],
    )


def _stored_invite(row: Any) -> StoredInvite:
    return StoredInvite(
        prefix=row["code_prefix"],
        role=row["role"],
        uses_left=row["uses_left"],
        expires_at=row["expires_at"],
        created_by=row["created_by"],
        created_at=row["created_at"],
    )


class PostgresUserStore(PostgresSchedules, PostgresHandoffs, PostgresConsoleLinks):
    """A :class:`~botkit.stores.UserStore` in PostgreSQL, over an asyncpg pool.

    It never creates tables: ``python -m botkit migrate`` does. Before its first query it
    checks that every migration has been applied, and raises :class:`ConfigError` if not.
    Database failures (unreachable, connection lost, lock timeout) are :class:`StoreError`,
    without the password.
    """

    def __init__(self, pool: Any) -> None:
        self.pool: Any = pool
        """The ``asyncpg.Pool``, which the bot may hand to its tools too."""
        self._dsn = ""
        self._owns_pool = False
        self._schema_ok = False
        self.changes = ChangeFeed(None)
        """Rows of conversations' approvals and choices changed by anyone (live only on a
        pool this store made: a pool passed in does not say where to listen)."""

    @classmethod
    async def connect(cls, dsn: str, **pool_options: Any) -> PostgresUserStore:
        """A store on a new pool (``asyncpg.create_pool(dsn, **pool_options)``), schema checked.

        Its :meth:`close` closes the pool.
        """
        try:
            options = {"reset": _reset_unless_own, **_KEPT_CONNECTIONS, **pool_options}
            pool = await asyncpg.create_pool(dsn, **options)
        except (*_DRIVER_ERRORS, ValueError) as e:  # ValueError: a DSN asyncpg cannot parse
            message = _without_password(f"{type(e).__name__}: {e}", dsn)
            raise StoreError(f"cannot connect to the user database: {message}") from e
        store = cls(pool)
        store._dsn = dsn
        store._owns_pool = True
        store.changes = ChangeFeed(dsn)
        try:
            await store.check_schema()
        except BaseException:
            await pool.close()
            raise
        return store

    async def check_schema(self) -> None:
        """Raise :class:`ConfigError` unless every botkit migration has been applied."""
        async with self._converted("checking the migrations"), self.pool.acquire() as conn:
            missing = await pending_migrations(conn)
        if missing:
            raise ConfigError(
                f"the database lacks botkit's tables (migrations not applied: "
                f"{', '.join(missing)}): {_RUN_MIGRATE}"
            )
        self._schema_ok = True

    async def close(self) -> None:
        """Close the pool if :meth:`connect` made it; a pool passed in is left to its owner."""
        await self.changes.close()
        if self._owns_pool:
            await self.pool.close()

    async def get_user(self, user_id: int) -> UserRecord | None:
        """The user, or ``None`` if they are not registered."""
        async with self._connection("reading a user") as conn:
            row = await conn.fetchrow(_GET_USER, user_id)
        return None if row is None else _user(row)

    async def upsert_user(
        self, user_id: int, role: str, display_name: str | None = None
    ) -> UserRecord:
        """Register the user, or set their role (and their name, if given) if registered."""
        async with self._connection("registering a user") as conn:
            row = await conn.fetchrow(_UPSERT_USER, user_id, role, display_name, datetime.now(UTC))
        return _user(row)

    async def set_blocked(self, user_id: int, blocked: bool) -> bool:
        """Block or unblock a user; ``False`` if there is no such user."""
        sql = "UPDATE botkit_users SET blocked = $2 WHERE user_id = $1 RETURNING user_id"
        async with self._connection("blocking or unblocking a user") as conn:
            return await conn.fetchrow(sql, user_id, blocked) is not None

    async def set_role(self, user_id: int, role: str) -> bool:
        """Change a user's role; ``False`` if there is no such user."""
        sql = "UPDATE botkit_users SET role = $2 WHERE user_id = $1 RETURNING user_id"
        async with self._connection("changing a user's role") as conn:
            return await conn.fetchrow(sql, user_id, role) is not None

    async def block_user(self, user_id: int, role: str = "user") -> UserRecord:
        """Block the user; one never registered is registered now, with ``role``, blocked."""
        async with self._connection("blocking a user") as conn:
            row = await conn.fetchrow(_BLOCK_USER, user_id, role, datetime.now(UTC))
        return _user(row)

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
        async with self._connection("listing users") as conn:
            rows = await conn.fetch(_LIST_USERS, role, blocked, limit, offset)
        return [_user(row) for row in rows]

    async def create_invite(
        self,
        role: str,
        uses: int = 1,
        expires_at: datetime | None = None,
        created_by: int | None = None,
    ) -> Invite:
        """A new invite with a fresh code, redeemable ``uses`` times until ``expires_at``."""
        i = new_invite(role, uses, expires_at, created_by)
        values = (i.code_hash, i.prefix, i.role, i.uses_left, i.expires_at, i.created_by)
        async with self._connection("creating an invite") as conn:
            await conn.execute(_INSERT_INVITE, *values, i.created_at)
        return i

    async def get_invite(self, code: str) -> Invite | None:
        """The invite with this code, or ``None``."""
        async with self._connection("reading an invite") as conn:
            row = await conn.fetchrow(_GET_INVITE, hash_invite_code(code))
        return None if row is None else _invite(code, row)

    async def redeem_invite(
        self, code: str, user_id: int, display_name: str | None = None
    ) -> RedeemResult:
        """Atomically take one use of the invite and register the user with its role.

        A user who is already registered keeps their record and role, takes no use of
        the invite, and gets a success with ``already_registered`` set, whatever the code.
        """
        async with self._connection("redeeming an invite") as conn:
            try:
                async with conn.transaction():
                    return await _redeem(conn, code, user_id, display_name)
            except _RegisteredMeanwhile:
                row = await conn.fetchrow(_GET_USER, user_id)
                return RedeemResult.success(_user(row), already_registered=True)

    async def list_invites(self) -> list[StoredInvite]:
        """Every invite, used up and expired ones too, oldest first."""
        sql = f"SELECT code_prefix, {_INVITE} FROM botkit_invites ORDER BY created_at, code_hash"
        async with self._connection("listing invites") as conn:
            rows = await conn.fetch(sql)
        return [_stored_invite(row) for row in rows]

    async def revoke_invite(self, code: str) -> RevokeResult:
        """Delete the invite with this code, or the only one whose prefix starts with it.

        ``code`` is a whole code, or up to :data:`INVITE_PREFIX_LENGTH` leading characters
        of one; a prefix several invites share revokes none of them.
        """
        async with self._connection("revoking an invite") as conn, conn.transaction():
            rows = await conn.fetch(_INVITE_BY_HASH, hash_invite_code(code))
            if not rows and is_invite_prefix(code):
                rows = await conn.fetch(_INVITES_BY_PREFIX, code)
            if len(rows) == 1:
                sql = "DELETE FROM botkit_invites WHERE code_hash = $1"
                await conn.execute(sql, rows[0]["code_hash"])
        return RevokeResult(tuple(_stored_invite(row) for row in rows))

    async def add_usage(self, user_id: int, day: date, tokens: int) -> None:
        """Add ``tokens`` to what the user spent on ``day``."""
        async with self._connection("adding token usage") as conn:
            await conn.execute(_ADD_USAGE, user_id, day, check_tokens(tokens))

    async def add_usages(self, entries: Sequence[tuple[int, date, int]]) -> None:
        """Add tokens to what each user spent on a day, ``(user_id, day, tokens)`` each, in
        one statement."""
        rows = [(user, day, check_tokens(tokens)) for user, day, tokens in entries]
        async with self._connection("adding token usage") as conn:
            await conn.executemany(_ADD_USAGE, rows)

    async def usage_on(self, user_id: int, day: date) -> int:
        """The tokens the user spent on ``day`` (0 if none)."""
        sql = "SELECT tokens FROM botkit_usage WHERE user_id = $1 AND day = $2"
        async with self._connection("reading token usage") as conn:
            tokens = await conn.fetchval(sql, user_id, day)
        return 0 if tokens is None else int(tokens)

    async def usage_since(self, first_day: date) -> list[DailyUsage]:
        """What each user spent on each day from ``first_day`` on, by day, then user id."""
        async with self._connection("listing token usage") as conn:
            rows = await conn.fetch(_USAGE_SINCE, first_day)
        return [DailyUsage(row["user_id"], row["day"], int(row["tokens"])) for row in rows]

    async def add_model_usage(self, entries: Sequence[ModelUsage]) -> None:
        """Add each entry's tokens to its user, day and model (all in one transaction)."""
        rows = [(e.user_id, e.day, e.model, *token_kinds(e.usage)) for e in entries]
        if not rows:
            return
        # In key order, so two processes adding the same keys never deadlock.
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        async with self._connection("adding token usage per model") as conn, conn.transaction():
            await conn.executemany(_ADD_MODEL_USAGE, rows)

    async def model_usage_since(self, first_day: date) -> list[ModelUsage]:
        """Tokens per user, day and model from ``first_day`` on, by day, user id, model."""
        async with self._connection("listing token usage per model") as conn:
            rows = await conn.fetch(_MODEL_USAGE_SINCE, first_day)
        return [
            ModelUsage(
                row["user_id"],
                row["day"],
                row["model"],
                Usage(
                    input_tokens=row["input_tokens"],
                    output_tokens=row["output_tokens"],
                    cache_read_input_tokens=row["cache_read_tokens"],
                    cache_creation_input_tokens=row["cache_creation_tokens"],
                    cache_write_1h_tokens=row["cache_write_1h_tokens"],
                    audio_seconds=row["audio_seconds"],
                    spoken_chars=row["spoken_chars"],
                ),
            )
            for row in rows
        ]

    async def get_voice_mode(self, owner_id: int, conversation: str) -> str | None:
        """The ``/voice`` choice of ``owner_id``'s ``conversation`` (``off``, ``mirror``,
        ``always``), or ``None``."""
        sql = "SELECT mode FROM botkit_voice_modes WHERE user_id = $1 AND conversation = $2"
        async with self._connection("reading a voice choice") as conn:
            mode = await conn.fetchval(sql, owner_id, conversation)
        return None if mode is None else str(mode)

    async def set_voice_mode(self, owner_id: int, conversation: str, mode: str) -> None:
        """Remember ``mode`` as the ``/voice`` choice of ``owner_id``'s ``conversation``."""
        async with self._connection("setting a voice choice") as conn:
            await conn.execute(_SET_VOICE_MODE, owner_id, conversation, mode)

    @asynccontextmanager
    async def _connection(self, doing: str) -> AsyncIterator[Any]:
        """A pooled connection, once the schema is known to be there, for ``doing``."""
        if not self._schema_ok:
            await self.check_schema()
        with own_queries():  # seen by the pool's reset when the connection returns
            async with self._converted(doing), self.pool.acquire() as conn:
                yield conn

    @asynccontextmanager
    async def _converted(self, doing: str) -> AsyncIterator[None]:
        """asyncpg's errors as botkit's: a missing table says to migrate, the rest StoreError."""
        try:
            yield
        except asyncpg.UndefinedTableError as e:
            raise ConfigError(f"{e}: {_RUN_MIGRATE}") from e
        except _DRIVER_ERRORS as e:
            message = _without_password(f"{type(e).__name__}: {e}", self._dsn)
            raise StoreError(f"the user database failed while {doing}: {message}") from e


async def _redeem(conn: Any, code: str, user_id: int, display_name: str | None) -> RedeemResult:
    """The redemption, inside the caller's transaction."""
    existing = await conn.fetchrow(_GET_USER, user_id)
    if existing is not None:
        return RedeemResult.success(_user(existing), already_registered=True)
    now = datetime.now(UTC)
    code_hash = hash_invite_code(code)
    role = await conn.fetchval(_TAKE_USE, code_hash, now)
    if role is None:
        row = await conn.fetchrow(_GET_INVITE, code_hash)
        if row is None:
            return RedeemResult.failed(RedeemFailure.UNKNOWN)
        return RedeemResult.failed(_invite(code, row).refusal(now) or RedeemFailure.USED_UP)
    registered = await conn.fetchrow(_REGISTER, user_id, role, display_name, now)
    if registered is None:
        raise _RegisteredMeanwhile
    return RedeemResult.success(_user(registered))
