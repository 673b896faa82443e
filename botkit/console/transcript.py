"""A conversation's entries as HTML: messages, tool calls and results, thinking folded away."""

from __future__ import annotations

import json
from html import escape

from botkit.sessions import (
    CompactionEntry,
    FeedbackEntry,
    ResetEntry,
    SessionEntry,
    SessionFile,
)
from botkit.types import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["transcript_html"]

HIDDEN = '<span class="note">(content hidden)</span>'
SHOWN_ENTRIES = 500
"""The last entries a transcript page shows."""


def transcript_html(file: SessionFile, *, show_content: bool) -> str:
    """The entries of ``file``, newest last; what people and the model wrote only if
    ``show_content`` (else who, when, which tools and what it cost)."""
    entries = file.entries[-SHOWN_ENTRIES:]
    names = {
        block.id: block.name
        for entry in entries
        if isinstance(entry, SessionEntry)
        for block in entry.content
        if isinstance(block, ToolUseBlock)
    }
    parts = []
    if len(file.entries) > len(entries):
        parts.append(f'<p class="note">The last {SHOWN_ENTRIES} entries.</p>')
    for entry in entries:
        when = entry.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(entry, ResetEntry):
            parts.append(f'<p class="note">{when} · context cleared</p>')
        elif isinstance(entry, CompactionEntry):
            summary = f"<pre>{escape(entry.summary)}</pre>" if show_content else HIDDEN
            parts.append(
                f'<details class="entry"><summary>{when} · earlier messages summarised</summary>'
                f"{summary}</details>"
            )
        elif isinstance(entry, FeedbackEntry):
            reaction = " ".join(entry.emoji) or "taken back"
            parts.append(
                f'<p class="note">{when} · feedback on turn {entry.update_id}: '
                f"{escape(entry.kind)} ({escape(reaction)})</p>"
            )
        else:
            parts.append(_message(entry, when, names, show_content))
    return "".join(parts)


def _message(entry: SessionEntry, when: str, names: dict[str, str], show: bool) -> str:
    about = [when, entry.role]
    if entry.speaker:
        about.append(entry.speaker)
    if entry.model:
        about.append(entry.model)
    if entry.usage is not None:
        u = entry.usage
        about.append(f"in {u.input_tokens:,} · out {u.output_tokens:,}")
    if entry.approval:
        about.append(f"approval: {entry.approval}")
    blocks = "".join(_block(block, names, show) for block in entry.content)
    return (
        f'<div class="entry {escape(entry.role)}"><div class="meta">{escape(" · ".join(about))}'
        f"</div>{blocks}</div>"
    )


def _block(block: ContentBlock, names: dict[str, str], show: bool) -> str:
    if isinstance(block, TextBlock):
        return f"<pre>{escape(block.text)}</pre>" if show else HIDDEN
    if isinstance(block, ToolUseBlock):
        args = json.dumps(block.input, ensure_ascii=False) if show else "…"
        return f'<div class="call">→ {escape(block.name)}({escape(args)})</div>'
    if isinstance(block, ToolResultBlock):
        name = names.get(block.tool_use_id, "a tool")
        error = " (error)" if block.is_error else ""
        text = escape(block.content) if show else "…"
        return f'<div class="result">↳ {escape(name)}{error}: {text}</div>'
    if isinstance(block, ThinkingBlock):
        inner = escape(block.thinking) if show and block.thinking else "(not shown)"
        return f"<details><summary>thinking</summary><pre>{inner}</pre></details>"
    if isinstance(block, RedactedThinkingBlock):
        return '<p class="note">(thinking, encrypted)</p>'
    if isinstance(block, ImageBlock):
        return f'<p class="note">[image {escape(block.source.media_type or "")}]</p>'
    if isinstance(block, DocumentBlock):
        title = escape(block.title or "untitled") if show else "document"
        return f'<p class="note">[file {title}, {escape(block.source.media_type or "")}]</p>'
    return f'<p class="note">[{escape(block.type)}]</p>'
