"""The docs' generated reference pages: every setting from the ``Settings`` model, and every
command from the CLI's own parser, so the docs cannot drift from the code (``mkdocs build``
renders them through ``docs/hooks.py``)."""

from __future__ import annotations

import argparse
import ast
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from botkit import config
from botkit.config import Settings

__all__ = ["api_markdown", "cli_markdown", "env_name", "settings_markdown", "testing_markdown"]

HELP_WIDTH = "100"
"""Columns argparse wraps the help at, whatever the terminal that builds the docs."""


def env_name(name: str, field: FieldInfo) -> str:
    """The environment variable a ``Settings`` field is read from."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        upper = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        if upper:
            return upper[0]
    if isinstance(alias, str):
        return alias.upper()
    return name.upper()


def field_docstrings() -> dict[str, str]:
    """Each ``Settings`` field's docstring (the string right after it), by field name."""
    tree = ast.parse(inspect.getsource(config))
    settings = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    found: dict[str, str] = {}
    for node, after in zip(settings.body, settings.body[1:], strict=False):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            found[node.target.id] = inspect.cleandoc(str(after.value.value))
    return found


def settings_markdown() -> str:
    """The settings reference: one row per ``Settings`` field (name, default, meaning)."""
    docs = field_docstrings()
    rows = [
        "# Settings",
        "",
        "Every setting is an environment variable (or a line of `.env`). This page is generated "
        "from `botkit.config.Settings` when the docs are built.",
        "",
        "| Variable | Default | What it does |",
        "|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        env = env_name(name, field)
        meaning = docs.get(name, "").removeprefix(f"{env}:").strip()
        rows.append(f"| `{env}` | {_default(field)} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


def _default(field: FieldInfo) -> str:
    """A field's default as the page shows it."""
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None or value == frozenset() or value == "":
        return "unset"
    if isinstance(value, Path | bool | int | float | str):
        return f"`{str(value).lower() if isinstance(value, bool) else value}`"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    """``text`` on one table row."""
    return " ".join(text.split()).replace("|", "\\|")


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """The CLI reference: the help of ``parser`` and of each of its commands."""
    sections = [
        "# Command line",
        "",
        "`python -m botkit COMMAND` (or `botkit COMMAND`). This page is generated from the "
        "CLI's own parser when the docs are built.",
    ]
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        sections += ["", "```text", parser.format_help().rstrip(), "```"]
        for name, command in _commands(parser):
            sections += ["", f"## {name}", "", "```text", command.format_help().rstrip(), "```"]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(sections) + "\n"


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every command and sub-command of ``parser``, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _commands(sub, f"{prefix}{name} ")


def testing_markdown(names: list[str]) -> str:
    """The test kit's reference: the pytest fixtures, then one entry per name of
    ``botkit.testing`` (``names``' order)."""
    head = (
        "# Test kit\n\n`botkit.testing`: fakes of the Telegram Bot API and the Messages API "
        "that the real clients talk to, your bot as a fixture, and helpers to drive it. "
        "Installed with botkit, the pytest plugin offers the fixtures `telegram`, `claude` "
        "and `make_bot`; see [Testing it](../guides/testing.md).\n\n"
        "## Fixtures\n\n::: botkit.testing.pytest_plugin\n    options:\n"
        "      members: [telegram, claude, make_bot]\n\n## Fakes and helpers\n\n"
    )
    entries = [f"::: botkit.testing.{name}" for name in names]
    return head + "\n\n".join(entries) + "\n"


def api_markdown(names: list[str]) -> str:
    """The Python API reference: one mkdocstrings entry per exported name, in ``names``' order."""
    entries = [f"::: botkit.{name}" for name in names]
    head = (
        "# Python API\n\nEverything `botkit` exports (`botkit.__all__`), from the docstrings. "
        "Import it from the top level: `from botkit import Bot, tool, ToolContext`.\n\n"
    )
    return head + "\n\n".join(entries) + "\n"
