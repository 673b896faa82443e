"""Long-term memory (#30): the memory tool through real turns on both stores, its paths and
limits, ``/memory``, surviving ``/clear`` and restarts, and that no conversation's memory ever
reaches another's request."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from botkit.bot import Bot
from botkit.memory.plugin import MEMORY_PROMPT
from botkit.replay import format_transcript
from botkit.sessions.jsonl import read_session_file
from botkit.stores.migrate import migrate
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot, make_settings
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
    if "mem {" in said:  # in a group, after who wrote it and the bot's @name
        return FakeReply.tool_use("memory", json.loads(said[said.index("mem {") + 4 :]))
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
    if "settings" not in more:
        more = {"allowed_users": frozenset({ALICE, BOB}), **more}
    return make_bot(claude, tmp_path, **more)


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
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
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


async def test_memory_survives_clear_and_a_restart(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    store_settings: dict[str, Any],
) -> None:
    bot = memory_bot(claude, tmp_path, **store_settings)
    async with running(bot, telegram):
        await ask(telegram, ALICE, mem(command="create", path="/memories/me.md", file_text="tea"))
        assert (await ask(telegram, ALICE, "/clear")).text == bot.options.clear_text
    await bot.aclose()

    again = memory_bot(claude, tmp_path, **store_settings)
    async with running(again, telegram):
        await ask(telegram, ALICE, mem(command="view", path="/memories/me.md"), timeout=20)
    await again.aclose()
    assert last_result(claude) == (
        "Here's the content of /memories/me.md with line numbers:\n     1\ttea"
    )
    first_after = claude.requests[-2]
    assert len(first_after.messages) == 1, "the conversation itself was cleared"


async def test_memory_command_shows_and_its_button_erases(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = memory_bot(claude, tmp_path)
    texts = bot.options.memory_texts
    async with running(bot, telegram):
        assert (await ask(telegram, ALICE, "/memory")).text == texts.empty
        await ask(telegram, ALICE, mem(command="create", path="/memories/me.md", file_text="tea"))
        await ask(telegram, BOB, mem(command="create", path="/memories/me.md", file_text="cake"))
        shown = await ask(telegram, ALICE, "/memory")
        assert shown.plain_text == f"{texts.header}\n\n/memories/me.md:\ntea"
        telegram.press_button(ALICE, shown, texts.clear_button)
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        [edited] = telegram.edited_messages(ALICE)
        assert edited.text == texts.cleared
        assert (await ask(telegram, ALICE, "/memory")).text == texts.empty
        assert "cake" in (await ask(telegram, BOB, "/memory")).text, "Bob's memory is his own"
        assert (await ask(telegram, BOB, "/memory clear")).text == texts.cleared
        assert (await ask(telegram, BOB, "/memory")).text == texts.empty
    await bot.aclose()


async def test_in_a_group_only_its_admins_erase_its_memory(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = memory_bot(claude, tmp_path, group_context="shared")
    group = {"chat_id": -100_555, "chat_type": "supergroup"}
    async with running(bot, telegram):
        create = mem(command="create", path="/memories/g", file_text="x")
        await ask(telegram, ALICE, f"@botkit_test_bot {create}", **group)
        denied = await ask(telegram, BOB, "/memory clear", **group)
        assert denied.text == bot.options.group_admin_only_text
        assert "/memories/g" in (await ask(telegram, BOB, "/memory", **group)).text
        assert (await ask(telegram, BOB, "/memory")).text == bot.options.memory_texts.empty
    await bot.aclose()


@pytest.mark.parametrize("how", ["option", "setting"])
async def test_memory_can_be_turned_off(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, how: str
) -> None:
    if how == "option":
        bot = memory_bot(claude, tmp_path, memory=False)  # Bot(memory=False)
    else:
        settings = make_settings(tmp_path, memory=False, allowed_users=frozenset({ALICE}))
        bot = memory_bot(claude, tmp_path, settings=settings)
    assert bot.memory is None
    async with running(bot, telegram):
        await ask(telegram, ALICE, "hello")
        reply = await ask(telegram, ALICE, "/memory")
    await bot.aclose()
    assert "memory" not in claude.requests[0].tool_names
    assert MEMORY_PROMPT not in claude.requests[0].system_text
    assert reply.text.startswith("I don't know /memory.")


async def test_another_worker_sees_what_the_last_turn_wrote(
    claude: FakeAnthropicServer, tmp_path: Path, postgres_dsn: str
) -> None:
    async with fresh_database(postgres_dsn) as db:
        await migrate(db)
        worker_a = memory_bot(claude, tmp_path / "a", database_url=SecretStr(db))
        worker_b = memory_bot(claude, tmp_path / "b", database_url=SecretStr(db))
        try:
            create = mem(command="create", path="/memories/me.md", file_text="tea")
            [event async for event in worker_a.turns.stream(ALICE, create)]
            view = mem(command="view", path="/memories")
            [event async for event in worker_b.turns.stream(ALICE, view)]
        finally:
            await worker_a.aclose()
            await worker_b.aclose()
    assert last_result(claude).endswith("3B\t/memories\n3B\t/memories/me.md")


# --- isolation: many users and groups writing at once ---------------------------------------

USERS = [101, 102, 103, 104]
GROUPS = [-100_1, -100_2]


def isolation_script(request: FakeRequest) -> FakeReply:
    """``remember W`` makes the model store W (create), then view its whole memory, then answer."""
    results = request.tool_results()
    said = request.last_user_text()
    if not results:
        word = said.rsplit("remember ", 1)[-1].strip()
        return FakeReply.tool_use(
            "memory", {"command": "create", "path": f"/memories/{word}.md", "file_text": word}
        )
    if "File created" in str(results[0]["content"]) or "already exists" in str(
        results[0]["content"]
    ):
        return FakeReply.tool_use("memory", {"command": "view", "path": "/memories"})
    return FakeReply.text("noted")


def conversation_of_step(user: int, place: int | None, group_context: str) -> str:
    """The conversation a step writes in: the user's private one, the group's, or (per_user)
    the user's own one in the group."""
    if place is None:
        return str(user)
    return f"chat_{place}_user_{user}" if group_context == "per_user" else f"chat_{place}"


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(USERS), st.one_of(st.none(), st.sampled_from(GROUPS))),
        min_size=4,
        max_size=14,
    ),
    group_context=st.sampled_from(["shared", "per_user"]),
    restart_at=st.integers(min_value=0, max_value=14),
    store=st.sampled_from(["files", "postgres"]),
)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_request_ever_carries_another_conversations_memory(
    steps: list[tuple[int, int | None]],
    group_context: str,
    restart_at: int,
    store: str,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_dsn: str,
) -> None:
    """Many users and groups write memories at once, on either store, with groups shared or
    one conversation per member, and the bot is replaced by a new one on the same store
    part-way (after ``restart_at`` steps): no request carries another conversation's memory."""
    folder = tmp_path_factory.mktemp("isolation")
    run = Isolation(steps, group_context, folder)
    asyncio.run(run.on(store, postgres_dsn, restart_at))


class Isolation:
    """One example of the isolation property: the steps, each with a word unique to it."""

    def __init__(self, steps: list[tuple[int, int | None]], group_context: str, folder: Path):
        self.words = {f"w{i}x{secrets.token_hex(3)}": step for i, step in enumerate(steps)}
        self.owner = {
            word: conversation_of_step(*step, group_context) for word, step in self.words.items()
        }
        self.group_context = group_context
        self.folder = folder
        self.sent: Counter[int] = Counter()
        """Steps sent so far to each chat (each gets one answer)."""

    async def on(self, store: str, admin_dsn: str, restart_at: int) -> None:
        """Run the steps on ``store`` (a new bot after ``restart_at`` of them), then check."""
        if store == "files":
            await self.run({}, restart_at)
            return
        async with fresh_database(admin_dsn) as db:
            await migrate(db)
            await self.run({"database_url": SecretStr(db)}, restart_at)

    async def run(self, stored: dict[str, Any], restart_at: int) -> None:
        words = list(self.words)
        async with FakeTelegramServer() as telegram, FakeAnthropicServer() as claude:
            claude.responder = isolation_script
            for part in (words[:restart_at], words[restart_at:]):
                bot = make_bot(
                    claude,
                    self.folder,
                    allowed_users=frozenset(USERS),
                    max_contexts=2,
                    group_context=self.group_context,
                    **stored,
                )
                try:
                    async with running(bot, telegram):
                        await self.send_at_once(telegram, part)
                finally:
                    await bot.aclose()
            self.check(claude.requests)

    async def send_at_once(self, telegram: FakeTelegramServer, words: list[str]) -> None:
        """Send these steps all at once; wait until every chat has all its answers so far."""
        for word in words:
            user, place = self.words[word]
            if place is None:
                telegram.send_text(user, f"remember {word}")
            else:
                text = f"@botkit_test_bot remember {word}"
                telegram.send_text(user, text, chat_id=place, chat_type="supergroup")
            self.sent[place or user] += 1
        for chat in {place or user for user, place in (self.words[w] for w in words)}:
            await telegram.wait_for_messages(chat, self.sent[chat], timeout=60)

    def check(self, requests: list[FakeRequest]) -> None:
        viewed: set[str] = set()
        for request in requests:
            body = json.dumps(request.body)
            seen = {self.owner[word] for word in self.words if word in body}
            assert len(seen) <= 1, f"one request carried the memories of {sorted(seen)}"
            for result in request.tool_results():
                if str(result["content"]).startswith("Here're the files"):
                    viewed |= {word for word in self.words if word in str(result["content"])}
        assert viewed == set(self.words), "every word came back in its own conversation's memory"


async def test_replay_shows_memory_calls_like_other_tool_calls(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = memory_bot(claude, tmp_path)
    async with running(bot, telegram):
        await ask(telegram, ALICE, mem(command="create", path="/memories/me.md", file_text="tea"))
    await bot.aclose()
    session = read_session_file(tmp_path / "sessions" / f"{ALICE}.jsonl")
    transcript = format_transcript(session, source="test")
    assert "/memories/me.md" in transcript and "memory" in transcript
    assert "↳ result of memory" in transcript
    assert "File created successfully at: /memories/me.md" in transcript


async def test_parallel_writes_and_long_paths_keep_to_the_limits(
    store_settings: dict[str, Any], tmp_path: Path
) -> None:
    """#51: eight parallel 40 KB creates against a 100 KB memory: each one that says it was
    stored is stored, and the total stays under the limit; paths count and are capped, and
    what was accepted exports."""
    from datetime import UTC, datetime

    from botkit.config import Settings
    from botkit.errors import ToolError
    from botkit.memory.store import memory_store_for
    from botkit.memory.tool import MemoryLimits, MemoryTool
    from botkit.privacy.parts import MemoryPart
    from botkit.tools import ToolContext

    settings = Settings(_env_file=None, sessions_dir=tmp_path / "s", **store_settings)
    store = memory_store_for(settings)
    tool = MemoryTool(store, "55", MemoryLimits(max_total_bytes=100 * 1024))
    ctx = ToolContext(user_id=55, chat_id=55, timestamp=datetime.now(UTC))
    text = "x" * 40 * 1024

    async def create(n: int) -> bool:
        try:
            await tool.execute(
                ctx, {"command": "create", "path": f"/memories/{n}.md", "file_text": text}
            )
        except ToolError:
            return False
        return True

    accepted = await asyncio.gather(*(create(n) for n in range(8)))
    files = await store.load("55")
    assert len(files) == sum(accepted) == 2, "what was accepted is what is stored"
    assert sum(len(p) + len(t) for p, t in files.items()) <= 100 * 1024
    with pytest.raises(ToolError, match="Path too long"):
        await tool.execute(
            ctx, {"command": "create", "path": "/memories/" + "p" * 100_000, "file_text": ""}
        )
    await store.save("55", {"q" * 300: "accepted before paths were capped"})
    described = await MemoryPart(memory_store_for(settings)).export(55, tmp_path / "export")
    assert len(described) == 3, "every accepted file exports, a long name shortened"
    await store.close()


async def test_export_shows_the_memory_of_a_shared_group_the_user_writes_in(
    store_settings: dict[str, Any], tmp_path: Path
) -> None:
    """#51: an erasure leaves a shared group's memory (the guide says so); ``users export``
    shows it to each member who wrote there, and to nobody else."""
    from botkit.config import Settings
    from botkit.memory.store import memory_store_for
    from botkit.privacy.parts import MemoryPart
    from botkit.sessions.configured import session_store_for
    from botkit.sessions.jsonl import SessionEntry
    from botkit.types import Message

    settings = Settings(_env_file=None, sessions_dir=tmp_path / "s", **store_settings)
    sessions = session_store_for(settings)
    said = SessionEntry.of(42, Message.user_text("hi all"), conversation="chat_-5")
    await sessions.append(said)
    await sessions.close()
    store = memory_store_for(settings)
    await store.save("chat_-5", {"notes.md": "the group plans a trip"})
    await store.close()
    part = MemoryPart(memory_store_for(settings), settings)
    shown = await part.export(42, tmp_path / "export42")
    assert (
        list(shown) == ["memory/chat_-5/notes.md"] and "group" in shown["memory/chat_-5/notes.md"]
    )
    other = MemoryPart(memory_store_for(settings), settings)
    assert await other.export(43, tmp_path / "export43") == {}
