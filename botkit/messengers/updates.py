"""Reading Telegram updates one by one, so one update aiogram cannot parse stops nothing.

aiogram validates a whole ``getUpdates`` answer at once: a single update with a shape its
models do not expect (a forward from 2015 whose ``hidden_user`` origin lacks
``sender_user_name``, an empty ``external_reply.story``) fails the batch, and since the batch
is never confirmed it comes back after every restart. Here the batch is taken as raw JSON and
each update is validated on its own. A message that fails only in a part botkit does without
(a forward origin, an external reply, a story, a nested message) is parsed without that part;
one that fails in what botkit needs (its id, date, chat, sender, text or the files it reads)
is unparseable.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiogram.methods.base import TelegramMethod
from aiogram.types import Update
from pydantic import ValidationError

if TYPE_CHECKING:
    from aiogram import Bot as AiogramBot

__all__ = ["ParsedUpdate", "RawGetUpdates", "parse_update"]

MESSAGE_UPDATES = frozenset(
    {"message", "edited_message", "channel_post", "edited_channel_post", "business_message"}
)
CORE_FIELDS = frozenset(
    {"message_id", "date", "chat", "from", "text", "caption", "photo", "message_thread_id"}
    | {"document", "voice", "audio", "video_note", "media_group_id"}
)
"""Parts of a message botkit cannot answer without: a failure here makes it unparseable."""
NESTED_MESSAGES = frozenset({"reply_to_message", "pinned_message"})
"""Parts that are messages themselves: repaired inside, or dropped whole if their core fails."""
MAX_REPAIRS = 16


class RawGetUpdates(TelegramMethod[list[dict[str, Any]]]):
    """``getUpdates`` whose answer is kept as raw JSON objects, validated one by one later."""

    __returning__ = list[dict[str, Any]]
    __api_method__ = "getUpdates"

    offset: int | None = None
    limit: int | None = None
    timeout: int | None = None
    allowed_updates: list[str] | None = None


@dataclass(frozen=True, slots=True)
class ParsedUpdate:
    """One raw update after validation: the update, or why it could not be read."""

    update: Update | None
    dropped: tuple[str, ...] = ()
    """Dotted paths of the parts left out so the rest could be read (e.g. ``message.story``)."""
    error: str | None = None
    """The first validation error, when ``update`` is ``None``."""


def parse_update(raw: dict[str, Any], bot: AiogramBot | None = None) -> ParsedUpdate:
    """Validate one raw update, leaving out the parts botkit can do without if they fail."""
    context = {"bot": bot} if bot is not None else None
    try:
        return ParsedUpdate(Update.model_validate(raw, context=context))
    except ValidationError as first_failure:
        failure = first_failure
    data = copy.deepcopy(raw)  # only broken updates pay for the copy
    dropped: list[str] = []
    for _ in range(MAX_REPAIRS):
        for error in failure.errors():
            loc = tuple(error["loc"])
            if any(_path(loc[:n]) in dropped for n in range(2, len(loc) + 1)):
                continue  # inside a part already left out in this pass
            part = _drop_optional_part(data, loc)
            if part is None:
                return ParsedUpdate(None, tuple(dropped), _describe(failure))
            dropped.append(part)
        try:
            return ParsedUpdate(Update.model_validate(data, context=context), tuple(dropped))
        except ValidationError as e:
            failure = e
    return ParsedUpdate(None, tuple(dropped), _describe(failure))


def _drop_optional_part(update: dict[str, Any], loc: Sequence[str | int]) -> str | None:
    """Remove the failing part at ``loc`` if botkit can do without it; its path, or ``None``."""
    if len(loc) < 2 or loc[0] not in MESSAGE_UPDATES:
        return None
    node: Any = update.get(str(loc[0]))
    nested: tuple[dict[str, Any], str, int] | None = None
    for depth in range(1, len(loc)):
        key = loc[depth]
        if not isinstance(node, dict) or not isinstance(key, str):
            break
        if key in NESTED_MESSAGES and isinstance(node.get(key), dict) and depth + 1 < len(loc):
            nested = (node, key, depth)
            node = node[key]
            continue
        if key in CORE_FIELDS or key not in node:
            break  # the message itself is broken here (or lacks a required field)
        del node[key]
        return _path(loc[: depth + 1])
    if nested is None:
        return None
    holder, key, depth = nested
    holder.pop(key, None)
    return _path(loc[: depth + 1])


def _path(loc: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in loc)


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{_path(first['loc'])}: {first['msg']}"
