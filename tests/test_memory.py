"""Long-term memory (#30): the memory tool through real turns on both stores, its paths and
limits, ``/memory``, surviving ``/clear`` and restarts, and that no conversation's memory ever
reaches another's request."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from pydantic import SecretStr

from botkit.bot import Bot
from botkit.memory.plugin import MEMORY_PROMPT
from botkit.stores.migrate import migrate
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot
from botkit.testing.telegram import FakeTelegramServer

ALICE, BOB = 11, 22
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}


def memory_script(request: FakeRequest) -> FakeReply:
    """``mem {json}`` makes the model call the memory tool with that input; the tool's result
    comes back as the answer (``ERROR: ...`` when it is an error); anything else is echoed."""
    results = request.tool_results()
    if results:
        result = results[0]
        content = result.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        return FakeReply.text(("ERROR: " if result.get("is_error") else "") + text)
    said = request.last_user_text()
    if said.startswith("mem "):
        return FakeReply.tool_use("memory", json.loads(said[4:]))
    return FakeReply.text(f"echo: {said}")


def mem(**command: Any) -> str:
    return "mem " + json.dumps(command)


def last_result(claude: FakeAnthropicServer) -> str:
    """The memory tool's result as the model got it (``ERROR: ...`` for an error)."""
    [result] = claude.requests[-1].tool_results()
    return ("ERROR: " if result.get("is_error") else "") + str(result["content"])


def holding(folder: Path, marker: bytes) -> set[str]:
    """The files under ``folder`` whose bytes hold ``marker`` (relative paths)."""
    return {
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file() and marker in path.read_bytes()
    }


@pytest.fixture(params=["files", "postgres"])
async def store_settings(
    request: pytest.FixtureRequest, postgres_dsn: str
) -> AsyncIterator[dict[str, Any]]:
    """Settings for a bot whose data is in files (and SQLite), or in a migrated PostgreSQL."""
    if request.param == "files":
        yield {}
        return
    async with fresh_database(postgres_dsn) as db:
        await migrate(db)
        yield {"database_url": SecretStr(db)}


@asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """A new empty database on the tests' server, dropped afterwards."""
    name = f"botkit_test_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def memory_bot(claude: FakeAnthropicServer, tmp_path: Path, **more: Any) -> Bot:
    claude.responder = memory_script
    values: dict[str, Any] = {"allowed_users": frozenset({ALICE, BOB})}
    return make_bot(claude, tmp_path, **{**values, **more})


async def test_every_command_through_a_turn(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    store_settings: dict[str, Any],
) -> None:
    bot = memory_bot(claude, tmp_path, **store_settings)
    async with running(bot, telegram):

        async def say(text: str) -> str:
            await ask(telegram, ALICE, text, timeout=20)
            return last_result(claude)

        assert await say(mem(command="view", path="/memories")) == (
            "Here're the files and directories up to 2 levels deep in /memories, excluding "
            "hidden items:\n0B\t/memories"
        )
        assert claude.requests[0].tools[-1] == {
            **MEMORY_TOOL,
            "cache_control": {"type": "ephemeral"},
        }
        assert MEMORY_PROMPT in claude.requests[0].system_text
        created = await say(mem(command="create", path="/memories/me.md", file_text="a\nb\n"))
        assert created == "File created successfully at: /memories/me.md"
        assert await say(mem(command="create", path="/memories/me.md", file_text="x")) == (
            "ERROR: File /memories/me.md already exists"
        )
        replaced = await say(
            mem(command="str_replace", path="/memories/me.md", old_str="b", new_str="B")
        )
        assert replaced == (
            "The memory file has been edited. Here is the snippet showing the change (with line "
            "numbers):\n     1\ta\n     2\tB\n     3\t"
        )
        inserted = await say(
            mem(command="insert", path="/memories/me.md", insert_line=1, insert_text="between")
        )
        assert inserted == "The file /memories/me.md has been edited."
        assert await say(mem(command="view", path="/memories/me.md")) == (
            "Here's the content of /memories/me.md with line numbers:\n"
            "     1\ta\n     2\tbetween\n     3\tB\n     4\t"
        )
        assert await say(mem(command="view", path="/memories/me.md", view_range=[2, 3])) == (
            "Here's the content of /memories/me.md with line numbers:\n     2\tbetween\n     3\tB"
        )
        renamed = await say(
            mem(command="rename", old_path="/memories/me.md", new_path="/memories/people/alice.md")
        )
        assert renamed == "Successfully renamed /memories/me.md to /memories/people/alice.md"
        assert await say(mem(command="view", path="/memories")) == (
            "Here're the files and directories up to 2 levels deep in /memories, excluding "
            "hidden items:\n12B\t/memories\n12B\t/memories/people/\n12B\t/memories/people/alice.md"
        )
        assert await say(mem(command="delete", path="/memories/people")) == (
            "Successfully deleted /memories/people"
        )
        assert await say(mem(command="view", path="/memories/people/alice.md")) == (
            "ERROR: The path /memories/people/alice.md does not exist. Please provide a valid path."
        )
        assert await say(
            mem(command="str_replace", path="/memories/x", old_str="a", new_str="")
        ) == ("ERROR: The path /memories/x does not exist. Please provide a valid path.")
    await bot.aclose()


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (
            "/memories/../etc/passwd",
            "Path /memories/../etc/passwd would escape /memories directory",
        ),
        ("/memories/a/../../x", "Path /memories/a/../../x would escape /memories directory"),
        ("../memories/x", "Path must start with /memories, got: ../memories/x"),
        ("/etc/passwd", "Path must start with /memories, got: /etc/passwd"),
        ("/memoriesx/a", "Path must start with /memories, got: /memoriesx/a"),
        ("memories/a", "Path must start with /memories, got: memories/a"),
        (
            "/memories/a\\..\\..\\b",
            "Path /memories/a\\..\\..\\b holds characters a memory path may not hold",
        ),
    ],
)
async def test_paths_outside_memories_are_refused(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, path: str, error: str
) -> None:
    bot = memory_bot(claude, tmp_path)
    async with running(bot, telegram):
        await ask(telegram, ALICE, mem(command="create", path=path, file_text="SECRET"))
        assert last_result(claude) == f"ERROR: {error}"
    await bot.aclose()
    assert holding(tmp_path, b"SECRET") == {"sessions/11.jsonl", "sessions/inbox.jsonl"}


async def test_limits_give_the_model_a_clear_error(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    store_settings: dict[str, Any],
) -> None:
    bot = memory_bot(
        claude,
        tmp_path,
        memory_max_files=3,
        memory_max_file_kb=1,
        memory_max_total_kb=2,
        **store_settings,
    )
    async with running(bot, telegram):

        async def say(text: str) -> str:
            await ask(telegram, ALICE, text, timeout=20)
            return last_result(claude)

        big = "x" * 1025
        assert await say(mem(command="create", path="/memories/big", file_text=big)) == (
            "ERROR: File /memories/big would be larger than the limit of 1 KB a file. Keep it "
            "shorter."
        )
        for name, size in (("a", 1000), ("b", 1000), ("c", 30)):
            created = await say(
                mem(command="create", path=f"/memories/{name}", file_text="y" * size)
            )
            assert created == f"File created successfully at: /memories/{name}"
        assert await say(mem(command="create", path="/memories/d", file_text="z")) == (
            "ERROR: The memory holds 3 files, the most it may hold is 3. Merge or delete files "
            "first."
        )
        grow = mem(
            command="str_replace", path="/memories/a", old_str="y" * 1000, new_str="y" * 1024
        )
        assert await say(grow) == (
            "ERROR: The memory would hold 2 KB, more than its limit of 2 KB. Shorten or delete "
            "files first."
        )
        assert (
            await say(mem(command="delete", path="/memories/c"))
            == "Successfully deleted /memories/c"
        )
        assert (await say(grow)).startswith("The memory file has been edited")
        assert await say(mem(command="view", path="/memories/d")) == (
            "ERROR: The path /memories/d does not exist. Please provide a valid path."
        )
    await bot.aclose()
