"""Where conversations' memories are kept: one small set of text files per conversation.

A memory is at most a few hundred KB (the limits see to it), so a store loads and saves a
conversation's memory whole: ``load`` gives every file, ``save`` applies a few changes at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from botkit.config import Settings
from botkit.errors import ConfigError

__all__ = ["FileMemoryStore", "MemoryStore", "memory_key", "memory_store_for"]

_KEY = re.compile(r"[0-9A-Za-z_-]{1,128}")


def memory_key(owner_id: int, conversation: str | None) -> str:
    """The memory of a conversation: a private one's user id, or a group's key."""
    return conversation or str(owner_id)


class MemoryStore(Protocol):
    """Each conversation's memory files, by conversation key."""

    async def load(self, key: str) -> dict[str, str]:
        """Every file of the conversation's memory: path (under /memories) to text."""
        ...

    async def save(self, key: str, changes: Mapping[str, str | None]) -> None:
        """Write these files (``None``: delete it), all or none."""
        ...

    async def clear(self, key: str) -> None:
        """Delete the conversation's whole memory."""
        ...

    async def keys(self) -> list[str]:
        """The conversations that have a memory."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def memory_store_for(settings: Settings) -> MemoryStore:
    """PostgreSQL when BOTKIT_DATABASE_URL is set, else files beside the sessions."""
    if settings.database_url is None:
        return FileMemoryStore(settings.sessions_dir / "memory")
    from botkit.memory.postgres import PostgresMemoryStore

    return PostgresMemoryStore(settings.database_url.get_secret_value())


class FileMemoryStore:
    """Memories as files beside the sessions: ``<dir>/<conversation>.json``, written whole
    and atomically (a crash leaves the old memory or the new, never half of one)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def path_for(self, key: str) -> Path:
        """The file holding ``key``'s memory."""
        if _KEY.fullmatch(key) is None:
            raise ConfigError(f"not a conversation key: {key!r}")
        return self.directory / f"{key}.json"

    async def load(self, key: str) -> dict[str, str]:
        """Every file of the conversation's memory."""
        return await asyncio.to_thread(self._read, self.path_for(key))

    async def save(self, key: str, changes: Mapping[str, str | None]) -> None:
        """Apply ``changes`` and write the memory back in one rename."""
        path = self.path_for(key)

        def apply() -> None:
            files = self._read(path)
            for name, text in changes.items():
                if text is None:
                    files.pop(name, None)
                else:
                    files[name] = text
            self._write(path, files)

        await asyncio.to_thread(apply)

    async def clear(self, key: str) -> None:
        """Delete the conversation's memory file."""
        await asyncio.to_thread(self.path_for(key).unlink, missing_ok=True)

    async def keys(self) -> list[str]:
        """The conversations with a memory file."""
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json"))

    async def close(self) -> None:
        """Nothing stays open."""

    @staticmethod
    def _read(path: Path) -> dict[str, str]:
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def _write(self, path: Path, files: dict[str, str]) -> None:
        if not files:
            path.unlink(missing_ok=True)
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
        data = json.dumps(files, ensure_ascii=False, sort_keys=True).encode("utf-8")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
