"""How the fake Bot API checks an ``InputRichMessage`` (Bot API 10.1), as the real one does.

https://core.telegram.org/bots/api#inputrichmessage: exactly one of ``html``, ``markdown`` or
``blocks``; the rich message limits: 32 768 characters of text (formula sources included),
500 blocks (nested blocks, list items and table rows count), 20 table columns; a
``thinking`` block only in ``sendRichMessageDraft``.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it import MarkdownIt

__all__ = ["RICH_MAX_BLOCKS", "RICH_MAX_CHARS", "RICH_MAX_COLUMNS", "RichRefusal", "rich_text"]

RICH_MAX_CHARS = 32_768
RICH_MAX_BLOCKS = 500
RICH_MAX_COLUMNS = 20

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_BLOCK_TOKENS = frozenset(
    {
        "paragraph_open",
        "heading_open",
        "list_item_open",
        "tr_open",
        "fence",
        "code_block",
        "blockquote_open",
        "hr",
        "bullet_list_open",
        "ordered_list_open",
        "table_open",
    }
)
_TAG = re.compile(r"<[^>]+>")
_HTML_BLOCKS = re.compile(r"<(p|h[1-6]|li|tr|pre|blockquote|hr|ul|ol|table|details|tg-[a-z-]+)\b")


class RichRefusal(Exception):
    """The description of the 400 the real API answers for this rich message."""


def rich_text(rich: Any, *, draft: bool) -> tuple[str, str]:
    """The visible text of ``rich`` and the field it came in (``markdown``, ``html`` or
    ``blocks``); raises ``RichRefusal`` where Telegram answers 400."""
    if not isinstance(rich, dict):
        raise RichRefusal("Bad Request: rich_message must be an object")
    given = [name for name in ("html", "markdown", "blocks") if rich.get(name) not in (None, "")]
    if len(given) != 1:
        raise RichRefusal(
            "Bad Request: exactly one of the fields html, markdown or blocks must be used"
        )
    kind = given[0]
    if kind == "markdown":
        text, blocks, columns = _markdown_measure(str(rich["markdown"]))
    elif kind == "html":
        source = str(rich["html"])
        if "<tg-thinking" in source and not draft:
            raise RichRefusal("Bad Request: thinking blocks can be used only in drafts")
        text = _TAG.sub("", source)
        blocks, columns = max(len(_HTML_BLOCKS.findall(source)), 1), 0
    else:
        if not isinstance(rich["blocks"], list):
            raise RichRefusal("Bad Request: blocks must be an array")
        text, blocks = _blocks_measure(rich["blocks"], draft)
        columns = 0
    if not text.strip() and not draft:
        raise RichRefusal("Bad Request: message text is empty")
    if len(text) > RICH_MAX_CHARS:
        raise RichRefusal("Bad Request: rich message text is too long")
    if blocks > RICH_MAX_BLOCKS:
        raise RichRefusal("Bad Request: rich message has too many blocks")
    if columns > RICH_MAX_COLUMNS:
        raise RichRefusal("Bad Request: rich message table has too many columns")
    return text, kind


def _markdown_measure(markdown: str) -> tuple[str, int, int]:
    """Visible text, block count and widest table of ``markdown`` (markdown-it's reading):
    top-level blocks a blank line apart, lines within one (list items, table rows with their
    cells ``|`` apart) a line apart."""
    parts: list[str] = []
    count = columns = 0
    row: list[str] | None = None
    fresh = False  # a top-level block began: its first line comes after a blank line

    def add(text: str) -> None:
        nonlocal fresh
        if text:
            parts.append(("\n\n" if fresh else "\n") + text)
            fresh = False

    for token in _PARSER.parse(markdown):
        if token.level == 0 and token.nesting >= 0:
            fresh = True
        if token.type in _BLOCK_TOKENS:
            count += 1
        if token.type == "tr_open":
            row = []
        elif token.type == "tr_close" and row is not None:
            columns = max(columns, len(row))
            add(" | ".join(row))
            row = None
        elif token.type == "inline":
            if row is not None:
                row.append(_inline_text(token))
            else:
                add(_inline_text(token))
        elif token.type in ("fence", "code_block"):
            add(token.content.rstrip("\n"))
    return "".join(parts).strip("\n"), count, columns


def _inline_text(token: Any) -> str:
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        else:
            parts.append(child.content)
    return "".join(parts)


def _blocks_measure(blocks: list[Any], draft: bool) -> tuple[str, int]:
    texts: list[str] = []
    count = 0
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise RichRefusal("Bad Request: can't parse rich block")
        if block["type"] == "thinking" and not draft:
            raise RichRefusal("Bad Request: thinking blocks can be used only in drafts")
        count += 1
        texts.append(_rich_text_of(block.get("text")))
        nested = block.get("blocks")
        if isinstance(nested, list):
            inner, inner_count = _blocks_measure(nested, draft)
            texts.append(inner)
            count += inner_count
    return "\n".join(t for t in texts if t), count


def _rich_text_of(value: Any) -> str:
    """The characters of a ``RichText`` (a string, a list, or an object holding ``text``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_rich_text_of(item) for item in value)
    if isinstance(value, dict):
        return _rich_text_of(value.get("text"))
    return ""
