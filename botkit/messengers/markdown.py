"""The model's Markdown as Telegram HTML, split into messages Telegram accepts.

Markdown is parsed with markdown-it-py and its token stream rendered into a *styled text*:
a list of ``(text, tags)`` runs. Splitting works on visible characters (a block to split is
first cut into one run per character), and each chunk is serialized on its own, so every tag
open at a cut is closed before it and reopened after it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html import escape
from html import escape as escape_html
from html.parser import HTMLParser
from itertools import groupby
from operator import itemgetter
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["html_to_plain", "markdown_to_html", "render_chunks"]

_TELEGRAM_LIMIT = 4096
_LINK_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
_FORMATTING = frozenset({"b", "i", "s"})
_BLOCK_GAP = "\n\n"
_HR = "———"
_INDENT = "  "

# Raw HTML stays text: with html=False markdown-it emits it as text tokens, escaped below.
_PARSER = MarkdownIt("commonmark", {"html": False, "maxNesting": 100}).enable(
    ["table", "strikethrough"]
)


@dataclass(frozen=True, slots=True)
class _Tag:
    name: str
    attrs: str = ""


_Tags = tuple[_Tag, ...]
_Styled = list[tuple[str, _Tags]]

_BOLD = _Tag("b")
_CODE_TAG = _Tag("code")
_PRE = _Tag("pre")
_QUOTE = _Tag("blockquote")
_INLINE_TAGS = {"strong": _BOLD, "em": _Tag("i"), "s": _Tag("s")}


def markdown_to_html(markdown: str) -> str:
    """Render Markdown as one Telegram HTML text ("" for blank input)."""
    return _to_html(_join(_blocks(markdown), _BLOCK_GAP))


def render_chunks(markdown: str, limit: int = _TELEGRAM_LIMIT) -> list[str]:
    """Render Markdown as Telegram HTML messages of at most ``limit`` visible characters each."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    if _is_plain(markdown) and len(markdown) <= limit // 2:
        # Most short replies carry no Markdown at all; skip the parser for them.
        text = markdown.strip()
        return [escape_html(text, quote=False)] if text else []
    chunks: list[_Styled] = []
    current: _Styled = []
    current_width = 0
    for block in _blocks(markdown):
        width = _width(block)
        if current and current_width + len(_BLOCK_GAP) + width <= limit:
            current += _plain(_BLOCK_GAP) + block
            current_width += len(_BLOCK_GAP) + width
            continue
        if current:
            chunks.append(current)
        if width <= limit:
            current, current_width = block, width
            continue
        *whole, current = _split(block, limit)
        chunks.extend(whole)
        current_width = _width(current)
    if current:
        chunks.append(current)
    return [_to_html(chunk) for chunk in chunks]


_MARKUP_CHARS = frozenset("*_`[]#>|~\\!<&=+-\t")


def _is_plain(text: str) -> bool:
    """No character that could start Markdown (or need more than escaping), one paragraph."""
    return (
        "\n" not in text
        and "  " not in text
        and not _MARKUP_CHARS.intersection(text)
        and not (text.lstrip()[:1].isdigit())
    )


def html_to_plain(html: str) -> str:
    """The visible text of Telegram HTML: tags dropped, entities unescaped."""
    parser = _TextCollector()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)


class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


# --- styled text -------------------------------------------------------------------------


def _plain(text: str, tags: _Tags = ()) -> _Styled:
    return [(text, tags)] if text else []


def _chars(styled: _Styled) -> _Styled:
    """One run per character, for the work that counts and cuts characters."""
    return [(char, tags) for text, tags in styled for char in text]


def _visible(styled: _Styled) -> str:
    return "".join(map(_CHAR_OF, styled))


def _join(parts: Iterable[_Styled], separator: str, tags: _Tags = ()) -> _Styled:
    joined: _Styled = []
    for part in parts:
        if not part:
            continue
        if joined:
            joined += _plain(separator, tags)
        joined += part
    return joined


def _indent(styled: _Styled, first: str, rest: str, tags: _Tags) -> _Styled:
    """Prefix the first line with ``first`` and other non-blank, non-code lines with ``rest``."""
    out = _plain(first, tags)
    line_end: _Tags | None = None  # the tags of a line end just copied, until the next line
    for text, run_tags in styled:
        start = 0
        while start < len(text):
            if line_end is not None:
                if text[start] != "\n" and not any(tag.name == "pre" for tag in run_tags):
                    out += _plain(rest, _common(line_end, run_tags))
                line_end = None
            end = text.find("\n", start)
            if end == -1:
                out.append((text[start:], run_tags))
                break
            out.append((text[start : end + 1], run_tags))
            line_end = run_tags
            start = end + 1
    return out


def _common(first: _Tags, second: _Tags) -> _Tags:
    return first[: _common_length(first, second)]


def _common_length(first: _Tags, second: _Tags) -> int:
    length = 0
    for one, other in zip(first, second, strict=False):
        if one != other:
            break
        length += 1
    return length


def _strip_line_ends(styled: _Styled) -> _Styled:
    """Drop spaces and tabs at the end of lines, except inside code blocks."""
    text = _visible(styled)
    if not text.endswith((" ", "\t")) and " \n" not in text and "\t\n" not in text:
        return styled  # the usual case: nothing to drop
    kept: _Styled = []
    at_line_end = True
    for char, tags in reversed(_chars(styled)):
        if at_line_end and char in " \t" and not any(tag.name == "pre" for tag in tags):
            continue
        kept.append((char, tags))
        at_line_end = char == "\n"
    kept.reverse()
    return kept


def _char_width(char: str) -> int:
    # Telegram counts UTF-16 code units; characters outside the BMP take two.
    return 2 if ord(char) > 0xFFFF else 1


def _width(styled: _Styled) -> int:
    # UTF-16 code units, counted in C: a character outside the BMP encodes as two.
    return _text_units(_visible(styled))


def _text_units(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# --- splitting ---------------------------------------------------------------------------


def _split(block: _Styled, limit: int) -> list[_Styled]:
    """Cut a block into pieces of at most ``limit`` width; drops whitespace at the cuts."""
    pieces: list[_Styled] = []
    rest = _chars(block)
    while _width(rest) > limit:
        end, resume = _cut_point(rest, limit)
        piece = _trim(rest[:end])
        if _visible(piece).strip():
            pieces.append(piece)
        rest = _trim(rest[resume:])
    if _visible(rest).strip():
        pieces.append(rest)
    return pieces


def _cut_point(styled: _Styled, limit: int) -> tuple[int, int]:
    """Where to end the piece and resume: a line end, else a space, else a hard cut."""
    end = _fitting(styled, limit)
    text = _visible(styled[: end + 1])
    # Prefer a separator in the back half so pieces stay large; take any one before cutting hard.
    for separator, floor in (("\n", end // 2), (" ", end // 2), ("\n", 0), (" ", 0)):
        position = text.rfind(separator, floor + 1, end + 1)
        if position > 0:
            return position, position + 1
    return end, end


def _fitting(styled: _Styled, limit: int) -> int:
    """How many leading characters fit in ``limit`` (at least one)."""
    total = 0
    for index, (char, _) in enumerate(styled):
        total += _char_width(char)
        if total > limit:
            return max(index, 1)
    return len(styled)


def _trim(styled: _Styled) -> _Styled:
    """Drop leading newlines and trailing whitespace, which Telegram would strip anyway."""
    runs = list(styled)
    while runs and not (kept := runs[0][0].lstrip("\n")):
        runs.pop(0)
    if runs:
        runs[0] = (kept, runs[0][1])
    while runs and not (kept := runs[-1][0].rstrip()):
        runs.pop()
    if runs:
        runs[-1] = (kept, runs[-1][1])
    return runs


# --- serialization -----------------------------------------------------------------------


_CHAR_OF = itemgetter(0)
_TAGS_OF = itemgetter(1)


def _to_html(styled: _Styled) -> str:
    out: list[str] = []
    stack: _Tags = ()
    for tags, group in groupby(styled, key=_TAGS_OF):
        keep = _common_length(stack, tags)
        out += [f"</{tag.name}>" for tag in reversed(stack[keep:])]
        out += [f"<{tag.name}{tag.attrs}>" for tag in tags[keep:]]
        out.append(escape("".join(map(_CHAR_OF, group)), quote=False))
        stack = tags
    out += [f"</{tag.name}>" for tag in reversed(stack)]
    return "".join(out)


# --- blocks ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Frame:
    """A block container being rendered: its opening token, tags and rendered children."""

    token: Token | None
    tags: _Tags
    parts: list[_Styled] = field(default_factory=list)


def _blocks(markdown: str) -> list[_Styled]:
    """The rendered top-level blocks of ``markdown``, blank ones dropped."""
    # A stack instead of recursion: deeply nested input must not exhaust Python's stack.
    stack = [_Frame(None, ())]
    tokens = iter(_PARSER.parse(markdown))
    for token in tokens:
        frame = stack[-1]
        if token.type == "table_open":
            frame.parts.append(_table(_until_close(token, tokens), frame.tags))
        elif token.nesting == 1:
            stack.append(_Frame(token, _block_tags(token, frame.tags)))
        elif token.nesting == -1:
            done = stack.pop()
            stack[-1].parts.append(_finish(done, stack[-1]))
        else:
            frame.parts.append(_leaf(token, frame.tags))
    blocks = (_trim(_strip_line_ends(block)) for block in stack[0].parts)
    return [block for block in blocks if block]  # trimmed: a blank block is empty


def _until_close(opening: Token, tokens: Iterator[Token]) -> list[Token]:
    closing = opening.type.removesuffix("_open") + "_close"
    taken = [opening]
    for token in tokens:
        taken.append(token)
        if token.type == closing:
            break
    return taken


def _block_tags(token: Token, tags: _Tags) -> _Tags:
    if token.type == "blockquote_open":
        return _push(tags, _QUOTE)
    if token.type == "heading_open":
        return _push(tags, _BOLD)
    return tags


def _finish(frame: _Frame, parent: _Frame) -> _Styled:
    kind = frame.token.type if frame.token else ""
    if kind == "list_item_open":
        body = _join(frame.parts, "\n", frame.tags)
        marker = _list_marker(parent)
        return _indent(body, f"{marker} " if body else marker, _INDENT, frame.tags)
    if kind in ("paragraph_open", "heading_open", "bullet_list_open", "ordered_list_open"):
        return _join(frame.parts, "\n", frame.tags)
    return _join(frame.parts, _BLOCK_GAP, frame.tags)


def _list_marker(parent: _Frame) -> str:
    if parent.token is None or parent.token.type != "ordered_list_open":
        return "•"
    start = int(str(parent.token.attrs.get("start", 1)))
    return f"{start + len(parent.parts)}."


def _leaf(token: Token, tags: _Tags) -> _Styled:
    if token.type == "inline":
        return _inline(token.children or [], tags)
    if token.type in ("fence", "code_block"):
        return _code_block(token, tags)
    if token.type == "hr":
        return _plain(_HR, tags)
    return _plain(token.content.rstrip("\n"), tags)


def _code_block(token: Token, tags: _Tags) -> _Styled:
    language = token.info.split(maxsplit=1)[0] if token.info.strip() else ""
    code: _Tags = (_PRE,)
    if language:
        code = (_PRE, _Tag("code", f' class="language-{escape(language)}"'))
    return _plain(token.content.rstrip("\n"), _code_tags(tags, code))


def _table(tokens: list[Token], tags: _Tags) -> _Styled:
    rows: list[list[str]] = []
    aligns: list[str] = []
    for token in tokens:
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "th_open":
            aligns.append(_alignment(token))
        elif token.type == "inline" and rows:
            rows[-1].append(_visible(_inline(token.children or [], ())).strip())
    # markdown-it gives every row as many cells as the header row has.
    widths = [max(_text_width(row[i]) for row in rows) for i in range(len(aligns))]
    lines = [_table_line(row, widths, aligns) for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return _plain("\n".join(lines), _code_tags(tags, (_PRE,)))


def _alignment(cell: Token) -> str:
    style = str(cell.attrs.get("style", ""))
    return style.removeprefix("text-align:") if style.startswith("text-align:") else "left"


def _table_line(row: list[str], widths: list[int], aligns: list[str]) -> str:
    padded = (
        _pad(text, width, align) for text, width, align in zip(row, widths, aligns, strict=True)
    )
    return " | ".join(padded).rstrip()


def _pad(text: str, width: int, align: str) -> str:
    gap = width - _text_width(text)
    if align == "right":
        return " " * gap + text
    if align == "center":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def _text_width(text: str) -> int:
    """Monospace columns taken by ``text``: wide East Asian characters and emoji take two."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


# --- inline ------------------------------------------------------------------------------


def _inline(tokens: list[Token], base: _Tags) -> _Styled:
    """Render inline tokens; tags are pushed down to the text, so nesting costs nothing."""
    out: _Styled = []
    tags = base
    opened: list[tuple[_Tags, int, str]] = []  # tags outside, where it began, link href
    for token in tokens:
        if token.nesting == 1:
            href = str(token.attrs.get("href", "")) if token.type == "link_open" else ""
            opened.append((tags, len(out), href))
            tags = _open_inline(token, tags)
        elif token.nesting == -1 and opened:
            outside, start, href = opened.pop()
            if _safe_href(href) and not _visible(out[start:]).strip():
                out += _plain(href, tags)
            tags = outside
        else:
            out += _inline_leaf(token, tags)
    return out


def _open_inline(token: Token, tags: _Tags) -> _Tags:
    if token.type == "link_open":
        return _push_link(str(token.attrs.get("href", "")), tags)
    tag = _INLINE_TAGS.get(token.type.removesuffix("_open"))
    return _push(tags, tag) if tag else tags


def _inline_leaf(token: Token, tags: _Tags) -> _Styled:
    if token.type in ("softbreak", "hardbreak"):
        return _plain("\n", tags)
    if token.type == "code_inline":
        return _plain(token.content, _code_tags(tags, (_CODE_TAG,)))
    if token.type == "image":
        src = str(token.attrs.get("src", ""))
        alt = _alt_text(token.children or [])
        return _plain(alt or (src if _safe_href(src) else ""), _push_link(src, tags))
    return _plain(token.content, tags)


def _alt_text(tokens: list[Token]) -> str:
    """The plain text of an image description (which may hold more images)."""
    parts: list[str] = []
    pending = list(reversed(tokens))
    while pending:
        token = pending.pop()
        if token.type == "image":
            pending += reversed(token.children or [])
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        else:
            parts.append(token.content)
    return "".join(parts)


def _push(tags: _Tags, tag: _Tag) -> _Tags:
    """Open ``tag`` inside ``tags``; quotes can't nest and doubled bold or links add nothing."""
    if any(outer.name == tag.name for outer in tags):
        return tags
    return (*tags, tag)


def _push_link(href: str, tags: _Tags) -> _Tags:
    if not _safe_href(href):
        return tags
    return _push(tags, _Tag("a", f' href="{escape(href, quote=True)}"'))


def _code_tags(tags: _Tags, code: _Tags) -> _Tags:
    """Tags for code: Telegram keeps code out of bold/italic/strike, and a link beats code."""
    kept = tuple(tag for tag in tags if tag.name not in _FORMATTING)
    if any(tag.name == "a" for tag in kept):
        return kept
    return (*kept, *code)


def _safe_href(href: str) -> bool:
    try:
        scheme = urlsplit(href).scheme.lower()
    except ValueError:
        return False
    return scheme in _LINK_SCHEMES
