"""Memory paths as the model writes them (``/memories/...``), checked and normalised."""

from __future__ import annotations

from botkit.errors import ToolError

__all__ = ["MAX_NAME_BYTES", "MAX_PATH_BYTES", "ROOT", "display", "normalise"]

ROOT = "/memories"
"""The one directory the memory tool works in."""
MAX_PATH_BYTES = 512
"""The longest path under ``/memories`` (UTF-8): paths count toward the memory's size too."""
MAX_NAME_BYTES = 128
"""The longest name of one directory or file in it (a file system takes 255 at most)."""


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
    relative = "/".join(parts)
    if len(relative.encode("utf-8")) > MAX_PATH_BYTES or any(
        len(part.encode("utf-8")) > MAX_NAME_BYTES for part in parts
    ):
        raise ToolError(
            f"Path too long: at most {MAX_PATH_BYTES} bytes, and {MAX_NAME_BYTES} a name."
        )
    return relative


def display(relative: str) -> str:
    """The model's form of a normalised path."""
    return f"{ROOT}/{relative}" if relative else ROOT
