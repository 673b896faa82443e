"""Text from sessions, made safe to print on a terminal.

A session holds what users wrote, which may include terminal escape sequences (moving the
cursor, rewriting lines, setting the clipboard through OSC 52) and bidirectional overrides that
show text reversed. Commands that print session text (``replay``, ``replay --rerun``) show
every such character as a visible escape (``\\x1b``, ``\\u202e``) instead.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters (but tab and newline) and the bidirectional controls."""


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline shown as its escape."""
    return _UNSAFE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
