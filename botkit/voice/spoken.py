"""What of an answer is read aloud: its prose, without code blocks, tables, links or markup.

A listener cannot use a code block or a table read out symbol by symbol, nor a URL; those stay
in the text sent beside the voice note. A long answer is spoken only up to a limit, in parts the
speech API takes (4096 characters each on OpenAI's), and ends by saying the rest is in the text.
"""

from __future__ import annotations

import re

__all__ = ["SPEECH_API_CHARS", "speakable", "spoken_parts"]

SPEECH_API_CHARS = 4096
"""The longest ``input`` OpenAI's ``/audio/speech`` takes (its API reference, read 2026-11-28)."""

_FENCED = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.MULTILINE | re.DOTALL)
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.MULTILINE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"<?https?://\S+>?")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_MARKUP = re.compile(r"^\s{0,3}(#{1,6}\s+|>\s?|[-*+]\s+|\d+[.)]\s+)|[*_~]{1,3}", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")


def speakable(text: str, *, code_note: str = "", table_note: str = "") -> str:
    """``text`` as it is read aloud: code blocks and tables become ``code_note`` and
    ``table_note`` (or nothing), links their label, bare URLs nothing, markup plain."""
    text = _FENCED.sub(lambda _: f"\n{code_note}\n", text)
    text = _replace_tables(text, table_note)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _URL.sub("", text)
    text = _INLINE_CODE.sub(lambda m: m.group(1), text)
    text = _MARKUP.sub("", text)
    lines = [line.strip() for line in text.splitlines()]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _replace_tables(text: str, note: str) -> str:
    """Each run of table rows becomes ``note`` once."""
    out: list[str] = []
    in_table = False
    for line in text.splitlines():
        if _TABLE_ROW.fullmatch(line):
            if not in_table and note:
                out.append(note)
            in_table = True
            continue
        in_table = False
        out.append(line)
    return "\n".join(out)


def spoken_parts(
    text: str, max_chars: int, rest_note: str, part_chars: int = SPEECH_API_CHARS
) -> tuple[list[str], bool]:
    """``text`` cut to at most ``max_chars`` (at a sentence end where there is one) and split
    into parts of at most ``part_chars``; whether it was cut (the last part then ends with
    ``rest_note``)."""
    cut = len(text) > max_chars
    if cut:
        text = f"{_at_sentence_end(text, max_chars - len(rest_note) - 1)} {rest_note}"
    parts: list[str] = []
    while text:
        if len(text) <= part_chars:
            parts.append(text)
            break
        head = _at_sentence_end(text, part_chars)
        parts.append(head)
        text = text[len(head) :].strip()
    return parts, cut


def _at_sentence_end(text: str, limit: int) -> str:
    """The longest start of ``text`` of at most ``limit`` characters ending a sentence (else a
    word; else cut hard)."""
    head = text[: max(limit, 1)]
    for ends in ((". ", "! ", "? ", "\n"), (" ",)):
        found = max(head.rfind(end) for end in ends)
        if found > limit // 2:
            return head[: found + 1].strip()
    return head.strip()
