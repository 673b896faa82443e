"""Session files: one line per append, read back whole, torn lines survived."""

from __future__ import annotations

from pathlib import Path

import orjson

from botkit.agent import ContextManager
from botkit.sessions import SCHEMA_VERSION, JsonlSessionStore, SessionEntry, read_session_file
from botkit.types import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage


def turn() -> list[tuple[Message, dict[str, object]]]:
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=3)
    return [
        (Message.user_text("what time is it?"), {"update_id": 101}),
        (
            Message(
                role="assistant",
                content=[ToolUseBlock(id="t1", name="current_time", input={"timezone": "UTC"})],
                usage=usage,
            ),
            {"model": "m", "stop_reason": "tool_use"},
        ),
        (Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content="noon")]), {}),
        (
            Message(role="assistant", content=[TextBlock(text="It is noon.")], usage=usage),
            {"model": "m", "stop_reason": "end_turn"},
        ),
    ]


async def test_every_append_is_one_line_and_reads_back(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    context = ContextManager(7, on_append=store.append)
    for message, meta in turn():
        await context.append(message, **meta)

    lines = store.path_for(7).read_bytes().splitlines()
    assert len(lines) == 4
    first = orjson.loads(lines[0])
    assert first["version"] == SCHEMA_VERSION
    assert first["user_id"] == 7 and first["role"] == "user" and first["update_id"] == 101
    assert first["content"] == [{"type": "text", "text": "what time is it?"}]
    second = orjson.loads(lines[1])
    assert second["usage"]["input_tokens"] == 10
    assert second["usage"]["cache_read_input_tokens"] == 3
    assert second["stop_reason"] == "tool_use"

    loaded = await store.load(7)
    assert loaded.messages == context.messages
    assert loaded.problems == []


async def test_torn_last_line_is_skipped_and_the_next_append_is_intact(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    for message, meta in turn()[:2]:
        await store.append(SessionEntry.of(3, message, **meta))
    path = store.path_for(3)
    path.write_bytes(path.read_bytes() + b'{"version":1,"user_id":3,"role":"us')  # cut-off write

    torn = read_session_file(path)
    assert len(torn.entries) == 2
    assert torn.problems == [(3, "torn last line (no newline)")]

    restarted = JsonlSessionStore(tmp_path)  # a new process appends after the torn line
    await restarted.append(SessionEntry.of(3, Message.user_text("again"), update_id=102))
    healed = read_session_file(path)
    assert [e.update_id for e in healed.entries] == [101, None, 102]
    assert [number for number, _ in healed.problems] == [3], "only the torn line is lost"


async def test_corrupt_middle_line_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "5.jsonl"
    good = SessionEntry.of(5, Message.user_text("hello")).to_line()
    path.write_bytes(good + b"not json\n" + b'{"role": "robot"}\n' + good)
    read = read_session_file(path)
    assert len(read.entries) == 2
    assert [number for number, _ in read.problems] == [2, 3]


async def test_missing_file_is_an_empty_session(tmp_path: Path) -> None:
    read = await JsonlSessionStore(tmp_path / "nowhere").load(1)
    assert read.entries == [] and read.problems == []


async def test_append_creates_the_directory(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path / "new" / "dir")
    await store.append(SessionEntry.of(9, Message.user_text("x")))
    assert store.path_for(9).exists()
