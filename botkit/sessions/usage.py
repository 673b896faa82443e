"""How much media a user has stored in a conversation, read from its recorded lines.

The per-user media quota (BOTKIT_MAX_MEDIA_MB) is checked before a file is fetched; each store
answers it from what it already holds: the conversation's lines name their media by content
hash (``botkit.sessions.media``), and the store knows each one's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from botkit.sessions.media import media_name

__all__ = ["stored_media"]


def stored_media(lines: Iterable[bytes | str], user_id: int) -> set[str]:
    """The names of the media that ``user_id``'s entries among ``lines`` refer to (in a private
    conversation every entry is the user's; in a group, only what they sent)."""
    names: set[str] = set()
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line: the stores report those when they load
        if isinstance(entry, dict) and entry.get("user_id") == user_id:
            for block in entry.get("content") or ():
                names.update(_names(block))
    return names


def _names(block: Any) -> list[str]:
    if not isinstance(block, dict):
        return []
    sources = [block.get("source")] + [image.get("source") for image in block.get("images") or ()]
    return [
        media_name(str(source.get("sha256")), source.get("media_type"))
        for source in sources
        if isinstance(source, dict) and source.get("type") == "stored"
    ]
