"""``python -m botkit doctor``: one ✓/✗ line per check, against the fakes, PostgreSQL and MCP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from botkit.stores.migrate import migrate
from botkit.testing import FakeAnthropicServer, FakeTelegramServer
from botkit.testing.speech import FakeSpeechServer

KEY = "sk-ant-test-key"
MODEL = "claude-sonnet-5-5"
MCP_SERVER = Path(__file__).with_name("mcp_server_example.py")
SKILLS = Path(__file__).resolve().parent.parent / "examples" / "skills"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(api_key=KEY, models=[MODEL]) as server:
        yield server


def mcp_config(**servers: str) -> str:
    """BOTKIT_MCP_CONFIG with the example server and ``name=command`` servers."""
    entries: dict[str, object] = {
        "example": {"command": sys.executable, "args": [str(MCP_SERVER)]},
        **{name: {"command": command} for name, command in servers.items()},
    }
    return orjson.dumps({"mcpServers": entries}).decode()


def environment(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path, **overrides: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env = {k: v for k, v in env.items() if not k.startswith("BOTKIT_")}
    env.update(
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE=telegram.base_url,
        ANTHROPIC_API_KEY=KEY,
        ANTHROPIC_BASE_URL=claude.base_url,
        BOTKIT_MODEL=MODEL,
        BOTKIT_SESSIONS_DIR=str(home / "sessions"),
        BOTKIT_MCP_CONFIG=mcp_config(),
        BOTKIT_SKILLS_DIR=str(SKILLS),
    )
    env.update(overrides)
    return env


async def run_doctor(
    home: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "doctor", *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(result: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """The report's lines of the check called ``name``."""
    return [line for line in result.stdout.splitlines() if line[2:].startswith(f"{name}:")]


async def test_doctor_is_all_green_against_the_fakes(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, postgres_db: str
) -> None:
    await migrate(postgres_db)
    env = environment(telegram, claude, tmp_path, BOTKIT_DATABASE_URL=postgres_db)
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout.splitlines()
    assert report[-1] == "all checks passed"
    checks = report[:-1]
    assert [line[2:].split(":")[0] for line in checks] == [
        "bot", "Telegram", "Anthropic", "database", "sessions", "MCP", "skills"
    ]  # fmt: skip
    assert all(line.startswith("✓ ") for line in checks), result.stdout
    assert f"@{telegram.bot_username}" in lines(result, "Telegram")[0]
    assert "no webhook set" in lines(result, "Telegram")[0]
    assert telegram.requests_for("getWebhookInfo"), "the webhook was asked about"
    assert not telegram.requests_for("getUpdates"), "the doctor does not poll"
    assert MODEL in lines(result, "Anthropic")[0]
    assert len(claude.count_token_requests) == 1 and not claude.requests, "no tokens spent"
    assert "migrations applied" in lines(result, "database")[0]
    assert "example__add" in lines(result, "MCP")[0]
    assert "meeting-notes" in lines(result, "skills")[0]
    assert telegram.token not in result.stdout + result.stderr
    assert KEY not in result.stdout + result.stderr


async def test_doctor_names_a_wrong_key_an_unreachable_database_and_a_broken_mcp_command(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = environment(
        telegram,
        claude,
        tmp_path,
        ANTHROPIC_API_KEY="sk-ant-wrong-key",
        BOTKIT_DATABASE_URL="postgresql://botkit:hunter2secret@127.0.0.1:1/botkit",
        BOTKIT_MCP_CONFIG=mcp_config(broken=str(tmp_path / "no-such-server")),
    )
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "3 of 8 checks failed"
    (anthropic,) = lines(result, "Anthropic")
    assert anthropic.startswith("✗ ") and "ANTHROPIC_API_KEY" in anthropic
    (database,) = lines(result, "database")
    assert database.startswith("✗ ") and "BOTKIT_DATABASE_URL" in database
    broken = [line for line in lines(result, "MCP") if "'broken'" in line]
    assert len(broken) == 1 and broken[0].startswith("✗ ") and "command" in broken[0]
    (example,) = [line for line in lines(result, "MCP") if "'example'" in line]
    assert example.startswith("✓ ")
    assert lines(result, "Telegram")[0].startswith("✓ ")
    output = result.stdout + result.stderr
    assert "hunter2secret" not in output and "sk-ant-wrong-key" not in output
    assert "Traceback" not in output


async def test_doctor_names_an_unknown_model(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = environment(telegram, claude, tmp_path, BOTKIT_MODEL="claude-sonet-9")
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    (anthropic,) = lines(result, "Anthropic")
    assert anthropic.startswith("✗ ")
    assert "'claude-sonet-9'" in anthropic and "BOTKIT_MODEL" in anthropic


async def test_doctor_says_to_migrate_when_migrations_are_pending(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, postgres_db: str
) -> None:
    env = environment(telegram, claude, tmp_path, BOTKIT_DATABASE_URL=postgres_db)
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    (database,) = lines(result, "database")
    assert database.startswith("✗ ") and "python -m botkit migrate" in database


async def test_doctor_names_a_rejected_token_a_broken_skill_and_a_target_that_fails(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    (skills / "good").mkdir(parents=True)
    (skills / "good" / "SKILL.md").write_text("---\nname: good\ndescription: Works.\n---\nDo.\n")
    (skills / "bad").mkdir()
    (skills / "bad" / "SKILL.md").write_text("no front matter here\n")
    (tmp_path / "mybot.py").write_text("raise RuntimeError('the bot module is broken')\n")
    env = environment(
        telegram,
        claude,
        tmp_path,
        TELEGRAM_BOT_TOKEN="999:WRONG",
        BOTKIT_SKILLS_DIR=str(skills),
        BOTKIT_MCP_CONFIG="",
    )
    result = await run_doctor(tmp_path, env, "mybot:bot")
    assert result.returncode == 1
    (bot,) = lines(result, "bot")
    assert bot.startswith("✗ ") and "the bot module is broken" in bot
    (token,) = lines(result, "Telegram")
    assert token.startswith("✗ ") and "TELEGRAM_BOT_TOKEN" in token and "WRONG" not in token
    skill_lines = lines(result, "skills")
    assert skill_lines[0].startswith("✓ ") and "good" in skill_lines[0]
    assert [line for line in skill_lines if line.startswith("✗ ")] == [
        "✗ skills: skills/bad/SKILL.md does not parse: it does not start with front matter "
        "(a line '---')"
    ]
    assert lines(result, "sessions")[0].startswith("✓ ")


async def test_doctor_names_a_malformed_token_and_still_checks_the_rest(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = environment(telegram, claude, tmp_path, TELEGRAM_BOT_TOKEN='"123456:AAH secret"')
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    (token,) = lines(result, "Telegram")
    assert token.startswith("✗ ") and "TELEGRAM_BOT_TOKEN is not a bot token" in token
    assert "secret" not in result.stdout
    report = result.stdout.splitlines()
    assert [line[2:].split(":")[0] for line in report[:-1]] == [
        "bot", "Telegram", "Anthropic", "database", "sessions", "MCP", "skills"
    ]  # fmt: skip
    assert [line[0] for line in report[:-1]].count("✗") == 1, result.stdout
    assert report[-1] == "1 of 7 checks failed"
    assert not telegram.requests, "a malformed token is never sent"


async def test_doctor_names_a_sessions_folder_that_cannot_be_written(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = environment(telegram, claude, tmp_path, BOTKIT_SESSIONS_DIR=str(blocker / "sessions"))
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    (sessions,) = lines(result, "sessions")
    assert sessions.startswith("✗ ") and "BOTKIT_SESSIONS_DIR" in sessions


async def test_doctor_names_a_data_folder_that_holds_another_bots_data(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "bot.json").write_text('{"bot_id": 654321}\n')
    result = await run_doctor(tmp_path, environment(telegram, claude, tmp_path))
    assert result.returncode == 1
    (sessions,) = lines(result, "sessions")
    assert sessions.startswith("✗ ") and "holds the data of bot 654321, not of this bot" in sessions
    assert "BOTKIT_SESSIONS_DIR" in sessions


async def test_doctor_reports_an_invalid_value_and_still_runs_every_check(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = environment(
        telegram, claude, tmp_path, BOTKIT_MAX_TOKENS="-5", BOTKIT_EFFORT="huge", BOTKIT_MODL="x"
    )
    result = await run_doctor(tmp_path, env)
    assert result.returncode == 1
    configuration = lines(result, "configuration")
    assert any("BOTKIT_MAX_TOKENS" in line for line in configuration)
    assert any("BOTKIT_EFFORT" in line for line in configuration), "every problem in one run"
    assert any("BOTKIT_MODL" in line for line in configuration)
    assert lines(result, "Telegram")[0].startswith("✓"), "the other checks ran"
    assert lines(result, "Anthropic")[0].startswith("✓")
    assert lines(result, "database") and lines(result, "sessions")


async def test_doctor_refuses_thinking_settings_the_model_would_refuse(
    telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    async with FakeAnthropicServer(api_key=KEY, models=["claude-opus-5-5"]) as claude:
        env = environment(
            telegram, claude, tmp_path, BOTKIT_MODEL="claude-opus-5-5", BOTKIT_THINKING="off"
        )
        result = await run_doctor(tmp_path, env)
    (anthropic,) = lines(result, "Anthropic")
    assert anthropic.startswith("✗ ") and "BOTKIT_THINKING=off" in anthropic


async def test_doctor_checks_that_the_speech_apis_answer(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async with FakeSpeechServer(api_key="sk-speech") as speech:
        env = environment(
            telegram,
            claude,
            tmp_path,
            BOTKIT_TRANSCRIBE_URL=speech.base_url,
            BOTKIT_TRANSCRIBE_API_KEY="sk-speech",
            BOTKIT_SPEECH_URL=speech.base_url,
            BOTKIT_SPEECH_API_KEY="wrong",
        )
        result = await run_doctor(tmp_path, env)
    assert lines(result, "transcription")[0].startswith("✓ "), result.stdout
    assert lines(result, "speech")[0].startswith("✗ ")
    assert "API key was refused" in lines(result, "speech")[0]
    assert "sk-speech" not in result.stdout + result.stderr


async def test_doctor_names_voice_replies_without_a_speech_api_and_one_that_is_down(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    env = environment(
        telegram,
        claude,
        tmp_path,
        BOTKIT_VOICE_REPLIES="mirror",
        BOTKIT_TRANSCRIBE_URL="http://127.0.0.1:1/v1",
    )
    result = await run_doctor(tmp_path, env)
    assert "needs BOTKIT_SPEECH_URL" in lines(result, "speech")[0]
    assert lines(result, "transcription")[0].startswith(
        "✗ transcription: http://127.0.0.1:1/v1 did not answer"
    )


async def test_doctor_checks_every_model_users_may_pick(
    telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    folder = tmp_path / "personas"
    folder.mkdir()
    (folder / "deep.md").write_text(
        "---\ntitle: Deep\ndescription: Thinks hard.\nmodel: claude-opus-5-5\n---\nThink.\n"
    )
    known = [MODEL, "claude-haiku-5-5", "claude-opus-5-5"]
    async with FakeAnthropicServer(api_key=KEY, models=known) as claude:
        env = environment(telegram, claude, tmp_path, BOTKIT_PERSONAS_DIR=str(folder))
        fine = await run_doctor(tmp_path, {**env, "BOTKIT_MODELS": f"{MODEL},claude-haiku-5-5"})
        typo = await run_doctor(tmp_path, {**env, "BOTKIT_MODELS": f"{MODEL},claude-haiku-5-6"})
    (listed,) = lines(fine, "models")
    assert listed == (
        f"✓ models: users may pick {MODEL}, claude-haiku-5-5, claude-opus-5-5; all known"
    )
    (wrong,) = lines(typo, "models")
    assert wrong == (
        "✗ models: claude-haiku-5-6 is not a model Anthropic knows: "
        "fix BOTKIT_MODELS, the plans or the personas"
    )
    assert typo.returncode == 1


async def test_doctor_says_nothing_of_models_when_users_pick_none(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    result = await run_doctor(tmp_path, environment(telegram, claude, tmp_path))
    assert lines(result, "models") == []
