"""The team example: a manager asks a cleaner through the bot, and the answer comes back."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from botkit import Bot, Settings, ToolContext, ToolError
from botkit.reminders.tools import SCHEDULING_TOOLS
from botkit.stores import PostgresUserStore
from botkit.stores.migrate import migrate
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    fake_llm,
    running,
)
from botkit.testing.anthropic import is_note

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "team_bot.py"
ANNA, MARIA, BO, EVE = 2001, 2002, 2003, 2666
NOW = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The example module, loaded from its file (dataclasses need it in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location("example_team_bot", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def turn_text(request: FakeRequest) -> str:
    """The text of the last user message that has text (tool results come after it)."""
    for message in reversed(request.messages):
        content = message["content"]
        if message["role"] != "user":
            continue
        if isinstance(content, str):
            return content
        texts = [b["text"] for b in content if b["type"] == "text" and not is_note(b["text"])]
        if texts:
            return "\n".join(texts)
    return ""


def last_call(request: FakeRequest) -> str | None:
    """The tool whose result this request carries, if any."""
    if not request.tool_results():
        return None
    calls = [b for b in request.messages[-2]["content"] if b["type"] == "tool_use"]
    return str(calls[0]["name"])


def id_of(pattern: str, text: str) -> int:
    found = re.search(pattern + r", id (\d+)", text)
    assert found is not None, f"{pattern!r} not in {text!r}"
    return int(found.group(1))


def manager_model(request: FakeRequest) -> FakeReply:
    """Look the cleaner up, then assign the room or ask the question."""
    called = last_call(request)
    if called is None:
        return FakeReply.tool_use("list_team", {})
    result = request.tool_results()[0]["content"]
    if called != "list_team":
        return FakeReply.text(result)
    maria = id_of(r"Maria \(cleaner\)", result)
    if turn_text(request).startswith("assign"):
        return FakeReply.tool_use("assign_room", {"room": "12", "cleaner_id": maria})
    return FakeReply.tool_use("send_user_message", {"user_id": maria, "text": "Is room 12 clean?"})


def cleaner_model(request: FakeRequest) -> FakeReply:
    """Mark the room clean and pass the answer to the manager named in the prompt."""
    if request.tool_results():
        return FakeReply.text("Marked room 12 clean and told Anna.")
    everything = json.dumps(request.messages)
    note = re.search(
        r"Relayed message\. Anna \(manager\) \(id (\d+)\).*?"
        r"<relayed_message>\\nIs room 12 clean\?\\n</relayed_message>",
        everything,
    )
    assert note, everything
    anna = id_of(r"Anna \(manager\)", request.system_text)
    assert anna == int(note.group(1)), "the note and the prompt agree on who asked"
    return FakeReply.tool_uses(
        [
            ("mark_room_clean", {"room": "12"}),
            ("send_user_message", {"user_id": anna, "text": "Yes, room 12 is clean."}),
        ]
    )


def model(request: FakeRequest) -> FakeReply:
    return manager_model(request) if "assign_room" in request.tool_names else cleaner_model(request)


async def ask(telegram: FakeTelegramServer, user: int, text: str, name: str = "User") -> str:
    before = len(telegram.sent_messages(user))
    telegram.send_text(user, text, first_name=name)
    return (await telegram.wait_for_messages(user, before + 1))[before].plain_text


async def test_a_cleaners_answer_reaches_the_manager(
    example: ModuleType, tmp_path: Path, postgres_db: str
) -> None:
    await migrate(postgres_db)
    settings = Settings(
        _env_file=None,
        database_url=postgres_db,
        sessions_dir=tmp_path / "sessions",
        stream_replies=False,
    )
    async with FakeTelegramServer() as telegram, FakeAnthropicServer(responder=model) as claude:
        llm = fake_llm(claude)
        bot: Bot = example.make_bot(settings, llm)
        store = await bot.access.user_store()
        manager_code = (await store.create_invite("manager")).code
        cleaner_code = (await store.create_invite("cleaner")).code
        async with running(bot, telegram):
            assert await ask(telegram, EVE, "let me in") == bot.options.rejection_text
            assert claude.requests == [], "a stranger costs no LLM call"
            welcome = bot.options.welcome_text
            assert await ask(telegram, ANNA, f"/start {manager_code}", "Anna") == welcome
            assert await ask(telegram, MARIA, f"/start {cleaner_code}", "Maria") == welcome

            assigned = await ask(telegram, ANNA, "assign room 12 to Maria", "Anna")
            assert assigned == "Room 12 is now Maria (cleaner)'s, marked dirty."
            asked = await ask(telegram, ANNA, "ask Maria if room 12 is clean", "Anna")
            assert asked == f"Delivered to user {MARIA}."
            question = (await telegram.wait_for_messages(MARIA, 2))[1].plain_text
            assert question == "Message from Anna (manager):\nIs room 12 clean?"

            reply = await ask(telegram, MARIA, "yes, done", "Maria")
            assert reply == "Marked room 12 clean and told Anna."
            answer = (await telegram.wait_for_messages(ANNA, 4))[3].plain_text
            assert answer == "Message from Maria (cleaner):\nYes, room 12 is clean."
        assert claude.responder_errors == []
        check_roles(claude.requests)
        reopened = await bot.access.user_store()  # serving closed the first store
        assert isinstance(reopened, PostgresUserStore)
        status = await reopened.pool.fetchval("SELECT status FROM team_rooms WHERE room = '12'")
        assert status == "clean", "Maria's agent marked the room clean in PostgreSQL"
        await bot.aclose()


def check_roles(requests: list[FakeRequest]) -> None:
    """Anna's turns ran with the manager's prompt and tools, Maria's with the cleaner's."""
    manager = next(r for r in requests if "assign_room" in r.tool_names)
    cleaner = next(r for r in requests if "mark_room_clean" in r.tool_names)
    assert "Anna, the manager" in manager.system_text
    assert "Maria, a cleaner" in cleaner.system_text
    assert {"list_team", "room_status", "assign_room", "send_user_message"} <= set(
        manager.tool_names
    )
    everyones = {*SCHEDULING_TOOLS, "memory"}  # botkit's reminders and memory, for every role
    assert {"my_rooms", "mark_room_clean", "send_user_message"} == set(
        cleaner.tool_names
    ) - everyones
    assert "mark_room_clean" not in manager.tool_names
    assert all(
        ("assign_room" in r.tool_names) != ("mark_room_clean" in r.tool_names) for r in requests
    )


async def test_cleaners_mark_only_their_own_rooms(example: ModuleType, postgres_db: str) -> None:
    await migrate(postgres_db)
    store = await PostgresUserStore.connect(postgres_db)
    try:
        await store.upsert_user(MARIA, "cleaner", "Maria")
        await store.upsert_user(BO, "cleaner", "Bo")
        await example.prepare(store.pool)
        await example.prepare(store.pool)  # a second start finds the table there

        def as_user(user_id: int) -> ToolContext:
            team = example.Team(store, store.pool)
            return ToolContext(user_id=user_id, chat_id=user_id, timestamp=NOW, extra=team)

        await example.assign_room.execute(as_user(ANNA), {"room": "7", "cleaner_id": MARIA})
        with pytest.raises(ToolError, match="not a cleaner"):
            await example.assign_room.execute(as_user(ANNA), {"room": "8", "cleaner_id": ANNA})
        with pytest.raises(ToolError, match="not assigned to you"):
            await example.mark_room_clean.execute(as_user(BO), {"room": "7"})
        assert await example.my_rooms.execute(as_user(MARIA), {}) == "Room 7: dirty"
        assert await example.my_rooms.execute(as_user(BO), {}) == "No rooms assigned."
        await example.mark_room_clean.execute(as_user(MARIA), {"room": "7"})
        status = await example.room_status.execute(as_user(ANNA), {})
        assert status == "Room 7: clean, Maria (cleaner)"
    finally:
        await store.close()


async def test_cleaners_message_managers_only_and_managers_anyone_on_the_team(
    example: ModuleType, tmp_path: Path, postgres_db: str
) -> None:
    await migrate(postgres_db)
    settings = Settings(
        _env_file=None, database_url=postgres_db, sessions_dir=tmp_path / "sessions"
    )
    async with FakeAnthropicServer(responder=model) as claude:
        bot: Bot = example.make_bot(settings, fake_llm(claude))
        try:
            store = await bot.access.user_store()
            await store.upsert_user(ANNA, "manager", "Anna")
            await store.upsert_user(MARIA, "cleaner", "Maria")
            await store.upsert_user(BO, "cleaner", "Bo")
            allowed = {
                (sender, recipient): await bot.can_relay(sender, recipient)
                for sender in (ANNA, MARIA, BO)
                for recipient in (ANNA, MARIA, BO, EVE)
                if sender != recipient
            }
        finally:
            await bot.aclose()
    assert {pair for pair, ok in allowed.items() if ok} == {
        (ANNA, MARIA),
        (ANNA, BO),
        (MARIA, ANNA),
        (BO, ANNA),
    }, "cleaner to cleaner and anyone to a stranger are refused"
