"""A user's part in group conversations, and the media nothing refers to after an erasure.

In a group conversation each turn a member started (their message, and the bot's calls and
answer to it) is replaced by ``[erased]`` entries: the group's sequence stays whole and the
other members' turns stay as they were. A member's own conversation in a group
(``BOTKIT_GROUP_CONTEXT=per_user``) goes whole.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from botkit.config import Settings
from botkit.privacy.parts import Described, _per_user_keys, _pg, forget_rows
from botkit.sessions.retention import rewrite_file, sweep_media_files

__all__ = ["ERASED", "GroupsPart", "MediaPart", "erase_turns"]

ERASED = "[erased]"
"""What an erased message of a group conversation says."""


def erase_turns(entries: list[dict[str, Any] | None], user_id: int) -> list[int]:
    """Replace, in place, the turns ``user_id`` started by ``[erased]`` (and their reactions by
    a removed one); their positions.

    ``None`` stands for a line that could not be read (left alone).
    """
    erased: list[int] = []
    theirs = False
    for number, entry in enumerate(entries):
        if entry is not None and entry.get("type") == "feedback":  # may land inside a turn
            if entry.get("by") == user_id:
                entry.update(emoji=[], kind="removed", by=0, user_id=0)  # their reaction
                erased.append(number)
            continue
        if entry is None or entry.get("type", "message") != "message":
            theirs = False
            continue
        if entry.get("role") == "user" and not _only_tool_results(entry):
            theirs = entry.get("user_id") == user_id
        if theirs:
            entry["content"] = [{"type": "text", "text": ERASED}]
            for field in ("speaker", "update_id"):
                entry.pop(field, None)
            if entry.get("role") == "user":
                entry["user_id"] = 0
            erased.append(number)
    return erased


def _only_tool_results(entry: dict[str, Any]) -> bool:
    content = entry.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


def _parsed(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class GroupsPart:
    """The user's turns in group conversations, and their own conversations in groups."""

    name = "groups"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Erase their turns (``[erased]``) and delete their per-member conversations."""
        if self.settings.database_url is None:
            return await asyncio.to_thread(self._forget_files, user_id)
        return await self._forget_rows(user_id)

    async def export(self, user_id: int, folder: Path) -> Described:
        """Nothing apart: shared group conversations are the other members' too (their own
        per-member ones are the sessions part's)."""
        return {}

    def _forget_files(self, user_id: int) -> int:
        paths = sorted(self.settings.sessions_dir.glob("chat_*.jsonl"))
        own = set(_per_user_keys([path.stem for path in paths], user_id))
        count = 0
        for path in paths:
            if path.stem in own:
                path.unlink(missing_ok=True)
                count += 1
                continue
            erased: list[int] = []

            def change(data: bytes, erased: list[int] = erased) -> bytes | None:
                lines = data.splitlines()
                entries = [_parsed(line) for line in lines]
                erased += erase_turns(entries, user_id)
                if not erased:
                    return None
                for number in erased:
                    lines[number] = orjson.dumps(entries[number])
                return b"".join(line + b"\n" for line in lines)

            rewrite_file(path, change)
            count += len(erased)
        return count

    async def _forget_rows(self, user_id: int) -> int:
        async with _pg(self.settings) as conn, conn.transaction():
            keys = [
                row["conversation"]
                for row in await conn.fetch(
                    "SELECT conversation FROM botkit_session_heads WHERE conversation LIKE 'chat_%'"
                )
            ]
            own = set(_per_user_keys(keys, user_id))
            count = 0
            for key in keys:
                if key in own:
                    count += await forget_rows(conn, key)
                    continue
                count += await _erase_rows(conn, key, user_id)
        return count


async def _erase_rows(conn: Any, key: str, user_id: int) -> int:
    """Erase the user's turns in one group conversation's rows; a newer head number makes
    every worker's cached context of it stale, so each rebuilds it without them."""
    rows = await conn.fetch(
        "SELECT seq, entry FROM botkit_sessions WHERE conversation = $1 ORDER BY seq FOR UPDATE",
        key,
    )
    entries = [_parsed(row["entry"].encode("utf-8")) for row in rows]
    erased = erase_turns(entries, user_id)
    for number in erased:
        await conn.execute(
            "UPDATE botkit_sessions SET entry = $3 WHERE conversation = $1 AND seq = $2",
            key,
            rows[number]["seq"],
            orjson.dumps(entries[number]).decode("utf-8"),
        )
    if erased:
        await conn.execute(
            "UPDATE botkit_session_heads SET last_seq = last_seq + 1 WHERE conversation = $1",
            key,
        )
    return len(erased)


class MediaPart:
    """Media (images, documents) no conversation refers to any more, after the other parts."""

    name = "media"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forget(self, user_id: int, *, keep_block: bool = False) -> int:
        """Delete the media nothing refers to; how many."""
        if self.settings.database_url is None:
            return await asyncio.to_thread(sweep_media_files, self.settings.sessions_dir)
        from botkit.sessions.postgres import PostgresSessionStore

        dsn = self.settings.database_url.get_secret_value()
        store = await PostgresSessionStore.connect(dsn)
        try:
            return len(await store.unreferenced_media(delete=True))
        finally:
            await store.close()

    async def export(self, user_id: int, folder: Path) -> Described:
        """Nothing apart: the sessions part exports what its conversations refer to."""
        return {}
