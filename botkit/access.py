"""Who may talk to the bot: the default gates, invite redemption, budgets, cached user records.

All of it is built from a ``UserStore`` (SQLite by default, PostgreSQL with
BOTKIT_DATABASE_URL). A bot's own ``authorize`` and ``handle_start`` replace the defaults here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import replace
from datetime import UTC, date, datetime

import structlog

from botkit.config import Settings
from botkit.extras import require_extra
from botkit.messengers.base import Incoming, Messenger
from botkit.options import BotOptions
from botkit.pricing import BATCH_FACTOR, BATCH_MARK, CACHE_READ_FACTOR, FALLBACK, price_for
from botkit.stores.base import ModelUsage, RedeemFailure, UserRecord, UserStore, check_tokens
from botkit.types import Usage

__all__ = ["USAGE_FLUSH_SECONDS", "USER_CACHE_SECONDS", "Access", "UsageLedger", "open_user_store"]

log = structlog.get_logger(__name__)

USER_CACHE_SECONDS = 3.0
"""How long a user record read for a message is trusted: a block, or an invite redeemed on
another worker, takes effect on every process within it."""
USER_CACHE_SIZE = 10_000
USAGE_FLUSH_SECONDS = 2.0
"""How long token usage per model is gathered in memory before it is written in one batch."""


class Access:
    """The default ``authorize`` and ``handle_start``, daily budgets and the user-record cache."""

    def __init__(
        self, settings: Settings, options: BotOptions, users: UserStore | None = None
    ) -> None:
        self.settings = settings
        self.options = options
        self._users = users
        self._own_store = users is None
        self._users_lock = asyncio.Lock()
        self._cache: dict[int, tuple[float, UserRecord | None]] = {}
        self.ledger = UsageLedger(self.user_store)
        """Every user's tokens per day and model, recorded whether budgets are set or not."""
        self.plan_budget: Callable[[int], Awaitable[int | None]] | None = None
        """The daily budget of a user's paid plan (``None``: no plan); set when plans are sold."""
        self.plan_role: Callable[[int], Awaitable[str | None]] | None = None
        """The role a user's paid plan gives (``None``: none); set when plans are sold."""
        self.budget_hint: str | None = None
        """Added to the over-budget text (where to raise the budget), when plans are sold."""
        self.budget_model: str | None = None
        """Budgets count tokens as priced on this model (set when users choose models);
        ``None``: every token counts as one."""

    async def user_store(self) -> UserStore:
        """The users and invites store, opened on first use."""
        if self._users is not None:
            return self._users
        async with self._users_lock:
            if self._users is None:
                self._users = await open_user_store(self.settings)
            return self._users

    async def close(self) -> None:
        """Write the usage not yet recorded, then close the store, if it was opened."""
        await self.ledger.close()
        if self._users is not None:
            await self._users.close()
            self._users = None

    def is_admin(self, user_id: int) -> bool:
        """Whether ``user_id`` is one of the configured admins."""
        return user_id in self.settings.admins

    def sender_is_admin(self, message: Incoming) -> bool:
        """Whether the sender of ``message`` is an admin: configured, or by their stored role."""
        return self.is_admin(message.user_id) or (
            message.user is not None and message.user.role == "admin"
        )

    async def is_group_admin(self, message: Incoming, messenger: Messenger | None) -> bool:
        """Whether the sender may manage the group's conversation: the bot's admin, or the
        chat's (asked of ``messenger``; none yet: only the bot's)."""
        if self.sender_is_admin(message):
            return True
        if messenger is None:
            return False
        return await messenger.is_chat_admin(message.chat_id, message.user_id)

    async def authorize(self, message: Incoming) -> str | None:
        """Admins, then the access mode: ``None`` admits, the rejection text turns away (and
        tells a stranger's ``/whoami`` their id, which an admin needs to let them in)."""
        rejection = await self._rejection(message)
        if rejection and message.command == "whoami":
            return self.options.stranger_whoami_text.format(user_id=message.user_id)
        return rejection

    async def _rejection(self, message: Incoming) -> str | None:
        user_id, settings = message.user_id, self.settings
        if self.is_admin(user_id):
            return None
        if settings.access == "allowlist" and user_id not in settings.allowed_users:
            return self.options.rejection_text
        record = await self.known_user(user_id)
        if record is not None and record.blocked:  # whatever admitted them
            return self.options.rejection_text
        if settings.access == "allowlist":
            return None
        if settings.access == "open" or record is not None or user_id in settings.allowed_users:
            return None
        return self.options.rejection_text

    async def redeem(self, message: Incoming, payload: str) -> str | None:
        """``/start <code>``: redeem an invite (atomically) and say how it went."""
        if not payload:
            return None
        users = await self.user_store()
        result = await users.redeem_invite(payload, message.user_id, name_of(message))
        self._cache.pop(message.user_id, None)
        if result.ok:
            fresh = not result.already_registered
            log.info("invite.redeemed", user_id=message.user_id, fresh=fresh)
            return self.options.welcome_text if fresh else self.options.already_registered_text
        log.info("invite.refused", user_id=message.user_id, why=str(result.failure))
        return {
            RedeemFailure.EXPIRED: self.options.invite_expired_text,
            RedeemFailure.USED_UP: self.options.invite_used_up_text,
        }.get(result.failure or RedeemFailure.UNKNOWN, self.options.invite_unknown_text)

    async def known_user(self, user_id: int) -> UserRecord | None:
        """The user's record, from a cache of a few seconds (every message needs it)."""
        cached = self._cache.get(user_id)
        if cached is not None and time.monotonic() - cached[0] < USER_CACHE_SECONDS:
            return cached[1]
        record = await (await self.user_store()).get_user(user_id)
        self.note_user(user_id, record)
        return record

    def note_user(self, user_id: int, record: UserRecord | None) -> None:
        """Take ``record`` (``None``: not stored), just read from the store by someone else,
        as the user's cached record: the next message needs no read of its own."""
        if len(self._cache) >= USER_CACHE_SIZE:
            self._cache.clear()  # cheap and rare: records are re-read on demand
        self._cache[user_id] = (time.monotonic(), record)

    def reads_users_from(self, dsn: str) -> bool:
        """Whether the user records are botkit's own PostgreSQL store on ``dsn``."""
        url = self.settings.database_url
        return self._own_store and url is not None and url.get_secret_value() == dsn

    async def user_record(self, message: Incoming) -> UserRecord:
        """The sender's record; one admitted by configuration alone gets role admin or user;
        a paid plan with a role gives its role while it lasts (admins stay admins)."""
        record = await self.known_user(message.user_id)
        if record is None:  # admitted by config (allowlist, admin, open): not stored
            role = "admin" if self.is_admin(message.user_id) else "user"
            now = datetime.now(UTC)
            record = UserRecord(message.user_id, role, name_of(message), now, blocked=False)
        if self.plan_role is not None and record.role != "admin":
            paid_role = await self.plan_role(message.user_id)
            if paid_role is not None:
                record = replace(record, role=paid_role)
        return record

    async def over_budget(self, user_id: int) -> bool:
        """Whether the user has used up today's token budget (if one is set)."""
        budget = await self.daily_budget(user_id)
        if budget is None:
            return False
        day = today()
        spent = await (await self.user_store()).usage_on(user_id, day)
        return spent + self.ledger.unwritten_tokens(user_id, day) >= budget

    async def daily_budget(self, user_id: int) -> int | None:
        """The user's daily token budget: their paid plan's, else BOTKIT_DAILY_TOKEN_BUDGET."""
        if self.plan_budget is not None:
            paid = await self.plan_budget(user_id)
            if paid is not None:
                return paid
        return self.settings.daily_token_budget

    @property
    def budget_text(self) -> str:
        """What a user over budget is told (with where to buy more, when plans are sold)."""
        hint = self.budget_hint
        return f"{self.options.budget_text}\n\n{hint}" if hint else self.options.budget_text

    def forget(self, user_id: int) -> None:
        """Drop the cached record of ``user_id``, so the next message reads it afresh."""
        self._cache.pop(user_id, None)

    async def charge(self, user_id: int, usage: Usage, model: str = "") -> None:
        """Record what an LLM call cost: per model for the user's usage, and against the
        user's daily budget (when budgets are on)."""
        if model:
            self.ledger.add(user_id, model, usage)
        if self.settings.daily_token_budget is None and self.plan_budget is None:
            return
        spent = usage.input_tokens + usage.output_tokens + usage.cache_creation_input_tokens
        spent += round(usage.cache_read_input_tokens * CACHE_READ_FACTOR)  # billed at a tenth
        if usage.web_search_requests:  # a search's fee, as the input tokens it would buy
            searches = (price_for(model) or FALLBACK).search_tokens() * usage.web_search_requests
            spent += searches
        if usage.audio_seconds or usage.spoken_chars:  # voice, as the chat model's tokens
            chat = price_for(self.settings.model) or FALLBACK
            spent += (price_for(model) or FALLBACK).voice_tokens(usage, chat)
        spent = self._weighed(spent, usage, model)
        store = await self.user_store()
        if getattr(store, "pool", None) is not None:  # PostgreSQL: every worker reads it at once
            await store.add_usage(user_id, today(), spent)
        else:  # SQLite: this process alone serves turns, and counts what it has not written
            self.ledger.add_tokens(user_id, spent)

    def _weighed(self, spent: int, usage: Usage, model: str) -> int:
        """``spent`` in tokens of the budget's model: a call to a model dearer than it counts
        for more (when users choose models, so a budget caps cost whichever they pick)."""
        base = self.budget_model
        batched = model.endswith(BATCH_MARK)  # a Message Batch's answer: half the price
        if batched and (base is None or model.removesuffix(BATCH_MARK) == base):
            return round(spent * BATCH_FACTOR)
        if base is None or not model or model == base:
            return spent
        at_base = (price_for(base) or FALLBACK).cost(usage)
        at_model = (price_for(model) or FALLBACK).cost(usage)
        return round(spent * at_model / at_base) if at_base > 0 else spent


class UsageLedger:
    """Token usage per user, UTC day and model, and the tokens counted against each user's
    daily budget, written to the user store in batches.

    An LLM call only adds to a dictionary; every :data:`USAGE_FLUSH_SECONDS` what gathered is
    written (the usage by model in one transaction), so recording every user's usage costs no
    store round trip per call. Budget checks add what is not written yet. A batch the store
    refuses is kept and tried again with the next; at most the last interval's usage is lost
    if the process is killed, and another process sees it that much later.
    """

    def __init__(
        self,
        store: Callable[[], Awaitable[UserStore]],
        interval: float = USAGE_FLUSH_SECONDS,
    ) -> None:
        self._store = store
        self.interval = interval
        self._pending: dict[tuple[int, date, str], Usage] = {}
        self._tokens: dict[tuple[int, date], int] = {}
        """Tokens against users' daily budgets, by user and UTC day, not written yet."""
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._writing: dict[tuple[int, date], int] = {}
        self._write_lock = asyncio.Lock()
        """Budget tokens being written now: still counted until their write is done."""

    def add(self, user_id: int, model: str, usage: Usage) -> None:
        """Count ``usage`` for the user today with ``model``; it is written soon."""
        key = (user_id, today(), model)
        before = self._pending.get(key)
        self._pending[key] = usage if before is None else before + usage
        self._flush_soon()

    def add_tokens(self, user_id: int, tokens: int) -> None:
        """Count ``tokens`` against the user's budget today; they are written soon."""
        key = (user_id, today())
        self._tokens[key] = self._tokens.get(key, 0) + check_tokens(tokens)
        self._flush_soon()

    def unwritten_tokens(self, user_id: int, day: date) -> int:
        """The tokens counted against the user's budget on ``day`` not written yet."""
        return self._tokens.get((user_id, day), 0) + self._writing.get((user_id, day), 0)

    def _flush_soon(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_later(), name="botkit-usage-ledger")

    async def flush(self) -> None:
        """Write what gathered now; on a store error, keep it for the next try."""
        await self._flush_tokens()
        pending, self._pending = self._pending, {}
        if not pending:
            return
        entries = [ModelUsage(u, d, m, usage) for (u, d, m), usage in pending.items()]
        try:
            await (await self._store()).add_model_usage(entries)
        except Exception as e:
            log.warning("usage.not_recorded", entries=len(entries), error=str(e))
            for key, usage in pending.items():
                later = self._pending.get(key)
                self._pending[key] = usage if later is None else usage + later

    async def _flush_tokens(self) -> None:
        """Write the budgets' tokens, user by user; what the store refuses is kept."""
        async with self._write_lock:
            await self._write_tokens()

    async def _write_tokens(self) -> None:
        self._writing, self._tokens = self._tokens, {}
        if not self._writing:
            return
        try:
            store = await self._store()
            add_all = getattr(store, "add_usages", None)  # SQLite's and PostgreSQL's: at once
            if add_all is not None:
                await add_all(
                    [(user, day, tokens) for (user, day), tokens in self._writing.items()]
                )
            else:
                for (user_id, day), tokens in list(self._writing.items()):
                    await store.add_usage(user_id, day, tokens)
                    del self._writing[(user_id, day)]  # written: the store's reads count it
        except Exception as e:
            log.warning("usage.budget_not_recorded", users=len(self._writing), error=str(e))
            for key, kept in self._writing.items():
                self._tokens[key] = self._tokens.get(key, 0) + kept
        self._writing = {}

    async def close(self) -> None:
        """Write what is left now (a write under way is finished, never cut off)."""
        self._wake.set()
        flusher = self._flusher
        if flusher is not None:
            await flusher
        await self.flush()
        self._wake.clear()

    async def _flush_later(self) -> None:
        try:
            while True:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)
                await self.flush()
                if not (self._pending or self._tokens) or self._wake.is_set():
                    return
        finally:
            self._flusher = None


def name_of(message: Incoming) -> str | None:
    """The sender's display name as Telegram gave it."""
    return message.first_name or message.username


def today() -> date:
    """Today in UTC: budgets are per UTC day."""
    return datetime.now(UTC).date()


async def open_user_store(settings: Settings, *, create: bool = True) -> UserStore:
    """The users and invites store: PostgreSQL with BOTKIT_DATABASE_URL, else SQLite.

    ``create=False`` (a command that only reads): an SQLite file that does not exist yet is
    not made, and an empty store answers instead.
    """
    if settings.database_url is not None:
        require_extra("asyncpg", "postgres", "BOTKIT_DATABASE_URL")
        from botkit.stores.postgres import PostgresUserStore

        return await PostgresUserStore.connect(settings.database_url.get_secret_value())
    from botkit.stores.sqlite import SqliteUserStore

    path = settings.database_path or settings.sessions_dir / "botkit.db"
    if not create and not path.exists():
        return SqliteUserStore(":memory:")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return SqliteUserStore(path)
