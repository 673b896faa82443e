"""User stores: one contract, run against SQLite and PostgreSQL; and the migrations."""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from botkit.approvals.postgres import PostgresApprovals
from botkit.errors import ConfigError, StoreError
from botkit.pricing import estimate
from botkit.stores import (
    INVITE_CODE_PATTERN,
    DailyUsage,
    NewSchedule,
    PostgresUserStore,
    RedeemFailure,
    RedeemResult,
    SqliteUserStore,
    StoredInvite,
    UserRecord,
    UserStore,
    hash_invite_code,
    new_invite_code,
)
from botkit.stores._sqlite_schedules import SCHEDULE_SCHEMA
from botkit.stores.base import ModelUsage
from botkit.stores.migrate import (
    MIGRATIONS,
    apply_migrations,
    load_migrations,
    migrate,
    pending_migrations,
)
from botkit.types import Usage

CODE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # Telegram's rule for /start parameters
FIRST = "001_users_and_invites"
ALL = [
    FIRST,
    "002_hash_invite_codes",
    "003_sessions",
    "004_schedules",
    "005_job_queue",
    "006_session_media",
    "007_usage_by_model",
    "008_bot_identity",
    "009_schedule_limits",
    "010_update_starts",
    "011_approvals",
    "012_handoffs",
    "013_memory",
    "014_payments",
    "015_approval_leases",
    "016_schedule_trace",
    "017_worker_locks",
    "018_bursts",
    "019_updates_by_job",
    "020_fetch_plan",
    "021_fetch_by_lock_heads",
    "022_finish_then_fetch",
    "023_choices",
    "025_usage_hour_writes",
    "026_voice",
    "027_console_links",
    "028_task_batches",
    "029_change_feed",
]
_TABLES = "botkit_users, botkit_invites, botkit_usage"


@dataclass(frozen=True)
class Backend:
    """Where a store lives, and how to open another store on the same data."""

    kind: str
    location: str

    async def open(self) -> UserStore:
        if self.kind == "sqlite":
            return await SqliteUserStore.connect(self.location)
        return await PostgresUserStore.connect(self.location, min_size=1, max_size=10)

    async def open_impatient(self) -> UserStore:
        """A store that waits a fifth of a second at most for a lock another connection holds."""
        if self.kind == "sqlite":
            return await SqliteUserStore.connect(self.location, busy_timeout=0.2)
        return await PostgresUserStore.connect(
            self.location, min_size=1, max_size=2, server_settings={"lock_timeout": "200ms"}
        )

    @asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """While inside, another connection holds botkit's tables against every writer."""
        if self.kind == "sqlite":
            db = sqlite3.connect(self.location, isolation_level=None)
            db.execute("BEGIN EXCLUSIVE")
            try:
                yield
            finally:
                db.execute("ROLLBACK")
                db.close()
            return
        conn = await asyncpg.connect(self.location)
        try:
            async with conn.transaction():
                await conn.execute(f"LOCK TABLE {_TABLES} IN ACCESS EXCLUSIVE MODE")
                yield
        finally:
            await conn.close()

    async def raw_invites(self) -> list[tuple[Any, ...]]:
        """Every row of the invites table, every column, read past the store."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.location) as db:
                return list(db.execute("SELECT * FROM botkit_invites"))
        conn = await asyncpg.connect(self.location)
        try:
            return [tuple(row) for row in await conn.fetch("SELECT * FROM botkit_invites")]
        finally:
            await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "users.db"))
    return Backend("postgres", request.getfixturevalue("migrated_db"))


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[UserStore]:
    opened = await backend.open()
    yield opened
    await opened.close()


def now() -> datetime:
    return datetime.now(UTC)


async def uses_left(store: UserStore, code: str) -> int:
    invite = await store.get_invite(code)
    assert invite is not None
    return invite.uses_left


async def registered(store: UserStore, user_id: int) -> UserRecord:
    user = await store.get_user(user_id)
    assert user is not None
    return user


def assert_failed(result: RedeemResult, failure: RedeemFailure) -> None:
    assert not result.ok
    assert result.user is None
    assert result.failure is failure


# --- users ---------------------------------------------------------------------------------


async def test_a_new_user_is_registered_and_read_back(store: UserStore) -> None:
    assert await store.get_user(1) is None
    before = now()
    user = await store.upsert_user(1, "user", "Ann")
    after = now()

    assert (user.user_id, user.role, user.display_name, user.blocked) == (1, "user", "Ann", False)
    assert user.joined_at.utcoffset() == timedelta(0)
    assert before <= user.joined_at <= after
    assert await store.get_user(1) == user
    assert await store.get_user(2) is None


async def test_upsert_changes_the_role_and_keeps_the_rest(store: UserStore) -> None:
    first = await store.upsert_user(1, "user", "Ann")
    await store.set_blocked(1, True)

    again = await store.upsert_user(1, "admin")

    assert again.role == "admin"
    assert again.display_name == "Ann"
    assert again.joined_at == first.joined_at
    assert again.blocked is True
    renamed = await store.upsert_user(1, "admin", "Annie")
    assert renamed.display_name == "Annie"
    assert await store.get_user(1) == renamed


async def test_users_can_be_blocked_and_unblocked(store: UserStore) -> None:
    await store.upsert_user(1, "user")

    assert await store.set_blocked(1, True) is True
    assert (await registered(store, 1)).blocked is True
    assert await store.set_blocked(1, False) is True
    assert (await registered(store, 1)).blocked is False
    assert await store.set_blocked(404, True) is False
    assert await store.get_user(404) is None


async def test_roles_can_be_changed(store: UserStore) -> None:
    await store.upsert_user(1, "user", "Ann")

    assert await store.set_role(1, "admin") is True
    user = await store.get_user(1)
    assert user is not None
    assert (user.role, user.display_name) == ("admin", "Ann")
    assert await store.set_role(404, "admin") is False
    assert await store.get_user(404) is None


async def test_users_are_listed_in_join_order_and_by_role(store: UserStore) -> None:
    for user_id, role in [(30, "user"), (10, "admin"), (20, "user"), (40, "guest")]:
        await store.upsert_user(user_id, role)
        await asyncio.sleep(0.002)  # distinct join times

    assert [u.user_id for u in await store.list_users()] == [30, 10, 20, 40]
    assert [u.user_id for u in await store.list_users("user")] == [30, 20]
    assert [u.role for u in await store.list_users("admin")] == ["admin"]
    assert await store.list_users("nobody") == []
    assert [u.user_id for u in await store.list_users(offset=1, limit=2)] == [10, 20]
    assert [u.user_id for u in await store.list_users(offset=3)] == [40]
    assert [u.user_id for u in await store.list_users("user", limit=1)] == [30]


async def test_blocking_a_user_never_registered_registers_them_blocked(store: UserStore) -> None:
    before = now()
    blocked = await store.block_user(404)

    assert (blocked.user_id, blocked.role, blocked.display_name) == (404, "user", None)
    assert blocked.blocked is True
    assert before <= blocked.joined_at <= now()
    assert await store.get_user(404) == blocked
    assert (await store.block_user(405, role="guest")).role == "guest"
    assert await store.set_blocked(404, False) is True
    assert (await registered(store, 404)).blocked is False


async def test_blocking_a_registered_user_keeps_their_record(store: UserStore) -> None:
    ann = await store.upsert_user(1, "manager", "Ann")

    blocked = await store.block_user(1)
    again = await store.block_user(1, role="user")

    assert blocked == again == UserRecord(1, "manager", "Ann", ann.joined_at, blocked=True)
    assert await store.get_user(1) == blocked


async def test_users_are_listed_by_blocked_flag_and_role(store: UserStore) -> None:
    for user_id, role in [(30, "user"), (10, "admin"), (20, "user"), (40, "guest")]:
        await store.upsert_user(user_id, role)
        await asyncio.sleep(0.002)  # distinct join times
    await store.set_blocked(20, True)
    await store.set_blocked(40, True)

    assert [u.user_id for u in await store.list_users(blocked=True)] == [20, 40]
    assert [u.user_id for u in await store.list_users(blocked=False)] == [30, 10]
    assert [u.user_id for u in await store.list_users("user", blocked=True)] == [20]
    assert [u.user_id for u in await store.list_users("user", blocked=False)] == [30]
    assert await store.list_users("admin", blocked=True) == []


async def test_another_store_on_the_same_data_sees_the_same_users(
    store: UserStore, backend: Backend
) -> None:
    user = await store.upsert_user(1, "admin", "Ann")
    invite = await store.create_invite("user")
    await store.add_usage(1, date(2025, 1, 2), 5)

    other = await backend.open()
    try:
        assert await other.get_user(1) == user
        assert await other.get_invite(invite.code) == invite
        assert await other.usage_on(1, date(2025, 1, 2)) == 5
    finally:
        await other.close()


# --- invites -------------------------------------------------------------------------------


async def test_an_invite_is_created_and_read_back(store: UserStore) -> None:
    expires = now() + timedelta(days=1)
    before = now()
    invite = await store.create_invite("user", uses=3, expires_at=expires, created_by=42)

    assert CODE.match(invite.code)
    assert (invite.role, invite.uses_left, invite.created_by) == ("user", 3, 42)
    assert invite.expires_at == expires
    assert before <= invite.created_at <= now()
    assert await store.get_invite(invite.code) == invite
    assert await store.get_invite("no-such-code") is None


async def test_invite_defaults_are_one_use_forever(store: UserStore) -> None:
    invite = await store.create_invite("user")

    assert (invite.uses_left, invite.expires_at, invite.created_by) == (1, None, None)
    assert await store.get_invite(invite.code) == invite


async def test_expiry_in_another_timezone_is_kept_as_the_same_moment(store: UserStore) -> None:
    berlin = timezone(timedelta(hours=2))
    expires = datetime(2030, 6, 1, 12, 0, 0, 123456, tzinfo=berlin)

    invite = await store.create_invite("user", expires_at=expires)
    stored = await store.get_invite(invite.code)

    assert stored is not None
    assert stored.expires_at == expires
    assert stored.expires_at is not None
    assert stored.expires_at.utcoffset() == timedelta(0)
    assert stored.expires_at.hour == 10


async def test_bad_invite_arguments_are_refused(store: UserStore) -> None:
    with pytest.raises(ValueError, match="at least one use"):
        await store.create_invite("user", uses=0)
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.create_invite("user", expires_at=datetime(2030, 1, 1))
    assert await store.list_users() == []


async def test_invite_codes_are_unique_and_fit_a_start_link(store: UserStore) -> None:
    codes = [(await store.create_invite("user")).code for _ in range(200)]

    assert len(set(codes)) == len(codes)
    assert all(CODE.match(code) for code in codes)
    fresh = {new_invite_code() for _ in range(10_000)}
    assert len(fresh) == 10_000
    assert all(CODE.match(code) and len(code) == 22 for code in fresh)
    assert not any(code.startswith("-") for code in [*fresh, *codes]), "reads as a CLI option"
    assert INVITE_CODE_PATTERN.fullmatch(new_invite_code())


async def test_the_database_keeps_only_a_hash_and_prefix_of_invite_codes(
    store: UserStore, backend: Backend
) -> None:
    invites = [await store.create_invite("user", uses=2) for _ in range(3)]

    rows = await backend.raw_invites()

    assert len(rows) == 3
    for invite in invites:
        assert not [row for row in rows if any(invite.code in str(cell) for cell in row)]
        (row,) = [row for row in rows if hash_invite_code(invite.code) in row]
        assert invite.code[:4] in row
        assert (await store.redeem_invite(invite.code, invites.index(invite) + 1)).ok
    assert hash_invite_code("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # SHA-256 of "abc"
    )


async def test_invites_are_listed_oldest_first_without_their_codes(store: UserStore) -> None:
    expires = now() + timedelta(days=2)
    first = await store.create_invite("cleaner", uses=3, expires_at=expires, created_by=7)
    await asyncio.sleep(0.002)  # distinct creation times
    second = await store.create_invite("manager")
    await store.redeem_invite(second.code, 1)

    listed = await store.list_invites()

    assert listed == [
        StoredInvite(first.prefix, "cleaner", 3, expires, 7, first.created_at),
        StoredInvite(second.prefix, "manager", 0, None, None, second.created_at),
    ]
    assert [i.refusal(now()) for i in listed] == [None, RedeemFailure.USED_UP]
    assert all(len(i.prefix) == 4 for i in listed)


async def test_an_invite_revoked_by_its_code_can_no_longer_be_redeemed(store: UserStore) -> None:
    kept = await store.create_invite("user")
    invite = await store.create_invite("user", uses=5, created_by=3)

    result = await store.revoke_invite(invite.code)

    assert result.revoked is not None and not result.ambiguous
    assert (result.revoked.prefix, result.revoked.uses_left) == (invite.prefix, 5)
    assert await store.get_invite(invite.code) is None
    assert_failed(await store.redeem_invite(invite.code, 1), RedeemFailure.UNKNOWN)
    assert (await store.revoke_invite(invite.code)).matches == ()
    assert [i.prefix for i in await store.list_invites()] == [kept.prefix]


async def test_an_invite_is_revoked_by_its_prefix(store: UserStore) -> None:
    invite = await store.create_invite("user")

    result = await store.revoke_invite(invite.prefix)

    assert result.revoked is not None and result.revoked.prefix == invite.prefix
    assert await store.list_invites() == []
    assert_failed(await store.redeem_invite(invite.code, 1), RedeemFailure.UNKNOWN)


async def test_a_prefix_several_invites_share_revokes_none(store: UserStore) -> None:
    codes = [(await store.create_invite("user")).code for _ in range(65)]
    shared = next(c[0] for c in codes if sum(o[0] == c[0] for o in codes) > 1)  # 64 letters

    result = await store.revoke_invite(shared)

    assert result.ambiguous and result.revoked is None
    assert len(result.matches) == sum(code[0] == shared for code in codes)
    assert all(invite.prefix.startswith(shared) for invite in result.matches)
    assert len(await store.list_invites()) == 65


async def test_revoking_text_that_names_no_invite_revokes_nothing(store: UserStore) -> None:
    invite = await store.create_invite("user")
    while invite.code.startswith("_"):  # "_" must name no invite: revoke and draw again
        await store.revoke_invite(invite.code)
        invite = await store.create_invite("user")
    texts = ["", "_", "%", invite.code[:3] + "!", invite.code + "x", invite.code[:5]]

    results = [await store.revoke_invite(text) for text in texts]

    assert [r.matches for r in results] == [()] * len(texts)
    assert await store.get_invite(invite.code) == invite


async def test_racing_revocations_of_one_invite_revoke_it_once(
    store: UserStore, backend: Backend
) -> None:
    invite = await store.create_invite("user")
    other = await backend.open()
    try:
        results = await asyncio.gather(*(s.revoke_invite(invite.code) for s in [store, other] * 10))
    finally:
        await other.close()

    assert sum(r.revoked is not None for r in results) == 1
    assert await store.list_invites() == []


# --- redeeming -----------------------------------------------------------------------------


async def test_redeeming_registers_the_user_with_the_invites_role(store: UserStore) -> None:
    invite = await store.create_invite("admin", uses=2)

    result = await store.redeem_invite(invite.code, 7, "Bob")

    assert result.ok
    assert result.failure is None
    assert result.already_registered is False
    assert result.user is not None
    assert (result.user.user_id, result.user.role, result.user.display_name) == (7, "admin", "Bob")
    assert await store.get_user(7) == result.user
    assert await uses_left(store, invite.code) == 1


async def test_an_unknown_code_registers_nobody(store: UserStore) -> None:
    assert_failed(await store.redeem_invite("not-a-code", 7), RedeemFailure.UNKNOWN)
    assert await store.get_user(7) is None


async def test_an_expired_invite_registers_nobody(store: UserStore) -> None:
    invite = await store.create_invite("user", uses=5, expires_at=now() - timedelta(seconds=1))

    result = await store.redeem_invite(invite.code, 7)

    assert_failed(result, RedeemFailure.EXPIRED)
    assert result.failure == "expired"
    assert await store.get_user(7) is None
    assert await uses_left(store, invite.code) == 5


async def test_an_invite_that_expires_later_works_now(store: UserStore) -> None:
    invite = await store.create_invite("user", expires_at=now() + timedelta(minutes=1))

    assert (await store.redeem_invite(invite.code, 7)).ok


async def test_a_used_up_invite_registers_nobody(store: UserStore) -> None:
    invite = await store.create_invite("user")
    assert (await store.redeem_invite(invite.code, 1)).ok

    result = await store.redeem_invite(invite.code, 2)

    assert_failed(result, RedeemFailure.USED_UP)
    assert result.failure == "used_up"
    assert await store.get_user(2) is None
    assert await uses_left(store, invite.code) == 0


async def test_a_multi_use_invite_counts_down(store: UserStore) -> None:
    invite = await store.create_invite("user", uses=3)

    for user_id, left in [(1, 2), (2, 1), (3, 0)]:
        assert (await store.redeem_invite(invite.code, user_id)).ok
        assert await uses_left(store, invite.code) == left

    assert_failed(await store.redeem_invite(invite.code, 4), RedeemFailure.USED_UP)
    assert [u.user_id for u in await store.list_users()] == [1, 2, 3]


async def test_a_registered_user_keeps_their_role_and_takes_no_use(store: UserStore) -> None:
    admin = await store.upsert_user(1, "admin", "Ann")
    invite = await store.create_invite("user")

    result = await store.redeem_invite(invite.code, 1, "Someone else")

    assert result.ok
    assert result.already_registered is True
    assert result.user == admin
    assert await store.get_user(1) == admin
    assert await uses_left(store, invite.code) == 1
    assert (await store.redeem_invite(invite.code, 2)).ok  # the use is still there


async def test_a_registered_user_redeeming_a_dead_code_stays_registered(store: UserStore) -> None:
    user = await store.upsert_user(1, "user")
    expired = await store.create_invite("admin", expires_at=now() - timedelta(seconds=1))

    for code in ["not-a-code", expired.code]:
        result = await store.redeem_invite(code, 1)
        assert result.ok
        assert result.already_registered
        assert result.user == user


async def test_fifty_racing_redemptions_of_a_single_use_code_admit_one(
    store: UserStore,
) -> None:
    invite = await store.create_invite("user")

    results = await asyncio.gather(
        *(store.redeem_invite(invite.code, user_id) for user_id in range(1, 51))
    )

    assert_one_admitted(results)
    assert len(await store.list_users()) == 1
    assert await uses_left(store, invite.code) == 0


async def test_racing_redemptions_through_several_stores_admit_as_many_as_uses(
    store: UserStore, backend: Backend
) -> None:
    single = await store.create_invite("user")
    triple = await store.create_invite("user", uses=3)
    others = await asyncio.gather(*(backend.open() for _ in range(5)))
    stores = [store, *others]
    try:
        results = await asyncio.gather(
            *(stores[i % 6].redeem_invite(single.code, 1000 + i) for i in range(50)),
            *(stores[i % 6].redeem_invite(triple.code, 2000 + i) for i in range(50)),
        )
    finally:
        await asyncio.gather(*(other.close() for other in others))

    assert_one_admitted(results[:50])
    assert sum(r.ok for r in results[50:]) == 3
    assert all(r.failure is RedeemFailure.USED_UP for r in results[50:] if not r.ok)
    admitted = {r.user.user_id for r in results if r.user is not None}
    assert {u.user_id for u in await store.list_users()} == admitted
    assert await uses_left(store, triple.code) == 0


async def test_one_user_redeeming_many_times_at_once_takes_one_use(store: UserStore) -> None:
    invite = await store.create_invite("user", uses=5)

    results = await asyncio.gather(*(store.redeem_invite(invite.code, 7) for _ in range(20)))

    assert all(r.ok and r.user is not None and r.user.user_id == 7 for r in results)
    assert sum(not r.already_registered for r in results) == 1
    assert await uses_left(store, invite.code) == 4


def assert_one_admitted(results: list[RedeemResult]) -> None:
    winners = [r for r in results if r.ok]
    assert len(winners) == 1, [r.failure for r in results]
    assert winners[0].already_registered is False
    assert [r.failure for r in results if not r.ok] == [RedeemFailure.USED_UP] * 49


# --- usage ---------------------------------------------------------------------------------


async def test_usage_adds_up_per_user_per_day(store: UserStore) -> None:
    monday, tuesday = date(2025, 3, 3), date(2025, 3, 4)
    assert await store.usage_on(1, monday) == 0

    await store.add_usage(1, monday, 100)
    await store.add_usage(1, monday, 50)
    await store.add_usage(1, tuesday, 7)
    await store.add_usage(2, monday, 1)
    await store.add_usage(2, monday, 0)

    assert await store.usage_on(1, monday) == 150
    assert await store.usage_on(1, tuesday) == 7
    assert await store.usage_on(2, monday) == 1
    assert await store.usage_on(2, tuesday) == 0
    with pytest.raises(ValueError, match="negative"):
        await store.add_usage(1, monday, -1)
    assert await store.usage_on(1, monday) == 150


async def test_usage_of_many_users_adds_up_in_one_write(store: UserStore) -> None:
    """The usage ledger writes budgets' tokens for many users at once (``add_usages``)."""
    day = date(2025, 3, 3)
    await store.add_usage(1, day, 100)
    await store.add_usages([(1, day, 5), (2, day, 7), (3, date(2025, 3, 4), 2)])  # type: ignore[attr-defined]
    assert [await store.usage_on(u, day) for u in (1, 2, 3)] == [105, 7, 0]
    assert await store.usage_on(3, date(2025, 3, 4)) == 2
    with pytest.raises(ValueError):
        await store.add_usages([(1, day, -1)])  # type: ignore[attr-defined]
    assert await store.usage_on(1, day) == 105, "a refused batch adds nothing"


async def test_concurrent_usage_is_not_lost(store: UserStore) -> None:
    day = date(2025, 3, 3)

    await asyncio.gather(*(store.add_usage(1, day, 10) for _ in range(40)))

    assert await store.usage_on(1, day) == 400


async def test_usage_is_listed_per_user_per_day_from_a_day_on(store: UserStore) -> None:
    sunday, monday, tuesday = date(2025, 3, 2), date(2025, 3, 3), date(2025, 3, 4)
    await store.add_usage(2, tuesday, 5)
    await store.add_usage(1, sunday, 99)
    await store.add_usage(3, monday, 7)
    await store.add_usage(1, monday, 10)
    await store.add_usage(1, monday, 1)

    assert await store.usage_since(monday) == [
        DailyUsage(1, monday, 11),
        DailyUsage(3, monday, 7),
        DailyUsage(2, tuesday, 5),
    ]
    assert len(await store.usage_since(sunday)) == 4
    assert await store.usage_since(date(2025, 3, 5)) == []


async def test_usage_per_model_adds_up_by_kind_and_is_listed_from_a_day_on(
    store: UserStore,
) -> None:
    sunday, monday = date(2025, 3, 2), date(2025, 3, 3)
    some = Usage(
        input_tokens=10,
        output_tokens=2,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=5,
        cache_write_1h_tokens=3,  # of the writes, kept an hour: priced at 2x, not 1.25x
    )
    await store.add_model_usage(
        [
            ModelUsage(1, monday, "claude-sonnet-5", some),
            ModelUsage(1, monday, "claude-haiku-4-5", Usage(output_tokens=1)),
            ModelUsage(2, monday, "claude-sonnet-5", Usage(input_tokens=3)),
            ModelUsage(1, sunday, "claude-sonnet-5", Usage(input_tokens=99)),
        ]
    )
    await store.add_model_usage([ModelUsage(1, monday, "claude-sonnet-5", some)])
    await store.add_model_usage([])

    assert await store.model_usage_since(monday) == [
        ModelUsage(1, monday, "claude-haiku-4-5", Usage(output_tokens=1)),
        ModelUsage(1, monday, "claude-sonnet-5", some + some),
        ModelUsage(2, monday, "claude-sonnet-5", Usage(input_tokens=3)),
    ]
    assert len(await store.model_usage_since(sunday)) == 4
    [kept] = [u for u in await store.model_usage_since(monday) if u.usage.cache_write_1h_tokens]
    assert estimate({"claude-sonnet-5": kept.usage}) == estimate({"claude-sonnet-5": some + some})
    with pytest.raises(ValueError, match="negative"):
        await store.add_model_usage([ModelUsage(1, monday, "m", Usage(input_tokens=-1))])


async def test_seconds_heard_and_characters_spoken_add_up_per_model(store: UserStore) -> None:
    day = date(2025, 3, 3)
    heard, spoken = Usage(audio_seconds=42), Usage(spoken_chars=1200)
    batch = [ModelUsage(1, day, "whisper-1", heard), ModelUsage(1, day, "tts-1", spoken)]

    await store.add_model_usage(batch)
    await store.add_model_usage(batch)

    totals = {row.model: row.usage for row in await store.model_usage_since(day)}
    assert totals == {"tts-1": Usage(spoken_chars=2400), "whisper-1": Usage(audio_seconds=84)}


async def test_a_conversations_voice_choice_is_kept_and_changed(backend: Backend) -> None:
    store: Any = await backend.open()
    try:
        assert await store.get_voice_mode(7, "private") is None
        await store.set_voice_mode(7, "private", "always")
        await store.set_voice_mode(-5, "chat_-5", "mirror")
        await store.set_voice_mode(7, "private", "off")
    finally:
        await store.close()
    again: Any = await backend.open()  # kept: another store on the same data reads it
    try:
        assert await again.get_voice_mode(7, "private") == "off"
        assert await again.get_voice_mode(-5, "chat_-5") == "mirror"
        assert await again.get_voice_mode(5, "chat_-5") is None
    finally:
        await again.close()


async def test_concurrent_usage_per_model_is_not_lost(store: UserStore) -> None:
    day, one = date(2025, 3, 3), Usage(input_tokens=1, output_tokens=2)
    batch = [ModelUsage(1, day, "a", one), ModelUsage(2, day, "b", one)]

    await asyncio.gather(*(store.add_model_usage(batch) for _ in range(20)))

    totals = {row.model: row.usage for row in await store.model_usage_since(day)}
    assert totals == {"a": Usage(input_tokens=20, output_tokens=40)} | {
        "b": Usage(input_tokens=20, output_tokens=40)
    }


# --- database failures --------------------------------------------------------------------


async def test_a_database_locked_past_the_timeout_is_a_store_error(backend: Backend) -> None:
    store = await backend.open_impatient()
    try:
        invite = await store.create_invite("user")
        async with backend.locked():
            with pytest.raises(StoreError, match="while registering a user") as raised:
                await store.upsert_user(1, "user")
            with pytest.raises(StoreError, match="while redeeming an invite"):
                await store.redeem_invite(invite.code, 2)
            with pytest.raises(StoreError, match="while adding token usage"):
                await store.add_usage(1, date(2025, 3, 5), 10)
        assert isinstance(raised.value.__cause__, sqlite3.Error | asyncpg.PostgresError)

        assert (await store.upsert_user(1, "user")).user_id == 1  # the lock gone, it works again
        assert (await store.redeem_invite(invite.code, 2)).ok
    finally:
        await store.close()


# --- SQLite only ---------------------------------------------------------------------------


async def test_sqlite_makes_its_file_and_tables_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "lazy.db"
    store = SqliteUserStore(path)
    assert not path.exists()
    try:
        assert await store.get_user(1) is None
        assert path.exists()
        await store.upsert_user(1, "user")
    finally:
        await store.close()

    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"botkit_users", "botkit_invites", "botkit_usage"} <= tables


async def test_sqlite_works_in_memory() -> None:
    store = await SqliteUserStore.connect(":memory:")
    try:
        invite = await store.create_invite("user")
        assert (await store.redeem_invite(invite.code, 1)).ok
        assert [u.user_id for u in await store.list_users("user")] == [1]
    finally:
        await store.close()


async def test_sqlite_refuses_a_file_from_a_newer_botkit(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")

    with pytest.raises(ConfigError, match="upgrade botkit"):
        await SqliteUserStore.connect(path)


async def test_sqlite_reports_a_file_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open"):
        await SqliteUserStore.connect(tmp_path / "no" / "such" / "dir.db")


async def test_sqlite_reads_see_what_is_committed_and_never_wait_for_a_writer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "users.db"
    store = await SqliteUserStore.connect(path)
    writer = await SqliteUserStore.connect(path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        await store.upsert_user(1, "user", "Ann")
        assert (await registered(store, 1)).display_name == "Ann"
        holder.execute("BEGIN IMMEDIATE")  # a write under way in another process
        holder.execute("UPDATE botkit_users SET display_name = 'Bea' WHERE user_id = 1")
        user = await asyncio.wait_for(store.get_user(1), 1)  # not waiting for the writer
        assert user is not None and user.display_name == "Ann"  # nor seeing its uncommitted work
        holder.execute("COMMIT")
        assert (await registered(store, 1)).display_name == "Bea"

        await writer.upsert_user(2, "admin", "Cy")  # another store's write is seen at once
        assert (await registered(store, 2)).role == "admin"
        assert await store.get_user(3) is None
    finally:
        holder.close()
        await store.close()
        await writer.close()


async def test_a_closed_sqlite_store_cannot_be_used(tmp_path: Path) -> None:
    store = await SqliteUserStore.connect(tmp_path / "users.db")
    await store.close()
    await store.close()

    with pytest.raises(RuntimeError, match="closed"):
        await store.get_user(1)


# --- PostgreSQL and migrations -------------------------------------------------------------


async def test_migrate_applies_each_migration_once(postgres_db: str) -> None:
    assert await migrate(postgres_db) == ALL
    assert await migrate(postgres_db) == []

    conn = await asyncpg.connect(postgres_db)
    try:
        assert (
            await conn.fetchval("SELECT array_agg(name ORDER BY name) FROM botkit_migrations")
            == ALL
        )
        for table in ["botkit_users", "botkit_invites", "botkit_usage"]:
            assert await conn.fetchval("SELECT to_regclass($1)::text", table) == table
        assert await pending_migrations(conn) == []
    finally:
        await conn.close()


async def test_concurrent_migrations_do_not_collide(postgres_db: str) -> None:
    runs = await asyncio.gather(*(migrate(postgres_db) for _ in range(4)))

    assert sorted(runs) == [[], [], [], ALL]


async def test_new_migrations_are_applied_in_number_order(postgres_db: str, tmp_path: Path) -> None:
    (tmp_path / "1_make.sql").write_text("CREATE TABLE steps (n int, at serial);")
    (tmp_path / "10_third.sql").write_text("INSERT INTO steps (n) VALUES (10);")
    (tmp_path / "2_second.sql").write_text("INSERT INTO steps (n) VALUES (2);")
    (tmp_path / "README.md").write_text("not a migration")

    assert await migrate(postgres_db, directory=tmp_path) == ["1_make", "2_second", "10_third"]
    (tmp_path / "11_fourth.sql").write_text("INSERT INTO steps (n) VALUES (11);")
    assert await migrate(postgres_db, directory=tmp_path) == ["11_fourth"]

    conn = await asyncpg.connect(postgres_db)
    try:
        assert await conn.fetchval("SELECT array_agg(n ORDER BY at) FROM steps") == [2, 10, 11]
    finally:
        await conn.close()


async def test_a_failing_migration_leaves_no_trace(postgres_db: str, tmp_path: Path) -> None:
    (tmp_path / "001_ok.sql").write_text("CREATE TABLE ok (n int);")
    (tmp_path / "002_bad.sql").write_text("CREATE TABLE half (n int); SELECT no_such_function();")

    with pytest.raises(StoreError, match="while applying migration 002_bad") as raised:
        await migrate(postgres_db, directory=tmp_path)

    assert "no_such_function() does not exist" in str(raised.value)
    assert isinstance(raised.value.__cause__, asyncpg.PostgresError)
    conn = await asyncpg.connect(postgres_db)
    try:
        assert await conn.fetchval("SELECT to_regclass('ok')::text") == "ok"
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        assert await conn.fetchval("SELECT array_agg(name) FROM botkit_migrations") == ["001_ok"]
    finally:
        await conn.close()


async def test_migrating_an_unreachable_database_is_a_store_error_without_the_password() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(StoreError, match="cannot migrate the database") as raised:
        await migrate(f"postgresql://botkit:s3cret-pw@127.0.0.1:{port}/botkit")
    assert "s3cret-pw" not in str(raised.value)
    assert isinstance(raised.value.__cause__, OSError)


def test_the_packaged_migrations_are_found() -> None:
    migrations = load_migrations()

    assert [m.name for m in migrations][: len(ALL)] == ALL
    assert [m.number for m in migrations] == sorted({m.number for m in migrations})
    assert "CREATE TABLE IF NOT EXISTS botkit_users" in migrations[0].sql
    assert (MIGRATIONS / f"{FIRST}.sql").is_file()


def test_badly_named_or_duplicate_migrations_are_refused(tmp_path: Path) -> None:
    (tmp_path / "first.sql").write_text("SELECT 1;")
    with pytest.raises(ConfigError, match=re.escape("001_what_it_does.sql")):
        load_migrations(tmp_path)

    (tmp_path / "first.sql").unlink()
    (tmp_path / "001_a.sql").write_text("SELECT 1;")
    (tmp_path / "01_b.sql").write_text("SELECT 1;")
    with pytest.raises(ConfigError, match="share number 1"):
        load_migrations(tmp_path)


async def test_postgres_store_on_an_unmigrated_database_says_to_migrate(
    postgres_db: str,
) -> None:
    with pytest.raises(ConfigError, match=re.escape("python -m botkit migrate")):
        await PostgresUserStore.connect(postgres_db, min_size=1, max_size=2)

    pool = await asyncpg.create_pool(postgres_db, min_size=1, max_size=2)
    try:
        store = PostgresUserStore(pool)
        with pytest.raises(ConfigError, match=re.escape("python -m botkit migrate")):
            await store.get_user(1)
        conn = await asyncpg.connect(postgres_db)
        try:
            assert await conn.fetchval("SELECT to_regclass('botkit_users')") is None
        finally:
            await conn.close()
    finally:
        await pool.close()


async def test_postgres_store_leaves_a_pool_it_was_given_open(migrated_db: str) -> None:
    pool = await asyncpg.create_pool(migrated_db, min_size=1, max_size=2)
    try:
        store = PostgresUserStore(pool)
        assert store.pool is pool
        await store.upsert_user(1, "user")
        await store.close()

        assert await pool.fetchval("SELECT count(*) FROM botkit_users") == 1
    finally:
        await pool.close()


async def test_an_unreachable_postgres_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot connect to the user database") as raised:
        await PostgresUserStore.connect("postgresql://u:hunter2@127.0.0.1:9/db", min_size=1)
    assert "hunter2" not in str(raised.value)
    assert isinstance(raised.value.__cause__, OSError)


async def test_a_pool_closed_under_the_store_is_a_store_error(migrated_db: str) -> None:
    pool = await asyncpg.create_pool(migrated_db, min_size=1, max_size=2)
    store = PostgresUserStore(pool)
    await store.upsert_user(1, "user")
    await pool.close()

    with pytest.raises(StoreError, match="while reading a user") as raised:
        await store.get_user(1)
    assert isinstance(raised.value.__cause__, asyncpg.InterfaceError)


async def test_a_connection_cut_off_mid_query_is_a_store_error_then_replaced(
    migrated_db: str,
) -> None:
    store = await PostgresUserStore.connect(migrated_db, min_size=1, max_size=1)
    admin = await asyncpg.connect(migrated_db)
    try:
        async with admin.transaction():
            await admin.execute("LOCK TABLE botkit_users IN ACCESS EXCLUSIVE MODE")
            reading = asyncio.create_task(store.get_user(1))
            waiter = await backend_waiting_for(admin, "botkit_users")
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", waiter)
            with pytest.raises(StoreError, match="while reading a user") as raised:
                await reading
        assert isinstance(raised.value.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError)

        assert await store.get_user(1) is None  # the pool connects again
    finally:
        await admin.close()
        await store.close()


async def backend_waiting_for(admin: Any, table: str) -> int:
    """The process id of the one backend waiting for a lock on ``table``, once there is one."""
    sql = "SELECT pid FROM pg_locks WHERE NOT granted AND relation = $1::regclass"
    for _ in range(1000):  # no event to wait on: the server's lock table is polled
        pid = await admin.fetchval(sql, table)
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no backend waited for a lock on {table} within 10 s")


async def test_migrating_postgres_hashes_the_invite_codes_already_there(postgres_db: str) -> None:
    plain = new_invite_code()
    conn = await asyncpg.connect(postgres_db)
    try:
        await apply_migrations(conn, load_migrations()[:1])
        await conn.execute(
            "INSERT INTO botkit_invites (code, role, uses_left) VALUES ($1, 'cleaner', 1)", plain
        )
    finally:
        await conn.close()

    assert await migrate(postgres_db) == ALL[1:]

    backend = Backend("postgres", postgres_db)
    assert await backend.raw_invites() != []
    assert not [row for row in await backend.raw_invites() if plain in str(row)]
    store = await backend.open()
    try:
        result = await store.redeem_invite(plain, 7)
        assert result.user is not None and result.user.role == "cleaner"
        assert_failed(await store.redeem_invite(plain, 8), RedeemFailure.USED_UP)
    finally:
        await store.close()


_SQLITE_SCHEMA_1 = """
    CREATE TABLE botkit_invites (
        code       TEXT    PRIMARY KEY,
        role       TEXT    NOT NULL,
        uses_left  INTEGER NOT NULL CHECK (uses_left >= 0),
        expires_at TEXT,
        created_by INTEGER,
        created_at TEXT    NOT NULL
    );
    PRAGMA user_version = 1;
"""


async def test_opening_an_older_sqlite_file_hashes_its_invite_codes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    plain = [new_invite_code() for _ in range(2)]
    with sqlite3.connect(path) as db:
        db.executescript(_SQLITE_SCHEMA_1)
        db.executemany(
            "INSERT INTO botkit_invites VALUES (?, 'cleaner', 1, NULL, NULL, ?)",
            [(code, "2026-01-01T00:00:00.000000Z") for code in plain],
        )
    db.close()

    store = await SqliteUserStore.connect(path)
    try:
        result = await store.redeem_invite(plain[0], 7)
        assert result.user is not None and result.user.role == "cleaner"
        assert (await store.redeem_invite(plain[1], 8)).ok
        assert_failed(await store.redeem_invite(plain[0], 9), RedeemFailure.USED_UP)
    finally:
        await store.close()

    rows = await Backend("sqlite", str(path)).raw_invites()
    assert len(rows) == 2
    assert not [row for row in rows if any(code in str(row) for code in plain)]
    raw = every_byte_in(tmp_path)
    assert not [code for code in plain if code.encode() in raw], "nothing left in free pages"


def every_byte_in(folder: Path) -> bytes:
    """The contents of every file in ``folder``, one after another."""
    return b"".join(f.read_bytes() for f in sorted(folder.iterdir()))


# ---- schedules and time zones (#13) ------------------------------------------------------

LEASE = timedelta(minutes=2)


def reminder(user_id: int = 7, due_in: timedelta = timedelta(0), **fields: Any) -> NewSchedule:
    base = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    values: dict[str, Any] = dict(
        user_id=user_id,
        chat_id=user_id,
        kind="reminder",
        text="call the plumber",
        due_at=base + due_in,
        timezone="Europe/Berlin",
    )
    return NewSchedule(**(values | fields))


T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_task_keeps_the_span_context_that_scheduled_it(store: UserStore) -> None:
    made = await store.add_schedule(reminder(kind="task", traceparent=TRACEPARENT), max_pending=5)
    untraced = await store.add_schedule(reminder(user_id=8), max_pending=5)
    assert made is not None and untraced is not None
    assert (made.traceparent, untraced.traceparent) == (TRACEPARENT, None)
    claimed = {s.id: s for s in await store.claim_due_schedules(T0, lease=LEASE)}
    assert claimed[made.id].traceparent == TRACEPARENT  # what a firing loop reads back
    assert claimed[untraced.id].traceparent is None


async def test_a_schedule_is_stored_listed_and_cancelled_by_its_owner_only(
    store: UserStore,
) -> None:
    made = await store.add_schedule(
        reminder(chat_id=-100, thread_id=5, chat_type="supergroup", repeat="daily"), max_pending=5
    )
    assert made is not None
    assert (made.user_id, made.chat_id, made.thread_id, made.chat_type) == (
        7,
        -100,
        5,
        "supergroup",
    )
    assert (made.kind, made.text, made.due_at, made.repeat) == (
        "reminder",
        "call the plumber",
        T0,
        "daily",
    )
    assert (made.status, made.fired, made.timezone) == ("pending", 0, "Europe/Berlin")
    other = await store.add_schedule(reminder(user_id=8), max_pending=5)
    assert other is not None
    assert [s.id for s in await store.pending_schedules(7)] == [made.id]
    assert {s.id for s in await store.pending_schedules()} == {made.id, other.id}

    assert await store.cancel_schedule(made.id, user_id=8) is None, "not theirs"
    cancelled = await store.cancel_schedule(made.id, user_id=7)
    assert cancelled is not None and cancelled.status == "cancelled"
    assert await store.cancel_schedule(made.id, user_id=7) is None, "already cancelled"
    assert await store.pending_schedules(7) == []
    assert await store.cancel_schedule(other.id) is not None, "an operator names no user"


async def test_at_most_max_pending_schedules_per_user(store: UserStore) -> None:
    for _ in range(3):
        assert await store.add_schedule(reminder(), max_pending=3) is not None
    assert await store.add_schedule(reminder(), max_pending=3) is None
    assert await store.add_schedule(reminder(user_id=8), max_pending=3) is not None
    first = (await store.pending_schedules(7))[0]
    await store.cancel_schedule(first.id)
    assert await store.add_schedule(reminder(), max_pending=3) is not None


async def test_only_due_schedules_are_claimed_and_only_once(store: UserStore) -> None:
    due = await store.add_schedule(reminder(), max_pending=5)
    later = await store.add_schedule(reminder(due_in=timedelta(hours=1)), max_pending=5)
    assert due is not None and later is not None
    claimed = await store.claim_due_schedules(T0, lease=LEASE)
    assert [(s.id, s.status) for s in claimed] == [(due.id, "firing")]
    assert claimed[0].claim
    assert await store.claim_due_schedules(T0 + timedelta(seconds=30), lease=LEASE) == []
    assert await store.finish_schedule(claimed[0], next_due=None, fired_at=T0, delivered=True)
    assert [s.id for s in await store.pending_schedules(7)] == [later.id]
    assert await store.claim_due_schedules(T0 + LEASE * 2, lease=LEASE) == []


async def test_a_claim_whose_lease_ran_out_is_taken_again_and_the_old_one_cannot_finish(
    store: UserStore,
) -> None:
    assert await store.add_schedule(reminder(), max_pending=5) is not None
    (dead,) = await store.claim_due_schedules(T0, lease=LEASE)
    (again,) = await store.claim_due_schedules(T0 + LEASE, lease=LEASE)
    assert again.id == dead.id and again.claim != dead.claim
    assert not await store.finish_schedule(dead, next_due=None, fired_at=T0, delivered=True)
    assert await store.finish_schedule(again, next_due=None, fired_at=T0, delivered=True)
    assert await store.pending_schedules() == []


async def test_a_queue_job_takes_over_its_occurrence_only_while_unrecorded(
    store: UserStore,
) -> None:
    made = await store.add_schedule(reminder(kind="task", repeat="daily"), max_pending=5)
    assert made is not None
    assert await store.take_schedule(made.id, 0, until=T0 + LEASE) is None, "not claimed yet"
    (claimed,) = await store.claim_due_schedules(T0, lease=LEASE)
    held = T0 + timedelta(days=7)
    taken = await store.take_schedule(made.id, 0, until=held)
    assert taken is not None and taken.claim not in (None, claimed.claim)
    assert await store.claim_due_schedules(T0 + LEASE * 2, lease=LEASE) == [], "held by the job"
    assert not await store.finish_schedule(claimed, next_due=None, fired_at=T0, delivered=True)
    tomorrow = T0 + timedelta(days=1)
    assert await store.finish_schedule(taken, next_due=tomorrow, fired_at=T0, delivered=True)
    assert await store.take_schedule(made.id, 0, until=held) is None, "a stale copy of the job"
    (again,) = await store.claim_due_schedules(tomorrow, lease=LEASE)
    await store.cancel_schedule(made.id)
    assert await store.take_schedule(made.id, again.fired, until=held) is None, "cancelled"


async def test_a_batched_occurrence_is_held_for_its_batch_and_forgets_it_once_recorded(
    store: UserStore,
) -> None:
    made = await store.add_schedule(
        reminder(kind="task", repeat="daily", urgent=False), max_pending=5
    )
    urgent = await store.add_schedule(reminder(kind="task", user_id=8), max_pending=5)
    assert made is not None and urgent is not None
    assert (made.urgent, urgent.urgent, made.batch_id) == (False, True, None)
    claimed = {s.id: s for s in await store.claim_due_schedules(T0, lease=LEASE)}
    assert claimed[made.id].urgent is False
    sent = T0 + timedelta(seconds=5)
    held = {"batch_id": "msgbatch_01x", "digest": "ab" * 32, "at": sent}
    assert await store.hold_for_batch(claimed[made.id], **held, until=T0 + timedelta(hours=25))
    (batched,) = await store.batched_schedules()
    assert (batched.id, batched.batch_id, batched.batch_at, batched.batch_digest) == (
        made.id,
        "msgbatch_01x",
        sent,
        "ab" * 32,
    )
    assert batched.claim == claimed[made.id].claim
    later = T0 + timedelta(hours=24)
    stale = claimed[urgent.id]
    assert await store.finish_schedule(stale, next_due=None, fired_at=T0, delivered=True)
    assert not await store.hold_for_batch(stale, **held, until=later), "no longer claimed"
    assert await store.claim_due_schedules(later, lease=LEASE) == [], "held for its batch"
    tomorrow = T0 + timedelta(days=1)
    assert await store.finish_schedule(batched, next_due=tomorrow, fired_at=later, delivered=True)
    assert await store.batched_schedules() == []
    (pending,) = await store.pending_schedules(7)
    assert (pending.batch_id, pending.batch_at, pending.batch_digest) == (None, None, None)
    assert pending.urgent is False, "every occurrence of the task may wait"


async def test_a_repeat_is_pending_again_at_its_next_occurrence(store: UserStore) -> None:
    assert await store.add_schedule(reminder(repeat="daily"), max_pending=5) is not None
    (claimed,) = await store.claim_due_schedules(T0, lease=LEASE)
    tomorrow = T0 + timedelta(days=1)
    assert await store.finish_schedule(claimed, next_due=tomorrow, fired_at=T0, delivered=True)
    (pending,) = await store.pending_schedules(7)
    assert (pending.status, pending.due_at, pending.fired, pending.claim) == (
        "pending",
        tomorrow,
        1,
        None,
    )
    assert pending.last_fired_at == T0


async def test_a_schedule_cancelled_during_delivery_stays_cancelled(store: UserStore) -> None:
    made = await store.add_schedule(reminder(repeat="daily"), max_pending=5)
    assert made is not None
    (claimed,) = await store.claim_due_schedules(T0, lease=LEASE)
    assert await store.cancel_schedule(made.id, user_id=7) is not None
    tomorrow = T0 + timedelta(days=1)
    assert not await store.finish_schedule(claimed, next_due=tomorrow, fired_at=T0, delivered=True)
    assert await store.pending_schedules() == []
    assert await store.claim_due_schedules(tomorrow, lease=LEASE) == []


async def test_blocked_users_schedules_are_not_claimed(store: UserStore) -> None:
    await store.upsert_user(7, "user")
    assert await store.add_schedule(reminder(), max_pending=5) is not None
    assert await store.add_schedule(reminder(user_id=9), max_pending=5) is not None, "unregistered"
    await store.set_blocked(7, True)
    assert [s.user_id for s in await store.claim_due_schedules(T0, lease=LEASE)] == [9]
    await store.set_blocked(7, False)
    assert [s.user_id for s in await store.claim_due_schedules(T0, lease=LEASE)] == [7]


async def test_two_stores_claiming_at_once_never_take_the_same_schedule(
    backend: Backend, store: UserStore
) -> None:
    for n in range(40):
        assert await store.add_schedule(reminder(user_id=n), max_pending=5) is not None
    others = [await backend.open() for _ in range(3)]
    try:
        batches = await asyncio.gather(
            *(s.claim_due_schedules(T0, lease=LEASE, limit=7) for s in [store, *others] * 3)
        )
    finally:
        for other in others:
            await other.close()
    ids = [s.id for batch in batches for s in batch]
    assert len(ids) == len(set(ids)) == 40


async def test_a_users_time_zone_is_remembered(backend: Backend, store: UserStore) -> None:
    assert await store.get_timezone(7) is None
    await store.set_timezone(7, "Europe/Berlin")
    await store.set_timezone(7, "America/New_York")
    reopened = await backend.open()
    try:
        assert await reopened.get_timezone(7) == "America/New_York"
    finally:
        await reopened.close()


# ---- schedule limits: paused owners, group listings, task runs per day (#27) -------------


async def test_a_paused_schedule_waits_is_listed_paused_and_is_claimed_again_later(
    store: UserStore,
) -> None:
    made = await store.add_schedule(reminder(repeat="daily"), max_pending=5)
    assert made is not None
    (claimed,) = await store.claim_due_schedules(T0, lease=LEASE)
    recheck = T0 + timedelta(minutes=5)
    assert await store.pause_schedule(claimed, until=recheck)
    assert not await store.pause_schedule(claimed, until=recheck), "no longer claimed"
    (listed,) = await store.pending_schedules(7)
    assert (listed.status, listed.paused, listed.due_at, listed.fired) == ("pending", True, T0, 0)
    assert await store.claim_due_schedules(recheck - timedelta(seconds=1), lease=LEASE) == []
    assert await store.next_schedule_due() == recheck
    (again,) = await store.claim_due_schedules(recheck, lease=LEASE)
    assert again.id == made.id and again.due_at == T0, "the same occurrence"
    tomorrow = T0 + timedelta(days=1)
    assert await store.finish_schedule(again, next_due=tomorrow, fired_at=recheck, delivered=True)
    (fired,) = await store.pending_schedules(7)
    assert not fired.paused and fired.due_at == tomorrow


async def test_a_blocked_owners_schedules_are_listed_paused(store: UserStore) -> None:
    await store.upsert_user(7, "user")
    assert await store.add_schedule(reminder(), max_pending=5) is not None
    assert [s.paused for s in await store.pending_schedules(7)] == [False]
    await store.set_blocked(7, True)
    assert [s.paused for s in await store.pending_schedules(7)] == [True]


async def test_a_chats_schedules_are_listed_and_cancelled_whoever_set_them(
    store: UserStore,
) -> None:
    group = {"chat_id": -100, "chat_type": "supergroup"}
    mine = await store.add_schedule(reminder(**group), max_pending=5)
    theirs = await store.add_schedule(reminder(user_id=8, **group), max_pending=5)
    private = await store.add_schedule(reminder(user_id=8), max_pending=5)
    assert mine is not None and theirs is not None and private is not None
    assert [s.id for s in await store.pending_schedules(chat_id=-100)] == [mine.id, theirs.id]
    assert await store.cancel_schedule(private.id, chat_id=-100) is None, "not of this chat"
    assert await store.cancel_schedule(theirs.id, chat_id=-100) is not None
    assert [s.id for s in await store.pending_schedules(chat_id=-100)] == [mine.id]
    assert [s.id for s in await store.pending_schedules(8)] == [private.id]


async def test_task_runs_are_counted_per_user_and_day_once_per_occurrence(
    store: UserStore,
) -> None:
    day = T0.date()
    tasks = []
    for n in range(4):
        new = reminder(kind="task", due_in=timedelta(hours=n))
        made = await store.add_schedule(new, max_pending=5)
        assert made is not None
        tasks.append(made)
    other = await store.add_schedule(reminder(user_id=8, kind="task"), max_pending=5)
    assert other is not None
    assert [await store.take_task_run(t, day, limit=3) for t in tasks] == [True] * 3 + [False]
    assert await store.take_task_run(tasks[0], day, limit=3), "the same occurrence again"
    assert await store.take_task_run(other, day, limit=3), "another user's runs are their own"
    later = replace(tasks[0], due_at=T0 + timedelta(days=1))
    assert not await store.take_task_run(later, day, limit=3), "its next occurrence, same day"
    tomorrow = day + timedelta(days=1)
    assert await store.take_task_run(later, tomorrow, limit=3), "a new day"
    assert await store.take_task_run(tasks[3], tomorrow, limit=3)


async def test_racing_task_runs_of_one_user_never_pass_the_limit(
    backend: Backend, store: UserStore
) -> None:
    tasks = []
    for n in range(20):
        new = reminder(kind="task", due_in=timedelta(minutes=n))
        made = await store.add_schedule(new, max_pending=50)
        assert made is not None
        tasks.append(made)
    others = [await backend.open() for _ in range(3)]
    stores = [store, *others]
    try:
        taken = await asyncio.gather(
            *(stores[n % 4].take_task_run(t, T0.date(), limit=5) for n, t in enumerate(tasks))
        )
    finally:
        for other in others:
            await other.close()
    assert taken.count(True) == 5


async def test_an_older_sqlite_schedule_table_gets_the_pause_and_trace_columns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old = SCHEDULE_SCHEMA[0].replace(",\n        paused_until  TEXT", "")
    old = old.replace(",\n        traceparent   TEXT", "")
    assert "paused_until" not in old and "traceparent" not in old
    with sqlite3.connect(path) as db:
        db.execute(old)
        db.execute("PRAGMA user_version = 2")
    store = await SqliteUserStore.connect(path)
    try:
        made = await store.add_schedule(reminder(traceparent=TRACEPARENT), max_pending=5)
        assert made is not None and made.traceparent == TRACEPARENT
        (claimed,) = await store.claim_due_schedules(T0, lease=LEASE)
        assert await store.pause_schedule(claimed, until=T0 + LEASE)
        assert [s.paused for s in await store.pending_schedules()] == [True]
    finally:
        await store.close()


async def test_an_older_sqlite_usage_table_gets_the_hour_writes_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            """CREATE TABLE botkit_model_usage (user_id INTEGER NOT NULL, day TEXT NOT NULL,
            model TEXT NOT NULL, input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_creation_tokens INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (user_id, day, model))"""
        )
        db.execute("INSERT INTO botkit_model_usage VALUES (1, '2026-11-27', 'm', 5, 0, 0, 4)")
        db.execute("PRAGMA user_version = 2")
    store = await SqliteUserStore.connect(path)
    try:
        day = date(2026, 11, 28)
        hour = Usage(cache_creation_input_tokens=8, cache_write_1h_tokens=8)
        await store.add_model_usage([ModelUsage(1, day, "m", hour)])
        rows = await store.model_usage_since(date(2026, 11, 27))
        assert [r.usage for r in rows] == [
            Usage(input_tokens=5, cache_creation_input_tokens=4),  # written before: 5 minutes
            hour,
        ]
    finally:
        await store.close()


async def last_query_of(dsn: str, pid: int) -> str:
    """What the server ran last on backend ``pid`` (``pg_stat_activity``)."""
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid))
    finally:
        await conn.close()


async def test_the_pool_resets_a_connection_a_tool_used_but_not_one_the_store_used(
    migrated_db: str,
) -> None:
    """A tool's session state (an advisory lock, a setting) on ``store.pool`` is undone when it
    gives the connection back; the store's own queries leave none, so theirs skip the reset's
    round trip."""
    store = await PostgresUserStore.connect(migrated_db, min_size=1, max_size=1)
    try:
        async with store.pool.acquire() as conn:  # as a tool would
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await conn.execute("SELECT pg_advisory_lock(4242)")
            await conn.execute("SET statement_timeout = 1234")
        assert "pg_advisory_unlock_all" in await last_query_of(migrated_db, pid)
        assert await store.get_user(7) is None
        assert "botkit_users" in await last_query_of(migrated_db, pid), "no reset query after"
        async with store.pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid, "the same connection"
            assert await conn.fetchval("SHOW statement_timeout") == "0"
            assert await conn.fetchval("SELECT pg_try_advisory_lock(4242)"), "the lock was freed"
    finally:
        await store.close()


async def test_approvals_over_the_stores_pool_skip_the_reset_too(migrated_db: str) -> None:
    """The approvals' check at every turn runs on the user store's pool; its statements leave
    no session state, so giving the connection back sends no reset query (one round trip a
    turn less in a worker)."""
    store = await PostgresUserStore.connect(migrated_db, min_size=1, max_size=1)

    async def pool() -> Any:
        return store.pool

    try:
        async with store.pool.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        assert not await PostgresApprovals(pool).waiting("user:7")
        assert "botkit_approvals" in await last_query_of(migrated_db, pid), "no reset after"
    finally:
        await store.close()


# --- console sign-in links (#48) --------------------------------------------------------------


async def test_a_console_link_is_taken_once_and_keeps_its_expiry(store: UserStore) -> None:
    links: Any = store
    digest = hashlib.sha256(b"token").hexdigest()
    expires = now() + timedelta(minutes=5)
    await links.add_console_link(digest, 42, expires)
    taken = await links.take_console_link(digest)
    assert taken is not None and taken.user_id == 42
    assert abs((taken.expires_at - expires).total_seconds()) < 0.001
    assert await links.take_console_link(digest) is None, "a link works once"
    assert await links.take_console_link(hashlib.sha256(b"other").hexdigest()) is None


async def test_keeping_a_console_link_drops_the_expired_ones(store: UserStore) -> None:
    links: Any = store
    old, new = hashlib.sha256(b"old").hexdigest(), hashlib.sha256(b"new").hexdigest()
    await links.add_console_link(old, 1, now() - timedelta(seconds=1))
    await links.add_console_link(new, 1, now() + timedelta(minutes=5))
    assert await links.take_console_link(old) is None
    assert await links.take_console_link(new) is not None
