"""Small helpers for testing a bot against the fakes: settings, a bot, one question asked.

A whole test of a bot reads::

    async def test_greets(telegram: FakeTelegramServer, claude: FakeAnthropicServer,
                          tmp_path: Path) -> None:
        bot = make_bot(claude, tmp_path, allowed_users=frozenset({42}))
        async with running(bot, telegram):
            assert (await ask(telegram, 42, "hi")).text == "echo: hi"

``run_in_virtual_time`` runs code whose waits read the event loop's clock (``asyncio.sleep``,
timeouts, flood control's pacing) without sleeping real seconds.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, overload

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from botkit.bot import Bot
from botkit.config import DEFAULT_MODEL, Settings
from botkit.llm.anthropic import AnthropicLLM
from botkit.memory.plugin import MemoryPlugin
from botkit.messengers.base import Incoming
from botkit.plugins import Plugin, PromptPlugin, ToolPlugin
from botkit.reminders.tools import SchedulingPlugin
from botkit.testing.anthropic import FakeAnthropicServer
from botkit.testing.telegram import FakeTelegramServer, SentMessage

__all__ = [
    "VirtualTimeLoop",
    "ask",
    "build_test_bot",
    "fake_llm",
    "isolated_settings",
    "make_bot",
    "make_settings",
    "run_in_virtual_time",
]

B = TypeVar("B", bound=Bot)
T = TypeVar("T")


def fake_llm(
    claude: FakeAnthropicServer, *, model: str = DEFAULT_MODEL, **options: Any
) -> AnthropicLLM:
    """An ``AnthropicLLM`` on ``claude`` that never retries: each scripted answer is used once.

    ``options`` are further ``AnthropicLLM`` arguments (``max_tokens``, ``prompt_caching``...).
    """
    values: dict[str, Any] = {"api_key": "test-key", "base_url": claude.base_url, "max_retries": 0}
    return AnthropicLLM(model=model, **{**values, **options})


class _IsolatedSettings(Settings):
    """Settings from the keywords given and the defaults: no environment, no ``.env``."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the keywords: the environment, ``.env`` and secrets files are not read."""
        return (init_settings,)


def isolated_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for one test that read neither the environment nor ``.env`` (an exported
    BOTKIT_DATABASE_URL or TELEGRAM_BOT_TOKEN is not used): sessions under ``tmp_path``,
    replies not streamed and sent as HTML messages (``rich_messages="auto"`` sends rich
    messages, as ``python -m botkit`` does), and ``overrides`` (``Settings`` fields)."""
    values: dict[str, Any] = {
        "sessions_dir": tmp_path / "sessions",
        "stream_replies": False,
        "rich_messages": "off",
    }
    return _IsolatedSettings(**{**values, **overrides})


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for one test, as ``isolated_settings``: never the environment or ``.env``.

    ``overrides`` are ``Settings`` fields (``allowed_users=frozenset({42})``,
    ``stream_replies=True``...). A test of what the environment does sets the variables and
    builds ``Settings()`` itself.
    """
    return isolated_settings(tmp_path, **overrides)


def build_test_bot(
    bot: Bot | type[Bot],
    claude: FakeAnthropicServer,
    tmp_path: Path,
    **settings_and_options: Any,
) -> Bot:
    """Your bot for a test, on ``claude`` with ``isolated_settings``: a ``Bot`` class is made
    with the keywords (``Settings`` fields go to the settings, the rest to the class); a
    ``Bot`` object is made again, of its class, with its options, tools, commands and plugins."""
    fields = {k: v for k, v in settings_and_options.items() if k in Settings.model_fields}
    rest = {k: v for k, v in settings_and_options.items() if k not in fields}
    settings = isolated_settings(tmp_path, **fields)
    llm = fake_llm(
        claude,
        model=settings.model,
        max_tokens=settings.max_tokens,
        thinking=settings.thinking_settings(),
    )
    if isinstance(bot, type):
        return bot(settings=settings, llm=llm, **rest)
    return _made_again(bot, settings, llm, rest)


def _made_again(bot: Bot, settings: Settings, llm: AnthropicLLM, rest: dict[str, Any]) -> Bot:
    """A bot of ``bot``'s class on new settings, with what was registered on ``bot``."""
    plugins = rest.pop("plugins", _given_plugins(bot))
    try:
        again = type(bot)(settings=settings, llm=llm, options=bot.options, plugins=plugins, **rest)
    except TypeError as e:
        name = type(bot).__name__
        raise TypeError(
            f"cannot make a {name} again for the test ({e}): pass the class and its "
            f"arguments instead, make_bot({name}, ...)"
        ) from e
    for tool in bot.tools:
        if tool.name not in again.tools:
            again.tools.register(tool)
    again.commands = {**bot.commands, **again.commands}
    again.buttons = {**bot.buttons, **again.buttons}
    return again


def _given_plugins(bot: Bot) -> list[Plugin]:
    """The plugins passed to ``bot``, without those it added itself (scheduling, skills,
    memory)."""
    own_prompt = bot.skills.prompt_section() if bot.skills else None
    return [
        plugin
        for plugin in bot.plugins
        if not isinstance(plugin, SchedulingPlugin | MemoryPlugin)
        and not (isinstance(plugin, PromptPlugin) and plugin.source == own_prompt)
        and not (isinstance(plugin, ToolPlugin) and bot.skills and _has_skill_tool(plugin))
    ]


def _has_skill_tool(plugin: ToolPlugin) -> bool:
    return any(tool.name == "load_skill" for tool in plugin.tools(_NOBODY))


_NOBODY = Incoming(
    update_id=0, user_id=0, chat_id=0, text="", date=datetime(2000, 1, 1, tzinfo=UTC)
)


@overload
def make_bot(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    *,
    bot_class: type[B],
    settings: Settings | None = None,
    **settings_and_options: Any,
) -> B: ...


@overload
def make_bot(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    *,
    settings: Settings | None = None,
    **settings_and_options: Any,
) -> Bot: ...


def make_bot(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    *,
    bot_class: type[Bot] = Bot,
    settings: Settings | None = None,
    **settings_and_options: Any,
) -> Bot:
    """A ``bot_class`` talking to ``claude`` (see ``fake_llm``), with ``make_settings`` (which
    read neither the environment nor ``.env``).

    Keywords naming a ``Settings`` field go to the settings, all others to ``bot_class``
    (``tools``, ``plugins``, ``BotOptions`` fields such as ``system_prompt``). Pass
    ``settings`` instead to use settings made elsewhere.
    """
    fields = {k: v for k, v in settings_and_options.items() if k in Settings.model_fields}
    rest = {k: v for k, v in settings_and_options.items() if k not in fields}
    if settings is None:
        settings = make_settings(tmp_path, **fields)
    elif fields:
        raise TypeError(f"pass either settings= or settings fields, not both: {sorted(fields)}")
    llm = fake_llm(
        claude,
        model=settings.model,
        max_tokens=settings.max_tokens,
        thinking=settings.thinking_settings(),
        cache_ttl=settings.cache_ttl,
        keep_cache_warm=settings.cache_keep_warm,
    )
    return bot_class(settings=settings, llm=llm, **rest)


async def ask(
    telegram: FakeTelegramServer,
    user_id: int,
    text: str,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109
    **send: Any,
) -> SentMessage:
    """Send ``text`` from ``user_id`` and return the first message the bot sends back.

    ``send`` are further ``FakeTelegramServer.send_text`` arguments; with ``chat_id`` (a group)
    the answer is awaited in that chat.
    """
    chat_id: int = send.get("chat_id") or user_id
    before = len(telegram.sent_messages(chat_id))
    telegram.send_text(user_id, text, **send)
    return (await telegram.wait_for_messages(chat_id, before + 1, timeout))[before]


class _SkippingSelector(selectors.DefaultSelector):
    """A selector that, instead of waiting for a timer, counts the wait as already passed."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped = 0.0
        """Seconds of waiting skipped so far: how far the loop's clock is ahead of real time."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """Ready I/O now; with none and only a timer to wait for, skip to that timer."""
        if timeout is None or timeout <= 0:  # no timer (wait for I/O), or do not wait at all
            return super().select(timeout)
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if not ready:
            self.skipped += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing else can run.

    Sleeps, timeouts and rate limiters that read ``loop.time()`` end at once in real time, in
    the order and at the loop times they would have had; I/O (on loopback, such as the fakes)
    runs as usual, and the clock never jumps while it has something ready. Not for code that
    waits on threads: a thread still working does not hold the clock back.
    """

    def __init__(self) -> None:
        """A loop on a selector that skips idle waits."""
        self._skipping = _SkippingSelector()
        super().__init__(self._skipping)

    def time(self) -> float:
        """Real monotonic time plus every wait skipped so far."""
        return super().time() + self._skipping.skipped


def run_in_virtual_time(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()`` to completion on a new ``VirtualTimeLoop`` and return its result."""

    async def run() -> T:
        return await main()

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(run())
