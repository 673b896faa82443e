"""The memory tool (Anthropic's client tool ``memory_20250818``) served from a ``MemoryStore``.

One tool object is made per turn, bound to that turn's conversation: nothing the model asks
can reach another conversation's memory. Result and error texts follow the SDK's own
implementation (``anthropic.lib.tools``), which the model was trained against.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any

from botkit.config import Settings
from botkit.errors import ToolError
from botkit.memory.paths import display, normalise
from botkit.memory.store import MemoryStore
from botkit.tools.base import Tool, ToolContext
from botkit.types import ToolDef

__all__ = ["MEMORY_TOOL_TYPE", "MemoryLimits", "MemoryTool"]

MEMORY_TOOL_TYPE = "memory_20250818"
"""The tool type the Messages API knows; the API supplies the tool's description and schema."""

_WIDTH = 6  # line numbers as the SDK prints them

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "type": "string",
            "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
        },
        "path": {"type": "string"},
        "view_range": {"type": "array", "items": {"type": "integer"}},
        "file_text": {"type": "string"},
        "old_str": {"type": "string"},
        "new_str": {"type": "string"},
        "insert_line": {"type": "integer"},
        "insert_text": {"type": "string"},
        "old_path": {"type": "string"},
        "new_path": {"type": "string"},
    },
    "required": ["command"],
}
_DEFINITION = ToolDef(
    name="memory",
    description="Your long-term memory: files under /memories.",
    input_schema=_SCHEMA,
    type=MEMORY_TOOL_TYPE,
)
"""The same every turn (frozen): built once."""


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    """How much one conversation's memory may hold."""

    max_files: int = 100
    max_file_bytes: int = 100 * 1024
    max_total_bytes: int = 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> MemoryLimits:
        """BOTKIT_MEMORY_MAX_FILES, _MAX_FILE_KB and _MAX_TOTAL_KB."""
        return cls(
            settings.memory_max_files,
            settings.memory_max_file_kb * 1024,
            settings.memory_max_total_kb * 1024,
        )


class MemoryTool(Tool):
    """``view``, ``create``, ``str_replace``, ``insert``, ``delete`` and ``rename`` on the
    files of one conversation's memory."""

    timeout = 30.0

    def __init__(self, store: MemoryStore, key: str, limits: MemoryLimits | None = None) -> None:
        self.store = store
        self.key = key
        """The conversation whose memory this is."""
        self.limits = limits or MemoryLimits()

    @property
    def definition(self) -> ToolDef:
        """Sent as ``{"type": "memory_20250818", "name": "memory"}``."""
        return _DEFINITION

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Run one command; a bad path, a missing file or a limit is a ``ToolError``.

        Commands on one memory run one at a time (parallel calls of one answer too): each
        reads what the one before wrote, and the limits hold for the sum of them.
        """
        command = args.get("command")
        async with _write_lock(self.store, self.key):
            files = await self.store.load(self.key)
            if command == "view":
                return _view(files, normalise(args.get("path")), args.get("view_range"))
            changes, result = self._change(str(command), files, args)
            self._check_limits(files, changes)
            await self.store.save(self.key, changes)
        return result

    def _change(
        self, command: str, files: dict[str, str], args: dict[str, Any]
    ) -> tuple[dict[str, str | None], str]:
        """What ``command`` changes, and what the model is told."""
        if command == "create":
            return _create(files, args)
        if command == "str_replace":
            return _str_replace(files, args)
        if command == "insert":
            return _insert(files, args)
        if command == "delete":
            return _delete(files, args)
        if command == "rename":
            return _rename(files, args)
        raise ToolError(
            f"Unknown command: {command}. Use view, create, str_replace, insert, delete or rename."
        )

    def _check_limits(self, files: dict[str, str], changes: dict[str, str | None]) -> None:
        after = {**files, **changes}
        kept = {path: text for path, text in after.items() if text is not None}
        limits = self.limits
        for path, text in changes.items():
            if text is not None and len(text.encode("utf-8")) > limits.max_file_bytes:
                raise ToolError(
                    f"File {display(path)} would be larger than the limit of "
                    f"{limits.max_file_bytes // 1024} KB a file. Keep it shorter."
                )
        if len(kept) > limits.max_files and len(kept) > len(files):
            raise ToolError(
                f"The memory holds {len(files)} files, the most it may hold is "
                f"{limits.max_files}. Merge or delete files first."
            )
        total = _weight(kept)
        if total > limits.max_total_bytes and total > _weight(files):
            raise ToolError(
                f"The memory would hold {total // 1024} KB, more than its limit of "
                f"{limits.max_total_bytes // 1024} KB. Shorten or delete files first."
            )


def _size(files: dict[str, str]) -> int:
    return sum(len(text.encode("utf-8")) for text in files.values())


def _weight(files: dict[str, str]) -> int:
    """What a memory weighs against its limit: its files' text and their paths."""
    return sum(len(f"{name}{text}".encode()) for name, text in files.items())


_LOCKS: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()


def _write_lock(store: MemoryStore, key: str) -> asyncio.Lock:
    """The lock of one memory in one store (held while a command reads and writes it)."""
    lock = _LOCKS.get((id(store), key))
    if lock is None:
        lock = _LOCKS[(id(store), key)] = asyncio.Lock()
    return lock


def _text_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"Parameter `{name}` is required and must be a string.")
    return value


def _file(files: dict[str, str], path: str, shown: str) -> str:
    if path not in files:
        if _is_dir(files, path):
            raise ToolError(f"The path {shown} is not a file.")
        raise ToolError(f"The path {shown} does not exist. Please provide a valid path.")
    return files[path]


def _is_dir(files: dict[str, str], path: str) -> bool:
    return path == "" or any(name.startswith(path + "/") for name in files)


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{str(i + first).rjust(_WIDTH)}\t{line}" for i, line in enumerate(lines))


def _view(files: dict[str, str], path: str, view_range: Any) -> str:
    shown = display(path)
    if path in files:
        lines = files[path].split("\n")
        first = 1
        if isinstance(view_range, list) and len(view_range) == 2:
            start = max(1, int(view_range[0])) - 1
            end = len(lines) if int(view_range[1]) == -1 else int(view_range[1])
            lines, first = lines[start:end], start + 1
        return f"Here's the content of {shown} with line numbers:\n" + _numbered(lines, first)
    if not _is_dir(files, path):
        raise ToolError(f"The path {shown} does not exist. Please provide a valid path.")
    return _listing(files, path, shown)


def _listing(files: dict[str, str], path: str, shown: str) -> str:
    """Files and directories up to 2 levels deep, with sizes, as the SDK lists them."""
    prefix = f"{path}/" if path else ""
    sizes: dict[str, int] = {}
    for name, text in files.items():
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        size = len(text.encode("utf-8"))
        for depth in range(1, min(len(parts), 2) + 1):
            entry = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            if not any(part.startswith(".") for part in parts[:depth]):
                sizes[entry] = sizes.get(entry, 0) + size
    header = (
        f"Here're the files and directories up to 2 levels deep in {shown}, excluding hidden items:"
    )
    total = _size({name: text for name, text in files.items() if name.startswith(prefix)})
    lines = [f"{_human(total)}\t{shown}"]
    lines += [f"{_human(sizes[entry])}\t{shown}/{entry}" for entry in sorted(sizes)]
    return f"{header}\n" + "\n".join(lines)


def _human(size: int) -> str:
    """Sizes as the SDK prints them: 0B, 512B, 1.5K, 2M."""
    if size == 0:
        return "0B"
    units, step = ["B", "K", "M", "G"], min((size.bit_length() - 1) // 10, 3)
    value = size / (1024**step)
    return f"{int(value)}{units[step]}" if value == int(value) else f"{value:.1f}{units[step]}"


def _create(files: dict[str, str], args: dict[str, Any]) -> tuple[dict[str, str | None], str]:
    shown = _text_arg(args, "path")
    path = normalise(shown)
    text = _text_arg(args, "file_text")
    if not path:
        raise ToolError("Cannot create the /memories directory itself: give a file path")
    if path in files:
        raise ToolError(f"File {shown} already exists")
    if _is_dir(files, path):
        raise ToolError(f"The path {shown} is a directory.")
    _no_file_above(files, path, shown)
    return {path: text}, f"File created successfully at: {shown}"


def _no_file_above(files: dict[str, str], path: str, shown: str) -> None:
    parts = path.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in files:
            raise ToolError(f"Cannot create {shown}: {display('/'.join(parts[:depth]))} is a file")


def _str_replace(files: dict[str, str], args: dict[str, Any]) -> tuple[dict[str, str | None], str]:
    shown = _text_arg(args, "path")
    path = normalise(shown)
    old, new = _text_arg(args, "old_str"), _text_arg(args, "new_str")
    content = _file(files, path, shown)
    count = content.count(old) if old else 0
    if count == 0:
        raise ToolError(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {shown}."
        )
    if count > 1:
        lines, start = [], 0
        while (found := content.find(old, start)) != -1:
            lines.append(str(content[:found].count("\n") + 1))
            start = found + 1
        raise ToolError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
            f"{', '.join(lines)}. Please ensure it is unique"
        )
    changed_line = content[: content.find(old)].count("\n")
    updated = content.replace(old, new)
    new_lines = updated.split("\n")
    first = max(0, changed_line - 2)
    snippet = _numbered(new_lines[first : min(len(new_lines), changed_line + 3)], first + 1)
    return {path: updated}, (
        "The memory file has been edited. Here is the snippet showing the change "
        f"(with line numbers):\n{snippet}"
    )


def _insert(files: dict[str, str], args: dict[str, Any]) -> tuple[dict[str, str | None], str]:
    shown = _text_arg(args, "path")
    path = normalise(shown)
    text = _text_arg(args, "insert_text")
    line = args.get("insert_line")
    content = _file(files, path, shown)
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= len(lines):
        raise ToolError(
            f"Invalid `insert_line` parameter: {line}. "
            f"It should be within the range [0, {len(lines)}]."
        )
    lines.insert(line, text.rstrip("\n"))
    return {path: "\n".join(lines) + "\n"}, f"The file {shown} has been edited."


def _delete(files: dict[str, str], args: dict[str, Any]) -> tuple[dict[str, str | None], str]:
    shown = _text_arg(args, "path")
    path = normalise(shown)
    if not path:
        raise ToolError("Cannot delete the /memories directory itself")
    gone = [name for name in files if name == path or name.startswith(path + "/")]
    if not gone:
        raise ToolError(f"The path {shown} does not exist")
    return dict.fromkeys(gone), f"Successfully deleted {shown}"


def _rename(files: dict[str, str], args: dict[str, Any]) -> tuple[dict[str, str | None], str]:
    old_shown, new_shown = _text_arg(args, "old_path"), _text_arg(args, "new_path")
    old, new = normalise(old_shown), normalise(new_shown)
    if not old:
        raise ToolError("Cannot rename the /memories directory itself")
    if new in files or (new and _is_dir(files, new)) or not new:
        raise ToolError(f"The destination {new_shown} already exists")
    moved = {
        name: new + name[len(old) :] for name in files if name == old or name.startswith(old + "/")
    }
    if not moved:
        raise ToolError(f"The path {old_shown} does not exist")
    if new.startswith(old + "/"):
        raise ToolError(f"Cannot move {old_shown} into itself")
    _no_file_above(files, new, new_shown)
    changes: dict[str, str | None] = dict.fromkeys(moved)
    changes.update({target: files[name] for name, target in moved.items()})
    return changes, f"Successfully renamed {old_shown} to {new_shown}"
