"""Settings say everything wrong at once: every invalid value, bounds, and unknown names."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from botkit.cli import main
from botkit.config import Settings
from botkit.doctor import doctor


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No botkit variables from outside, and an empty folder as the working directory."""
    for name in list(os.environ):
        if name.startswith(("BOTKIT_", "TELEGRAM_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_every_invalid_setting_is_named_in_one_error(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("BOTKIT_MAX_TOKENS", "-5")
    clean_env.setenv("BOTKIT_LOG_LEVEL", "verbose")
    clean_env.setenv("BOTKIT_GLOBAL_RATE", "0")
    clean_env.setenv("BOTKIT_TIMEZONE", "Mars/Olympus")
    assert main(["run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "botkit: invalid settings:"
    named = sorted(line.split(":")[0].strip() for line in err[1:])
    assert named == [
        "BOTKIT_GLOBAL_RATE",
        "BOTKIT_LOG_LEVEL",
        "BOTKIT_MAX_TOKENS",
        "BOTKIT_TIMEZONE",
    ]
    assert "  BOTKIT_MAX_TOKENS: Input should be greater than or equal to 1" in err
    out = io.StringIO()
    assert doctor(None, out) == 1
    failed = [line for line in out.getvalue().splitlines() if line.startswith("✗")]
    # each invalid value once, and the bot (built from the same settings) cannot be built;
    # every other check still ran on the defaults of the invalid values
    assert len([f for f in failed if "configuration:" in f]) == 4, out.getvalue()
    assert any(line.startswith("✗ bot:") for line in failed)
    assert any("BOTKIT_LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR" in f for f in failed)


def test_log_level_is_case_insensitive_and_bounded(clean_env: pytest.MonkeyPatch) -> None:
    assert Settings(_env_file=None, log_level="warning").log_level == "WARNING"
    with pytest.raises(ValueError, match="log_level"):
        Settings(_env_file=None, log_level="verbose")
    with pytest.raises(ValueError, match="max_concurrent_turns"):
        Settings(_env_file=None, max_concurrent_turns=0)


def test_unknown_names_are_warned_with_the_nearest_setting(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("BOTKIT_MODLE", "claude-opus-5")
    (tmp_path / ".env").write_text("BOTKIT_SESSION_DIR=/srv/sessions\n")
    assert main(["run"]) == 2  # no token: it stops, but says the names first
    err = capsys.readouterr().err
    assert "botkit: warning: BOTKIT_MODLE: not a setting; did you mean BOTKIT_MODEL?" in err
    assert "BOTKIT_SESSION_DIR: not a setting; did you mean BOTKIT_SESSIONS_DIR?" in err
    out = io.StringIO()
    assert doctor(None, out) == 1
    report = out.getvalue()
    assert "✗ configuration: BOTKIT_MODLE: not a setting; did you mean BOTKIT_MODEL?" in report
    assert "✗ configuration: BOTKIT_SESSION_DIR: not a setting" in report
