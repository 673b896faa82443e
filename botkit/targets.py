"""Loading what a command runs: the settings, and the bot a ``module:name`` target names.

The long-running commands and ``doctor`` share these, so a target that fails to load says so
the same way everywhere.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from botkit.bot import Bot
    from botkit.config import Settings
    from botkit.errors import ConfigError

__all__ = ["first_error", "load_bot", "load_settings", "settings_error", "warn_unknown_settings"]


def load_settings() -> Settings:
    """Settings from the environment and .env, or a ConfigError naming the bad one."""
    from pydantic import ValidationError

    from botkit.config import Settings

    try:
        return Settings()
    except ValidationError as e:
        raise settings_error(e) from e


def load_bot(target: str | None) -> Bot:
    """The bot ``target`` names (the default assistant for ``None``), or a ConfigError."""
    from pydantic import ValidationError

    from botkit.bot import Bot
    from botkit.errors import ConfigError

    try:
        if target is None:
            from botkit.assistant import default_bot

            return default_bot()
        found = _import_target(target)
        bot = found() if callable(found) and not isinstance(found, Bot) else found
    except ValidationError as e:
        raise settings_error(e) from e
    if not isinstance(bot, Bot):
        raise ConfigError(f"{target} is a {type(bot).__name__}, not a botkit.Bot")
    return bot


def _import_target(target: str) -> object:
    from botkit.errors import ConfigError

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected 'package.module:name', got {target!r}{_suggestion(target)}")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import {module_name!r}: {e}") from e
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"{module_name!r} has no attribute {attribute!r}") from None


def settings_error(e: object) -> ConfigError:
    """One ConfigError naming every invalid setting, one ``NAME: problem`` a line."""
    from pydantic import ValidationError

    from botkit.config import setting_problems
    from botkit.errors import ConfigError

    assert isinstance(e, ValidationError)
    problems = setting_problems(e)
    if len(problems) == 1:
        return ConfigError(f"invalid setting: {problems[0]}")
    return ConfigError("invalid settings:\n" + "\n".join(f"  {p}" for p in problems))


def warn_unknown_settings() -> None:
    """One stderr line for each BOTKIT_ variable (environment or .env) that is no setting."""
    from botkit.config import unknown_setting_names

    for problem in unknown_setting_names():
        print(f"botkit: warning: {problem}", file=sys.stderr)


def _suggestion(target: str) -> str:
    """``mybot.py`` or ``src/mybot.py``: the target it probably means (``mybot:bot``)."""
    path = Path(target.partition(":")[0])
    if path.suffix != ".py":
        return ""
    module = ".".join(path.with_suffix("").parts)
    return f": did you mean '{module}:bot'?"


def first_error(e: object) -> str:
    from pydantic import ValidationError

    assert isinstance(e, ValidationError)
    error = e.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "settings"
    return f"{where}: {error['msg']}"
