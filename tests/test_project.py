"""A fresh project outside the repository installs botkit and runs the testing guide's example."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from botkit import testing
from botkit.testing import FakeAnthropicServer

REPO = Path(__file__).resolve().parent.parent
PIP = (sys.executable, "-m", "pip")
"""This environment's pip: it builds the wheel and installs it, offline."""
OFFLINE = ("--no-deps", "--no-index", "--quiet")
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


def built_wheel(folder: Path) -> Path:
    """botkit's wheel, built from a copy of this checkout (nothing written into it) with this
    environment's setuptools and no network."""
    assert "bdist_wheel" in _setuptools_commands(), (
        "building botkit's wheel needs setuptools>=70.1 (or the wheel package) in this "
        "environment: pip install -e '.[dev]'"
    )
    source = folder / "source"
    no_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "botkit", source / "botkit", ignore=no_caches)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, source / part)
    wheels = folder / "wheels"
    build = subprocess.run(
        [*PIP, "wheel", *OFFLINE, "--no-build-isolation", "--wheel-dir", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    [wheel] = wheels.glob("botkit-*.whl")
    return wheel


def _setuptools_commands() -> set[str]:
    """The distutils commands this environment's setuptools offers (bdist_wheel among them
    from setuptools 70.1, or with the wheel package)."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group="distutils.commands")}


def fresh_venv(folder: Path, wheel: Path) -> Path:
    """A virtualenv with botkit installed from ``wheel`` and this environment's other packages
    (botkit's own left out) as its dependencies; returns its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60
    )
    python = folder / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    install = subprocess.run(
        [*PIP, "--python", str(python), "install", *OFFLINE, str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    (site / "zz-dependencies.pth").write_text(f"{dependencies(folder / 'dependencies')}\n")
    return python


def dependencies(folder: Path) -> Path:
    """A folder of links to this environment's installed packages, less botkit (its code, its
    metadata, its editable-install hooks), so the venv finds botkit in its wheel alone."""
    folder.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        name = entry.name.lower()
        if name.startswith(("botkit", "__editable__")) or name.endswith(".pth"):
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


WHEEL_CHECK = """
import json, sys
from importlib.metadata import distribution, entry_points
from importlib.resources import files

import botkit

[plugin] = [ep for ep in entry_points(group="pytest11") if ep.name == "botkit"]
print(json.dumps({
    "botkit": botkit.__file__,
    "distribution": str(distribution("botkit").locate_file("")),
    "plugin": plugin.value,
    "plugin_from": str(plugin.dist.locate_file("")),
    "py.typed": files("botkit").joinpath("py.typed").is_file(),
    "migrations": sorted(
        p.name for p in files("botkit.stores").joinpath("migrations").iterdir()
        if p.name.endswith(".sql")
    ),
    "prefix": sys.prefix,
}))
"""
"""What the installed wheel brought: where botkit and its pytest plugin come from, its data."""


@pytest.mark.timeout(420)  # a wheel built, a cold interpreter importing botkit and pytest
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
    venv = tmp_path / "venv"
    python = fresh_venv(venv, built_wheel(tmp_path / "build"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        BOTKIT_DATABASE_URL="postgresql://nobody@127.0.0.1:1/exported",
        TELEGRAM_BOT_TOKEN="2:exported",
    )
    installed = subprocess.run(
        [python, "-c", WHEEL_CHECK], cwd=project, env=env, capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    found = json.loads(installed.stdout)
    site = Path(found["distribution"]).resolve()
    assert Path(found["prefix"]).resolve() == venv.resolve()
    assert site.is_relative_to(venv.resolve()), f"botkit's metadata is not the wheel's: {site}"
    assert Path(found["botkit"]).resolve().is_relative_to(site), "botkit is not the wheel's"
    assert found["plugin"] == "botkit.testing.pytest_plugin"
    assert Path(found["plugin_from"]).resolve() == site, "the pytest11 entry point is elsewhere"
    assert found["py.typed"] is True
    shipped = sorted(p.name for p in (REPO / "botkit" / "stores" / "migrations").glob("*.sql"))
    assert found["migrations"] == shipped
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
    assert "asyncio_default_fixture_loop_scope" not in result.stdout + result.stderr, (
        "a bot project's test run warns about nothing it did not write"
    )


async def test_the_older_helpers_read_neither_the_environment_nor_dotenv(
    claude: FakeAnthropicServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``botkit.testing.make_settings`` and ``make_bot`` are isolated as the fixtures are."""

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("BOTKIT_MODEL=model-from-dotenv\n")
    monkeypatch.setenv("BOTKIT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/exported")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "2:exported")
    monkeypatch.setenv("BOTKIT_MAX_TOKENS", "7")
    settings = testing.make_settings(tmp_path, admins=frozenset({1}))
    assert settings.database_url is None and settings.telegram_bot_token is None
    assert settings.max_tokens != 7 and settings.model != "model-from-dotenv"
    assert settings.admins == {1} and settings.sessions_dir == tmp_path / "sessions"
    bot = testing.make_bot(claude, tmp_path)
    try:
        assert bot.settings.database_url is None and bot.settings.max_tokens != 7
    finally:
        await bot.aclose()
