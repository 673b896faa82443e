"""Tools are checked when they are registered: types, the ``Args:`` section, a docstring."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from botkit import Bot
from botkit.config import Settings
from botkit.errors import ConfigError
from botkit.tools import ToolRegistry, tool


async def untyped(city, days: int = 1) -> str:  # type: ignore[no-untyped-def]
    """Forecast the weather.

    Args:
        city: The city.
        days: How many days.
    """
    return f"{city}: sunny for {days} days"


async def stray_args(city: str) -> str:
    """Forecast the weather.

    Args:
        town: The city.
    """
    return f"{city}: sunny"


async def undocumented(city: str) -> str:
    return f"{city}: sunny"


async def well_made(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Args:
        city: The city.
        days: How many days.
    """
    return f"{city}: sunny for {days} days"


def test_an_untyped_parameter_is_an_error_naming_the_function(tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        Bot(settings=Settings(_env_file=None, sessions_dir=tmp_path), tools=[untyped])
    message = str(caught.value)
    assert "test_tool_checks.untyped" in message and "'city' has no type" in message
    with pytest.raises(ConfigError, match="untyped"):
        tool(untyped)


def test_an_args_entry_naming_no_parameter_is_an_error() -> None:
    registry = ToolRegistry()
    with pytest.raises(ConfigError) as caught:
        registry.register(stray_args)
    message = str(caught.value)
    assert "test_tool_checks.stray_args" in message
    assert "'town'" in message and "the parameters are city" in message
    assert "stray_args" not in registry


def test_a_missing_docstring_is_one_warning() -> None:
    with capture_logs() as logs:
        made = tool(undocumented)
        tool(well_made)
        tool(description="Forecast the weather.")(undocumented)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert warnings == [
        {
            "event": "tools.missing_docstring",
            "tool": "undocumented",
            "function": "test_tool_checks.undocumented",
            "log_level": "warning",
        }
    ]
    assert made.name == "undocumented", "still registered: a warning, not an error"
