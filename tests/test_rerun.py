"""``python -m botkit replay SESSION --rerun``: recorded sessions run again through a bot's own
pipeline (the real anthropic SDK against the fake Messages API), compared turn by turn."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson
import pytest
from rerun_shop import FORMAL_PROMPT, PROMPT, shop_bot

from botkit.stores.migrate import migrate
from botkit.testing import (
    FakeAnthropicServer,
    FakeTelegramServer,
    ask,
    fake_llm,
    make_settings,
    running,
)
from botkit.testing.anthropic import FakeReply, FakeRequest

USER = 42
ROOT = Path(__file__).resolve().parent.parent
CHAT = ["hello", "order 7", "thanks"]


def shop_responder(request: FakeRequest) -> FakeReply:
    """ "order N" → lookup_order(id=N); "cancel N" → cancel_order(id=N); a tool's result is
    read back; anything else is echoed (``Dear customer,`` first when the prompt is formal)."""
    if "RECORDED ANSWER" in request.last_user_text():
        return FakeReply.text("better: it greets the customer")
    results = request.tool_results()
    if results:
        content = results[0].get("content")
        text = content if isinstance(content, str) else str(content)
        return FakeReply.text(f"Here it is: {text}")
    said = request.last_user_text()
    for verb, tool in (("order", "lookup_order"), ("cancel", "cancel_order")):
        found = re.fullmatch(rf"{verb} (\d+)", said)
        if found:
            return FakeReply.tool_use(tool, {"id": int(found.group(1))})
    polite = "Dear customer, " if "formal" in request.system_text else ""
    return FakeReply.text(f"{polite}echo: {said}")


async def record(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    texts: list[str],
    *,
    user: int = USER,
    **settings: Any,
) -> Path:
    """Serve the shop bot on the fakes, send ``texts`` from ``user``; the session file."""
    claude.responder = shop_responder
    config = make_settings(tmp_path, allowed_users=frozenset({USER, 43}), **settings)
    bot = shop_bot(settings=config, llm=fake_llm(claude, model=config.model))
    async with running(bot, telegram):
        for text in texts:
            await ask(telegram, user, text)
    await bot.aclose()
    return tmp_path / "sessions" / f"{user}.jsonl"


async def rerun_cli(
    tmp_path: Path, claude: FakeAnthropicServer, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m botkit replay ARGS`` (the shop bot as target) in a subprocess, while the
    fake keeps answering in this loop."""
    keep = ("TELEGRAM_", "ANTHROPIC_", "BOTKIT_", "SHOP_")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(keep)}
    environ.update(
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=claude.base_url,
        BOTKIT_SESSIONS_DIR=str(tmp_path / "sessions"),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    )
    environ.update(env)
    command = [sys.executable, "-m", "botkit", "replay", *args, "--rerun"]
    if "--bot" not in args:
        command += ["--bot", "rerun_shop:make"]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return subprocess.CompletedProcess(command, process.returncode, out.decode(), err.decode())


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the sessions, media, the user store) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stdout.splitlines()


async def test_live_rerun_of_a_recorded_session_changes_nothing_and_sends_nothing(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    path = await record(tmp_path, telegram, claude, CHAT)
    recorded = path.read_bytes()
    files = snapshot(tmp_path / "sessions")
    sent = len(telegram.sent_messages(USER))
    calls = len(claude.requests)
    tool_log = tmp_path / "tool.log"

    result = await rerun_cli(tmp_path, claude, str(USER), SHOP_LOG=str(tool_log))

    assert result.returncode == 0, result.stderr
    assert lines(result)[:3] == ["turn 1: same", "turn 2: same", "turn 3: same"]
    assert lines(result)[-1] == "3 turns, 0 changed"
    assert len(claude.requests) == calls + 4, "live: the model answered each call again"
    assert tool_log.read_text() == "True\n", "the tool ran again, and saw ToolContext.rerun"
    assert len(telegram.sent_messages(USER)) == sent, "nothing went to Telegram"
    assert path.read_bytes() == recorded, "the recorded session is byte-identical"
    assert snapshot(tmp_path / "sessions") == files, "nothing else written beside it"


async def test_recorded_mode_makes_no_request_and_costs_no_tokens(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    path = await record(tmp_path, telegram, claude, CHAT)
    calls = len(claude.requests)

    result = await rerun_cli(tmp_path, claude, str(path), "--llm", "recorded", "--json")

    assert result.returncode == 0, result.stderr
    assert len(claude.requests) == calls, "no request reached the Messages API"
    objects = [json.loads(line) for line in lines(result)]
    assert [o["type"] for o in objects] == ["turn", "turn", "turn", "summary"]
    summary = objects[-1]
    assert summary["turns"] == 3 and summary["changed"] == 0 and summary["llm"] == "recorded"
    assert set(summary["tokens"]["now"].values()) == {0}
    assert sum(summary["tokens"]["recorded"].values()) > 0
    assert objects[1]["tool_calls"]["now"] == [
        {
            "name": "lookup_order",
            "input": {"id": 7},
            "result": "order 7: shipped",
            "is_error": False,
        }
    ]


async def test_a_changed_tool_result_exits_1_and_names_the_tool(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, CHAT)

    result = await rerun_cli(
        tmp_path, claude, str(USER), "--llm", "recorded", SHOP_RESULT="order {id}: lost"
    )

    assert result.returncode == 1, result.stderr
    assert lines(result)[:3] == [
        "turn 1: same",
        "turn 2: changed — tool results: lookup_order",
        "turn 3: same",
    ]
    assert lines(result)[-1] == "3 turns, 1 changed"


async def test_a_prompt_change_that_changes_answers_exits_1_with_their_similarity(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, CHAT)

    result = await rerun_cli(tmp_path, claude, str(USER), SHOP_PROMPT=FORMAL_PROMPT)

    assert result.returncode == 1, result.stderr
    first, second, third = lines(result)[:3]
    assert first.startswith("turn 1: changed — answer (similarity 0.")
    assert first.endswith("; system prompt changed")
    assert second == "turn 2: same (system prompt changed)"
    assert third.startswith("turn 3: changed — answer (similarity")
    assert lines(result)[-1] == "3 turns, 2 changed"


async def test_a_tool_the_bot_no_longer_offers_changes_the_turn(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, ["cancel 7", "hello"])

    result = await rerun_cli(tmp_path, claude, str(USER), "--llm", "recorded", SHOP_NO_CANCEL="1")

    assert result.returncode == 1, result.stderr
    first = lines(result)[0]
    assert first.startswith("turn 1: changed — the bot no longer offers tool cancel_order; ")
    assert "tool calls: - cancel_order(id=7)" in first
    assert "tools offered: - cancel_order" in first
    assert lines(result)[1] == "turn 2: same (tools offered: - cancel_order)"


async def test_anchored_turns_start_from_the_record_and_free_ones_carry_the_rerun_on(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, ["hello", "again"])

    def history_of_last_call() -> list[str]:
        messages = claude.requests[-1].messages
        return [
            block["text"]
            for message in messages
            if message["role"] == "assistant"
            for block in message["content"]
            if block.get("type") == "text"
        ]

    anchored = await rerun_cli(tmp_path, claude, str(USER), SHOP_PROMPT=FORMAL_PROMPT)
    anchored_history = history_of_last_call()
    free = await rerun_cli(tmp_path, claude, str(USER), "--free", SHOP_PROMPT=FORMAL_PROMPT)
    free_history = history_of_last_call()

    assert anchored.returncode == 1 and free.returncode == 1
    assert anchored_history == ["echo: hello"], "turn 2 started from the recorded answer"
    assert free_history == ["Dear customer, echo: hello"], "turn 2 went on from the re-run's"


async def test_an_unreadable_session_or_bot_is_one_line_and_exit_2(
    tmp_path: Path, claude: FakeAnthropicServer
) -> None:
    (tmp_path / "sessions").mkdir()
    missing = await rerun_cli(tmp_path, claude, "999")
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\xff\xfe not json\n")
    (tmp_path / "sessions" / "5.jsonl").write_text(
        '{"type":"message","user_id":5,"role":"user","content":[{"type":"text","text":"hi"}]}\n'
    )
    no_bot = await rerun_cli(tmp_path, claude, "5", "--bot", "no_such_module:make")

    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("botkit: no session file for user 999")
    assert len(missing.stderr.splitlines()) == 1 and "Traceback" not in missing.stderr
    assert no_bot.returncode == 2 and no_bot.stdout == ""
    assert len(no_bot.stderr.splitlines()) == 1 and "Traceback" not in no_bot.stderr


async def test_json_lines_and_the_html_report_show_both_sides(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, CHAT)
    report = tmp_path / "report.html"

    result = await rerun_cli(
        tmp_path, claude, str(USER), "--json", "--report", str(report), SHOP_PROMPT=FORMAL_PROMPT
    )

    assert result.returncode == 1, result.stderr
    first = json.loads(lines(result)[0])
    assert first["changed"] is True and first["answer"]["same"] is False
    assert first["answer"]["recorded"] == "echo: hello"
    assert first["answer"]["now"] == "Dear customer, echo: hello"
    assert 0 < first["answer"]["similarity"] < 1
    assert sum(first["tokens"]["now"].values()) > 0
    page = report.read_text()
    assert page.startswith("<!doctype html>") and "<script" not in page and "http" not in page
    assert "echo: hello" in page and "Dear customer, echo: hello" in page
    assert "lookup_order(id=7)" in page and "3 turns, 2 changed" in page


async def test_a_folder_of_sessions_ends_with_one_summary_table(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, CHAT)
    await record(tmp_path, telegram, claude, ["hello"], user=43)
    folder = tmp_path / "sessions"

    result = await rerun_cli(
        tmp_path, claude, str(folder), "--llm", "recorded", SHOP_RESULT="order {id}: lost"
    )
    everything = await rerun_cli(tmp_path, claude, "--all", "--llm", "recorded")

    assert result.returncode == 1, result.stderr
    out = lines(result)
    assert out[0] == f"{folder / '42.jsonl'}: turn 2: changed — tool results: lookup_order"
    assert out[1].split() == ["session", "turns", "changed", "result"]
    assert out[2].split() == [str(folder / "42.jsonl"), "3", "1", "changed"]
    assert out[3].split() == [str(folder / "43.jsonl"), "1", "0", "same"]
    assert out[-1] == "2 sessions, 4 turns, 1 changed"
    assert everything.returncode == 0, everything.stderr
    assert lines(everything)[-1] == "2 sessions, 4 turns, 0 changed"


async def test_the_same_from_postgresql(
    postgres_db: str, tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await migrate(postgres_db)
    await record(tmp_path, telegram, claude, CHAT, database_url=postgres_db)
    conn = await asyncpg.connect(postgres_db)
    try:
        query = "SELECT seq, entry FROM botkit_sessions ORDER BY conversation, seq"
        before = await conn.fetch(query)
        calls = len(claude.requests)
        env = {"BOTKIT_DATABASE_URL": postgres_db}

        same = await rerun_cli(tmp_path, claude, str(USER), "--llm", "recorded", **env)
        changed = await rerun_cli(
            tmp_path, claude, str(USER), "--llm", "recorded", SHOP_RESULT="gone", **env
        )
        live = await rerun_cli(tmp_path, claude, str(USER), **env)
        missing = await rerun_cli(tmp_path, claude, "12345", **env)
        after = await conn.fetch(query)
    finally:
        await conn.close()

    assert same.returncode == 0 and lines(same)[-1] == "3 turns, 0 changed", same.stderr
    assert changed.returncode == 1
    assert lines(changed)[1] == "turn 2: changed — tool results: lookup_order"
    assert live.returncode == 0 and len(claude.requests) == calls + 4
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
    assert [tuple(row) for row in after] == [tuple(row) for row in before], "nothing written"


async def test_answers_record_the_tools_offered_and_the_prompt_hash(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    path = await record(tmp_path, telegram, claude, ["order 7"])

    answers = [
        e for e in map(orjson.loads, path.read_bytes().splitlines()) if e["role"] == "assistant"
    ]

    assert len(answers) == 2
    for answer in answers:
        assert answer["tools"] == ["lookup_order", "cancel_order"]
        assert answer["system_sha256"] == hashlib.sha256(PROMPT.encode()).hexdigest()


async def test_an_old_session_without_them_still_reruns(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    path = await record(tmp_path, telegram, claude, CHAT)
    old = []
    for line in path.read_bytes().splitlines():
        entry = orjson.loads(line)
        entry.pop("tools", None)
        entry.pop("system_sha256", None)
        old.append(orjson.dumps(entry))
    path.write_bytes(b"\n".join(old) + b"\n")

    recorded = await rerun_cli(tmp_path, claude, str(USER), "--llm", "recorded")
    prompt = await rerun_cli(tmp_path, claude, str(USER), SHOP_PROMPT=FORMAL_PROMPT)

    assert recorded.returncode == 0 and lines(recorded)[-1] == "3 turns, 0 changed"
    assert lines(prompt)[1] == "turn 2: same", "no hash recorded: no note about the prompt"


@pytest.mark.parametrize("flag", ["--free", "--model=x", "--all"])
def test_rerun_flags_without_rerun_are_refused(tmp_path: Path, flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "botkit", "replay", "42", flag],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.endswith("goes with --rerun\n")


async def test_live_without_an_api_key_is_one_line_and_exit_2(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, ["hello"])

    result = await rerun_cli(tmp_path, claude, str(USER), ANTHROPIC_API_KEY="")

    assert result.returncode == 2 and result.stdout == ""
    assert "ANTHROPIC_API_KEY" in result.stderr and len(result.stderr.splitlines()) == 1


async def test_judge_grades_each_changed_answer_against_the_recorded_one(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    await record(tmp_path, telegram, claude, CHAT)
    calls = len(claude.requests)
    report = tmp_path / "report.html"

    result = await rerun_cli(
        tmp_path,
        claude,
        str(USER),
        "--judge",
        "Politeness counts.",
        "--report",
        str(report),
        SHOP_PROMPT=FORMAL_PROMPT,
    )
    first_run = claude.requests[calls:]
    as_json = await rerun_cli(
        tmp_path,
        claude,
        str(USER),
        "--json",
        "--judge",
        "Politeness counts.",
        SHOP_PROMPT=FORMAL_PROMPT,
    )

    assert result.returncode == 1, result.stderr
    first, second, third = lines(result)[:3]
    assert first.startswith("turn 1: changed — answer (similarity 0.")
    assert "; judged better: it greets the customer; system prompt changed" in first
    assert "judged" not in second, "an unchanged answer is not judged"
    assert "judged better: it greets the customer" in third
    judged = [r for r in first_run if "RECORDED ANSWER" in r.last_user_text()]
    assert len(judged) == 2
    assert "Politeness counts." in judged[0].system_text
    asked = judged[0].last_user_text()
    assert "RECORDED ANSWER:\necho: hello" in asked
    assert "NEW ANSWER:\nDear customer, echo: hello" in asked
    assert "judged better: it greets the customer" in report.read_text()
    verdict = json.loads(lines(as_json)[0])["judge"]
    assert verdict == {"grade": "better", "why": "it greets the customer"}


async def test_a_rerun_writes_nothing_into_the_stores_the_bot_serves_from(
    tmp_path: Path, claude: FakeAnthropicServer
) -> None:
    """#51: a session whose recorded answer calls the memory tool for any user, re-run with
    ``--llm recorded``, must not plant a memory (nor make a user store) in the live folder; and
    the text it prints never carries a terminal escape sequence from the session."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    evil = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"  # write the clipboard, clear the screen
    planted = {"command": "create", "path": "/memories/staff.md", "file_text": "PLANTED staff"}
    entries = [
        {"type": "message", "user_id": 77, "role": "user", "update_id": 1,
         "content": [{"type": "text", "text": f"hello {evil}"}]},
        {"type": "message", "user_id": 77, "role": "assistant", "model": "claude-sonnet-5-5",
         "stop_reason": "tool_use",
         "content": [{"type": "tool_use", "id": "toolu_1", "name": "memory", "input": planted}]},
        {"type": "message", "user_id": 77, "role": "user",
         "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        {"type": "message", "user_id": 77, "role": "assistant", "model": "claude-sonnet-5-5",
         "stop_reason": "end_turn", "content": [{"type": "text", "text": f"done {evil}"}]},
    ]  # fmt: skip
    session = sessions / "77.jsonl"
    session.write_text("".join(orjson.dumps({"version": 1, **e}).decode() + "\n" for e in entries))
    before = snapshot(sessions)

    result = await rerun_cli(
        tmp_path, claude, str(session), "--llm", "recorded", "--bot", "botkit.assistant:default_bot"
    )

    assert result.returncode in (0, 1), result.stderr
    assert snapshot(sessions) == before, "no memory file, no botkit.db, nothing new"
    assert not (tmp_path / "botkit.db").exists()
    # the memory call ran again (its result differs from the recorded "ok"), in the scratch
    assert "turn 1: changed — tool results: memory" in result.stdout, result.stdout
    assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout
    replayed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "replay", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "\x1b" not in replayed.stdout and "\\x1b]52" in replayed.stdout


async def test_a_bot_with_its_own_stores_is_not_rerun(
    tmp_path: Path, claude: FakeAnthropicServer
) -> None:
    (tmp_path / "fixed_bot.py").write_text(
        "from pathlib import Path\nfrom botkit import Bot, Settings\n"
        "def make():\n    return Bot(settings=Settings(sessions_dir=Path('live')))\n"
    )
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    line = {"version": 1, "type": "message", "user_id": 5, "role": "user",
            "content": [{"type": "text", "text": "hi"}]}  # fmt: skip
    (sessions / "5.jsonl").write_text(orjson.dumps(line).decode() + "\n")
    result = await rerun_cli(
        tmp_path, claude, "5", "--llm", "recorded", "--bot", "fixed_bot:make",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
    )  # fmt: skip
    assert result.returncode == 2
    assert "would write into the stores it serves from" in result.stderr
    assert not (tmp_path / "live").exists()
