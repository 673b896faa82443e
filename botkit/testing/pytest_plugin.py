"""botkit's pytest plugin (the ``pytest11`` entry point): the fakes and your bot as fixtures.

Installed with botkit, it offers ``telegram`` (a ``FakeTelegramServer``), ``claude`` (a
``FakeAnthropicServer``) and ``make_bot`` (your bot on the fake model, with settings that read
neither the environment nor ``.env``). They are pytest-asyncio fixtures, so they work without
``asyncio_mode = "auto"``: mark async tests ``@pytest.mark.asyncio`` (or put
``pytestmark = pytest.mark.asyncio`` in the module). botkit itself is imported only when a
test asks for a fixture, so other projects' test runs do not pay for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from botkit.bot import Bot
    from botkit.testing.anthropic import FakeAnthropicServer
    from botkit.testing.speech import FakeSpeechServer
    from botkit.testing.telegram import FakeTelegramServer

__all__ = ["MakeBot", "claude", "make_bot", "speech", "telegram"]

MakeBot = Callable[..., "Bot"]
"""``make_bot(bot=Bot, **settings_and_options)``: your bot (a class or an object) for a test."""


def _missing_pytest_asyncio(fn: Any) -> Any:
    """Without pytest-asyncio: a fixture of ``fn``'s name that fails saying what to install."""

    @pytest.fixture(name=fn.__name__)
    def missing() -> None:
        pytest.fail("botkit's fixtures need pytest-asyncio: pip install pytest-asyncio")

    return missing


def _async_fixture() -> Callable[[Any], Any]:
    try:
        import pytest_asyncio
    except ImportError:
        return _missing_pytest_asyncio
    return pytest_asyncio.fixture


async_fixture = _async_fixture()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Give pytest-asyncio the loop scope botkit's fixtures are written for (each test's own
    loop), unless the project set one: its warning about an unset scope is not yours to fix."""
    try:
        if not config.getini("asyncio_default_fixture_loop_scope"):
            config._inicache["asyncio_default_fixture_loop_scope"] = "function"
    except ValueError:  # pytest-asyncio is not installed: the fixtures say what to install
        return


@async_fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    """A fake Telegram Bot API on 127.0.0.1, for this test only."""
    from botkit.testing.telegram import FakeTelegramServer

    async with FakeTelegramServer() as server:
        yield server


@async_fixture
async def speech() -> AsyncIterator[FakeSpeechServer]:
    """A fake OpenAI-compatible speech API on 127.0.0.1 (transcripts scripted per file)."""
    from botkit.testing.speech import FakeSpeechServer

    async with FakeSpeechServer() as server:
        yield server


@async_fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    """A fake Anthropic Messages API on 127.0.0.1 that echoes unless scripted."""
    from botkit.testing.anthropic import FakeAnthropicServer

    async with FakeAnthropicServer() as server:
        yield server


@async_fixture
async def make_bot(claude: FakeAnthropicServer, tmp_path: Path) -> AsyncIterator[MakeBot]:
    """Makes your bot for this test: ``make_bot(MyBot)`` or ``make_bot(my_bot)``, on ``claude``,
    sessions under ``tmp_path``, settings from the keywords only (never the environment)."""
    from botkit.bot import Bot
    from botkit.testing.kit import build_test_bot

    made: list[Bot] = []

    def make(bot: Bot | type[Bot] = Bot, **settings_and_options: Any) -> Bot:
        made.append(build_test_bot(bot, claude, tmp_path, **settings_and_options))
        return made[-1]

    yield make
    for bot in made:
        await bot.aclose()
