"""Administration from the command line: users, invites and usage, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from botkit import Bot, Settings
from botkit.access import open_user_store
from botkit.admin import Admin, format_table
from botkit.stores import RedeemFailure, UserStore
from botkit.stores.base import ModelUsage
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, ask, fake_llm, running
from botkit.types import Usage

ANN, BOB, ALLOWED, STRANGER = 2101, 2102, 2103, 2104


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The records of a ``--json`` listing: one JSON object per line."""
    return [json.loads(line) for line in stdout.splitlines()]


@dataclass(frozen=True)
class Backend:
    """The configuration a bot and the CLI share, as settings and as environment."""

    tmp_path: Path
    database_url: str | None

    @property
    def env(self) -> dict[str, str]:
        env = {
            "BOTKIT_SESSIONS_DIR": str(self.tmp_path / "sessions"),
            "BOTKIT_ALLOWED_USERS": str(ALLOWED),
        }
        return env | ({"BOTKIT_DATABASE_URL": self.database_url} if self.database_url else {})

    def settings(self, **values: Any) -> Settings:
        defaults: dict[str, Any] = {
            "sessions_dir": self.tmp_path / "sessions",
            "allowed_users": frozenset({ALLOWED}),
            "database_url": self.database_url,
            "stream_replies": False,
        }
        return Settings(_env_file=None, **(defaults | values))

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``python -m botkit ARGS`` with this configuration only."""
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TELEGRAM", "ANTHROPIC", "BOTKIT"))
        }
        return subprocess.run(
            [sys.executable, "-m", "botkit", *args],
            env=clean | self.env | env,
            cwd=self.tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    async def acli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """:meth:`cli` in a thread, so the event loop (and a running bot) goes on."""
        return await asyncio.to_thread(self.cli, *args, **env)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend(tmp_path, None)
    return Backend(tmp_path, request.getfixturevalue("migrated_db"))


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[UserStore]:
    opened = await open_user_store(backend.settings())
    yield opened
    await opened.close()


def audit_lines(stderr: str) -> list[dict[str, Any]]:
    """The ``admin.action`` log lines in a CLI's stderr (JSON lines, as it is not a terminal)."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line["event"] == "admin.action"]


def fields(shown: str) -> dict[str, str]:
    """``users show`` output: a label, two or more spaces, a value, on each line."""
    pairs = [re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in shown.splitlines()]
    return {pair[0]: pair[-1] if len(pair) > 1 else "" for pair in pairs}


# --- users -------------------------------------------------------------------------------------


async def test_users_are_listed_as_an_aligned_table_and_as_json(
    backend: Backend, store: UserStore
) -> None:
    await store.upsert_user(ANN, "manager", "Ann Lee")
    await asyncio.sleep(0.002)  # distinct join times
    await store.upsert_user(BOB, "user", "Bob")
    await store.set_blocked(BOB, True)

    table, as_json, blocked, managers = await asyncio.gather(
        backend.acli("users", "list"),
        backend.acli("users", "list", "--json"),
        backend.acli("users", "list", "--blocked", "--json"),
        backend.acli("users", "list", "--role", "manager", "--json"),
    )

    header, *rows = table.stdout.splitlines()
    assert header.split() == ["ID", "ROLE", "NAME", "JOINED", "(UTC)", "BLOCKED"]
    assert [row.split()[0] for row in rows] == [str(ANN), str(BOB)]
    assert rows[0].index("manager") == header.index("ROLE")
    assert rows[1].index("Bob") == header.index("NAME")
    assert rows[1].rstrip().endswith("yes") and rows[0].rstrip().endswith("no")
    users = json_lines(as_json.stdout)
    assert [(u["user_id"], u["role"], u["display_name"], u["blocked"]) for u in users] == [
        (ANN, "manager", "Ann Lee", False),
        (BOB, "user", "Bob", True),
    ]
    assert [u["user_id"] for u in json_lines(blocked.stdout)] == [BOB]
    assert [u["user_id"] for u in json_lines(managers.stdout)] == [ANN]


async def test_users_are_blocked_unblocked_and_given_roles(
    backend: Backend, store: UserStore
) -> None:
    await store.upsert_user(ANN, "user", "Ann")

    block = await backend.acli("users", "block", str(ANN))
    assert block.returncode == 0, block.stderr
    assert [u.user_id for u in await store.list_users(blocked=True)] == [ANN]
    role = await backend.acli("users", "role", str(ANN), "manager")
    unblock = await backend.acli("users", "unblock", str(ANN))
    show = await backend.acli("users", "show", str(ANN))

    user = await store.get_user(ANN)
    assert user is not None and (user.role, user.blocked, user.display_name) == (
        "manager",
        False,
        "Ann",
    )
    assert [r.returncode for r in (role, unblock, show)] == [0, 0, 0]
    assert fields(show.stdout) == {
        "user": str(ANN),
        "role": "manager",
        "name": "Ann",
        "joined": user.joined_at.strftime("%Y-%m-%d %H:%M UTC"),
        "blocked": "no",
    }
    trail = [audit_lines(r.stderr) for r in (block, role, unblock)]
    assert [[(a["actor"], a["action"], a["target"]) for a in lines] for lines in trail] == [
        [("cli", "users.block", ANN)],
        [("cli", "users.role", ANN)],
        [("cli", "users.unblock", ANN)],
    ]
    assert trail[1][0]["role"] == "manager"


async def test_a_user_only_the_allowlist_admits_can_be_shown_and_blocked(
    backend: Backend, store: UserStore
) -> None:
    shown = await backend.acli("users", "show", str(ALLOWED))
    blocked = await backend.acli("users", "block", str(ALLOWED))

    assert shown.returncode == 0
    assert fields(shown.stdout) == {
        "user": str(ALLOWED),
        "registered": "no",
        "admitted by": "BOTKIT_ALLOWED_USERS",
    }
    assert blocked.returncode == 0, blocked.stderr
    user = await store.get_user(ALLOWED)
    assert user is not None and (user.role, user.blocked) == ("user", True)
    assert audit_lines(blocked.stderr)[0]["registered"] is True


async def test_a_stranger_is_blocked_too(backend: Backend, store: UserStore) -> None:
    result = await backend.acli("users", "block", str(STRANGER))

    assert result.returncode == 0 and result.stdout == f"blocked {STRANGER} (role user)\n"
    user = await store.get_user(STRANGER)
    assert user is not None and user.blocked


async def test_unknown_ids_and_codes_are_one_line_and_exit_1(
    backend: Backend, store: UserStore
) -> None:
    await store.create_invite("user")
    results = await asyncio.gather(
        backend.acli("users", "show", str(STRANGER)),
        backend.acli("users", "unblock", str(STRANGER)),
        backend.acli("users", "role", str(STRANGER), "manager"),
        backend.acli("invites", "revoke", "no-such-code-at-all"),
        backend.acli("invites", "revoke", "!"),
        backend.acli("invites", "revoke", "-F9W"),  # a code may start with a dash
    )

    for result in results:
        assert result.returncode == 1, result
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("botkit: ")
        assert "Traceback" not in result.stderr
    assert str(STRANGER) in results[0].stderr and "invite" in results[3].stderr
    assert await store.get_user(STRANGER) is None
    assert len(await store.list_invites()) == 1


# --- invites -----------------------------------------------------------------------------------


async def test_invites_are_listed_and_revoked_by_code_or_prefix(
    backend: Backend, store: UserStore
) -> None:
    expires = datetime.now(UTC) + timedelta(days=3)
    cleaners = await store.create_invite("cleaner", uses=3, expires_at=expires, created_by=ANN)
    await asyncio.sleep(0.002)  # distinct creation times
    managers = await store.create_invite("manager")

    table, as_json = await asyncio.gather(
        backend.acli("invites", "list"), backend.acli("invites", "list", "--json")
    )
    by_code = await backend.acli("invites", "revoke", cleaners.code)
    by_prefix = await backend.acli("invites", "revoke", managers.prefix)
    after = await backend.acli("invites", "list", "--json")

    header, *rows = table.stdout.splitlines()
    assert [row.split()[0] for row in rows] == [cleaners.prefix + "…", managers.prefix + "…"]
    assert rows[0].index("cleaner") == header.index("ROLE")
    assert str(ANN) in rows[0] and "usable" in rows[0]
    listed = json_lines(as_json.stdout)
    assert [(i["prefix"], i["role"], i["uses_left"], i["created_by"]) for i in listed] == [
        (cleaners.prefix, "cleaner", 3, ANN),
        (managers.prefix, "manager", 1, None),
    ]
    assert datetime.fromisoformat(listed[0]["expires_at"]) == expires
    assert cleaners.code not in table.stdout + as_json.stdout
    assert by_code.returncode == by_prefix.returncode == 0
    assert after.stdout == "", "no invites: no lines"
    refused = await store.redeem_invite(cleaners.code, BOB)
    assert refused.failure is RedeemFailure.UNKNOWN
    (revoked,) = audit_lines(by_code.stderr)
    assert (revoked["action"], revoked["target"]) == ("invites.revoke", cleaners.prefix)
    assert cleaners.code not in by_code.stderr, "the audit trail names the prefix, not the secret"


async def test_an_invite_made_from_the_cli_is_an_audit_line_naming_its_prefix(
    backend: Backend, store: UserStore
) -> None:
    made = await backend.acli("invite", "--role", "cleaner", "--uses", "2", "--bot-username", "b")

    assert made.returncode == 0, made.stderr
    code = made.stdout.strip().split("start=")[1]
    (invite,) = await store.list_invites()
    (audit,) = audit_lines(made.stderr)
    assert (audit["actor"], audit["action"], audit["target"]) == (
        "cli",
        "invites.create",
        invite.prefix,
    )
    assert (audit["role"], audit["uses"]) == ("cleaner", 2) and audit["expires_at"]
    assert code.startswith(invite.prefix) and code not in made.stderr


# --- usage -------------------------------------------------------------------------------------


async def test_usage_gives_tokens_by_kind_and_cost_per_user_and_day(
    backend: Backend, store: UserStore
) -> None:
    today = datetime.now(UTC).date()
    yesterday, before = today - timedelta(days=1), today - timedelta(days=2)
    haiku, sonnet = "claude-haiku-4-5", "claude-sonnet-5"  # $1/$5 and $2/$10 per million
    await store.upsert_user(ANN, "user", "Ann")
    await store.add_model_usage(
        [
            ModelUsage(ANN, today, haiku, Usage(input_tokens=1_000_000, output_tokens=200_000)),
            ModelUsage(ANN, today, sonnet, Usage(cache_read_input_tokens=1_000_000)),
            ModelUsage(BOB, today, haiku, Usage(input_tokens=500_000)),
            ModelUsage(ANN, yesterday, haiku, Usage(output_tokens=200_000)),
            ModelUsage(ANN, before, haiku, Usage(input_tokens=7)),  # before --days 2
        ]
    )

    as_json, table, everything = await asyncio.gather(
        backend.acli("usage", "--days", "2", "--json"),
        backend.acli("usage", "--days", "2"),
        backend.acli("usage", "--json"),
    )

    records = json_lines(as_json.stdout)
    report = {
        "days": [r for r in records if r["scope"] == "day"],
        "users": [r for r in records if r["scope"] == "total"],
        "cost_basis": records[0]["cost_basis"],
    }
    assert [
        (d["day"], d["user_id"], d["input_tokens"], d["output_tokens"], d["cache_read_tokens"])
        for d in report["days"]
    ] == [
        (yesterday.isoformat(), ANN, 0, 200_000, 0),
        (today.isoformat(), ANN, 1_000_000, 200_000, 1_000_000),
        (today.isoformat(), BOB, 500_000, 0, 0),
    ]
    assert [d["cost_usd"] for d in report["days"]] == [1.0, 2.2, 0.5]
    assert report["days"][1]["models"][sonnet]["cache_read_tokens"] == 1_000_000
    assert [(u["user_id"], u["tokens"], u["cost_usd"]) for u in report["users"]] == [
        (ANN, 2_400_000, 3.2),
        (BOB, 500_000, 0.5),
    ]
    assert "list prices" in report["cost_basis"] and as_json.stderr == ""
    assert "1,000,000" in table.stdout and "$3.2000" in table.stdout and "Ann" in table.stdout
    assert "CACHE READ" in table.stdout and table.returncode == 0
    assert len([r for r in json_lines(everything.stdout) if r["scope"] == "day"]) == 4


async def test_a_running_bot_records_every_users_usage_without_a_budget(
    backend: Backend, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = Bot(settings=backend.settings(), llm=fake_llm(claude))
    assert bot.settings.daily_token_budget is None
    async with running(bot, telegram):
        await ask(telegram, ALLOWED, "hi")
        await ask(telegram, ALLOWED, "and again")

    shown = json_lines((await backend.acli("usage", "--json")).stdout)
    (day,) = [r for r in shown if r["scope"] == "day"]
    ((model, spent),) = bot.turns.usage_by_model.items()
    assert set(day["models"]) == {model}
    assert (day["user_id"], day["input_tokens"], day["output_tokens"]) == (
        ALLOWED,
        spent.input_tokens,
        spent.output_tokens,
    )
    assert day["cache_creation_tokens"] == spent.cache_creation_input_tokens
    assert day["cost_usd"] > 0


# --- the audit trail, in process ---------------------------------------------------------------


async def test_every_change_is_one_audit_line_with_who_what_and_whom(store: UserStore) -> None:
    invite = await store.create_invite("user")
    admin = Admin(store, actor=ANN)

    with capture_logs() as logs:
        await admin.block(BOB)
        await admin.unblock(BOB)
        await admin.set_role(BOB, "manager")
        await admin.revoke(invite.code)
        assert not await admin.unblock(STRANGER)
        assert not await admin.set_role(STRANGER, "x")
        assert (await admin.revoke(invite.code)).revoked is None

    assert [(e["event"], e["actor"], e["action"], e["target"]) for e in logs] == [
        ("admin.action", ANN, "users.block", BOB),
        ("admin.action", ANN, "users.unblock", BOB),
        ("admin.action", ANN, "users.role", BOB),
        ("admin.action", ANN, "invites.revoke", invite.prefix),
    ]


def test_tables_align_every_column() -> None:
    table = format_table(["ID", "NAME"], [["7", "Ann"], ["12345", "Bo"]], right={0})

    assert table.splitlines() == ["   ID  NAME", "    7  Ann", "12345  Bo"]


# --- blocking a running bot --------------------------------------------------------------------


@pytest.mark.parametrize("access", ["invite", "allowlist"])
async def test_a_block_from_the_cli_stops_a_running_bot_within_15_seconds(
    backend: Backend, telegram: FakeTelegramServer, claude: FakeAnthropicServer, access: str
) -> None:
    bot = Bot(settings=backend.settings(access=access), llm=fake_llm(claude))
    rejection = bot.options.rejection_text

    async def say(text: str) -> str:
        return (await ask(telegram, ALLOWED, text)).text

    async with running(bot, telegram):
        answered = await block_and_count_answers(backend, say, rejection)

    assert len(claude.requests) == answered, "no request to the model once the block was seen"


async def block_and_count_answers(
    backend: Backend, say: Callable[[str], Awaitable[str]], rejection: str
) -> int:
    """Block ALLOWED with the CLI while they chat: the messages answered until the block held
    (within 15 s), the first one included."""
    assert await say("hi") == "echo: hi"  # the bot now holds their (absent) record
    blocked = await backend.acli("users", "block", str(ALLOWED))
    assert blocked.returncode == 0, blocked.stderr
    since_block, answered = time.monotonic(), 1
    while (reply := await say(f"still here? {answered}")) != rejection:
        assert reply.startswith("echo: "), reply
        answered += 1
        assert time.monotonic() - since_block < 15, "the block was not seen within 15 s"
        await asyncio.sleep(0.5)  # pace the messages while the cached record expires
    assert time.monotonic() - since_block < 15
    assert await say("and now?") == rejection
    return answered


async def test_a_block_from_the_cli_reaches_the_workers_of_a_queued_bot(
    migrated_db: str, tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.cluster import queue_for, serve_queued
    from botkit.runtime.telegram import messenger_for

    backend = Backend(tmp_path, migrated_db)
    settings = backend.settings(
        access="allowlist",
        telegram_bot_token=telegram.token,
        telegram_api_base=telegram.base_url,
        poll_timeout=1,
    )
    bot = Bot(settings=settings, llm=fake_llm(claude))
    messenger = messenger_for(settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    queue = queue_for(settings, concurrency=2)
    task = asyncio.create_task(serve_queued(bot, stop, messenger=messenger, queue=queue))

    async def say(text: str) -> str:
        return (await ask(telegram, ALLOWED, text, timeout=20)).text

    try:
        answered = await block_and_count_answers(backend, say, bot.options.rejection_text)
    finally:
        stop.set()
        await task

    assert len(claude.requests) == answered, "no request to the model once the block was seen"


async def test_usage_gives_each_days_cost_by_model_with_the_cache_share(
    backend: Backend, store: UserStore
) -> None:
    today = datetime.now(UTC).date()
    sonnet, haiku = "claude-sonnet-5", "claude-haiku-4-5"
    await store.add_model_usage(
        [
            ModelUsage(ANN, today, sonnet, Usage(input_tokens=100, cache_read_input_tokens=300)),
            ModelUsage(BOB, today, sonnet, Usage(cache_creation_input_tokens=100)),
            ModelUsage(BOB, today, haiku, Usage(input_tokens=50)),
        ]
    )

    as_json, table = await asyncio.gather(
        backend.acli("usage", "--days", "1", "--json"), backend.acli("usage", "--days", "1")
    )

    models = [r for r in json_lines(as_json.stdout) if r["scope"] == "model"]
    assert [(m["model"], m["tokens"], m["cache_share"]) for m in models] == [
        (haiku, 50, 0.0),
        (sonnet, 500, 0.6),  # both users: 300 of 500 prompt tokens read from the cache
    ]
    assert "CACHED" in table.stdout and "60%" in table.stdout
