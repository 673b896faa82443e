"""A fresh project outside the repository installs botkit and runs the testing guide's example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SETUP = "import setuptools; setuptools.setup()"
"""Writes this checkout's metadata (entry points included) where it is told, no wheel needed."""
GUIDE = REPO / "docs" / "guides" / "testing.md"

ISOLATION_TEST = """
import pytest

from mybot import bot

pytestmark = pytest.mark.asyncio


async def test_settings_come_from_the_test_alone(make_bot, tmp_path):
    made = make_bot(bot)
    assert made.settings.database_url is None, "the exported BOTKIT_DATABASE_URL is not used"
    assert made.settings.telegram_bot_token is None, "nor the exported token"
    assert made.settings.model != "model-from-dotenv", "nor .env"
    assert made.settings.sessions_dir == tmp_path / "sessions"
    assert made.tools.get("greet") is not None and type(made).__name__ == "GreeterBot"
"""


def guide_files() -> dict[str, str]:
    """The guide's code blocks that carry a file name (``title="mybot.py"``)."""
    blocks = re.findall(r'```python title="([^"]+)"\n(.*?)```', GUIDE.read_text(), re.DOTALL)
    return dict(blocks)


def fresh_venv(folder: Path) -> Path:
    """A virtualenv with this checkout installed (its metadata, entry points included) and
    this environment's packages as its dependencies; returns its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60
    )
    python = folder / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-c", SETUP, "-q", "egg_info", "--egg-base", site],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=60,
    )
    (Path(site) / "botkit.pth").write_text(f"{REPO}\n")
    (Path(site) / "zz-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


@pytest.mark.timeout(300)  # a cold interpreter importing botkit and pytest, twice
def test_the_guides_example_passes_in_a_fresh_project(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    files = guide_files()
    assert set(files) == {"mybot.py", "test_mybot.py"}
    for name, text in files.items():
        (project / name).write_text(text)
    (project / "test_isolated.py").write_text(ISOLATION_TEST)
    (project / ".env").write_text(
        "BOTKIT_MODEL=model-from-dotenv\nTELEGRAM_BOT_TOKEN=1:from-dotenv\n"
        "BOTKIT_DATABASE_URL=postgresql://nobody@127.0.0.1:1/dotenv\n"
    )
    python = fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        BOTKIT_DATABASE_URL="postgresql://nobody@127.0.0.1:1/exported",
        TELEGRAM_BOT_TOKEN="2:exported",
    )
    result = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout
    assert (
        str(REPO / "botkit")
        in subprocess.run(
            [python, "-c", "import botkit; print(botkit.__file__)"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
    ), "the project runs this checkout's botkit"
