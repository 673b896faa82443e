"""mkdocs hooks: the reference pages generated from the code, and bench/README.md as a page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

import botkit
import botkit.testing
from botkit.cli import _parser
from botkit.reference import api_markdown, cli_markdown, settings_markdown, testing_markdown

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config: Any) -> Files:
    """Add the pages written at build time: settings, the CLI, the API, the benchmarks' notes."""
    pages = {
        "reference/settings.md": settings_markdown(),
        "reference/cli.md": cli_markdown(_parser()),
        "reference/api.md": api_markdown(sorted(botkit.__all__, key=str.lower)),
        "reference/testing.md": testing_markdown(list(botkit.testing.__all__)),
        "benchmarks/methods.md": (ROOT / "bench" / "README.md").read_text(),
    }
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files
