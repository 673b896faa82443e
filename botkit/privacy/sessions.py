"""The user's own conversations (their private chat, and their per-member ones in groups with
``BOTKIT_GROUP_CONTEXT=per_user``) as stored, and the media they refer to: read for
``users export``, from the JSONL files and ``media/`` or from PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import re

from botkit.config import Settings
from botkit.sessions.jsonl import SessionEntry, parse_entry
from botkit.sessions.media import MEDIA_DIR, MediaFiles, references

__all__ = ["ConversationCopy", "media_of", "own_conversations", "own_keys", "referenced_media"]

ConversationCopy = tuple[str, bytes]
"""A conversation's key and its JSONL lines, as stored."""


def own_keys(keys: list[str], user_id: int) -> list[str]:
    """Of these conversation keys, the user's private one and their own ones in groups."""
    own = re.compile(rf"chat_-?[0-9]+(?:_[0-9]+)?_user_{user_id}")
    return [k for k in keys if k == str(user_id) or own.fullmatch(k)]


async def own_conversations(settings: Settings, user_id: int) -> list[ConversationCopy]:
    """The user's private conversation and per-member group conversations, oldest line first."""
    if settings.database_url is None:
        paths = sorted(settings.sessions_dir.glob("*.jsonl"))
        own = set(own_keys([path.stem for path in paths], user_id))
        return [(p.stem, await asyncio.to_thread(p.read_bytes)) for p in paths if p.stem in own]
    from botkit.sessions.postgres import PostgresSessionStore

    store = await PostgresSessionStore.connect(settings.database_url.get_secret_value())
    try:
        keys = own_keys(await store.conversations(), user_id)
        return [(key, b"".join(await store.lines(key))) for key in keys]
    finally:
        await store.close()


def referenced_media(data: bytes) -> set[str]:
    """The media names (``<sha256>.<ext>``) these JSONL lines refer to."""
    names: set[str] = set()
    for line in data.splitlines():
        with contextlib.suppress(ValueError):  # a damaged line refers to nothing readable
            entry = parse_entry(line)
            if isinstance(entry, SessionEntry):
                names |= references(entry.content)
    return names


async def media_of(settings: Settings, names: set[str]) -> dict[str, bytes]:
    """The stored bytes of these media (those that are gone are left out)."""
    if not names:
        return {}
    if settings.database_url is None:
        files = MediaFiles(settings.sessions_dir / MEDIA_DIR)
        found = {name: await asyncio.to_thread(files.get, name) for name in sorted(names)}
        return {name: data for name, data in found.items() if data is not None}
    from botkit.sessions.postgres import PostgresSessionStore

    store = await PostgresSessionStore.connect(settings.database_url.get_secret_value())
    try:
        return await store.media(names)
    finally:
        await store.close()
