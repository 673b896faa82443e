"""Rich messages (Bot API 10.1): the model's Markdown sent as Telegram renders it natively.

``sendRichMessage`` takes an ``InputRichMessage`` with exactly one of ``html``, ``markdown`` or
``blocks`` (https://core.telegram.org/bots/api#inputrichmessage); Telegram parses the
Markdown itself into headings, tables, lists, math and collapsible details. botkit passes
the model's Markdown straight through: building blocks from it would mean a second Markdown
parser to keep in step with Telegram's, and costs CPU on every turn (bench/README).

A rich message holds at most 32 768 characters of text (formula sources included) and 500
blocks (list items and table rows count), tables at most 20 columns (Bot API 10.1, "rich
message limits"). A longer answer is split here between top-level blocks, never inside a
table, a fenced code block or a ``$$`` formula; only a single block larger than a whole
message is cut, at a row or line, each part a valid block of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import structlog
from markdown_it import MarkdownIt

__all__ = [
    "RICH_BLOCK_LIMIT",
    "RICH_TEXT_LIMIT",
    "RichState",
    "count_blocks",
    "draft_markdown",
    "split_rich",
]

log = structlog.get_logger(__name__)

RICH_TEXT_LIMIT = 32_768
"""Characters of text one rich message may hold (formula sources included)."""
RICH_BLOCK_LIMIT = 500
"""Blocks one rich message may hold (nested blocks, list items and table rows count)."""
_MARGIN = 0.9
"""Parts are cut to this share of the limits: Telegram counts after its own parsing."""

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_COUNTED = frozenset(
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
_MATH_FENCE = re.compile(r"^\s*\$\$")
_CODE_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class RichState:
    """Whether this process still sends rich messages (``BOTKIT_RICH_MESSAGES``).

    ``auto`` tries them; a 404 (a self-hosted Bot API server older than 10.1) turns them off
    until restart, with one log line. ``off`` never tries.
    """

    mode: str = "auto"
    unavailable_reason: str | None = field(default=None)

    @property
    def active(self) -> bool:
        """Whether the next message should try ``sendRichMessage``."""
        return self.mode == "auto" and self.unavailable_reason is None

    def server_lacks_rich(self, method: str, description: str) -> None:
        """The server answered 404 for ``method``: no rich message is tried until restart."""
        if self.unavailable_reason is None:
            self.unavailable_reason = description
            log.warning(
                "telegram.rich_unavailable",
                method=method,
                error=description,
                note="the Bot API server predates 10.1: HTML until restart",
            )


def count_blocks(markdown: str) -> int:
    """The blocks Telegram counts for ``markdown`` (paragraphs, headings, items, rows…)."""
    return sum(1 for token in _PARSER.parse(markdown) if token.type in _COUNTED)


def split_rich(
    markdown: str, *, max_chars: int = RICH_TEXT_LIMIT, max_blocks: int = RICH_BLOCK_LIMIT
) -> list[str]:
    """``markdown`` as rich messages' Markdown, split between top-level blocks where needed."""
    text = markdown.strip()
    if not text:
        return []
    chars, blocks = int(max_chars * _MARGIN), int(max_blocks * _MARGIN)
    if len(text) <= chars and _few_blocks(text, blocks):
        return [text]
    parts: list[str] = []
    current: list[str] = []
    size = count = 0
    for block in _units(text, chars, blocks):
        block_count = count_blocks(block)
        if current and (size + len(block) + 2 > chars or count + block_count > blocks):
            parts.append("\n\n".join(current))
            current, size, count = [], 0, 0
        current.append(block)
        size += len(block) + 2
        count += block_count
    if current:
        parts.append("\n\n".join(current))
    return parts


def _few_blocks(text: str, limit: int) -> bool:
    """Whether ``text`` holds at most ``limit`` blocks; a short text is not parsed for it
    (a line opens at most a quote, a list, an item and a paragraph)."""
    lines = text.count("\n") + 1
    return lines * _BLOCKS_PER_LINE <= limit or count_blocks(text) <= limit


_BLOCKS_PER_LINE = 4


def _units(text: str, chars: int, blocks: int) -> list[str]:
    """The top-level blocks of ``text``; one too big for a message cut into valid pieces."""
    units: list[str] = []
    for block in _top_level_blocks(text):
        if len(block) <= chars and count_blocks(block) <= blocks:
            units.append(block)
        else:
            units.extend(_cut_block(block, chars, blocks))
    return units


def _top_level_blocks(text: str) -> list[str]:
    """Top-level Markdown blocks (by markdown-it's line maps), ``$$`` formulas kept whole."""
    lines = text.split("\n")
    starts: list[tuple[int, int]] = []
    for token in _PARSER.parse(text):
        if token.level == 0 and token.map is not None and token.nesting != -1:
            starts.append((token.map[0], token.map[1]))
    spans = _merge_math(lines, starts)
    return ["\n".join(lines[a:b]).strip() for a, b in spans if "\n".join(lines[a:b]).strip()]


def _merge_math(lines: list[str], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans joined while a ``$$`` display formula opened in one is still open."""
    merged: list[tuple[int, int]] = []
    open_math = False
    for start, end in spans:
        if open_math and merged:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
        fences = sum(line.count("$$") for line in lines[start:end])
        if fences % 2:
            open_math = not open_math
    return merged


def _cut_block(block: str, chars: int, blocks: int) -> list[str]:
    """One block larger than a message, cut where each piece stays valid on its own: a table
    between rows (the header repeated), code between lines (fences repeated), else lines."""
    lines = block.split("\n")
    head: list[str] = []
    tail: list[str] = []
    body = lines
    if _CODE_FENCE.match(lines[0]) and len(lines) > 1 and _CODE_FENCE.match(lines[-1]):
        head, body, tail = [lines[0]], lines[1:-1], [lines[-1]]
    elif lines[0].lstrip().startswith("|") and len(lines) > 2:
        head, body = lines[:2], lines[2:]
    elif _MATH_FENCE.match(lines[0]):
        head, body = [], lines
    pieces: list[str] = []
    current: list[str] = []
    budget = chars - sum(len(line) + 1 for line in head + tail)
    rows = max(blocks - 2, 1)
    for line in body:
        for piece in _wrap(line, max(budget, 1)):
            if current and (
                sum(len(x) + 1 for x in current) + len(piece) > budget or len(current) >= rows
            ):
                pieces.append("\n".join(head + current + tail))
                current = []
            current.append(piece)
    if current:
        pieces.append("\n".join(head + current + tail))
    return pieces


def _wrap(line: str, width: int) -> list[str]:
    """``line`` in pieces of at most ``width`` characters, cut at spaces where it can be."""
    pieces: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", 0, width)
        cut = cut if cut > 0 else width
        pieces.append(line[:cut])
        line = line[cut:].lstrip()
    pieces.append(line)
    return pieces


def draft_markdown(text: str, limit: int = RICH_TEXT_LIMIT) -> str:
    """A growing answer as a rich draft's Markdown: no half-typed markup shows.

    Finished lines go as they are; the line still being written loses its markup characters
    (an unclosed ``**`` would flash as bold and back); an open code fence is closed and an
    open ``$$`` formula left out until it is complete. A draft over the limit shows its tail.
    """
    cut = text.rfind("\n")
    head, tail = (text[:cut], text[cut + 1 :]) if cut >= 0 else ("", text)
    fences = [line for line in head.split("\n") if _CODE_FENCE.match(line)]
    in_code = len(fences) % 2 == 1
    if not in_code:
        tail = tail.translate(_MARKUP)
    shown = f"{head}\n{tail}" if head else tail
    if in_code:
        shown = f"{shown}\n```"
    elif shown.count("$$") % 2:
        shown = shown[: shown.rfind("$$")]
    shown = shown.strip()
    if len(shown) > limit:
        shown = "…\n" + shown[-(limit - 4) :].split("\n", 1)[-1]
    return shown


_MARKUP = str.maketrans("", "", "*_`~#>|$")
