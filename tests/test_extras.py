"""Install what you use: the core runs a one-process SQLite bot without any extra, and a feature
whose extra is missing says which one to install (#31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from botkit import BotOptions
from botkit.testing.anthropic import FakeAnthropicServer
from botkit.testing.harness import running
from botkit.testing.kit import make_bot
from botkit.testing.speech import FakeSpeechServer
from botkit.testing.telegram import FakeTelegramServer

EXTRAS = ("asyncpg", "procrastinate", "psycopg", "psycopg_pool", "mcp", "PIL", "pypdf", "av")
USER = 501


def python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter in ``cwd``, without the environment's BOTKIT_*."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BOTKIT_", "TELEGRAM"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, **env},
        timeout=120,
    )


def test_the_core_import_path_loads_no_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import botkit\n"
        "from botkit import Bot, Settings\n"
        f"Bot(settings=Settings(_env_file=None, sessions_dir={str(tmp_path / 's')!r}))\n"
        "Bot(settings=Settings(_env_file=None, transcribe_url='http://x/v1', "
        f"speech_url='http://x/v1', sessions_dir={str(tmp_path / 'v')!r}))\n"
        "import botkit.cli, botkit.doctor, botkit.replay, botkit.runtime.telegram\n"
        "import botkit.runtime.console, botkit.sessions.retention, botkit.stores\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(EXTRAS)!r}))\n"
    )
    done = python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("missing", ["asyncpg", "procrastinate"])
def test_a_database_url_without_the_postgres_extra_names_the_extra(
    tmp_path: Path, missing: str
) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None  # as if not installed\n"
        "from botkit.cli import main\n"
        "sys.exit(main(['run']))\n"
    )
    done = python(
        code,
        tmp_path,
        BOTKIT_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        TELEGRAM_BOT_TOKEN="123:abc",
        ANTHROPIC_API_KEY="k",
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "pip install 'botkit[postgres]'" in done.stderr, done.stderr
    assert "BOTKIT_DATABASE_URL" in done.stderr


def test_mcp_config_without_the_mcp_extra_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['mcp'] = None  # as if not installed\n"
        "from botkit.cli import main\n"
        "sys.exit(main(['run']))\n"
    )
    done = python(
        code,
        tmp_path,
        BOTKIT_MCP_CONFIG='{"mcpServers": {}}',
        TELEGRAM_BOT_TOKEN="123:abc",
        ANTHROPIC_API_KEY="k",
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'botkit[mcp]'" in done.stderr, done.stderr


async def test_a_photo_without_the_files_extra_gets_a_polite_reply(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({USER}))
    with capture_logs() as logs:
        async with running(bot, telegram):
            telegram.send_photo(USER, caption="what is this?")
            (reply,) = await telegram.wait_for_messages(USER)
    expected = BotOptions().file_texts.not_installed.format(name="the photo")
    assert reply.text == expected
    assert claude.requests == [], "no LLM call for a file that cannot be read"
    (line,) = [entry for entry in logs if entry["event"] == "files.extra_missing"]
    assert "pip install 'botkit[files]'" in line["error"]


async def test_speech_in_another_format_without_the_voice_extra_leaves_the_text_alone(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # as if PyAV were not installed
    async with FakeSpeechServer(answer_format="wav") as speech:
        bot = make_bot(
            claude,
            tmp_path,
            allowed_users=frozenset({USER}),
            speech_url=speech.base_url,
            voice_replies="always",
        )
        with capture_logs() as logs:
            async with running(bot, telegram):
                telegram.send_text(USER, "hello")
                (reply,) = await telegram.wait_for_messages(USER)
    assert reply.text == "echo: hello"
    assert telegram.sent_voices(USER) == []
    (line,) = [entry for entry in logs if entry["event"] == "voice.speech_failed"]
    assert "pip install 'botkit[voice]'" in line["error"]
