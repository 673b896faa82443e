"""Memory paths as the model writes them (``/memories/...``), checked and normalised."""

from __future__ import annotations

from botkit.errors import ToolError

__all__ = ["ROOT", "display", "normalise"]

ROOT = "/memories"
"""The one directory the memory tool works in."""


def normalise(path: object) -> str:
    """The path relative to ``/memories`` (``""`` for the directory itself), or ``ToolError``.

    Nothing outside ``/memories`` is reachable: other absolute paths, ``..``, backslashes and
    control characters are refused; ``.`` segments and repeated slashes are dropped.
    """
    if not isinstance(path, str) or not path:
        raise ToolError("The path is missing: give a path under /memories.")
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise ToolError(f"Path must start with /memories, got: {path}")
    if "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ToolError(f"Path {path} holds characters a memory path may not hold")
    parts = [part for part in path[len(ROOT) :].split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ToolError(f"Path {path} would escape /memories directory")
    return "/".join(parts)


def display(relative: str) -> str:
    """The model's form of a normalised path."""
    return f"{ROOT}/{relative}" if relative else ROOT
