"""The public surface: what README, the docs and examples import is exported, and nothing is
missing."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import botkit

ROOT = Path(__file__).resolve().parent.parent


def imported_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "botkit":
            names.update(alias.name for alias in node.names)
    return names


def test_all_names_exist() -> None:
    for name in botkit.__all__:
        assert getattr(botkit, name) is not None, name


def test_readme_docs_and_examples_import_only_public_names() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [b for p in pages for b in re.findall(r"```python\n(.*?)```", p.read_text(), re.S)]
    sources = blocks + [p.read_text() for p in (ROOT / "examples").glob("*.py")]
    used = set().union(*(imported_names(s) for s in sources))
    assert used, "README shows how to import botkit"
    assert used <= set(botkit.__all__), used - set(botkit.__all__)


def test_help_is_fast_and_does_not_import_the_sdks() -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['botkit', '--help']\n"
        "try:\n    runpy.run_module('botkit', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('anthropic', 'aiogram') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert "usage: python -m botkit" in out.stdout
    assert out.stdout.strip().endswith("[]"), out.stdout
