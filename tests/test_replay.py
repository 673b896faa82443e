"""``python -m botkit replay``: a session file as a transcript or JSON lines, damage survived."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from botkit.replay import format_transcript, replay
from botkit.sessions import (
    CompactionEntry,
    JsonlSessionStore,
    PostgresSessionStore,
    ResetEntry,
    SessionEntry,
    read_session_file,
)
from botkit.stores.migrate import migrate
from botkit.types import (
    DocumentBlock,
    DocumentSource,
    ImageBlock,
    ImageSource,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

USER = 42
Entry = SessionEntry | ResetEntry | CompactionEntry

PNG = b"\x89PNG" + b"\0" * (12 * 1024 - 4)
WEATHER_ARGS: dict[str, Any] = {"city": "Paris", "units": "metric"}
FETCH_ARGS: dict[str, Any] = {"url": "https://example.org/ä", "timeout": 10}
LONG_RESULT = "x" * 1000
FIRST_USAGE = Usage(input_tokens=1234, output_tokens=56, cache_read_input_tokens=1100)
SECOND_USAGE = Usage(input_tokens=1500, output_tokens=20, cache_creation_input_tokens=300)
THIRD_USAGE = Usage(input_tokens=90, output_tokens=4096, cache_read_input_tokens=2000)
SUMMARY_USAGE = Usage(input_tokens=700, output_tokens=80)
SUMMARY = "The user asked about the weather in Paris.\nThe bot said it was sunny."


def at(day: int, hour: int, minute: int, second: int) -> datetime:
    return datetime(2025, 3, day, hour, minute, second, tzinfo=UTC)


def conversation() -> list[Entry]:
    """A turn with two tool calls (one failing), a reset, a new turn, a compaction."""
    return [
        SessionEntry.of(
            USER,
            Message(
                role="user",
                content=[
                    TextBlock(text="What's the weather in Paris?\nAnd get me that page."),
                    ImageBlock(
                        source=ImageSource(
                            media_type="image/png", data=base64.b64encode(PNG).decode()
                        )
                    ),
                ],
            ),
            update_id=1001,
            timestamp=at(1, 23, 59, 50),
        ),
        SessionEntry.of(
            USER,
            Message(
                role="assistant",
                content=[
                    TextBlock(text="Let me check."),
                    ToolUseBlock(id="toolu_01", name="get_weather", input=WEATHER_ARGS),
                    ToolUseBlock(id="toolu_02", name="fetch_url", input=FETCH_ARGS),
                ],
                usage=FIRST_USAGE,
            ),
            model="claude-test",
            stop_reason="tool_use",
            timestamp=at(1, 23, 59, 55),
        ),
        SessionEntry.of(
            USER,
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="toolu_01", content=LONG_RESULT),
                    ToolResultBlock(tool_use_id="toolu_02", content="timed out", is_error=True),
                ],
            ),
            timestamp=at(2, 0, 0, 1),
        ),
        SessionEntry.of(
            USER,
            Message(
                role="assistant",
                content=[TextBlock(text="It is sunny in Paris; the page timed out.")],
                usage=SECOND_USAGE,
            ),
            model="claude-test",
            stop_reason="end_turn",
            timestamp=at(2, 0, 0, 4),
        ),
        ResetEntry(user_id=USER, reason="/clear", timestamp=at(2, 0, 1, 0)),
        SessionEntry.of(
            USER,
            Message.user_text("Tell me a long story"),
            update_id=1002,
            timestamp=at(2, 0, 2, 0),
        ),
        SessionEntry.of(
            USER,
            Message(
                role="assistant", content=[TextBlock(text="Once upon a time")], usage=THIRD_USAGE
            ),
            model="claude-test",
            stop_reason="max_tokens",
            timestamp=at(2, 0, 2, 30),
        ),
        CompactionEntry(
            user_id=USER, summary=SUMMARY, kept=2, usage=SUMMARY_USAGE, timestamp=at(2, 0, 3, 0)
        ),
    ]


def write_session(directory: Path, entries: Sequence[Entry]) -> Path:
    """Write ``entries`` with the real store; the path of the file."""
    store = JsonlSessionStore(directory)

    async def append_all() -> None:
        for entry in entries:
            await store.append(entry)

    asyncio.run(append_all())
    return store.path_for(USER)


def usage_text(usage: Usage) -> str:
    return (
        f"in {usage.input_tokens:,} · out {usage.output_tokens:,} · "
        f"cache write {usage.cache_creation_input_tokens:,} · "
        f"cache read {usage.cache_read_input_tokens:,}"
    )


def compact(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def line_with(text: str, needle: str) -> str:
    """The one line of ``text`` that contains ``needle``."""
    found = [line for line in text.splitlines() if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return write_session(tmp_path / "sessions", conversation())


# --- the transcript -------------------------------------------------------------------------------


def test_transcript_shows_every_entry_in_order(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    header = text.splitlines()[0]
    assert f"user {USER}" in header
    assert str(session) in header
    assert f"{len(conversation())} entries" in header

    order = [
        "What's the weather in Paris?",
        "And get me that page.",
        "[image image/png, 12 KB]",
        "Let me check.",
        f"→ get_weather({compact(WEATHER_ARGS)})",
        f"→ fetch_url({compact(FETCH_ARGS)})",
        "↳ result of get_weather (toolu_01)",
        "↳ result of fetch_url (toolu_02) ERROR: timed out",
        "It is sunny in Paris; the page timed out.",
        "──── context cleared (/clear) ────",
        "Tell me a long story",
        "Once upon a time",
        "context compacted",
        "total:",
    ]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions)


def test_roles_times_and_date_changes(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    assert "[2025-03-01 23:59:50] user · update 1001" in text
    assert "[23:59:55] assistant · claude-test" in text
    assert "[2025-03-02 00:00:01] user" in text, "the date is shown again when it changes"
    assert "[00:00:04] assistant · claude-test" in text
    assert "[00:02:00] user · update 1002" in text


def test_usage_and_stop_reason_per_assistant_message(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    first = line_with(text, usage_text(FIRST_USAGE))
    assert first.strip() == f"usage: {usage_text(FIRST_USAGE)} · stop: tool_use"
    second = line_with(text, usage_text(SECOND_USAGE))
    assert "stop" not in second, "end_turn is the normal case, not shown"
    third = line_with(text, usage_text(THIRD_USAGE))
    assert third.endswith("stop: max_tokens")


def test_long_tool_results_are_cut(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    result = line_with(text, "result of get_weather")
    assert LONG_RESULT[:250] in result
    assert LONG_RESULT not in result
    assert result.endswith("…")
    assert len(result) < 400


def test_reset_and_compaction_markers(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    assert "[00:01:00] ──── context cleared (/clear) ────" in text
    marker = line_with(text, "context compacted")
    assert marker.startswith("[00:03:00] ────")
    assert "2 messages kept" in marker
    lines = text.splitlines()
    after = lines[lines.index(marker) + 1 :]
    for summary_line in SUMMARY.splitlines():
        assert f"  {summary_line}" in after[:3], "the summary follows, indented"
    assert f"usage: {usage_text(SUMMARY_USAGE)}" in text


def test_totals_sum_all_usage_and_count_turns(session: Path) -> None:
    text = format_transcript(read_session_file(session), source=str(session))
    total = FIRST_USAGE + SECOND_USAGE + THIRD_USAGE + SUMMARY_USAGE
    user_turns = 2  # the two messages with an update id; the tool results are no turn
    assert text.splitlines()[-1] == f"total: {user_turns} turns · {usage_text(total)}"


def test_unknown_tool_result_and_empty_file(tmp_path: Path) -> None:
    orphan = SessionEntry.of(
        USER,
        Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_x", content="ok")]),
    )
    path = write_session(tmp_path, [orphan])
    text = format_transcript(read_session_file(path), source=str(path))
    assert "↳ result of an unknown tool (toolu_x): ok" in text
    assert text.splitlines()[-1] == f"total: 0 turns · {usage_text(Usage())}"

    empty = tmp_path / f"{USER + 1}.jsonl"
    empty.write_bytes(b"")
    text = format_transcript(read_session_file(empty), source=str(empty))
    assert f"user {USER + 1}" in text and "0 entries" in text


# --- replay(): damaged files, user ids, missing files ---------------------------------------------


def damage(path: Path) -> tuple[int, int]:
    """Put a corrupt line in the middle (after a blank one) and a torn one at the end."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2:2] = [b"\n", b"this is not json\n"]
    path.write_bytes(b"".join(lines) + b'{"type": "message", "user_id": 42, "ro')
    corrupt = 4
    torn = len(lines) + 1
    return corrupt, torn


def test_damaged_file_reports_problems_and_prints_the_rest(
    session: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt, torn = damage(session)
    assert replay(str(session)) == 0
    out, err = capsys.readouterr()
    problems = err.splitlines()
    assert len(problems) == 2
    assert problems[0].startswith(f"line {corrupt}: ") and problems[0].endswith("(skipped)")
    assert problems[1] == f"line {torn}: torn last line (no newline) (skipped)"
    assert "2 unreadable lines skipped" in out.splitlines()[0]
    assert f"{len(conversation())} entries" in out.splitlines()[0]
    for text in ("What's the weather", "It is sunny in Paris", "Once upon a time", SUMMARY[:20]):
        assert text in out
    assert out.splitlines()[-1].startswith("total: 2 turns")


def test_json_lines_in_file_order_with_problems(
    session: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt, torn = damage(session)
    assert replay(str(session), as_json=True) == 0
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    expected = [entry.model_dump(mode="json", exclude_none=True) for entry in conversation()]
    assert [r for r in records if r["type"] != "problem"] == expected

    types = [r["type"] for r in records]
    assert types[:2] == ["message", "message"]
    assert records[2] == {"type": "problem", "line": corrupt, "reason": records[2]["reason"]}
    assert records[2]["reason"]
    assert records[-1] == {"type": "problem", "line": torn, "reason": "torn last line (no newline)"}
    assert len(records) == len(expected) + 2
    assert f"line {corrupt}:" in err, "people watching the terminal see the problems too"


def test_user_id_is_looked_up_in_the_sessions_dir(
    session: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOTKIT_SESSIONS_DIR", str(session.parent))
    assert replay(str(USER)) == 0
    out, err = capsys.readouterr()
    assert str(session) in out.splitlines()[0]
    assert "Once upon a time" in out
    assert err == ""


def test_missing_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOTKIT_SESSIONS_DIR", str(tmp_path / "nowhere"))
    assert replay("7") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert "user 7" in err and str(tmp_path / "nowhere" / "7.jsonl") in err

    assert replay(str(tmp_path / "gone.jsonl"), as_json=True) == 2
    assert str(tmp_path / "gone.jsonl") in capsys.readouterr().err

    assert replay(str(tmp_path)) == 2, "a directory is no session file"
    assert capsys.readouterr().err.count("\n") == 1


def test_invalid_settings_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOTKIT_ALLOWED_USERS", "12,abc")
    assert replay(str(USER)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "invalid setting" in err and "BOTKIT_ALLOWED_USERS" in err


# --- end to end: python -m botkit replay ----------------------------------------------------------


def run_replay(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    clean.pop("BOTKIT_SESSIONS_DIR", None)
    clean.pop("BOTKIT_DATABASE_URL", None)
    clean.update(env, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "botkit", "replay", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        encoding="utf-8",
        timeout=60,
    )


def test_cli_user_id_form(session: Path, tmp_path: Path) -> None:
    result = run_replay(tmp_path, str(USER), BOTKIT_SESSIONS_DIR=str(session.parent))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert f"→ get_weather({compact(WEATHER_ARGS)})" in result.stdout
    assert "──── context cleared (/clear) ────" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("total: 2 turns")


def test_cli_default_sessions_dir_is_relative_to_cwd(session: Path, tmp_path: Path) -> None:
    assert session.parent == tmp_path / "sessions"
    result = run_replay(tmp_path, str(USER))
    assert result.returncode == 0, result.stderr
    assert "Once upon a time" in result.stdout


def test_cli_missing_file(tmp_path: Path) -> None:
    result = run_replay(tmp_path, "12345")
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert "12345" in result.stderr and "Traceback" not in result.stderr


def test_cli_json_with_damage(session: Path, tmp_path: Path) -> None:
    corrupt, torn = damage(session)
    result = run_replay(tmp_path, str(session), "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == len(conversation()) + 2, "nothing but JSON lines on stdout"
    assert [r["line"] for r in records if r["type"] == "problem"] == [corrupt, torn]
    assert records[0]["content"][0]["text"].startswith("What's the weather")
    assert "Traceback" not in result.stderr
    assert f"line {torn}: torn last line" in result.stderr


def test_cli_reader_going_away_is_no_traceback(tmp_path: Path) -> None:
    many = [
        SessionEntry.of(USER, Message.user_text(f"message {i} " + "y" * 200), update_id=i)
        for i in range(2000)
    ]
    path = write_session(tmp_path, many)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    with subprocess.Popen(
        [sys.executable, "-m", "botkit", "replay", str(path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b"session of user")
        process.stdout.close()
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) in (0, 1)
    assert "Traceback" not in stderr
    assert "Exception ignored" not in stderr


# --- from PostgreSQL ------------------------------------------------------------------------------


async def test_cli_reads_the_session_from_postgres_when_configured(
    postgres_db: str, tmp_path: Path
) -> None:
    await migrate(postgres_db)
    files = JsonlSessionStore(tmp_path / "files")
    store = await PostgresSessionStore.connect(postgres_db)
    for entry in conversation():
        await store.append(entry)
        await files.append(entry)
    await store.close()
    await files.close()
    path = files.path_for(USER)
    env = {"BOTKIT_SESSIONS_DIR": str(tmp_path / "empty"), "BOTKIT_DATABASE_URL": postgres_db}

    from_db = run_replay(tmp_path, str(USER), **env)
    from_file = run_replay(tmp_path, str(path))
    json_from_db = run_replay(tmp_path, str(USER), "--json", **env)
    json_from_file = run_replay(tmp_path, str(path), "--json")

    assert from_db.returncode == 0 and from_db.stderr == ""
    assert from_db.stdout.splitlines()[0].startswith(
        f"session of user {USER} · PostgreSQL conversation {USER} · "
    )
    assert from_db.stdout.splitlines()[1:] == from_file.stdout.splitlines()[1:]
    assert json_from_db.stdout == json_from_file.stdout and json_from_db.returncode == 0


async def test_cli_missing_user_in_postgres_is_one_line_and_exit_2(
    postgres_db: str, tmp_path: Path
) -> None:
    await migrate(postgres_db)

    missing = run_replay(tmp_path, "12345", BOTKIT_DATABASE_URL=postgres_db)
    unreachable = run_replay(
        tmp_path, "12345", BOTKIT_DATABASE_URL="postgresql://u:hunter2@127.0.0.1:9/db"
    )

    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == "botkit: no session for user 12345 in the database\n"
    assert unreachable.returncode == 2 and len(unreachable.stderr.splitlines()) == 1
    assert unreachable.stderr.startswith("botkit: cannot read sessions from the database")
    assert "hunter2" not in unreachable.stderr and "Traceback" not in unreachable.stderr


async def test_replay_shows_stored_pictures_and_documents_and_notes_missing_ones(
    tmp_path: Path,
) -> None:
    pdf = base64.b64encode(b"%PDF-1.4 " + b"0" * 2048).decode()
    said = Message(
        role="user",
        content=[
            ImageBlock(
                source=ImageSource(media_type="image/png", data=base64.b64encode(PNG).decode())
            ),
            DocumentBlock(source=DocumentSource(data=pdf), title="offer.pdf"),
            DocumentBlock(
                source=DocumentSource(type="text", media_type="text/plain", data="a,b\n"),
                title="t.csv",
            ),
        ],
    )
    store = JsonlSessionStore(tmp_path)
    await store.append(SessionEntry.of(USER, said, update_id=1))
    await store.close()
    shown = format_transcript(read_session_file(tmp_path / f"{USER}.jsonl"), source="s")
    for path in (tmp_path / "media").glob("*.pdf"):
        path.unlink()
    damaged = format_transcript(read_session_file(tmp_path / f"{USER}.jsonl"), source="s")

    assert "[image image/png, 12 KB]" in shown
    assert "[document offer.pdf, application/pdf, 2 KB]" in shown
    assert "[document t.csv, text/plain, 4 characters]" in shown
    assert "[The document offer.pdf sent here is no longer stored]" in damaged
